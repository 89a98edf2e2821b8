package policies

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"cuelang.org/go/cue"

	"github.com/airlock-ci/airlock/attest/storeref"
)

// Policy is the effective policy, decoded from CUE. Field meanings are
// documented in schema.cue and README.md.
type Policy struct {
	Agents  Agents  `json:"agents"`
	Sandbox Sandbox `json:"sandbox"`
	Egress  Egress  `json:"egress"`
	Trust   Trust   `json:"trust"`
	// Credentials governs the job's own credentials (see schema.cue).
	Credentials Credentials `json:"credentials"`
	Attest      Attest      `json:"attest"`
	// Images says which registry images may be pulled; nil: the section
	// is absent (see schema.cue for what that allows).
	Images *Images           `json:"images,omitempty"`
	Steps  map[string][]Step `json:"steps"`
}

// Images is which images may be pulled from registries (schema.cue).
type Images struct {
	// Pull: false pulls nothing (only mapped images run).
	Pull  bool        `json:"pull"`
	Allow []ImageRule `json:"allow"`
	// Mirrors: registry -> where its blobs and manifests are pulled from.
	Mirrors  map[string]string `json:"mirrors"`
	Insecure []string          `json:"insecure"`
	// Cache bounds the runner's image cache, as a size ("20G").
	Cache string `json:"cache"`
}

// ImageRule allows the images whose name matches Name.
type ImageRule struct {
	Name string `json:"name"`
	// Digest is "agents", "always" or "never": when a reference must pin
	// a digest.
	Digest   string   `json:"digest"`
	SignedBy []string `json:"signedBy"`
	// SignedByIdentity are the Sigstore identities (keyless) whose
	// signature also allows the image.
	SignedByIdentity []SigstoreIdentity `json:"signedByIdentity"`
	// Mode is "enforce" or "warn".
	Mode string `json:"mode"`
}

// SigstoreIdentity is who a keyless signature's certificate must name,
// under which trusted root (schema.cue).
type SigstoreIdentity struct {
	Issuer        string `json:"issuer"`
	Subject       string `json:"subject,omitempty"`
	SubjectRegexp string `json:"subjectRegexp,omitempty"`
	TrustedRoot   string `json:"trustedRoot"`
}

// check finds what the schema cannot say: a Sigstore identity needs
// its subject or a regular expression for it, one of the two, and the
// expression must be RE2.
func (im *Images) check() []string {
	if im == nil {
		return nil
	}
	var problems []string
	for i, r := range im.Allow {
		for j, key := range r.SignedBy {
			if strings.Contains(key, "://") {
				problems = append(problems, fmt.Sprintf("images.allow.%d.signedBy.%d: %q is a KMS key, and airlock checks signatures offline, with the public key alone: export it once (cosign public-key --key %s > /etc/airlock/signing.pub) and name that file", i, j, key, key))
			}
		}
		for j, id := range r.SignedByIdentity {
			at := fmt.Sprintf("images.allow.%d.signedByIdentity.%d", i, j)
			if (id.Subject == "") == (id.SubjectRegexp == "") {
				problems = append(problems, at+": give subject (the certificate's subject exactly) or subjectRegexp (an RE2 expression that matches all of it), one of the two")
				continue
			}
			if id.SubjectRegexp == "" {
				continue
			}
			if _, err := regexp.Compile(id.SubjectRegexp); err != nil {
				problems = append(problems, fmt.Sprintf("%s.subjectRegexp: %v", at, err))
			}
		}
	}
	return problems
}

// Agents decides which pull requests are an agent's.
type Agents struct {
	Logins             []string `json:"logins"`
	BotSuffix          bool     `json:"botSuffix"`
	Labels             []string `json:"labels"`
	HeadBranchPrefixes []string `json:"headBranchPrefixes"`
	Humans             string   `json:"humans"`
}

