package report

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// VerifyArtifact over files: a provenance bundle, or a directory of
// several jobs' where the one that names the artifact is found; the run
// attestation next to it verified with it; a tampered artifact, a
// swapped run attestation, a job a compliance policy refuses and a
// policy without the run attestation are each not verified.
func TestVerifyArtifactFiles(t *testing.T) {
	key, other := newTestKey(t), newTestKey(t)
	ws := t.TempDir()
	dir := t.TempDir()
	zips := map[string][]byte{}
	for i, j := range []struct {
		id    string
		agent bool
		key   string
	}{{"job-a1", false, key.key}, {"job-b2", true, key.key}, {"job-c3", false, key.key}, {"job-d4", false, other.key}} {
		zips[j.id] = []byte("PK\x03\x04 made by " + j.id)
		_, log := finishJob(t, dir, j.key, ws, nil, nil, jobResult(j.id, j.agent, upload("dist", zips[j.id]), upload("other", []byte{byte(i)})))
		if !strings.Contains(log, "provenance: ") {
			t.Fatal(log)
		}
	}
	artifact := func(name string, b []byte) string {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	prov := func(id string) string { return filepath.Join(dir, id+ProvenanceSuffix) }
	// A copy of job-a1's provenance whose run attestation is job-c3's.
	swapped := t.TempDir()
	for src, dst := range map[string]string{prov("job-a1"): "job-a1" + ProvenanceSuffix, filepath.Join(dir, "job-c3"+RunSuffix): "job-a1" + RunSuffix} {
		b, _ := os.ReadFile(src)
		os.WriteFile(filepath.Join(swapped, dst), b, 0o644)
	}
	alone := t.TempDir()
	b, _ := os.ReadFile(prov("job-a1"))
	os.WriteFile(filepath.Join(alone, "job-a1"+ProvenanceSuffix), b, 0o644)
	noAgents := []byte("predicate: policy: agent: agent: false\n")

	for _, tc := range []struct {
		name       string
		artifact   string
		provenance string
		compliance []byte
		want       string // "" verified, by the job named in wantJob
		wantJob    string
	}{
		{"a bundle", artifact("dist.zip", zips["job-a1"]), prov("job-a1"), nil, "", "job-a1"},
		{"a directory of several jobs", artifact("dist.zip", zips["job-c3"]), dir, nil, "", "job-c3"},
		{"a tampered artifact", artifact("dist.zip", append(zips["job-a1"], ' ')), prov("job-a1"), nil, "none of the provenance's subjects", ""},
		{"a tampered artifact, in a directory", artifact("dist.zip", append(zips["job-a1"], ' ')), dir, nil, "a subject of none of the 4 provenance bundles in " + dir + " that were checked", ""},
		{"another key's job, in a directory", artifact("dist.zip", zips["job-d4"]), dir, nil, "1 were left out: not signed with the key", ""},
		{"a swapped run attestation", artifact("dist.zip", zips["job-a1"]), swapped, nil, "not this job's run attestation", ""},
		{"compliance: a human's job", artifact("dist.zip", zips["job-a1"]), dir, noAgents, "", "job-a1"},
		{"compliance: an agent's job", artifact("dist.zip", zips["job-b2"]), dir, noAgents, "compliance", ""},
		{"compliance without the run attestation", artifact("dist.zip", zips["job-a1"]), alone, noAgents, "looked for it at " + filepath.Join(alone, "job-a1"+RunSuffix), ""},
		{"no such artifact", filepath.Join(t.TempDir(), "nope.zip"), dir, nil, "no such file", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := VerifyArtifact(ArtifactQuery{Artifact: tc.artifact, Provenance: tc.provenance, Compliance: tc.compliance, ComplianceName: "c.cue"}, key.v)
			if tc.want != "" {
				if !errors.Is(err, attest.ErrNotVerified) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Jobs) != 1 || rep.Jobs[0].Bundle != prov(tc.wantJob) && filepath.Base(rep.Jobs[0].Bundle) != tc.wantJob+ProvenanceSuffix || rep.Jobs[0].Run == nil {
				t.Fatalf("jobs %+v", rep.Jobs)
			}
			var out bytes.Buffer
			WriteArtifactVerified(&out, rep, false)
			for _, want := range []string{"VERIFIED: " + tc.artifact, `is "dist.zip" of ` + tc.wantJob, "agent: no", "verdict: PASSED", "evil.test:443 denied 2", "warning git-hooks runtime-diff .git/hooks/pre-commit", "run attestation: " + tc.wantJob + RunSuffix + " verified"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the report lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// The report says an agent made the artifact, the uploads that are not
// subjects, and when it had only the provenance.
func TestWriteArtifactVerifiedAgent(t *testing.T) {
	key := newTestKey(t)
	dir := t.TempDir()
	zip := []byte("PK\x03\x04 agent's")
	refused := uploads.Upload{Name: "sneaky\x1b[2J", Status: uploads.Refused, Reason: "the claimed hash is not the bytes'", SHA256: strings.Repeat("5", 64)}
	finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult("job-e5", true, upload("dist", zip), refused))
	os.Remove(filepath.Join(dir, "job-e5"+RunSuffix))
	p := filepath.Join(t.TempDir(), "dist.zip")
	os.WriteFile(p, zip, 0o644)
	rep, err := VerifyArtifact(ArtifactQuery{Artifact: p, Provenance: dir}, key.v)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteArtifactVerified(&out, rep, false)
	for _, want := range []string{"agent: YES (author Copilot matches agents.authors)", "uploads that are not subjects: 1", "sneaky", "refused the claimed hash", "run attestation: job-e5.sigstore.json not found at " + filepath.Join(dir, "job-e5"+RunSuffix)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Error("a control character from the job reached the report")
	}
}

// Fail closed in a directory: two provenances name the same bytes and
// one fails (its run attestation is another job's), so the artifact is
// not verified though the other passes; a bundle signed with the key
// whose content is invalid fails the search even when it names another
// artifact; only a bundle another key signed is left out.
func TestVerifyArtifactFailsClosed(t *testing.T) {
	key, other := newTestKey(t), newTestKey(t)
	zip := []byte("PK\x03\x04 made twice")
	dir := t.TempDir()
	for _, id := range []string{"job-a1", "job-b2"} {
		finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult(id, false, upload("dist", zip)))
	}
	finishJob(t, dir, other.key, t.TempDir(), nil, nil, jobResult("job-o9", false, upload("dist", zip)))
	art := filepath.Join(t.TempDir(), "dist.zip")
	os.WriteFile(art, zip, 0o644)
	rep, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir}, key.v)
	if err != nil || len(rep.Jobs) != 2 || len(rep.Unverified) != 1 || !strings.Contains(rep.Unverified[0], "job-o9") {
		t.Fatalf("both jobs, the other key's left out: %+v, %v", rep, err)
	}
	// job-b2's run attestation swapped for job-a1's.
	b, _ := os.ReadFile(filepath.Join(dir, "job-a1"+RunSuffix))
	os.WriteFile(filepath.Join(dir, "job-b2"+RunSuffix), b, 0o644)
	if _, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir}, key.v); !errors.Is(err, attest.ErrNotVerified) || !strings.Contains(err.Error(), "job-b2") {
		t.Fatalf("one of two failing: err = %v", err)
	}

	// A provenance signed with the key, whose content is invalid.
	bad := t.TempDir()
	finishJob(t, bad, key.key, t.TempDir(), nil, nil, jobResult("job-a1", false, upload("dist", zip)))
	s, err := attest.LoadSigner(context.Background(), key.key, nil)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := attest.Sign(s, []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"https://slsa.dev/provenance/v1","predicate":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bad, "job-zz"+ProvenanceSuffix), signed.Bundle, 0o644)
	if _, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: bad}, key.v); !errors.Is(err, attest.ErrNotVerified) || !strings.Contains(err.Error(), "job-zz") {
		t.Fatalf("a signed invalid bundle: err = %v", err)
	}
}

