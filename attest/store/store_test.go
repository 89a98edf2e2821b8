package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

func TestTag(t *testing.T) {
	l := labels(KindAttestation, 42, "9a3bb6bc09af1c2d3e4f5a6b7c8d9e0f1a2b3c4d", "job-efbb8c29c09a", 1)
	for _, tc := range []struct {
		name string
		edit func(*Labels)
		want string
	}{
		{"a pull request's job", func(*Labels) {}, "octo-org_widgets.pr42.9a3bb6bc09af.r8800001-1.build.efbb8c29c09a.att"},
		{"its provenance", func(l *Labels) { l.Kind = KindProvenance }, "octo-org_widgets.pr42.9a3bb6bc09af.r8800001-1.build.efbb8c29c09a.prov"},
		{"airlock run, no repository", func(l *Labels) { *l = Labels{Kind: KindAttestation, JobID: "job-0123456789ab"} }, "local.nopr.nocommit.local.job.0123456789ab.att"},
		{"owner/name", func(l *Labels) { l.Repository = "octo-org/widgets" }, "octo-org_widgets.pr42.9a3bb6bc09af.r8800001-1.build.efbb8c29c09a.att"},
		{"odd bytes in the job's name", func(l *Labels) { l.Job = "build (ubuntu, 20.x)/é" }, "octo-org_widgets.pr42.9a3bb6bc09af.r8800001-1.build__ubuntu-f1dfa3.efbb8c29c09a.att"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := l
			tc.edit(&l)
			if got := l.Tag(); got != tc.want {
				t.Fatalf("Tag() = %q, want %q", got, tc.want)
			}
		})
	}
	// Whatever the labels hold (the job's name and the repository come
	// from the workflow, which an agent may write), the tag is a valid
	// tag within 128 characters, and another job's is another tag.
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	for i := range 2000 {
		junk := func(n int) string {
			b := make([]byte, rng.IntN(n))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			return string(b)
		}
		l := Labels{Kind: KindAttestation, Repository: junk(300), PullRequest: rng.IntN(1 << 40), Commit: junk(60), RunID: junk(40), RunAttempt: junk(10), Job: junk(200), JobID: fmt.Sprintf("job-%012x", i)}
		tag := l.Tag()
		if len(tag) > 128 || !validTag().MatchString(tag) || !isJobTag(tag) {
			t.Fatalf("labels %+v: tag %q (%d) is not a valid job tag", l, tag, len(tag))
		}
		if seen[tag] {
			t.Fatalf("two jobs share tag %q", tag)
		}
		seen[tag] = true
		if ct := CommitTag(l.Repository, l.Commit); len(ct) > 128 || !validTag().MatchString(ct) || !commitTagShape().MatchString(ct) {
			t.Fatalf("commit tag %q is not valid", ct)
		}
	}
}

