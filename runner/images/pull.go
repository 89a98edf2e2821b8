package images

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ggcrtransport "github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/policies"
)

// Credentials are a registry's user name and password as the runner hands
// them to the hook (container.credentials): used on the host only.
type Credentials struct {
	Registry           string
	Username, Password string
}

// String never shows the password.
func (c Credentials) String() string { return "credentials for " + c.Registry }

// Puller pulls images into a Store.
type Puller struct {
	Store *Store
	// Check says why an address may not be dialled; used where the
	// decision asks (an agent's job).
	Check AddressCheck
	// Credentials the runner gave for a registry; the host's Docker
	// config (DOCKER_CONFIG, ~/.docker/config.json) answers for the others.
	Credentials []Credentials
	// Progress, when set, gets a line per layer once a pull has taken
	// longer than a second, as docker pull shows it.
	Progress func(line string)
	// Platform is the platform to pull; zero: linux and this binary's
	// architecture.
	Platform v1.Platform

	// timeouts and backoff, when set, replace the defaults (tests).
	timeouts *timeouts
	backoff  *remote.Backoff
}

// Resolved says what a reference resolved to, for the record.
type Resolved struct {
	// Ref is the reference as written.
	Ref string `json:"ref"`
	// Digest is what the reference resolved to in its registry (an
	// index's digest for a multi-platform image); ImageDigest the
	// platform's image manifest, which the job ran.
	Digest      string `json:"digest"`
	ImageDigest string `json:"imageDigest"`
	Platform    string `json:"platform"`
	// Signature names the signature that verified it, when the policy
	// asked for one.
	Signature *Signature `json:"signature,omitempty"`
	// Rule is the policy rule that allowed it; Warnings what a rule in
	// mode warn let through.
	Rule     string   `json:"rule"`
	Warnings []string `json:"warnings,omitempty"`
	// Pulled: the image was pulled now; false: the cache held it.
	Pulled bool `json:"pulled"`
}

// retry is how often a transient failure (a reset, a 5xx, a 429) is
// tried again: after 0.5, 1 and 2 s.
var retry = remote.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 4}

// Pull resolves ref under decision d (which must allow it), pulls what
// the cache lacks, unpacks it once, and returns the image with a lease
// that the caller holds while a job runs on it.
func (p *Puller) Pull(ctx context.Context, ref Ref, d Decision) (Image, Resolved, *Lease, error) {
	res := Resolved{Ref: ref.Written, Rule: d.Rule, Warnings: d.Warnings}
	if !d.Allowed {
		return Image{}, res, nil, d.Error(ref)
	}
	from, err := p.source(ref, d)
	if err != nil {
		return Image{}, res, nil, err
	}
	var check AddressCheck
	if d.CheckAddresses && d.Mirror == "" {
		check = p.Check
	}
	tr := newTransport(check, d.Insecure, *cmpOr(p.timeouts, &defaultTimeouts))
	plain := tr.plainAllowed(from.Context().RegistryStr())
	if plain {
		// go-containerregistry tries plain HTTP only where the name says
		// so; the policy's insecure registries are named too.
		if from, err = name.ParseReference(from.String(), name.Insecure); err != nil {
			return Image{}, res, nil, err
		}
	}
	plat := p.platform()
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(tr),
		remote.WithAuthFromKeychain(p.keychain(d.HostCredentials)),
		remote.WithPlatform(plat),
		remote.WithRetryBackoff(*cmpOr(p.backoff, &retry)),
		remote.WithRetryStatusCodes(408, 429, 500, 502, 503, 504),
		remote.WithUserAgent("airlock"),
	}
	desc, err := remote.Get(from, opts...)
	if err != nil {
		return Image{}, res, nil, p.failed(ref, from, plain, err)
	}
	res.Digest = desc.Digest.String()
	img, err := desc.Image()
	if err != nil {
		return Image{}, res, nil, p.failed(ref, from, plain, err)
	}
	h, err := img.Digest()
	if err != nil {
		return Image{}, res, nil, p.failed(ref, from, plain, err)
	}
	res.ImageDigest = h.String()
	if len(d.Signers) > 0 || len(d.Identities) > 0 {
		sig, err := p.verify(ctx, from.Context(), desc.Digest, h, d, opts)
		// Mode warn lets an unsigned image through, not a check that could
		// not be made (a key file that does not read, a registry that
		// fails): that fails whatever the mode.
		if err != nil && (!d.Warn || !errors.Is(err, ErrNotSigned)) {
			return Image{}, res, nil, fmt.Errorf("%s (%s): %w", ref.Written, d.Rule, err)
		}
		if err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s: %v (mode warn: pulled all the same)", d.Rule, err))
		} else {
			res.Signature = &sig
		}
	}
	cached, lease, err := p.cached(ctx, ref, img, h, plat, &res)
	if err != nil {
		return Image{}, res, nil, err
	}
	res.Platform = cached.Platform
	// Busy: a pull under way prunes when it is done.
	if _, err := p.Store.Prune(p.Store.max); err != nil && !errors.Is(err, ErrCacheBusy) {
		lease.Close()
		return Image{}, res, nil, err
	}
	return cached, res, lease, nil
}