// Whatever lies at the run attestation's path (a FIFO, a directory, a
// symlink) neither blocks nor stops the search for another job's
// artifact; for the job that made the artifact it is not verified, and
// the message says what is there.
func TestVerifyArtifactRunAttestationNotAFile(t *testing.T) {
	key := newTestKey(t)
	mine, theirs := []byte("PK\x03\x04 mine"), []byte("PK\x03\x04 theirs")
	for _, tc := range []struct {
		name string
		make func(p string) error
		want string
	}{
		{"a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "is a FIFO, not a regular file"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }, "is a directory, not a regular file"},
		{"a symlink", func(p string) error { return os.Symlink("/etc/hostname", p) }, "is a symlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult("job-a1", false, upload("dist", mine)))
			finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult("job-b2", false, upload("dist", theirs)))
			run := filepath.Join(dir, "job-b2"+RunSuffix)
			os.Remove(run)
			if err := tc.make(run); err != nil {
				t.Fatal(err)
			}
			art := filepath.Join(t.TempDir(), "dist.zip")
			os.WriteFile(art, mine, 0o644)
			done := make(chan error, 1)
			go func() {
				_, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir}, key.v)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("job-a1's artifact: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocked on the run attestation's path")
			}
			os.WriteFile(art, theirs, 0o644)
			_, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir}, key.v)
			if !errors.Is(err, attest.ErrNotVerified) || !strings.Contains(err.Error(), run+" is") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("job-b2's artifact: err = %v, want %q", err, tc.want)
			}
		})
	}
}