// Every kind of store holds what it is given byte for byte, lists it
// by repository, pull request and commit, resolves a tag, refuses to
// overwrite a tag with other content and takes a retry of the same.
func TestStoreRoundTrip(t *testing.T) {
	key := newTestKey(t)
	kinds := append([]registryKind{}, registries...)
	kinds = append(kinds, registryKind{"file", func(t testing.TB) (storeref.Ref, Options, *testregistry.Server) { return fileRef(t), Options{}, nil }})
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ref, opts, _ := k.start(t)
			b, err := Open(ref, opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			c1, c2 := commitOf("one"), commitOf("two")
			jobs := []struct {
				l      Labels
				bundle []byte
			}{
				{labels(KindAttestation, 7, c1, "job-000000000001", 1), signedBundle(t, key, c1, 5, true)},
				{labels(KindProvenance, 7, c1, "job-000000000001", 1), signedBundle(t, key, c1, 1, true)},
				{labels(KindAttestation, 7, c1, "job-000000000002", 2), signedBundle(t, key, c1, 6, false)},
				{labels(KindAttestation, 7, c2, "job-000000000003", 3), signedBundle(t, key, c2, 7, true)},
				{labels(KindAttestation, 8, commitOf("three"), "job-000000000004", 4), signedBundle(t, key, commitOf("three"), 8, true)},
			}
			jobs[2].l.Verdict = VerdictFailed
			for _, j := range jobs {
				e, err := b.Put(ctx, Record{Labels: j.l, Bundle: j.bundle})
				if err != nil {
					t.Fatalf("Put %s: %v", j.l.Tag(), err)
				}
				if e.Tag != j.l.Tag() || e.Digest != digestOf(j.bundle) || e.Ref == "" {
					t.Fatalf("Put gave %+v", e)
				}
			}
			for _, tc := range []struct {
				q    Query
				want []string // job ids, kinds' order as listed
			}{
				{Query{}, []string{"1", "1", "2", "3", "4"}},
				{Query{Repository: "octo-org/widgets", PullRequest: 7}, []string{"1", "1", "2", "3"}},
				{Query{Repository: "https://github.com/octo-org/widgets", PullRequest: 8}, []string{"4"}},
				{Query{PullRequest: 7}, []string{"1", "1", "2", "3"}},
				{Query{Commit: c1}, []string{"1", "1", "2"}},
				{Query{Commit: c2[:7]}, []string{"3"}}, // as git abbreviates
				{Query{Repository: "octo-org/other"}, nil},
			} {
				got, err := b.List(ctx, tc.q)
				if err != nil {
					t.Fatalf("List(%+v): %v", tc.q, err)
				}
				var ids []string
				for _, e := range got {
					ids = append(ids, strings.TrimLeft(strings.TrimPrefix(e.JobID, "job-"), "0"))
					if e.Store != ref.Location() || e.Tag == "" || e.Digest == "" {
						t.Fatalf("List entry %+v", e)
					}
				}
				if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
					t.Errorf("List(%+v) = jobs %v, want %v", tc.q, ids, tc.want)
				}
			}
			// Read back: by tag, byte for byte, labels intact.
			e, err := b.Resolve(ctx, jobs[2].l.Tag())
			if err != nil {
				t.Fatal(err)
			}
			if e.Verdict != VerdictFailed || e.Commit != c1 || e.PullRequest != 7 || e.RunID != "8800002" || e.Runner != "arc-runner-x7k2p" || !e.Created.Equal(jobs[2].l.Created) {
				t.Fatalf("Resolve gave labels %+v, want %+v", e.Labels, jobs[2].l)
			}
			got, err := b.Fetch(ctx, e)
			if err != nil || string(got) != string(jobs[2].bundle) {
				t.Fatalf("Fetch: %v (%d bytes, want %d)", err, len(got), len(jobs[2].bundle))
			}
			byRef, err := b.Resolve(ctx, e.Ref)
			if err != nil || byRef.Tag != e.Tag {
				t.Fatalf("Resolve(%s) = %+v, %v", e.Ref, byRef, err)
			}
			// A retry of the same record is success; other content under
			// the same job's tag is refused, and the first stays.
			if _, err := b.Put(ctx, Record{Labels: jobs[0].l, Bundle: jobs[0].bundle}); err != nil {
				t.Fatalf("a retry of the same record: %v", err)
			}
			_, err = b.Put(ctx, Record{Labels: jobs[0].l, Bundle: jobs[3].bundle})
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "never overwrites") {
				t.Fatalf("another record under a job's tag: %v, want ErrConflict", err)
			}
			e0, _ := b.Resolve(ctx, jobs[0].l.Tag())
			if got, err := b.Fetch(ctx, e0); err != nil || string(got) != string(jobs[0].bundle) {
				t.Fatalf("after the refused overwrite the tag holds %d bytes (%v), want the first record", len(got), err)
			}
			if _, err := b.Resolve(ctx, "octo-org_widgets.pr7.000000000000.r1-1.build.ffffffffffff.att"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Resolve of a tag never pushed: %v, want ErrNotFound", err)
			}
		})
	}
}