// Sandbox is the job sandbox's filesystem, identity and limits.
type Sandbox struct {
	RootFS         string  `json:"rootfs"`
	Platform       string  `json:"platform"`
	WorkspaceMount string  `json:"workspaceMount"`
	Mounts         []Mount `json:"mounts"`
	// Images maps an image reference to an unpacked rootfs directory.
	Images map[string]string `json:"images"`
	// Services allows the job's service containers.
	Services bool `json:"services"`
	// Masks is a set: path -> true.
	Masks        map[string]bool `json:"masks"`
	User         *User           `json:"user,omitempty"`
	Capabilities []string        `json:"capabilities"`
	Limits       Limits          `json:"limits"`
}

// ImageUser reports whether the job runs as its image's own user
// (sandbox.user: "image"), so that the image and the workflow choose it.
func (s Sandbox) ImageUser() bool { return s.User != nil && s.User.Image }

// Mount is an extra host path in the sandbox.
type Mount struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	ReadOnly    bool   `json:"readOnly"`
}

// User is the job's identity: a numeric one, or (Image) the image's own
// user, written "image" in the policy.
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Image runs the job as its image's user (root unless the image or
	// the workflow's options: --user says otherwise), inside gVisor.
	Image bool `json:"-"`
}

// UserImage is the policy's word for the image's own user.
const UserImage = "image"

// UnmarshalJSON reads {uid, gid} or "image".
func (u *User) UnmarshalJSON(b []byte) error {
	var word string
	if err := json.Unmarshal(b, &word); err == nil {
		if word != UserImage {
			return fmt.Errorf("sandbox.user: %q is neither {uid, gid} nor %q", word, UserImage)
		}
		*u = User{Image: true}
		return nil
	}
	type numeric User
	var n numeric
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("sandbox.user: %w", err)
	}
	*u = User(n)
	return nil
}

// MarshalJSON writes the user as the policy does.
func (u User) MarshalJSON() ([]byte, error) {
	if u.Image {
		return json.Marshal(UserImage)
	}
	type numeric User
	return json.Marshal(numeric(u))
}

// Limits as written in the policy: durations like "30m", sizes like "4G".
type Limits struct {
	JobTimeout  string  `json:"jobTimeout"`
	StepTimeout string  `json:"stepTimeout"`
	Memory      string  `json:"memory"`
	Pids        int     `json:"pids"`
	CPUs        float64 `json:"cpus"`
	Overlay     string  `json:"overlay"`
	Tmp         string  `json:"tmp"`
	Output      string  `json:"output"`
	// Workspace is the most a job may write into its workspace; empty:
	// DefaultWorkspaceLimit. The organisation's value is also the most a
	// repository may set (see orgOnly).
	Workspace string `json:"workspace,omitempty"`
}

// DefaultWorkspaceLimit is sandbox.limits.workspace when no policy sets it.
const DefaultWorkspaceLimit = "16G"

// WorkspaceOrDefault is the workspace limit as written, or the default.
func (l Limits) WorkspaceOrDefault() string {
	if l.Workspace == "" {
		return DefaultWorkspaceLimit
	}
	return l.Workspace
}

// Egress is the network policy.
type Egress struct {
	Default string `json:"default"`
	// Mode is "enforce" or "audit" (organisation only).
	Mode  string       `json:"mode"`
	Allow []EgressRule `json:"allow"`
	// DenyCIDRs is a set: range -> true.
	DenyCIDRs  map[string]bool `json:"denyCIDRs"`
	AllowCIDRs []string        `json:"allowCIDRs"`
	Secrets    []Secret        `json:"secrets"`
	// Resolve pins names to addresses on the host side.
	Resolve map[string]string `json:"resolve"`
	Network EgressNetwork     `json:"network"`
}

// EgressNetwork sets the gateway's addresses.
type EgressNetwork struct {
	Link      string `json:"link"`
	Pool      string `json:"pool"`
	ProxyPort int    `json:"proxyPort"`
}

// EgressRule allows one destination.
type EgressRule struct {
	Host         string   `json:"host"`
	Ports        []int    `json:"ports"`
	Methods      []string `json:"methods"`
	PathPrefixes []string `json:"pathPrefixes"`
}

