package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/images"
)

// ImageSource gives a job the images it names (its container, its
// services, its Docker actions): the directory the organisation maps an
// image to (sandbox.images) first, for runners that stage their images;
// else the image pulled by digest from its registry on the host, under
// the policy's images section (package images). It keeps each pulled
// image in the cache until the job ends (Close), and what each reference
// resolved to, for the record (Resolved).
type ImageSource struct {
	mapped  map[string]string
	section *policies.Images
	agent   bool
	ranges  rules.Ranges
	// StoreDir is the image cache; empty: images.DefaultStoreDir.
	StoreDir string
	// Credentials are registry credentials for any reference of their
	// registry.
	Credentials []images.Credentials
	// RefCredentials are the credentials that came with one reference
	// (the runner's, for the job container and each service: keyed by
	// the reference as written), used for that reference alone, before
	// Credentials, each only for its own registry.
	RefCredentials map[string]images.Credentials
	// Log gets the pulls' progress; nil: none.
	Log io.Writer

	mu       sync.Mutex
	leases   []*images.Lease
	resolved []images.Resolved
}

// NewImageSource is the source of a job's images: mapped are the
// organisation's directories (sandbox.images), pol the effective policy
// (its egress ranges; nil: the built-in ones), org the organisation's
// (its images section alone decides; nil: no section), agent whether the
// pull request is an agent's. NewPlan makes the job's.
func NewImageSource(mapped map[string]string, pol *policies.Policy, org *policies.Policy, agent bool) (*ImageSource, error) {
	s := &ImageSource{mapped: mapped, agent: agent}
	if org != nil {
		s.section = org.Images // the organisation's alone decides
	}
	// The deny ranges are the effective policy's (a repository may add
	// some); the exceptions to them the organisation's alone.
	var allow, deny []string
	if pol != nil {
		deny = slices.Sorted(maps.Keys(pol.Egress.DenyCIDRs))
		allow = pol.Egress.AllowCIDRs
	}
	if org != nil {
		allow = org.Egress.AllowCIDRs
	}
	r, err := rules.NewRanges(allow, deny)
	if err != nil {
		return nil, err
	}
	s.ranges = r
	return s, nil
}

// Mapped returns the directory the organisation maps ref to, if it does.
func (s *ImageSource) Mapped(ref string) (string, bool) {
	return policies.ImageRoot(s.mapped, ref)
}

// ResolvedFor is what ref resolved to when this job pulled it, if it did.
func (s *ImageSource) ResolvedFor(ref string) (images.Resolved, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := strings.TrimPrefix(ref, "docker://")
	for _, r := range s.resolved {
		if r.Ref == w {
			return r, true
		}
	}
	return images.Resolved{}, false
}

// Pulls reports whether the policy lets images be pulled at all
// (images.pull).
func (s *ImageSource) Pulls() bool { return s.section == nil || s.section.Pull }

// Check says why ref cannot be had (what names its user in the error),
// without pulling: a mapped image always can; any other must be a
// reference the policy allows.
func (s *ImageSource) Check(ref, what string) error {
	if _, ok := s.Mapped(ref); ok {
		return nil
	}
	_, _, err := s.decide(ref, what)
	return err
}

// decide is the policy's decision on pulling ref (not mapped), or why
// it may not be pulled.
func (s *ImageSource) decide(ref, what string) (images.Ref, images.Decision, error) {
	if !s.Pulls() {
		return images.Ref{}, images.Decision{}, fmt.Errorf("%s: image %q is not mapped to a local root filesystem by the organisation policy (sandbox.images), and the policy pulls no images (images.pull: false)", what, ref)
	}
	r, err := images.ParseRef(ref)
	if err != nil {
		return r, images.Decision{}, fmt.Errorf("%s: %w", what, err)
	}
	d := images.Decide(r, s.section, s.agent)
	if !d.Allowed {
		return r, d, fmt.Errorf("%s: %w", what, d.Error(r))
	}
	return r, d, nil
}

// Open returns the image ref names: mapped, or pulled (and held in the
// cache until Close).
func (s *ImageSource) Open(ctx context.Context, ref, what string) (Image, error) {
	if dir, ok := policies.ImageRoot(s.mapped, ref); ok {
		return OpenImage(dir)
	}
	r, d, err := s.decide(ref, what)
	if err != nil {
		return Image{}, err
	}
	max := int64(0)
	if s.section != nil && s.section.Cache != "" {
		if max, err = policies.ParseSize(s.section.Cache); err != nil {
			return Image{}, PolicyError{fmt.Errorf("images.cache: %w", err)}
		}
	}
	dir := s.StoreDir
	if dir == "" {
		dir = images.DefaultStoreDir
	}
	store, err := images.OpenStore(dir, max)
	if err != nil {
		return Image{}, err
	}
	creds := s.Credentials
	if c, ok := s.RefCredentials[ref]; ok {
		creds = append([]images.Credentials{c}, creds...)
	}
	p := &images.Puller{Store: store, Credentials: creds, Check: s.check}
	if s.Log != nil {
		p.Progress = func(line string) { fmt.Fprintf(s.Log, "airlock: %s\n", line) }
	}
	img, res, lease, err := p.Pull(ctx, r, d)
	if err != nil {
		return Image{}, fmt.Errorf("%s: %w", what, err)
	}
	s.mu.Lock()
	s.leases = append(s.leases, lease)
	s.resolved = append(s.resolved, res)
	s.mu.Unlock()
	if s.Log != nil {
		from := "from the cache"
		if res.Pulled {
			from = "pulled"
		}
		fmt.Fprintf(s.Log, "airlock: %s: %s is %s (%s, %s; %s)\n", what, ref, res.Digest, res.Platform, from, res.Rule)
		for _, w := range res.Warnings {
			fmt.Fprintf(s.Log, "airlock: warning: %s\n", w)
		}
	}
	return pulledImage(img), nil
}

// check refuses an address in the egress deny ranges (an agent's pulls).
func (s *ImageSource) check(a netip.Addr) error {
	if v := s.ranges.Check(a); !v.Allowed {
		msg := v.Reason
		if v.Suggest != "" {
			msg += "; " + v.Suggest
		}
		return errors.New(msg)
	}
	return nil
}

// Resolved is what each pulled reference resolved to, in order.
func (s *ImageSource) Resolved() []images.Resolved {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.resolved)
}

// Close lets the cache prune the job's images again.
func (s *ImageSource) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.leases {
		l.Close()
	}
	s.leases = nil
}

// pulledImage is a cached image as a job runs it: its root, and its
// config's command, environment, directory and (numeric) user.
func pulledImage(img images.Image) Image {
	out := Image{RootFS: img.RootFS, Env: slices.Clone(img.Env), Dir: img.WorkingDir}
	out.Args = append(slices.Clone(img.Entrypoint), img.Cmd...)
	if u, g, ok := numericUser(img.User); ok {
		out.User = &gvisor.User{UID: u, GID: g}
	}
	return out
}

// numericUser reads "uid" or "uid:gid"; a name is not read here (it
// needs the image's /etc/passwd).
func numericUser(s string) (uint32, uint32, bool) {
	if s == "" {
		return 0, 0, true
	}
	us, gs, hasG := strings.Cut(s, ":")
	u, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return 0, 0, false
	}
	g := u
	if hasG {
		if g, err = strconv.ParseUint(gs, 10, 32); err != nil {
			return 0, 0, false
		}
	}
	return uint32(u), uint32(g), true
}
