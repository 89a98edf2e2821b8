package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/hashicorp/go-retryablehttp"
	"golang.org/x/sync/errgroup"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/storeref"
)

// The OCI layout's media types and annotations. The bundle's are
// cosign's (specs/BUNDLE_SPEC.md); the rest are airlock's.
const (
	emptyMediaType   types.MediaType = "application/vnd.oci.empty.v1+json"
	commitArtifact                   = "application/vnd.airlock-ci.commit.v1+json"
	annCreated                       = "org.opencontainers.image.created"
	annBundleContent                 = "dev.sigstore.bundle.content"
	annPredicateType                 = "dev.sigstore.bundle.predicateType"
	annPrefix                        = "com.github.airlock-ci."
	annRepository                    = annPrefix + "repository"
	annPullRequest                   = annPrefix + "pull-request"
	annCommit                        = annPrefix + "commit"
	annRunID                         = annPrefix + "run-id"
	annRunAttempt                    = annPrefix + "run-attempt"
	annJob                           = annPrefix + "job"
	annRunner                        = annPrefix + "runner"
	annJobID                         = annPrefix + "job-id"
	annVerdict                       = annPrefix + "verdict"
	annKind                          = annPrefix + "kind"
	annTag                           = annPrefix + "tag"
	annBundleDigest                  = annPrefix + "bundle-digest"
)

// errNotARecord is a manifest that is not an airlock record.
var errNotARecord = errors.New("not an airlock record")

// emptyJSON is the OCI empty descriptor's content.
var emptyJSON = []byte("{}")

// maxManifest bounds a manifest or index read back.
const maxManifest = 4 << 20

// listDeadline bounds a whole List (a registry that pages its tags for
// ever, or hangs between answers).
const listDeadline = 10 * time.Minute

// listWorkers bounds the requests List makes at once.
const listWorkers = 8

// ociStore is a repository of an OCI registry.
type ociStore struct {
	ref    storeref.Ref
	repo   name.Repository
	o      Options
	pusher *remote.Pusher
	puller *remote.Puller
	// emptyUp: this store value uploaded the empty blob already (a
	// Sessions' store, prepared while the job ran).
	emptyUp atomic.Bool
}

func openOCI(r storeref.Ref, o Options) (*ociStore, error) {
	keys, err := loadKeychain(o.AuthFile)
	if err != nil {
		return nil, err
	}
	var nameOpts []name.Option
	if r.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	repo, err := name.NewRepository(r.Registry+"/"+r.Repository, nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("attestation store %s: %w", r.Location(), err)
	}
	tr := &schemeGuard{next: newTransport(o), insecure: r.Insecure}
	opts := []remote.Option{
		remote.WithAuthFromKeychain(keys),
		remote.WithTransport(tr),
		// Retries are go-retryablehttp's, below: none of go-containerregistry's own.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithRetryStatusCodes(),
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithUserAgent("airlock"),
		remote.WithJobs(2),
	}
	s := &ociStore{ref: r, repo: repo, o: o}
	if s.pusher, err = remote.NewPusher(opts...); err != nil {
		return nil, fmt.Errorf("attestation store %s: %w", r.Location(), err)
	}
	if s.puller, err = remote.NewPuller(opts...); err != nil {
		return nil, fmt.Errorf("attestation store %s: %w", r.Location(), err)
	}
	return s, nil
}

// errPlainHTTP is plain HTTP that schemeGuard refused.
var errPlainHTTP = errors.New("refusing plain HTTP")

// schemeGuard refuses plain HTTP to a registry that is not on loopback
// unless the store said insecure=true: credentials never cross a network
// in the clear because a TLS handshake failed.
type schemeGuard struct {
	next     http.RoundTripper
	insecure bool
}