// The OCI layout is cosign's bundle spec: the manifest's artifactType
// and its one layer are the bundle's media type, the config is the
// empty descriptor, the subject is the commit's manifest, and the
// commit's referrers (the API, or the sha256-<hex> fallback tag on
// distribution) list the job with its annotations.
func TestOCILayout(t *testing.T) {
	key := newTestKey(t)
	for _, k := range registries {
		t.Run(k.name, func(t *testing.T) {
			ref, opts, srv := k.start(t)
			b, _ := Open(ref, opts)
			commit := commitOf("layout")
			l := labels(KindAttestation, 9, commit, "job-00000000000a", 1)
			bundle := signedBundle(t, key, commit, 3, true)
			e, err := b.Put(context.Background(), Record{Labels: l, Bundle: bundle})
			if err != nil {
				t.Fatal(err)
			}
			get := func(path string, accept string) (int, []byte) {
				req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Host+"/v2/airlock/attestations/"+path, nil)
				req.SetBasicAuth(srv.User, srv.Password)
				req.Header.Set("Accept", accept)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, body
			}
			code, raw := get("manifests/"+l.Tag(), "application/vnd.oci.image.manifest.v1+json")
			if code != 200 {
				t.Fatalf("GET the job's tag: %d %s", code, raw)
			}
			var m struct {
				MediaType, ArtifactType string
				Config                  struct{ MediaType, Digest string }
				Layers                  []struct {
					MediaType, Digest string
					Size              int
				}
				Subject     struct{ MediaType, Digest string }
				Annotations map[string]string
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.ArtifactType != attest.BundleMediaType ||
				m.Config.MediaType != "application/vnd.oci.empty.v1+json" || m.Config.Digest != "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" ||
				len(m.Layers) != 1 || m.Layers[0].MediaType != attest.BundleMediaType || m.Layers[0].Digest != digestOf(bundle) || m.Layers[0].Size != len(bundle) {
				t.Fatalf("manifest is not cosign's bundle layout:\n%s", raw)
			}
			for k, v := range map[string]string{
				"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": attest.PredicateType,
				"org.opencontainers.image.created": "2026-12-07T12:00:01Z", annRepository: l.Repository, annPullRequest: "9",
				annCommit: commit, annRunID: "8800001", annRunAttempt: "1", annJob: "build", annVerdict: "passed", annJobID: l.JobID,
			} {
				if m.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q", k, m.Annotations[k], v)
				}
			}
			code, subject := get("manifests/"+CommitTag(l.Repository, commit), "application/vnd.oci.image.manifest.v1+json")
			if code != 200 || digestOf(subject) != m.Subject.Digest {
				t.Fatalf("the subject %s is not the commit's manifest (%d, %s)", m.Subject.Digest, code, subject)
			}
			// The referrers of the commit, as a standard client asks: the
			// API, then the fallback tag where the API answers 404.
			code, body := get("referrers/"+m.Subject.Digest, "application/vnd.oci.image.index.v1+json")
			if k.name == "distribution" {
				if code != http.StatusNotFound {
					t.Fatalf("distribution 2.8 answered the referrers API with %d; the test expects it has none", code)
				}
				code, body = get("manifests/sha256-"+strings.TrimPrefix(m.Subject.Digest, "sha256:"), "application/vnd.oci.image.index.v1+json")
			}
			if code != 200 || !strings.Contains(string(body), strings.TrimPrefix(e.Ref, e.Ref[:strings.Index(e.Ref, "@")+1])) || !strings.Contains(string(body), `"`+annTag+`":"`+l.Tag()+`"`) {
				t.Fatalf("the commit's referrers (%d) lack the job %s:\n%s", code, e.Ref, body)
			}
		})
	}
}

// The file store refuses a directory that is not there (an unmounted
// volume), and a bundle that changed on it.
func TestFileStoreRefuses(t *testing.T) {
	ref, _ := storeref.Parse("file://" + filepath.Join(t.TempDir(), "not-mounted"))
	b, _ := Open(ref, Options{})
	key := newTestKey(t)
	l := labels(KindAttestation, 1, commitOf("x"), "job-00000000000b", 1)
	if _, err := b.Put(context.Background(), Record{Labels: l, Bundle: signedBundle(t, key, commitOf("x"), 1, true)}); err == nil || !strings.Contains(err.Error(), "mount its volume") {
		t.Fatalf("Put to a missing directory: %v", err)
	}
	if _, err := os.Stat(ref.Path); err == nil {
		t.Fatal("Put made the missing directory")
	}
	ref = fileRef(t)
	b, _ = Open(ref, Options{})
	e, err := b.Put(context.Background(), Record{Labels: l, Bundle: signedBundle(t, key, commitOf("x"), 1, true)})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(e.Ref, []byte(`{"tampered":true}`), 0o644)
	if _, err := b.Fetch(context.Background(), e); err == nil || !strings.Contains(err.Error(), "hashes to") {
		t.Fatalf("Fetch of a changed bundle: %v", err)
	}
}

