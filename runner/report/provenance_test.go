package report

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
	"github.com/airlock-ci/airlock/runner/trust"
)

const headSHA = "0123456789abcdef0123456789abcdef01234567"

// testKey is a signing key on disk and its verifier.
type testKey struct {
	key, pub string
	v        signature.Verifier
}

func newTestKey(t *testing.T) testKey {
	t.Helper()
	prefix := filepath.Join(t.TempDir(), "k")
	if err := attest.WriteKeyPair(prefix, nil); err != nil {
		t.Fatal(err)
	}
	v, err := attest.LoadVerifierFile(prefix + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return testKey{key: prefix + ".key", pub: prefix + ".pub", v: v}
}

// upload is an upload the gateway finalized: what upload-artifact
// stores as name.zip, with the sha256 of its bytes.
func upload(name string, zip []byte) uploads.Upload {
	return uploads.Upload{Name: name, SHA256: sha256Hex(zip), Size: int64(len(zip)), Claimed: "sha256:" + sha256Hex(zip), Status: uploads.Finalized, ID: "7"}
}

// jobResult is a job's result as runner.Session.Close returns it: an
// agent's pull request (or a human's), refused egress, a trust finding,
// and the uploads the gateway recorded.
func jobResult(id string, agent bool, ups ...uploads.Upload) runner.Result {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	det := &policies.Detection{Agent: agent, Sandboxed: true, Reason: "author Copilot matches agents.authors"}
	if !agent {
		det.Reason = "author alice matches no agents rule"
	}
	return runner.Result{
		Job: "build", Passed: true, Start: t0, End: t0.Add(90 * time.Second),
		Sandbox: runner.SandboxInfo{ID: id, Runtime: "gVisor runsc (embedded)", Platform: "systrap", RootFS: "host", Network: "egress gateway 198.18.0.1"},
		Policy:  &runner.PolicyInfo{Digest: strings.Repeat("b", 64), Agent: det},
		Egress: &egress.Report{Gateway: "198.18.0.1", Mode: "enforce", Denied: 2, Uploads: ups, Decisions: []rules.Decision{
			{Time: t0.Add(time.Second), Protocol: rules.ProtoProxyConnect, Name: "evil.test", Port: 443, Decision: rules.Denied, Rule: "default (deny)"},
			{Time: t0.Add(2 * time.Second), Protocol: rules.ProtoProxyConnect, Name: "evil.test", Port: 443, Decision: rules.Denied, Rule: "default (deny)"},
		}},
		Trust: &trust.Report{Findings: []trust.Finding{{Phase: "runtime", Category: "git-hooks", Check: "runtime-diff", Path: ".git/hooks/pre-commit", Kind: "added", Severity: trust.SeverityWarning, Action: "readonly"}}},
	}
}

// finishJob ends a job as every door does (Finish) and returns where its
// statements went and the log.
func finishJob(t *testing.T, dir, key string, ws string, outputs []string, actions []attest.Descriptor, res runner.Result) (*Attestation, string) {
	t.Helper()
	c := &runner.AttestConfig{
		Dir: dir, Key: key, Outputs: outputs, Repository: ws, Actions: actions,
		Meta: attest.Meta{AirlockVersion: "v0.9.0", Repository: "https://github.com/acme/app", HeadSHA: headSHA, BaseSHA: strings.Repeat("1", 40), PullRequest: 7, Author: "Copilot", Event: "pull_request"},
	}
	var log bytes.Buffer
	att := Finish(context.Background(), res, c, nil, &log)
	return att, log.String()
}

// A job's provenance, from its result: the finalized uploads (NAME.zip,
// the sha256 the gateway took of the bytes) and the outputs found in the
// workspace (a link out of it is not followed) are its subjects; the
// refused and unfinished uploads are on record beside them; the rest is
// the run attestation's, which the provenance names by its statement's
// digest. Without artifacts there is none; without a key it is written
// unsigned, like the run attestation.
func TestProvenanceFromResult(t *testing.T) {
	t.Setenv("GITHUB_ACTIONS", "true")
	for k, v := range map[string]string{"GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "2", "GITHUB_WORKFLOW": "ci", "GITHUB_JOB": "build", "RUNNER_NAME": "runner 7", "GITHUB_REPOSITORY": "acme/app"} {
		t.Setenv(k, v)
	}
	key := newTestKey(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "dist"), 0o755)
	os.WriteFile(filepath.Join(ws, "dist", "app.tar.gz"), []byte("the app"), 0o644)
	secret := filepath.Join(t.TempDir(), "secret.tar.gz")
	os.WriteFile(secret, []byte("host secret"), 0o644)
	os.Symlink(secret, filepath.Join(ws, "dist", "link.tar.gz"))
	zip := []byte("PK\x03\x04 dist")
	ups := []uploads.Upload{
		upload("dist", zip),
		{Name: "sneaky", SHA256: strings.Repeat("5", 64), Size: 3, Claimed: "sha256:" + strings.Repeat("6", 64), Status: uploads.Refused, Reason: "the claimed hash is not the bytes'"},
		{Name: "half", Status: uploads.NotFinalized, Size: 10},
	}
	checkout := attest.Descriptor{Name: "actions/checkout@v4", URI: "git+https://github.com/actions/checkout@v4", Digest: map[string]string{attest.TreeDigestAlg: strings.Repeat("4", 64)}}
	for _, tc := range []struct {
		name     string
		key      string
		outputs  []string
		uploads  []uploads.Upload
		files    []string // written besides the run attestation's
		log      string
		subjects int
	}{
		{"signed", key.key, []string{"dist/*.tar.gz"}, ups, []string{".provenance.sigstore.json", ".provenance.dsse.json"}, "(signed, 2 artifact(s))", 2},
		{"unsigned", "", []string{"dist/app.tar.gz"}, nil, []string{".provenance.UNSIGNED.intoto.json"}, "PROVENANCE NOT SIGNED: no signing key", 1},
		{"no artifacts", key.key, nil, ups[1:], nil, "provenance: none written: the job made no artifact", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			att, log := finishJob(t, dir, tc.key, ws, tc.outputs, []attest.Descriptor{checkout}, jobResult("job-0a1b", true, tc.uploads...))
			if !strings.Contains(log, tc.log) || att.Provenance == nil || att.Provenance.Subjects != tc.subjects {
				t.Fatalf("provenance %+v, log:\n%s", att.Provenance, log)
			}
			var got []string
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if n := strings.TrimPrefix(e.Name(), "job-0a1b"); strings.HasPrefix(n, ".provenance") {
					got = append(got, n)
				}
			}
			if slices.Sort(tc.files); !slices.Equal(got, tc.files) {
				t.Errorf("provenance files %q, want %q", got, tc.files)
			}
			if tc.name == "signed" {
				checkSignedProvenance(t, att, key, sha256Hex(zip), log)
				// The bare envelope written beside the bundle verifies
				// too, its run attestation found by the name it gives.
				env := strings.TrimSuffix(att.Provenance.Bundle, ProvenanceSuffix) + ".provenance.dsse.json"
				rep, err := VerifyArtifact(ArtifactQuery{Artifact: filepath.Join(ws, "dist", "app.tar.gz"), Provenance: env}, key.v)
				if err != nil || len(rep.Jobs) != 1 || rep.Jobs[0].RunBundle == "" {
					t.Errorf("verify --artifact with %s: %+v, %v", env, rep, err)
				}
			}
		})
	}
}