// cached returns image h from the cache with a lease on it, pulling it
// first if the cache lacks it. The gc lock is held, shared, until the
// lease is: no prune runs between the pull and the lease.
func (p *Puller) cached(ctx context.Context, ref Ref, img v1.Image, h v1.Hash, plat v1.Platform, res *Resolved) (Image, *Lease, error) {
	gc, err := p.Store.lockWait(ctx, "gc", gcLock, unix.LOCK_SH)
	if err != nil {
		return Image{}, nil, err
	}
	defer gc.Close()
	if cached, lease, ok, err := p.Store.use(h); err != nil || ok {
		return cached, lease, err
	}
	if res.Pulled, err = p.fetch(ctx, ref, img, h, plat); err != nil {
		return Image{}, nil, err
	}
	cached, lease, ok, err := p.Store.use(h)
	if err == nil && !ok {
		err = fmt.Errorf("image %s: not in the cache right after its pull: pull again", ref.Written)
	}
	return cached, lease, err
}

func cmpOr[T any](p, def *T) *T {
	if p != nil {
		return p
	}
	return def
}

// source is where the reference's bytes come from: its registry, or the
// mirror the policy names for it (same repository, tag and digest).
func (p *Puller) source(ref Ref, d Decision) (name.Reference, error) {
	if d.Mirror == "" {
		return ref.ref, nil
	}
	s := d.Mirror + "/" + ref.Repository()
	if dg := ref.Digest(); dg != "" {
		s += "@" + dg
	} else {
		s += ":" + ref.Tag()
	}
	m, err := name.ParseReference(s)
	if err != nil {
		return nil, fmt.Errorf("mirror of %s (images.mirrors): %w", ref.Registry(), err)
	}
	return m, nil
}

func (p *Puller) platform() v1.Platform {
	if p.Platform.OS != "" {
		return p.Platform
	}
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// keychain answers with the runner's credentials for their registry,
// else, where host is true, with the host's Docker config, as the
// runner's Docker would.
func (p *Puller) keychain(host bool) authn.Keychain {
	if !host {
		return staticKeychain(p.Credentials)
	}
	return authn.NewMultiKeychain(staticKeychain(p.Credentials), authn.DefaultKeychain)
}

type staticKeychain []Credentials

func (k staticKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	for _, c := range k {
		reg := c.Registry
		if reg == "docker.io" || reg == "" {
			reg = name.DefaultRegistry
		}
		if reg == r.RegistryStr() {
			return authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password}), nil
		}
	}
	return authn.Anonymous, nil
}