func (g *schemeGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "http" && !g.insecure && !loopback(r.URL.Hostname()) {
		return nil, fmt.Errorf("%w to %s: the store is not on loopback; give ?insecure=true in its name if the registry has no TLS", errPlainHTTP, r.URL.Host)
	}
	return g.next.RoundTrip(r)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *ociStore) Location() string { return s.ref.Location() }

// Put pushes the empty blob and the bundle, the commit's subject
// manifest under its tag, then the bundle's manifest under the job's
// tag (go-containerregistry adds it to the subject's fallback index
// where the registry has no referrers API).
func (s *ociStore) Put(ctx context.Context, r Record) (Entry, error) {
	if err := r.check(); err != nil {
		return Entry{}, err
	}
	if len(r.Bundle) > attest.MaxBundleSize {
		return Entry{}, fmt.Errorf("bundle of %d bytes, more than the %d a bundle may have", len(r.Bundle), attest.MaxBundleSize)
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Deadline)
	defer cancel()
	var err error
	for attempt := range s.o.Attempts {
		var e Entry
		if e, err = s.put(ctx, r); err == nil {
			return e, nil
		}
		s.emptyUp.Store(false) // the next try looks for it again
		if !transient(err) || attempt == s.o.Attempts-1 {
			break
		}
		// A try that failed midway (a blob upload the registry took part
		// of) starts again whole, after a back-off.
		select {
		case <-time.After(retryablehttp.DefaultBackoff(s.o.RetryWaitMin, s.o.RetryWaitMax, attempt, nil)):
		case <-ctx.Done():
		}
	}
	return Entry{}, fmt.Errorf("%s: %w", s.Location(), s.explain(ctx, err))
}

// PrepareCommit puts what every job of the commit shares: the empty
// blob and the commit's subject manifest. Keeper.Prepare calls it while
// the job runs, so that the push after the job is only the job's own
// (on distribution 2.8 a manifest write is 7–13 ms, BENCHMARKS §18).
func (s *ociStore) PrepareCommit(ctx context.Context, repository, commit string) error {
	subject, err := commitManifest(repository, commit)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Deadline)
	defer cancel()
	if err := s.uploadEmpty(ctx); err != nil {
		return err
	}
	if err := s.putOnce(ctx, CommitTag(repository, commit), subject, false); err != nil {
		return fmt.Errorf("%s: the commit's subject manifest: %w", s.Location(), s.explain(ctx, err))
	}
	return nil
}

// uploadEmpty uploads the empty blob (the config and layer of every
// manifest airlock writes) alone: small, there after the first job,
// and never half-written beside a large upload on a full disk.
func (s *ociStore) uploadEmpty(ctx context.Context) error {
	if s.emptyUp.Load() {
		return nil
	}
	if err := s.pusher.Upload(ctx, s.repo, static.NewLayer(emptyJSON, emptyMediaType)); err != nil {
		return fmt.Errorf("upload the empty config: %w", err)
	}
	s.emptyUp.Store(true)
	return nil
}

