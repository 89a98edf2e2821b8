package images

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Ref is an image reference as a workflow wrote it, parsed the way Docker
// reads it: "node:20" is docker.io/library/node:20, a name without a tag
// or digest is ":latest".
type Ref struct {
	// Written is the reference as written (docker:// removed).
	Written string
	ref     name.Reference
}

// ParseRef parses an image reference; "docker://" in front (a Docker
// action's uses:) is dropped.
func ParseRef(s string) (Ref, error) {
	w := strings.TrimPrefix(strings.TrimSpace(s), "docker://")
	if w == "" {
		return Ref{}, fmt.Errorf("image reference %q: empty", s)
	}
	r, err := name.ParseReference(w)
	if err != nil {
		return Ref{}, fmt.Errorf("image reference %q: %w", s, err)
	}
	return Ref{Written: w, ref: r}, nil
}

// Registry is the registry's host (and port) as policies name it:
// "docker.io" for Docker Hub (go-containerregistry says index.docker.io).
func (r Ref) Registry() string {
	reg := r.ref.Context().RegistryStr()
	if reg == name.DefaultRegistry {
		return "docker.io"
	}
	return reg
}

// Repository is the repository within the registry: "library/node".
func (r Ref) Repository() string { return r.ref.Context().RepositoryStr() }

// Name is registry/repository, what image rules match: "docker.io/library/node".
func (r Ref) Name() string { return r.Registry() + "/" + r.Repository() }

// Digest is the digest the reference pins ("sha256:..."), or "".
func (r Ref) Digest() string {
	if d, ok := r.ref.(name.Digest); ok {
		return d.DigestStr()
	}
	return ""
}

// Tag is the reference's tag ("latest" when none is written and no digest
// is), or "" for a digest reference.
func (r Ref) Tag() string {
	if t, ok := r.ref.(name.Tag); ok {
		return t.TagStr()
	}
	return ""
}

// String is the reference in full: "docker.io/library/node:20".
func (r Ref) String() string {
	if d := r.Digest(); d != "" {
		return r.Name() + "@" + d
	}
	return r.Name() + ":" + r.Tag()
}
