package attest

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// A job's SLSA provenance (docs/provenance.md): an in-toto Statement v1
// whose subjects are the artifacts the job made (what it uploaded, the
// files attest.outputs names) and whose predicate is SLSA provenance v1
// with airlock's build type. It is signed from outside the sandbox with
// the run attestation's key, so no job can forge it, and it names the
// run attestation among its byproducts, with a summary of what the job
// did for a consumer who only has the artifact.

// Types and identifiers of the provenance.
const (
	// ProvenanceType is SLSA provenance v1's predicate type.
	ProvenanceType = "https://slsa.dev/provenance/v1"
	// JobBuildType is airlock's build type: one job in a sandbox, its
	// parameters as docs/provenance.md defines them.
	JobBuildType = "https://github.com/airlock-ci/airlock/blob/main/docs/provenance.md#job-v1"
	// BuilderID is the builder's id before its host (?host=NAME).
	BuilderID = "https://github.com/airlock-ci/airlock/builder/v1"
	// TreeDigestAlg names the digest of an action's directory
	// (files.TreeDigest's canonical listing, hashed with sha256).
	TreeDigestAlg = "airlockTreeV1"
	// MaxProvenanceSubjects bounds the artifacts one provenance names.
	MaxProvenanceSubjects = 600
)

// Provenance is the SLSA v1 predicate of a job (field names and shapes
// as SLSA's; what airlock puts in its parameters is JobBuildType's).
type Provenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

// BuildDefinition says what the job was asked to do and with what.
type BuildDefinition struct {
	BuildType            string             `json:"buildType"`
	ExternalParameters   ExternalParameters `json:"externalParameters"`
	InternalParameters   InternalParameters `json:"internalParameters"`
	ResolvedDependencies []Descriptor       `json:"resolvedDependencies"`
}

// ExternalParameters are the job's inputs that someone outside airlock
// chose: the repository and commit, the workflow and job, the event and
// pull request, and who wrote it (the agent detection). Taken from the
// run attestation's predicate.
type ExternalParameters struct {
	Repository  string         `json:"repository"`
	Ref         string         `json:"ref"`
	BaseRef     string         `json:"baseRef"`
	Workflow    string         `json:"workflow"`
	Job         string         `json:"job"`
	Event       string         `json:"event"`
	PullRequest int            `json:"pullRequest"`
	Author      string         `json:"author"`
	Agent       *AgentDecision `json:"agent"`
}

// InternalParameters are what the runner's side set: the effective
// policy, the platform and the sandbox's settings.
type InternalParameters struct {
	Policy         ProvenancePolicy `json:"policy"`
	Platform       string           `json:"platform"`
	PlatformReason string           `json:"platformReason"`
	GVisorVersion  string           `json:"gvisorVersion"`
	Sandbox        SandboxSettings  `json:"sandbox"`
}

// ProvenancePolicy is the policy that governed the job.
type ProvenancePolicy struct {
	EffectiveSHA256 string         `json:"effectiveSha256"`
	Sources         []PolicySource `json:"sources"`
}

// SandboxSettings are the sandbox's settings that bear on what it could
// do: its network, user and root, the egress mode, the paths it had
// read-only, and its limits.
type SandboxSettings struct {
	Network    string        `json:"network"`
	User       string        `json:"user"`
	RootFS     string        `json:"rootfs"`
	EgressMode string        `json:"egressMode"`
	ReadOnly   []string      `json:"readOnly"`
	Limits     SandboxLimits `json:"limits"`
}

// SandboxLimits are the job's limits (0: none), in seconds and bytes.
type SandboxLimits struct {
	JobTimeoutSeconds  int64   `json:"jobTimeoutSeconds"`
	StepTimeoutSeconds int64   `json:"stepTimeoutSeconds"`
	MemoryBytes        int64   `json:"memoryBytes"`
	Pids               int     `json:"pids"`
	CPUs               float64 `json:"cpus"`
	WorkspaceBytes     int64   `json:"workspaceBytes"`
	// EnforcedBy says who enforces the memory and CPU limits when it is
	// not the sandbox's own cgroup: the enclosing cgroup (a pod's), whose
	// values they are.
	EnforcedBy string `json:"enforcedBy,omitempty"`
	// WorkspaceMedium is "tmpfs" where the workspace's bound kept the
	// job's writes in memory (no loop devices, as in a pod); empty: on
	// the disk.
	WorkspaceMedium string `json:"workspaceMedium,omitempty"`
}