// put is one try of Put.
func (s *ociStore) put(ctx context.Context, r Record) (Entry, error) {
	tag := r.Tag()
	subject, err := commitManifest(r.Repository, r.Commit)
	if err != nil {
		return Entry{}, err
	}
	if err := s.uploadEmpty(ctx); err != nil {
		return Entry{}, err
	}
	// The commit's subject manifest goes up while the bundle does: a
	// manifest may name a subject the registry does not have yet (the
	// distribution spec's), and the subject's tag is only how List finds
	// the commit.
	var subjectErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.putOnce(ctx, CommitTag(r.Repository, r.Commit), subject, false); err != nil {
			subjectErr = fmt.Errorf("the commit's subject manifest: %w", err)
		}
	})
	m, err := bundleManifest(r, tag, subject)
	if err == nil {
		if err = s.pusher.Upload(ctx, s.repo, static.NewLayer(r.Bundle, attest.BundleMediaType)); err != nil {
			err = fmt.Errorf("upload the bundle: %w", err)
		} else if err = s.putOnce(ctx, tag, m, true); err != nil && !s.holds(ctx, tag, m) {
			err = fmt.Errorf("tag %s: %w", tag, err)
		} else {
			err = nil
		}
	}
	wg.Wait()
	if err != nil {
		return Entry{}, err
	}
	if subjectErr != nil {
		return Entry{}, subjectErr // the record is stored; a retry puts the subject
	}
	// The tag holds the record now. The commit's fallback index is how
	// standard tools find it; its update can fail where the tag's did
	// not (distribution 2.8, busy with other jobs of the commit, has
	// answered MANIFEST_BLOB_UNKNOWN for a manifest it had just
	// stored), and is tried again here; List finds the job by its tag
	// whatever happens.
	s.ensureReferred(ctx, subject.digest(), m)
	e := entryOf(r.Labels, tag, digestOf(r.Bundle), int64(len(r.Bundle)))
	e.Store, e.Ref = s.Location(), s.repo.Digest(m.digest()).String()
	return e, nil
}

// putOnce puts m under tag unless the tag holds something else
// (ErrConflict). A tag that holds m already is put again when m has a
// subject (hasSubject): a retry after a job was killed between its
// manifest and its fallback index repairs the index, and the bytes are
// the same; a commit's subject manifest, there already, is left alone.
func (s *ociStore) putOnce(ctx context.Context, tag string, m rawManifest, hasSubject bool) error {
	ref := s.repo.Tag(tag)
	d, err := s.puller.Head(ctx, ref)
	switch {
	case err == nil && d.Digest.String() != m.digest():
		return fmt.Errorf("%w: it holds %s, this record is %s", ErrConflict, d.Digest, m.digest())
	case err == nil && !hasSubject:
		return nil
	case err != nil && !hasSubject && transient(err):
		// A commit's subject whose tag the registry cannot read (a
		// full disk left it broken): its bytes are the commit's
		// own, whoever put them, so putting them again repairs it.
	case err != nil && !isStatus(err, http.StatusNotFound):
		return err
	}
	return s.pusher.Put(ctx, ref, m)
}

// holds says whether tag holds m.
func (s *ociStore) holds(ctx context.Context, tag string, m rawManifest) bool {
	d, err := s.puller.Head(ctx, s.repo.Tag(tag))
	return err == nil && d.Digest.String() == m.digest()
}

// indexRounds bounds how often Put puts a manifest again whose
// fallback index lost it.
const indexRounds = 10