// Secret is injected by the gateway into requests to Host.
type Secret struct {
	Host    string `json:"host"`
	Header  string `json:"header"`
	FromEnv string `json:"fromEnv"`
}

// Trust sets the action per category of trust-sensitive files.
type Trust struct {
	// Authored and Runtime map each category to its action for changes
	// made by the pull request's commits and by the job itself.
	Authored      map[string]string   `json:"authored"`
	Runtime       map[string]string   `json:"runtime"`
	Globs         map[string][]string `json:"globs"`
	GitConfigKeys []string            `json:"gitConfigKeys"`
}

// Credentials is what requests carrying the job's own credentials may
// do. Cache and GitPush are unset (empty, nil) where the policy leaves
// them to the job's default.
type Credentials struct {
	Cache     string                      `json:"cache,omitempty"`
	GitPush   *bool                       `json:"gitPush,omitempty"`
	API       string                      `json:"api,omitempty"`
	Artifacts bool                        `json:"artifacts"`
	OIDC      OIDC                        `json:"oidc"`
	Secrets   map[string]CredentialSecret `json:"secrets"`
}

// OIDC lists the audiences an OIDC token may be requested for.
type OIDC struct {
	Audiences []string `json:"audiences"`
}

// CredentialSecret is a workflow secret the gateway sends to Hosts only.
type CredentialSecret struct {
	Hosts []string `json:"hosts"`
}

// Attest configures signing.
type Attest struct {
	Key string `json:"key,omitempty"`
	// Outputs are the files the job leaves in the workspace that are its
	// artifacts (paths or globs relative to it).
	Outputs []string `json:"outputs"`
	// Subjects is the deprecated synonym of Outputs.
	Subjects []string `json:"subjects"`
	// Store are where the job's bundles are kept (organisation only).
	Store []AttestStore `json:"store"`
}

// AttestStore is one store of attest.store.
type AttestStore struct {
	URI      string `json:"uri"`
	Required bool   `json:"required"`
}

// Stores are the stores attest.store names, parsed (Load has refused
// any that does not parse): a best-effort store is one whose entry or
// name says so.
func (a Attest) Stores() []storeref.Ref {
	var out []storeref.Ref
	for _, s := range a.Store {
		r, err := storeref.Parse(s.URI)
		if err != nil {
			continue
		}
		r.Required = r.Required && s.Required
		out = storeref.Merge(out, r)
	}
	return out
}

// OutputPatterns are the job's artifact patterns: Outputs, then those
// of the deprecated Subjects that Outputs does not have.
func (a Attest) OutputPatterns() []string {
	out := slices.Clone(a.Outputs)
	for _, s := range a.Subjects {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Step is one step of a named job.
type Step struct {
	Name             string            `json:"name"`
	Run              string            `json:"run"`
	Shell            string            `json:"shell"`
	Env              map[string]string `json:"env"`
	WorkingDirectory string            `json:"workingDirectory,omitempty"`
	Timeout          string            `json:"timeout,omitempty"`
}

// checkStores refuses a store name that does not parse, at the file and
// line that gave it (compiled are the sources' values, in order).
func (a Attest) checkStores(compiled []cue.Value) []string {
	var problems []string
	for i, s := range a.Store {
		if _, err := storeref.Parse(s.URI); err != nil {
			at := fmt.Sprintf("attest.store[%d].uri", i)
			if pos := positionOf(compiled, at); pos != "" {
				at = pos + ": " + at
			}
			problems = append(problems, fmt.Sprintf("%s: %v", at, err))
		}
	}
	return problems
}

// positionOf is file:line:column of the first source that sets path.
func positionOf(compiled []cue.Value, path string) string {
	p := cue.ParsePath(path)
	for _, v := range compiled {
		if !v.Exists() {
			continue
		}
		if sv := v.LookupPath(p); sv.Exists() && sv.Pos().IsValid() {
			return sv.Pos().String()
		}
	}
	return ""
}
