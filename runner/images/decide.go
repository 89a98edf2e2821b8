package images

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/airlock-ci/airlock/policies"
)

// PublicRegistries are the registries an agent's job may pull from when
// the organisation policy has no images section: the well-known public
// ones, which serve anyone and hold nothing of the runner's network.
var PublicRegistries = []string{"docker.io", "ghcr.io", "quay.io", "gcr.io", "registry.k8s.io", "public.ecr.aws", "mcr.microsoft.com"}

// Decision is whether a reference may be pulled, by which rule, and what
// the pull must check.
type Decision struct {
	// Allowed: the reference may be pulled (subject to the checks below).
	Allowed bool
	// Rule names what decided: "images.allow[2] (ghcr.io/my-org/**)", or
	// the default that applied.
	Rule string
	// Reason says why a refused reference is refused, in one line, and
	// Fix what would allow it.
	Reason, Fix string
	// Signers are the public key files, and Identities the Sigstore
	// identities, of which one must have signed the image; both empty:
	// none needed.
	Signers    []string
	Identities []policies.SigstoreIdentity
	// Warn: what the rule requires is recorded as a warning where it
	// fails, and the image is pulled all the same (mode "warn").
	Warn bool
	// Warnings are what a rule in mode "warn" let through.
	Warnings []string
	// Mirror is where the registry's bytes come from instead, or "".
	Mirror string
	// Insecure are the registries that may speak plain HTTP (loopback
	// always may): the pull checks the one it dials, the mirror's when
	// there is one.
	Insecure []string
	// CheckAddresses: every address the registry's name resolves to must
	// be outside the egress deny ranges (an agent's job). A mirror the
	// organisation names is not checked: the organisation chose it.
	CheckAddresses bool
	// HostCredentials: the host's own registry credentials (its Docker
	// config) may be used. Never for an agent's job: an agent could name
	// any image those credentials can read and run on it.
	HostCredentials bool
}

// Error says why a reference is refused: the Decision's reason and fix.
func (d Decision) Error(ref Ref) error {
	return fmt.Errorf("%w: %s: %s (%s); %s", ErrRefused, ref.Written, d.Reason, d.Rule, d.Fix)
}

// ErrRefused: the policy does not allow the image.
var ErrRefused = fmt.Errorf("image refused by the policy")

// Decide applies the organisation's images section (nil: absent) to ref,
// for an agent's job or a human's.
func Decide(ref Ref, p *policies.Images, agent bool) Decision {
	d := Decision{CheckAddresses: agent, HostCredentials: !agent}
	if p == nil {
		switch {
		case !agent:
			d.Allowed, d.Rule = true, "images (no section): a human's job may pull from any registry"
		case slices.Contains(PublicRegistries, ref.Registry()):
			d.Allowed, d.Rule = true, "images (no section): an agent's job may pull from the public registries"
		default:
			d.Rule = "images (no section): an agent's job may pull only from " + strings.Join(PublicRegistries, ", ")
			d.Reason = "registry " + ref.Registry() + " is not a public registry"
			d.Fix = fmt.Sprintf("to allow it: add {name: %q} to images.allow in the organisation policy", ref.Name())
		}
		return d
	}
	d.Mirror = p.Mirrors[ref.Registry()]
	d.Insecure = slices.Clone(p.Insecure)
	for i, r := range p.Allow {
		if !NameMatches(r.Name, ref.Name()) {
			continue
		}
		d.Rule = fmt.Sprintf("images.allow[%d] (%s)", i, r.Name)
		d.Signers, d.Identities, d.Warn = r.SignedBy, r.SignedByIdentity, r.Mode == "warn"
		needDigest := r.Digest == "always" || (r.Digest == "agents" && agent)
		if needDigest && ref.Digest() == "" {
			why := "the rule requires a digest"
			if r.Digest == "agents" {
				why += " for an agent's pull request"
			}
			if d.Warn {
				d.Warnings = append(d.Warnings, fmt.Sprintf("%s: %s, and %s names a tag (mode warn: pulled all the same)", d.Rule, why, ref.Written))
			} else {
				d.Reason = why + ", and the reference names a tag"
				d.Fix = fmt.Sprintf("pin it: write %s@sha256:<digest> (`crane digest %s` prints it)", ref.Name(), ref.Written)
				return d
			}
		}
		d.Allowed = true
		return d
	}
	d.Rule = "images.allow"
	d.Reason = "no rule allows " + ref.Name() + " (deny by default)"
	d.Fix = fmt.Sprintf("to allow it: add {name: %q} to images.allow in the organisation policy", ref.Name())
	return d
}

// NameMatches reports whether an image name (registry/repository) matches
// a rule's glob: "*" and the other path.Match patterns within a path
// component, and a final "/**" for that prefix at any depth.
func NameMatches(glob, imageName string) bool {
	if prefix, ok := strings.CutSuffix(glob, "/**"); ok {
		comps := strings.Count(prefix, "/") + 1
		parts := strings.SplitN(imageName, "/", comps+1)
		if len(parts) <= comps {
			return false
		}
		ok, err := path.Match(prefix, strings.Join(parts[:comps], "/"))
		return ok && err == nil
	}
	ok, err := path.Match(glob, imageName)
	return ok && err == nil
}