// ensureReferred makes sure that the fallback index of the subject
// lists m, on a registry without the referrers API: two jobs of one
// commit that finish together each read the index, add themselves and
// write it back, and the later write drops the earlier (distribution
// has no conditional PUT). A job that finds itself missing puts its
// manifest again (go-containerregistry adds it to the index anew),
// after a random pause, a few times. The job's tag holds it whatever
// happens: List finds a job the index lost by its tag.
func (s *ociStore) ensureReferred(ctx context.Context, subject string, m rawManifest) error {
	idx := s.repo.Tag(strings.Replace(subject, ":", "-", 1))
	contended := false
	for round := range indexRounds {
		desc, err := s.puller.Get(ctx, idx)
		if err != nil {
			if isStatus(err, http.StatusNotFound) && round == 0 {
				return nil // no fallback index: the registry has the referrers API
			}
			return err
		}
		im, err := v1.ParseIndexManifest(bytes.NewReader(desc.Manifest))
		if err != nil {
			return fmt.Errorf("fallback index %s: %w", idx.TagStr(), err)
		}
		present := false
		for _, d := range im.Manifests {
			present = present || d.Digest.String() == m.digest()
		}
		switch {
		case present && !contended:
			return nil
		case present:
			// Others of the commit are writing the index now: one that
			// read it before this job's write may still drop it. Look
			// again once they are likely done.
			contended = false
			select {
			case <-time.After(time.Duration(20+rand.IntN(60)) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		contended = true
		select {
		case <-time.After(time.Duration(5+rand.IntN(40)) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		s.pusher.Put(ctx, s.repo.Digest(m.digest()), m) // its error is the index's: the next round reads again
	}
	return nil // the tag still finds it
}

// List lists the jobs q selects: the referrers of each commit whose
// subject it finds by tag, and any job's tag that no referrers list has
// (two jobs that updated a fallback index at once: the one that lost is
// still tagged).
func (s *ociStore) List(ctx context.Context, q Query) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, listDeadline)
	defer cancel()
	tags, err := s.puller.List(ctx, s.repo)
	if err != nil {
		if isStatus(err, http.StatusNotFound) {
			return nil, fmt.Errorf("%s: %w: the registry has no such repository (no job was stored there yet, or the name is wrong)", s.Location(), ErrNotFound)
		}
		return nil, fmt.Errorf("%s: list tags: %w", s.Location(), s.explain(ctx, err))
	}
	repoPrefix, commitPrefix := "", ""
	if q.Repository != "" {
		repoPrefix = RepoPrefix(q.Repository)
	}
	if q.Commit != "" {
		commitPrefix = commitPart(q.Commit)
	}
	var jobTags, commitTags []string
	for _, t := range tags {
		if isJobTag(t) {
			repo, pr, commit := tagParts(t)
			if (repoPrefix == "" || repo == repoPrefix) && (q.PullRequest == 0 || pr == prPart(q.PullRequest)) && (commitPrefix == "" || strings.HasPrefix(commit, commitPrefix)) {
				jobTags = append(jobTags, t)
			}
		} else if m := commitTagShape().FindStringSubmatch(t); m != nil {
			if (repoPrefix == "" || m[1] == repoPrefix) && (q.Commit == "" || strings.HasPrefix(m[2], q.Commit)) {
				commitTags = append(commitTags, t)
			}
		}
	}
	if q.PullRequest != 0 {
		// Only the commits that the pull request's jobs name.
		commits := map[string]bool{}
		for _, t := range jobTags {
			_, _, c := tagParts(t)
			commits[c] = true
		}
		commitTags = slices.DeleteFunc(commitTags, func(t string) bool {
			m := commitTagShape().FindStringSubmatch(t)
			return !commits[commitPart(m[2])]
		})
	}
	// Entries are kept by their manifests' digests: what a referrers
	// list says of a tag is the registry's word, so a tag that one
	// entry, and one only, claims is covered; any other job's tag is
	// read.
	var mu sync.Mutex
	found := map[string]Entry{}
	claims := map[string]int{}
	add := func(e Entry) {
		mu.Lock()
		defer mu.Unlock()
		if _, seen := found[e.Ref]; !seen {
			claims[e.Tag]++
		}
		if q.matches(e.Labels) {
			found[e.Ref] = e
		}
	}
	// A commit whose referrers cannot be read (its tag broken, an index
	// that does not parse) is no failure: its jobs are found by their
	// tags below.
	parallel(ctx, commitTags, func(t string) error {
		s.referrers(ctx, t, add)
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Location(), s.explain(ctx, err))
	}
	var rest []string
	for _, t := range jobTags {
		if claims[t] != 1 {
			rest = append(rest, t)
		}
	}
	err = parallel(ctx, rest, func(t string) error {
		e, err := s.Resolve(ctx, t)
		switch {
		case errors.Is(err, ErrNotFound), errors.Is(err, errNotARecord):
			return nil // gone since the listing, or another tool's tag of the same shape
		case err != nil:
			return err
		}
		add(e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sortEntries(found), nil
}

// referrers adds the bundles that refer to the subject tagged t.
func (s *ociStore) referrers(ctx context.Context, t string, add func(Entry)) error {
	d, err := s.puller.Head(ctx, s.repo.Tag(t))
	if err != nil {
		return fmt.Errorf("%s: commit tag %s: %w", s.Location(), t, s.explain(ctx, err))
	}
	// No artifactType filter: a registry may put the config's media
	// type there instead of the manifest's (go-containerregistry's own
	// does); airlock's annotations pick its records, and Fetch checks
	// the manifest.
	idx, err := remote.Referrers(s.repo.Digest(d.Digest.String()), remote.Reuse(s.puller), remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("%s: referrers of %s: %w", s.Location(), t, s.explain(ctx, err))
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("%s: referrers of %s: %w", s.Location(), t, err)
	}
	for _, desc := range im.Manifests {
		e, ok := entryFromAnnotations(desc.Annotations)
		if !ok {
			continue // not airlock's: another tool's bundle of the same subject
		}
		e.Store, e.Ref = s.Location(), s.repo.Digest(desc.Digest.String()).String()
		add(e)
	}
	return nil
}

// Resolve reads the manifest ref names: a tag of this store's, or a
// digest (sha256:..., or REGISTRY/REPOSITORY@sha256:... of this store).
func (s *ociStore) Resolve(ctx context.Context, ref string) (Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Deadline)
	defer cancel()
	var r name.Reference
	switch {
	case strings.Contains(ref, "@"):
		d, err := name.NewDigest(ref)
		if err != nil {
			return Entry{}, fmt.Errorf("%q is not a digest reference: %w", ref, err)
		}
		if d.Context().String() != s.repo.String() {
			return Entry{}, fmt.Errorf("%s is not in the store %s (its repository is %s)", ref, s.Location(), d.Context())
		}
		r = s.repo.Digest(d.DigestStr()) // the store's repository, with its options (insecure)
	case strings.HasPrefix(ref, "sha256:"):
		r = s.repo.Digest(ref)
	case validTag().MatchString(ref):
		r = s.repo.Tag(ref)
	default:
		return Entry{}, fmt.Errorf("%q is neither a tag nor a digest of the store %s", ref, s.Location())
	}
	desc, err := s.puller.Get(ctx, r)
	if err != nil {
		if isStatus(err, http.StatusNotFound) {
			return Entry{}, fmt.Errorf("%s: %s: %w", s.Location(), ref, ErrNotFound)
		}
		return Entry{}, fmt.Errorf("%s: %s: %w", s.Location(), ref, s.explain(ctx, err))
	}
	m, err := parseBundleManifest(desc.Manifest)
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %s: %w", s.Location(), ref, err)
	}
	e, ok := entryFromAnnotations(m.Annotations)
	if !ok {
		return Entry{}, fmt.Errorf("%s: %s is %w (its annotations lack %s)", s.Location(), ref, errNotARecord, annJobID)
	}
	if _, isTag := r.(name.Tag); isTag && e.Tag != ref {
		return Entry{}, fmt.Errorf("%s: the tag %s holds a record that names itself %s", s.Location(), ref, e.Tag)
	}
	e.Store, e.Ref = s.Location(), s.repo.Digest(desc.Digest.String()).String()
	e.Digest, e.Size = m.Layers[0].Digest.String(), m.Layers[0].Size
	return e, nil
}

// Fetch reads e's bundle: the layer of the manifest e.Ref names, which
// must be the digest e has, and whose bytes must hash to it.
func (s *ociStore) Fetch(ctx context.Context, e Entry) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Deadline)
	defer cancel()
	d, err := name.NewDigest(e.Ref)
	if err != nil {
		return nil, fmt.Errorf("%q is not a digest reference: %w", e.Ref, err)
	}
	if d.Context().String() != s.repo.String() {
		return nil, fmt.Errorf("%s is not in the store %s", e.Ref, s.Location())
	}
	desc, err := s.puller.Get(ctx, s.repo.Digest(d.DigestStr()))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.Location(), e.Ref, s.explain(ctx, err))
	}
	m, err := parseBundleManifest(desc.Manifest)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.Location(), e.Ref, err)
	}
	layer := m.Layers[0]
	if e.Digest != "" && layer.Digest.String() != e.Digest {
		return nil, fmt.Errorf("%s: %s holds bundle %s, its index says %s", s.Location(), e.Ref, layer.Digest, e.Digest)
	}
	l, err := s.puller.Layer(ctx, s.repo.Digest(layer.Digest.String()))
	if err != nil {
		return nil, fmt.Errorf("%s: bundle %s: %w", s.Location(), layer.Digest, s.explain(ctx, err))
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("%s: bundle %s: %w", s.Location(), layer.Digest, s.explain(ctx, err))
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, attest.MaxBundleSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: bundle %s: %w", s.Location(), layer.Digest, s.explain(ctx, err))
	}
	if len(b) > attest.MaxBundleSize {
		return nil, fmt.Errorf("%s: bundle %s is larger than %d bytes", s.Location(), layer.Digest, attest.MaxBundleSize)
	}
	if got := digestOf(b); got != layer.Digest.String() {
		return nil, fmt.Errorf("%s: bundle %s: its bytes hash to %s", s.Location(), layer.Digest, got)
	}
	return b, nil
}