// Twenty jobs of one commit stored at once: on a registry without the
// referrers API they race to update the commit's fallback index, and a
// later write can drop an earlier one (there is no conditional PUT);
// every job is still listed, by its tag, and each fetches back.
func TestConcurrentJobsOfOneCommit(t *testing.T) {
	key := newTestKey(t)
	for _, k := range registries {
		t.Run(k.name, func(t *testing.T) {
			ref, opts, _ := k.start(t)
			st, _ := Open(ref, opts)
			commit := commitOf("matrix")
			bundle := signedBundle(t, key, commit, 1, true)
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for i := range 20 {
				wg.Go(func() {
					l := labels(KindAttestation, 4, commit, fmt.Sprintf("job-%012x", 0x100+i), i)
					if _, err := st.Put(context.Background(), Record{Labels: l, Bundle: bundle}); err != nil {
						errs <- err
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("Put: %v", err)
			}
			got, err := st.List(context.Background(), Query{Commit: commit})
			if err != nil || len(got) != 20 {
				t.Fatalf("List of the commit: %d jobs (%v), want 20", len(got), err)
			}
			for _, e := range got {
				if b, err := st.Fetch(context.Background(), e); err != nil || string(b) != string(bundle) {
					t.Fatalf("Fetch %s: %v", e.Tag, err)
				}
			}
		})
	}
}

// What a registry says of a record is untrusted: an index entry whose
// tag is no job's (a path, a name with odd bytes) is not taken for an
// airlock record.
func TestAnnotationsFromARegistry(t *testing.T) {
	good := annotationsOf(labels(KindAttestation, 1, commitOf("a"), "job-000000000001", 1))
	good[annTag] = "octo-org_widgets.pr1.aaaaaaaaaaaa.r1-1.build.000000000001.att"
	for _, tc := range []struct {
		tag string
		ok  bool
	}{
		{good[annTag], true},
		{"../../../etc/cron.d/x", false},
		{"octo-org_widgets.pr1.aaaaaaaaaaaa.r1-1.build.000000000001.att/../../x", false},
		{"", false},
		{"a.b.c.d.e.f.att\n", false},
	} {
		ann := maps.Clone(good)
		ann[annTag] = tc.tag
		if _, ok := entryFromAnnotations(ann); ok != tc.ok {
			t.Errorf("tag %q: taken %v, want %v", tc.tag, ok, tc.ok)
		}
	}
}

// Any labels (the job's and runner's names come from the workflow):
// the tag is a valid tag within 128 characters, of a job's shape, and
// the commit's subject tag a valid commit tag.
func FuzzLabelsTag(f *testing.F) {
	f.Add("https://github.com/octo-org/widgets", 42, "9a3bb6bc09af1c2d3e4f5a6b7c8d9e0f1a2b3c4d", "8812345", "1", "build (ubuntu, 20)", "job-efbb8c29c09a")
	f.Add("", 0, "", "", "", "", "job-0")
	f.Fuzz(func(t *testing.T, repo string, pr int, commit, run, attempt, job, id string) {
		l := Labels{Kind: KindProvenance, Repository: repo, PullRequest: pr, Commit: commit, RunID: run, RunAttempt: attempt, Job: job, JobID: id}
		if tag := l.Tag(); len(tag) > 128 || !validTag().MatchString(tag) || !isJobTag(tag) {
			t.Fatalf("%+v: tag %q", l, tag)
		}
		if ct := CommitTag(repo, commit); len(ct) > 128 || !commitTagShape().MatchString(ct) {
			t.Fatalf("commit tag %q", ct)
		}
	})
}