// checkSignedProvenance reads the signed provenance back through
// attest.VerifyArtifact and checks what it says.
func checkSignedProvenance(t *testing.T, att *Attestation, key testKey, zipSum, log string) {
	t.Helper()
	if want := strings.TrimSuffix(att.Bundle, RunSuffix) + ProvenanceSuffix; att.Provenance.Bundle != want || !strings.Contains(log, "provenance: "+want+" (signed") {
		t.Errorf("provenance bundle %q, want %q; log:\n%s", att.Provenance.Bundle, want, log)
	}
	prov, _ := os.ReadFile(att.Provenance.Bundle)
	run, _ := os.ReadFile(att.Bundle)
	got, err := attest.VerifyArtifact(prov, key.v, attest.ArtifactOptions{SHA256: zipSum, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got.Provenance.Subjects {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"dist.zip", "dist/app.tar.gz"}) {
		t.Errorf("subjects %q", names)
	}
	p := got.Provenance.Provenance
	ext, in, rd := p.BuildDefinition.ExternalParameters, p.BuildDefinition.InternalParameters, p.RunDetails
	if ext.Repository != "https://github.com/acme/app" || ext.Ref != headSHA || ext.Workflow != "ci" || ext.Job != "build" || ext.PullRequest != 7 || ext.Event != "pull_request" || ext.Agent == nil || !ext.Agent.Agent {
		t.Errorf("external parameters %+v", ext)
	}
	if in.Policy.EffectiveSHA256 != strings.Repeat("b", 64) || in.Platform != "systrap" || in.Sandbox.RootFS != "host" || in.Sandbox.EgressMode != "enforce" {
		t.Errorf("internal parameters %+v", in)
	}
	var deps []string
	for _, d := range p.BuildDefinition.ResolvedDependencies {
		deps = append(deps, d.Name+" "+d.URI)
	}
	if !slices.Equal(deps, []string{"source git+https://github.com/acme/app@" + headSHA, "rootfs file:///", "actions/checkout@v4 git+https://github.com/actions/checkout@v4"}) {
		t.Errorf("resolved dependencies %q", deps)
	}
	if rd.Builder.ID != attest.BuilderID+"?host=runner+7" || rd.Builder.Version["airlock"] != "v0.9.0" || rd.Metadata.InvocationID != "https://github.com/acme/app/actions/runs/42/attempts/2#job-0a1b" {
		t.Errorf("run details %+v", rd)
	}
	s := got.Provenance.Run().Annotations
	if got.Provenance.Run().Name != filepath.Base(att.Bundle) || s.Verdict != "passed" || !s.Agent.Agent ||
		!slices.Equal(s.RefusedEgress, []attest.RefusedEgress{{Destination: "evil.test:443", Denied: 2}}) ||
		len(s.TrustFindings) != 1 || s.TrustFindings[0].Path != ".git/hooks/pre-commit" {
		t.Errorf("run summary %+v", s)
	}
	var refused []string
	for _, u := range s.RefusedUploads {
		refused = append(refused, u.Name+" "+u.Status)
	}
	if !slices.Equal(refused, []string{"sneaky refused", "half not finalized"}) {
		t.Errorf("refused uploads %q", refused)
	}
	out, _ := json.Marshal(Outcome{Attestation: att})
	if !bytes.Contains(out, []byte(`"provenance":{"bundle":"`+att.Provenance.Bundle)) {
		t.Errorf("the JSON result: %s", out)
	}
}

// What the job names its uploads is bounded, and an upload finalized
// without a digest of its bytes is no subject; a refused upload after
// the last subject is still on record, and what is not is counted.
func TestUploadSubjectsBounded(t *testing.T) {
	many := []uploads.Upload{{Name: strings.Repeat("n", 1000), Status: uploads.Finalized}}
	for range maxUploadSubjects + 5 {
		many = append(many, upload("a", []byte("x")))
	}
	many = append(many, uploads.Upload{Name: "late", Status: uploads.Refused, Reason: "the claimed hash is not the bytes'"})
	subjects, refused, notes := uploadSubjects(&egress.Report{Uploads: many})
	if len(subjects) != maxUploadSubjects || len(refused) != 2 || refused[1].Name != "late" || len(notes) != 1 || !strings.Contains(notes[0], "5 are not subjects") {
		t.Fatalf("%d subjects, %d refused, notes %q", len(subjects), len(refused), notes)
	}
	for range maxRefusedUploads + 2 {
		many = append(many, uploads.Upload{Name: "r", Status: uploads.Refused})
	}
	if _, refused, notes := uploadSubjects(&egress.Report{Uploads: many}); len(refused) != maxRefusedUploads || len(notes) != 2 || !strings.Contains(notes[1], "4 upload(s) that are not subjects are not listed") {
		t.Fatalf("%d refused, notes %q", len(refused), notes)
	}
	if r := refused[0]; len(r.Name) > 260 || !strings.Contains(r.Reason, "without a digest") {
		t.Errorf("refused %+v", r)
	}
	if s, r, n := uploadSubjects(nil); len(s)+len(r)+len(n) != 0 || s == nil || r == nil || n == nil {
		t.Errorf("no gateway: %v %v %v", s, r, n)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// The job container's descriptor describes what ran (the mapped root):
// the digest of the reference the workflow wrote is an annotation.
func TestContainerImageDependency(t *testing.T) {
	var p attest.Predicate
	p.Job.ContainerImage = "node@sha256:" + strings.Repeat("ab", 32)
	deps := dependencies(p, attest.SubjectInfo{}, "/srv/images/node", nil)
	d := deps[len(deps)-1]
	if d.Name != "containerImage" || len(d.Digest) != 0 || d.URI != "file:///srv/images/node" || d.Annotations["referenceDigest"] != "sha256:"+strings.Repeat("ab", 32) || d.Annotations["reference"] != "docker://"+p.Job.ContainerImage {
		t.Errorf("containerImage: %+v", d)
	}
}
