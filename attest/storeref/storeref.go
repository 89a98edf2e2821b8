// Package storeref parses the names of attestation stores: where a job's
// signed bundles are kept after the job (attest/store writes them).
//
//	oci://REGISTRY[:PORT]/REPOSITORY   an OCI registry's repository
//	file:///PATH                       a directory on a mounted volume
//
// A name may end in a query of options: required=false makes the store
// best-effort (a failure is reported, the job is not failed for it);
// insecure=true lets an OCI store speak plain HTTP to a registry that is
// not on loopback. Nothing else is accepted: a name that does not parse
// is refused with what was wrong and the form that is right, so that a
// typo in the organisation policy stops the policy's load rather than
// the first job's record.
//
// Layer 0: imports nothing of airlock's, so that both the policy loader
// and the store take names the same way.
package storeref

import (
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Kind is the kind of a store.
type Kind string

// The kinds of store.
const (
	OCI  Kind = "oci"
	File Kind = "file"
)

// Ref is a parsed store name.
type Ref struct {
	Kind Kind
	// Registry (host[:port]) and Repository name an OCI store.
	Registry, Repository string
	// Path is a file store's directory (absolute, clean).
	Path string
	// Required is true unless the name says required=false: a store
	// that fails then fails the job.
	Required bool
	// Insecure lets an OCI store use plain HTTP beyond loopback.
	Insecure bool
}

// Form is what a store name looks like, for the errors that refuse one.
const Form = `oci://REGISTRY/REPOSITORY or file:///PATH, optionally followed by ?required=false (best-effort) or ?insecure=true (plain HTTP, OCI)`

// MaxLen bounds a store name.
const MaxLen = 1024

// Parse parses a store name.
func Parse(s string) (Ref, error) {
	bad := func(why string) (Ref, error) {
		return Ref{}, fmt.Errorf("attestation store %q: %s; a store is %s", clip(s), why, Form)
	}
	if len(s) > MaxLen {
		return bad(fmt.Sprintf("longer than %d bytes", MaxLen))
	}
	if strings.TrimSpace(s) != s || s == "" {
		return bad("empty, or with spaces around it")
	}
	for _, c := range s {
		if c < 0x21 || c == 0x7f {
			return bad("it holds a space or a control character")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URI")
	}
	r := Ref{Required: true}
	if u.User != nil {
		return bad("it holds credentials: name the credentials file in the runner's configuration instead (Docker's config.json format), never in a store name")
	}
	if u.Fragment != "" || u.RawFragment != "" || strings.Contains(s, "#") {
		return bad("it has a #fragment")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("its query does not parse")
	}
	for k, v := range q {
		if len(v) != 1 {
			return bad(fmt.Sprintf("option %s given %d times", k, len(v)))
		}
		if k != "required" && k != "insecure" {
			return bad(fmt.Sprintf("unknown option %q (there are required and insecure)", k))
		}
		b, err := strconv.ParseBool(v[0])
		if err != nil {
			return bad(fmt.Sprintf("option %s=%s is not true or false", k, v[0]))
		}
		switch k {
		case "required":
			r.Required = b
		case "insecure":
			r.Insecure = b
		}
	}
	switch u.Scheme {
	case "oci":
		r.Kind = OCI
		if u.Host == "" || u.Opaque != "" {
			return bad("no registry: write oci://REGISTRY/REPOSITORY")
		}
		repo := strings.TrimPrefix(u.Path, "/")
		if repo == "" {
			return bad("no repository after the registry")
		}
		if u.RawPath != "" || strings.Contains(repo, "%") {
			return bad("the repository has escaped characters")
		}
		ref, err := name.NewRepository(u.Host+"/"+repo, name.StrictValidation)
		if err != nil {
			return bad("the repository is not a valid OCI repository name (lower case letters, digits, . _ - and / only): " + err.Error())
		}
		if ref.RegistryStr() != u.Host {
			return bad("the registry is not a valid host[:port]")
		}
		r.Registry, r.Repository = u.Host, repo
	case "file":
		r.Kind = File
		if u.Host != "" && u.Host != "localhost" {
			return bad(fmt.Sprintf("file URIs name a path on this host (file:///PATH), not on %q", u.Host))
		}
		if r.Insecure {
			return bad("insecure is for OCI stores")
		}
		p := u.Path
		if u.Opaque != "" || !strings.HasPrefix(p, "/") {
			return bad("the path must be absolute: file:///PATH")
		}
		if path.Clean(p) != p || p == "/" {
			return bad("the path must be clean (no //, . or .., no trailing /) and not /")
		}
		r.Path = p
	case "":
		return bad("no scheme")
	default:
		return bad(fmt.Sprintf("unknown scheme %q", u.Scheme))
	}
	return r, nil
}

// String is the store's canonical name, options left out but for a
// best-effort store's and an insecure one's.
func (r Ref) String() string {
	var s string
	switch r.Kind {
	case OCI:
		s = "oci://" + r.Registry + "/" + r.Repository
	case File:
		s = "file://" + r.Path
	default:
		return ""
	}
	var opts []string
	if !r.Required {
		opts = append(opts, "required=false")
	}
	if r.Insecure {
		opts = append(opts, "insecure=true")
	}
	if len(opts) > 0 {
		s += "?" + strings.Join(opts, "&")
	}
	return s
}

// Location is the store without its options: two names with the same
// location are the same store.
func (r Ref) Location() string {
	r.Required, r.Insecure = true, false
	return r.String()
}

// ParseList parses names separated by spaces, commas or new lines (the
// hook's AIRLOCK_ATTEST_STORE), each once.
func ParseList(s string) ([]Ref, error) {
	var out []Ref
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\n' || r == '\t' }) {
		r, err := Parse(f)
		if err != nil {
			return nil, err
		}
		out = Merge(out, r)
	}
	return out, nil
}

// Merge adds r to refs unless a store of the same location is there;
// then the stricter of the two wins (required over best-effort), and an
// insecure one stays insecure only if both said so.
func Merge(refs []Ref, add ...Ref) []Ref {
	for _, r := range add {
		merged := false
		for i := range refs {
			if refs[i].Location() == r.Location() {
				refs[i].Required = refs[i].Required || r.Required
				refs[i].Insecure = refs[i].Insecure && r.Insecure
				merged = true
			}
		}
		if !merged {
			refs = append(refs, r)
		}
	}
	return refs
}

// clip shortens a name for an error, and hides what stands between
// :// and @ (a name that carries credentials must not print them).
func clip(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		if j := strings.LastIndex(s, "@"); j > i+3 {
			s = s[:i+3] + "***" + s[j:]
		}
	}
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}