// rawManifest is a manifest's bytes, pushed as they are.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (m rawManifest) digest() string                      { return digestOf(m) }

// emptyDescriptor is the OCI empty descriptor.
func emptyDescriptor() v1.Descriptor {
	h, _ := v1.NewHash(digestOf(emptyJSON))
	return v1.Descriptor{MediaType: emptyMediaType, Digest: h, Size: int64(len(emptyJSON))}
}

// commitManifest is the subject manifest of a repository's commit: the
// same bytes for the same two, so every job of the commit refers to one
// digest.
func commitManifest(repository, commit string) (rawManifest, error) {
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: commitArtifact,
		Config: emptyDescriptor(), Layers: []v1.Descriptor{emptyDescriptor()},
		Annotations: map[string]string{annRepository: repository, annCommit: commit},
	}
	b, err := json.Marshal(m)
	return b, err
}

// bundleManifest is the bundle's OCI 1.1 artifact, as cosign's
// BUNDLE_SPEC has it, with airlock's labels among its annotations.
func bundleManifest(r Record, tag string, subject rawManifest) (rawManifest, error) {
	sh, err := v1.NewHash(subject.digest())
	if err != nil {
		return nil, err
	}
	bh, err := v1.NewHash(digestOf(r.Bundle))
	if err != nil {
		return nil, err
	}
	ann := annotationsOf(r.Labels)
	ann[annTag], ann[annBundleDigest] = tag, bh.String()
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: attest.BundleMediaType,
		Config:      emptyDescriptor(),
		Layers:      []v1.Descriptor{{MediaType: attest.BundleMediaType, Digest: bh, Size: int64(len(r.Bundle))}},
		Subject:     &v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: sh, Size: int64(len(subject))},
		Annotations: ann,
	}
	b, err := json.Marshal(m)
	return b, err
}