// A provenance bundle named otherwise: its run attestation is looked for
// under the name the provenance gives it, in the same directory.
func TestVerifyArtifactRenamedBundle(t *testing.T) {
	key := newTestKey(t)
	zip := []byte("PK\x03\x04 renamed")
	dir := t.TempDir()
	finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult("job-a1", false, upload("dist", zip)))
	renamed := filepath.Join(dir, "dist.provenance.json")
	os.Rename(filepath.Join(dir, "job-a1"+ProvenanceSuffix), renamed)
	art := filepath.Join(t.TempDir(), "dist.zip")
	os.WriteFile(art, zip, 0o644)
	rep, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: renamed}, key.v)
	if err != nil || rep.Jobs[0].RunBundle != filepath.Join(dir, "job-a1"+RunSuffix) || rep.Jobs[0].Run == nil {
		t.Fatalf("%+v, %v", rep, err)
	}
}

// --repository, --commit and --run: a provenance of another repository,
// commit or run is not verified, and says which it is.
func TestVerifyArtifactBinding(t *testing.T) {
	key := newTestKey(t)
	zip := []byte("PK\x03\x04 bound")
	dir := t.TempDir()
	finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult("job-a1", false, upload("dist", zip)))
	art := filepath.Join(t.TempDir(), "dist.zip")
	os.WriteFile(art, zip, 0o644)
	for _, tc := range []struct {
		name string
		b    attest.Binding
		want string // "" verified
	}{
		{"all of them", attest.Binding{Repository: "https://github.com/acme/app/", Commit: strings.ToUpper(headSHA), Invocation: "job-a1"}, ""},
		{"another repository", attest.Binding{Repository: "https://github.com/acme/other"}, `of repository "https://github.com/acme/app", not "https://github.com/acme/other" (--repository)`},
		{"another commit", attest.Binding{Commit: strings.Repeat("d", 40)}, "(--commit): a job of another commit made it"},
		{"another run", attest.Binding{Invocation: "job-a"}, `invocation is "job-a1", not within "job-a" (--run)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir, Binding: tc.b}, key.v)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, attest.ErrNotVerified) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// In a directory, a provenance of another run that names the same
// bytes (a re-run, or one replayed) is left out and listed; none of the
// expected run is not verified, and says why.
func TestVerifyArtifactBindingDirectory(t *testing.T) {
	key := newTestKey(t)
	zip := []byte("PK\x03\x04 run twice")
	dir := t.TempDir()
	for _, id := range []string{"job-a1", "job-b2"} {
		finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult(id, false, upload("dist", zip)))
	}
	art := filepath.Join(t.TempDir(), "dist.zip")
	os.WriteFile(art, zip, 0o644)
	rep, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir, Binding: attest.Binding{Invocation: "job-b2"}}, key.v)
	if err != nil || len(rep.Jobs) != 1 || filepath.Base(rep.Jobs[0].Bundle) != "job-b2"+ProvenanceSuffix || len(rep.Unverified) != 1 || !strings.Contains(rep.Unverified[0], "(--run)") {
		t.Fatalf("%+v, %v", rep, err)
	}
	if _, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir, Binding: attest.Binding{Invocation: "job-c3"}}, key.v); !errors.Is(err, attest.ErrNotVerified) || !strings.Contains(err.Error(), "2 were left out") || !strings.Contains(err.Error(), "(--run)") {
		t.Fatalf("err = %v", err)
	}
}

// A report that cannot be written says so.
func TestWriteArtifactVerifiedError(t *testing.T) {
	key := newTestKey(t)
	zip := []byte("PK\x03\x04 written")
	dir := t.TempDir()
	finishJob(t, dir, key.key, t.TempDir(), nil, nil, jobResult("job-a1", false, upload("dist", zip)))
	art := filepath.Join(t.TempDir(), "dist.zip")
	os.WriteFile(art, zip, 0o644)
	rep, err := VerifyArtifact(ArtifactQuery{Artifact: art, Provenance: dir}, key.v)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteArtifactVerified(failingWriter{}, rep, false); err == nil {
		t.Error("a write error was not returned")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