// failed words a registry failure for the job's log: what, from where,
// and what to do. The registry's own words are kept (they never hold the
// credentials: go-containerregistry sends those in headers).
// plain says whether HTTP was allowed to the registry (then a scheme
// mismatch is not the cause).
func (p *Puller) failed(ref Ref, from name.Reference, plain bool, err error) error {
	where := from.Context().RegistryStr()
	err = registryWords{err}
	var terr *ggcrtransport.Error
	var nerr net.Error
	var refused *AddressRefusedError
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("pull %s: registry %s is at an address an agent's job may not reach: %v", ref.Written, where, refused.Err)
	case !plain && (errors.Is(err, http.ErrSchemeMismatch) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")):
		return fmt.Errorf("pull %s: registry %s speaks plain HTTP, which airlock speaks only to loopback and to the registries the organisation names: add %q to images.insecure in the organisation policy, or serve it over HTTPS: %w", ref.Written, where, where, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("pull %s from %s: %w", ref.Written, where, err)
	case errors.As(err, &terr) && terr.StatusCode == http.StatusUnauthorized, errors.As(err, &terr) && terr.StatusCode == http.StatusForbidden:
		return fmt.Errorf("pull %s: registry %s refused it (HTTP %d): %w; give the runner credentials for it (the workflow's container credentials, or the host's Docker config)", ref.Written, where, terr.StatusCode, err)
	case errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound:
		return fmt.Errorf("pull %s: registry %s has no such image (HTTP 404): %w", ref.Written, where, err)
	case errors.As(err, &terr) && terr.StatusCode >= 500:
		return fmt.Errorf("pull %s: registry %s answered HTTP %d, %d tries: %w; try again later, or check the registry", ref.Written, where, terr.StatusCode, retry.Steps, err)
	case errors.As(err, &nerr), errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("pull %s: registry %s did not answer, %d tries: %w; check that the registry is up and reachable from the runner", ref.Written, where, retry.Steps, err)
	}
	return fmt.Errorf("pull %s from %s: %w", ref.Written, where, err)
}

// registryWords is an error whose text came in part from a registry:
// one line, bounded, as every error from outside is printed.
type registryWords struct{ err error }

func (r registryWords) Error() string {
	return textsafe.Clip(textsafe.Line(strings.ReplaceAll(r.err.Error(), "\n", " ")), 1000, "...")
}
func (r registryWords) Unwrap() error { return r.err }

// fetch brings image h into the cache unless another pull did meanwhile
// (one pull per image at a time: the second waits and finds it), and
// reports whether it pulled.
func (p *Puller) fetch(ctx context.Context, ref Ref, img v1.Image, h v1.Hash, plat v1.Platform) (bool, error) {
	lock, err := p.Store.lockWait(ctx, "pull", h, unix.LOCK_EX)
	if err != nil {
		return false, err
	}
	defer lock.Close()
	if _, ok := p.Store.root(h); ok {
		return false, nil
	}
	p.Store.removeStaleTmp(h)
	if err := p.checkSizes(ref, img); err != nil {
		return false, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return false, fmt.Errorf("pull %s: image config: %w", ref.Written, err)
	}
	if cfg.OS != plat.OS || cfg.Architecture != plat.Architecture {
		return false, fmt.Errorf("%w: %s is an image for %s/%s, and this runner runs %s/%s: use a multi-platform image, or one built for %s/%s", ErrPlatform, ref.Written, cfg.OS, cfg.Architecture, plat.OS, plat.Architecture, plat.OS, plat.Architecture)
	}
	layers, err := img.Layers()
	if err != nil {
		return false, fmt.Errorf("pull %s: %w", ref.Written, err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return false, fmt.Errorf("pull %s: %d layers, but its config lists %d: refused", ref.Written, len(layers), len(cfg.RootFS.DiffIDs))
	}
	rec := Image{Digest: h.String(), Ref: ref.String(), Platform: cfg.OS + "/" + cfg.Architecture, Env: cfg.Config.Env, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User}
	if cfg.Variant != "" {
		rec.Platform += "/" + cfg.Variant
	}
	start := time.Now()
	var streams []LayerStream
	for i, l := range layers {
		ld, err := l.Digest()
		if err != nil {
			return false, fmt.Errorf("pull %s: layer %d: %w", ref.Written, i+1, err)
		}
		rec.Layers = append(rec.Layers, ld.String())
		if !p.Store.hasBlob(ld) {
			if err := p.fetchBlob(l, ld); err != nil {
				return false, fmt.Errorf("pull %s: layer %d/%d %s: %w", ref.Written, i+1, len(layers), ld, err)
			}
		}
		size, _ := l.Size()
		p.progress(start, "%s: layer %d/%d %s (%s) ready", ref.Written, i+1, len(layers), ld.Hex[:12], policies.HumanSize(size))
		path := p.Store.blobPath(ld)
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(path) })
		if err != nil {
			return false, fmt.Errorf("pull %s: layer %d: %w", ref.Written, i+1, err)
		}
		streams = append(streams, LayerStream{DiffID: cfg.RootFS.DiffIDs[i].String(), Open: layer.Uncompressed})
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	chains := chainIDs(cfg.RootFS.DiffIDs)
	budget := Budget{Bytes: p.Store.max, Entries: maxEntries}
	held, err := p.Store.buildSnapshots(ctx, chains, streams, &budget)
	if err != nil {
		p.Store.removeBlobs(rec.Layers)
		return false, fmt.Errorf("unpack %s: %w", ref.Written, err)
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, c := range chains {
		rec.Chain = append(rec.Chain, c.Hex)
		size, _ := p.Store.snapshotSize(c)
		rec.Size += size
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(p.Store.dir, "tmp"), "pull-"+h.Hex+"-")
	if err != nil {
		return false, fmt.Errorf("image cache: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), b, 0o600); err != nil {
		return false, fmt.Errorf("image cache: %w", err)
	}
	if err := os.Rename(tmp, p.Store.rootDir(h)); err != nil {
		return false, fmt.Errorf("image cache: %w", err)
	}
	p.progress(start, "%s: %s unpacked (%d layers, %s)", ref.Written, h.Hex[:12], len(layers), policies.HumanSize(rec.Size))
	return true, nil
}

// maxEntries bounds the files of one image (an inode bomb).
const maxEntries = 2_000_000

// ErrPlatform: the image is for another platform than the runner's.
var ErrPlatform = errors.New("image for another platform")

// fetchBlob downloads layer l into the cache, verified against ld and
// the size its manifest declares.
func (p *Puller) fetchBlob(l v1.Layer, ld v1.Hash) error {
	size, err := l.Size()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = p.Store.putBlob(ld, rc, size)
	return err
}

// Bounds on what an image's manifest may declare, checked before a byte
// of its config or layers is read: a config is small (Docker's are a
// few KiB), an image has at most maxLayers layers (Docker's limit), and
// its compressed layers fit in the cache.
const (
	maxConfig = 1 << 20
	maxLayers = 127
)

// checkSizes refuses an image whose manifest declares more than the
// bounds allow.
func (p *Puller) checkSizes(ref Ref, img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("pull %s: manifest: %w", ref.Written, err)
	}
	if m.Config.Size > maxConfig || m.Config.Size < 0 {
		return fmt.Errorf("%w: %s: its config is %d bytes, more than %d: refused", ErrTooLarge, ref.Written, m.Config.Size, maxConfig)
	}
	if len(m.Layers) > maxLayers {
		return fmt.Errorf("%w: %s: %d layers, more than %d: refused", ErrTooLarge, ref.Written, len(m.Layers), maxLayers)
	}
	total := int64(0)
	for _, l := range m.Layers {
		if l.Size < 0 || l.Size > p.Store.max-total {
			return fmt.Errorf("%w: %s: its layers are larger than the image cache (%s; images.cache in the organisation policy)", ErrTooLarge, ref.Written, policies.HumanSize(p.Store.max))
		}
		total += l.Size
	}
	return nil
}

// progress prints a line once the pull has taken longer than a second.
func (p *Puller) progress(start time.Time, format string, args ...any) {
	if p.Progress != nil && time.Since(start) > time.Second {
		p.Progress(fmt.Sprintf(format, args...))
	}
}

// verify checks the signatures the decision asks for, on the digest the
// reference resolved to (what `cosign sign REF` signs) and on the
// platform's image manifest.
func (p *Puller) verify(ctx context.Context, repo name.Repository, resolved, image v1.Hash, d Decision, opts []remote.Option) (Signature, error) {
	var rules []SignatureRule
	for _, id := range d.Identities {
		r, err := LoadIdentity(id)
		if err != nil {
			return Signature{}, fmt.Errorf("images.allow signedByIdentity: %w", err)
		}
		rules = append(rules, SignatureRule{Identity: &r})
	}
	for _, k := range d.Signers {
		b, err := os.ReadFile(k)
		if err != nil {
			return Signature{}, fmt.Errorf("signing key %s (images.allow signedBy): %w", k, err)
		}
		r, err := ParsePublicKey(b)
		if err != nil {
			return Signature{}, fmt.Errorf("signing key %s (images.allow signedBy): %w", k, err)
		}
		rules = append(rules, r)
	}
	sig, err := VerifySignature(ctx, repo, resolved, rules, opts...)
	if err == nil || resolved == image {
		return sig, err
	}
	sig, err2 := VerifySignature(ctx, repo, image, rules, opts...)
	switch {
	case err2 == nil:
		return sig, nil
	case !errors.Is(err2, ErrNotSigned):
		return Signature{}, err2 // a check that could not be made
	}
	return Signature{}, err
}