// parseBundleManifest reads a bundle's manifest back, refusing one
// that is not the layout Put writes.
func parseBundleManifest(raw []byte) (*v1.Manifest, error) {
	if len(raw) > maxManifest {
		return nil, fmt.Errorf("manifest of %d bytes", len(raw))
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if m.ArtifactType != attest.BundleMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != attest.BundleMediaType {
		return nil, fmt.Errorf("not a Sigstore bundle artifact (artifactType %q, %d layers)", m.ArtifactType, len(m.Layers))
	}
	if m.Layers[0].Size > attest.MaxBundleSize {
		return nil, fmt.Errorf("bundle of %d bytes, more than %d", m.Layers[0].Size, attest.MaxBundleSize)
	}
	return m, nil
}

// annotationsOf writes labels as annotations (cosign's bundle ones too).
func annotationsOf(l Labels) map[string]string {
	ann := map[string]string{
		annCreated: l.Created.UTC().Format(time.RFC3339), annBundleContent: "dsse-envelope", annPredicateType: l.PredicateType,
		annRepository: l.Repository, annCommit: l.Commit, annJobID: l.JobID, annVerdict: l.Verdict, annKind: l.Kind,
	}
	for k, v := range map[string]string{annPullRequest: itoa(l.PullRequest), annRunID: l.RunID, annRunAttempt: l.RunAttempt, annJob: l.Job, annRunner: l.Runner} {
		if v != "" {
			ann[k] = v
		}
	}
	return ann
}

// entryFromAnnotations reads an entry's labels, tag and bundle digest
// back; false: not airlock's.
func entryFromAnnotations(ann map[string]string) (Entry, bool) {
	if ann[annJobID] == "" || !isJobTag(ann[annTag]) {
		return Entry{}, false // not airlock's, or a tag no job has (a registry's word is untrusted)
	}
	created, _ := time.Parse(time.RFC3339, ann[annCreated])
	pr, _ := strconv.Atoi(ann[annPullRequest])
	l := Labels{
		Kind: ann[annKind], Repository: ann[annRepository], PullRequest: pr, Commit: ann[annCommit],
		RunID: ann[annRunID], RunAttempt: ann[annRunAttempt], Job: ann[annJob], Runner: ann[annRunner],
		JobID: ann[annJobID], Verdict: ann[annVerdict], Created: created, PredicateType: ann[annPredicateType],
	}
	return Entry{Labels: l, Tag: ann[annTag], Digest: ann[annBundleDigest]}, true
}

func entryOf(l Labels, tag, digest string, size int64) Entry {
	return Entry{Labels: l, Tag: tag, Digest: digest, Size: size}
}

// explain turns a registry's answer into what to do about it.
func (s *ociStore) explain(ctx context.Context, err error) error {
	var terr *transport.Error
	var nerr net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("no answer in time, retries included (the registry is down, hangs, or is unreachable from this runner): %w", err)
	case errors.As(err, &nerr) && nerr.Timeout():
		return fmt.Errorf("no answer within %s on each of %d tries (the registry hangs, or is unreachable from this runner): %w", s.o.AttemptTimeout, s.o.Attempts, err)
	case errors.As(err, &terr) && terr.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("the registry refused the credentials (401): check that the credentials file (%s) has a valid entry for %s: %w", orNone(s.o.AuthFile), s.ref.Registry, err)
	case errors.As(err, &terr) && terr.StatusCode == http.StatusForbidden:
		return fmt.Errorf("the registry forbids it (403): the credentials for %s may not write to %s; grant them push rights there: %w", s.ref.Registry, s.ref.Repository, err)
	case errors.As(err, &terr) && terr.StatusCode >= 500:
		return fmt.Errorf("the registry failed (%d) after %d tries; see its own log (a full disk, a broken storage backend): %w", terr.StatusCode, s.o.Attempts, err)
	}
	return err
}

func orNone(f string) string {
	if f == "" {
		return "none given: the push was anonymous"
	}
	if _, err := os.Stat(f); err != nil {
		return f + ", which is not there: the push was anonymous"
	}
	return f
}

// isStatus says whether err is a registry's answer with that status.
func isStatus(err error, code int) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == code
}

// parallel runs f on each item, listWorkers at a time, and returns the
// first error.
func parallel(ctx context.Context, items []string, f func(string) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(listWorkers)
	for _, it := range items {
		if ctx.Err() != nil {
			break // one failed: the rest are not started
		}
		g.Go(func() error { return f(it) })
	}
	return g.Wait()
}

// sortEntries orders entries oldest first, then by tag.
func sortEntries(m map[string]Entry) []Entry {
	out := make([]Entry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Tag, b.Tag)
	})
	return out
}
