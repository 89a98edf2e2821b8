package report

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		{"a tampered artifact, in a directory", artifact("dist.zip", append(zips["job-a1"], ' ')), dir, nil, "a subject of none of the 4 provenance bundles", ""},
		{"another key's job, in a directory", artifact("dist.zip", zips["job-d4"]), dir, nil, "1 did not verify", ""},
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
	for _, want := range []string{"agent: YES (author Copilot matches agents.authors)", "uploads that are not subjects: 1", "sneaky", "refused the claimed hash", "run attestation: job-e5.sigstore.json not found next to the provenance"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Error("a control character from the job reached the report")
	}
}