// Descriptor is an in-toto ResourceDescriptor: a dependency of the job.
type Descriptor struct {
	Name        string            `json:"name,omitempty"`
	URI         string            `json:"uri,omitempty"`
	Digest      map[string]string `json:"digest,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RunDetails says who ran the job, when, and what else it left.
type RunDetails struct {
	Builder  Builder       `json:"builder"`
	Metadata BuildMetadata `json:"metadata"`
	// Byproducts are the run attestation (RunByproduct), first and only.
	Byproducts []RunByproduct `json:"byproducts"`
}

// Builder is the runner host under airlock: BuilderID with its host,
// and the versions of airlock and gVisor.
type Builder struct {
	ID      string            `json:"id"`
	Version map[string]string `json:"version"`
}

// BuildMetadata identifies the invocation and bounds it in time.
type BuildMetadata struct {
	InvocationID string    `json:"invocationId"`
	StartedOn    time.Time `json:"startedOn"`
	FinishedOn   time.Time `json:"finishedOn"`
}

// RunByproduct is the run attestation as a byproduct: its file's name,
// the sha256 of its statement (the DSSE payload), and what it says in
// brief (RunSummary) for a consumer who has only the provenance.
type RunByproduct struct {
	Name        string            `json:"name"`
	Digest      map[string]string `json:"digest"`
	MediaType   string            `json:"mediaType"`
	Annotations RunSummary        `json:"annotations"`
}

// RunSummary is what the job did, from its run attestation: every field
// always present, as in the run predicate.
type RunSummary struct {
	PredicateType string         `json:"predicateType"`
	Agent         *AgentDecision `json:"agent"`
	// Verdict is "passed" or "failed"; Reasons say why it failed.
	Verdict       string          `json:"verdict"`
	ExitCode      int             `json:"exitCode"`
	Reasons       []string        `json:"reasons"`
	EgressMode    string          `json:"egressMode"`
	RefusedEgress []RefusedEgress `json:"refusedEgress"`
	TrustFindings []FindingRef    `json:"trustFindings"`
	// RefusedUploads are the uploads that are not subjects: refused by
	// the gateway, or never finalized.
	RefusedUploads []UploadRecord `json:"refusedUploads"`
	// Notes say what was left out of the subjects and why.
	Notes []string `json:"notes"`
}

// RefusedEgress is one destination the job was refused (or, under
// audit, let through where enforcement would refuse it).
type RefusedEgress struct {
	Destination string `json:"destination"`
	Denied      int    `json:"denied"`
	WouldDeny   int    `json:"wouldDeny"`
}

// FindingRef is a trust finding in brief.
type FindingRef struct {
	Check    string `json:"check"`
	Category string `json:"category"`
	Severity string `json:"severity"`
	Path     string `json:"path"`
}

// UploadRecord is an upload of the job that is not a subject.
type UploadRecord struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// provenanceJSON is the provenance statement in its JSON form.
type provenanceJSON struct {
	Type          string        `json:"_type"`
	Subject       []SubjectInfo `json:"subject"`
	PredicateType string        `json:"predicateType"`
	Predicate     Provenance    `json:"predicate"`
}

// ProvenanceStatement serialises the provenance statement of artifacts
// (at least one, each with its sha256: in-toto needs a subject, and a
// consumer matches an artifact by its sha256). These bytes are signed.
func ProvenanceStatement(artifacts []SubjectInfo, p Provenance) ([]byte, error) {
	if err := checkArtifactSubjects(artifacts); err != nil {
		return nil, fmt.Errorf("provenance statement: %w", err)
	}
	b, err := json.Marshal(provenanceJSON{Type: StatementType, Subject: artifacts, PredicateType: ProvenanceType, Predicate: p})
	if err != nil {
		return nil, fmt.Errorf("encode provenance statement: %w", err)
	}
	return b, nil
}

// checkArtifactSubjects holds the provenance's subjects to its shape:
// 1 to MaxProvenanceSubjects, each named, with a hex sha256.
func checkArtifactSubjects(subjects []SubjectInfo) error {
	if len(subjects) == 0 || len(subjects) > MaxProvenanceSubjects {
		return fmt.Errorf("%d subjects, want 1 to %d artifacts", len(subjects), MaxProvenanceSubjects)
	}
	for _, s := range subjects {
		if s.Name == "" || !IsSHA256(s.Digest["sha256"]) {
			return fmt.Errorf("subject %q: want a name and a sha256 digest", s.Name)
		}
	}
	return nil
}

// IsSHA256 reports whether s is a sha256 digest in lower-case hex.
func IsSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == strings.ToLower(s)
}
