package attest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/sigstore/sigstore/pkg/signature"
	"google.golang.org/protobuf/encoding/protojson"
)

// artifactBytes is an artifact of the provenance fixture: what a
// consumer downloads, and its sha256.
var artifactBytes = []byte("PK\x03\x04 the zip of an upload\n")

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// provenanceOf is a job's provenance as runner/report makes it, over
// the run statement run: the artifact and an output file as subjects.
func provenanceOf(run []byte, p Predicate) ([]SubjectInfo, Provenance) {
	t0 := p.Times.Start
	subjects := []SubjectInfo{
		{Name: "dist.zip", Digest: map[string]string{"sha256": sha256Hex(artifactBytes)}},
		{Name: "out/app.tar.gz", Digest: map[string]string{"sha256": strings.Repeat("9", 64)}},
	}
	prov := Provenance{
		BuildDefinition: BuildDefinition{
			BuildType: JobBuildType,
			ExternalParameters: ExternalParameters{Repository: p.Job.Repository, Ref: p.Job.HeadSHA, BaseRef: p.Job.BaseSHA, Workflow: "ci", Job: "build",
				Event: p.Job.Event, PullRequest: p.Job.PullRequest, Author: p.Job.Author, Agent: p.Policy.Agent},
			InternalParameters: InternalParameters{
				Policy:   ProvenancePolicy{EffectiveSHA256: p.Policy.EffectiveSHA256, Sources: p.Policy.Sources},
				Platform: "systrap", GVisorVersion: p.Runner.GVisorVersion,
				Sandbox: SandboxSettings{Network: p.Sandbox.Network, User: p.Sandbox.User, RootFS: "host", EgressMode: "enforce", ReadOnly: []string{".git/hooks"},
					Limits: SandboxLimits{JobTimeoutSeconds: 3600, MemoryBytes: 4 << 30, Pids: 4096, CPUs: 2}},
			},
			ResolvedDependencies: []Descriptor{
				{Name: "source", URI: "git+" + p.Job.Repository + "@" + p.Job.HeadSHA, Digest: map[string]string{"gitCommit": p.Job.HeadSHA}},
				{Name: "rootfs", URI: "file:///", Annotations: map[string]string{"source": "the runner host's root filesystem"}},
				{Name: "actions/checkout@v4", URI: "git+https://github.com/actions/checkout@v4", Digest: map[string]string{TreeDigestAlg: strings.Repeat("4", 64)}},
			},
		},
		RunDetails: RunDetails{
			Builder:  Builder{ID: BuilderID + "?host=runner-1", Version: map[string]string{"airlock": "v0.1.0"}},
			Metadata: BuildMetadata{InvocationID: "https://github.com/acme/app/actions/runs/9/attempts/1#job-1", StartedOn: t0, FinishedOn: t0.Add(time.Minute)},
			Byproducts: []RunByproduct{{Name: "job-1.sigstore.json", Digest: map[string]string{"sha256": sha256Hex(run)}, MediaType: PayloadType,
				Annotations: RunSummary{PredicateType: PredicateType, Agent: p.Policy.Agent, Verdict: "passed", Reasons: []string{},
					RefusedEgress:  []RefusedEgress{{Destination: "evil.test:443", Denied: 2}},
					TrustFindings:  []FindingRef{{Check: "runtime-diff", Category: "git-hooks", Severity: "warning", Path: ".git/hooks/pre-commit"}},
					RefusedUploads: []UploadRecord{{Name: "sneaky", Status: "refused", Reason: "the claimed hash is not the bytes'", SHA256: strings.Repeat("5", 64), Size: 10}},
					Notes:          []string{}}}},
		},
	}
	return subjects, prov
}

// signedJob is one job's two bundles, signed with one key.
type signedJob struct {
	run, prov []byte
	verifier  signature.Verifier
}

func signJob(t *testing.T, k keyFile, p Predicate) signedJob {
	t.Helper()
	s, err := LoadSigner(context.Background(), k.ref, k.password)
	if err != nil {
		t.Fatal(err)
	}
	run := statement(t, commitA, p)
	stmt, err := ProvenanceStatement(provenanceOf(run, p))
	if err != nil {
		t.Fatal(err)
	}
	runSigned, err := Sign(s, run)
	if err != nil {
		t.Fatal(err)
	}
	provSigned, err := Sign(s, stmt)
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(k.pub)
	if err != nil {
		t.Fatal(err)
	}
	return signedJob{run: runSigned.Bundle, prov: provSigned.Bundle, verifier: v}
}

// The statement is an in-toto Statement v1 of SLSA provenance v1 as the
// in-toto attestation framework's own bindings read it: every field
// known to their schema (protojson refuses others), and both validate.
func TestProvenanceValidatesWithInToto(t *testing.T) {
	p := predicate(0, 20, 1)
	stmt, err := ProvenanceStatement(provenanceOf(statement(t, commitA, p), p))
	if err != nil {
		t.Fatal(err)
	}
	var st intoto.Statement
	if err := protojson.Unmarshal(stmt, &st); err != nil {
		t.Fatalf("in-toto statement: %v", err)
	}
	if err := st.Validate(); err != nil {
		t.Fatalf("in-toto statement: %v", err)
	}
	if st.GetPredicateType() != ProvenanceType || len(st.GetSubject()) != 2 {
		t.Errorf("statement: %v", &st)
	}
	pred, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		t.Fatal(err)
	}
	var prov slsa.Provenance
	if err := protojson.Unmarshal(pred, &prov); err != nil {
		t.Fatalf("SLSA provenance v1: %v", err)
	}
	if err := prov.Validate(); err != nil {
		t.Fatalf("SLSA provenance v1: %v", err)
	}
	if got := prov.GetRunDetails().GetBuilder().GetId(); got != BuilderID+"?host=runner-1" {
		t.Errorf("builder id %q", got)
	}
	if got := prov.GetRunDetails().GetMetadata().GetStartedOn().AsTime(); !got.Equal(p.Times.Start) {
		t.Errorf("startedOn %v, want %v", got, p.Times.Start)
	}
}

// ProvenanceStatement makes no statement that a consumer could not
// match an artifact against.
func TestProvenanceStatementRefuses(t *testing.T) {
	p := predicate(0, 0, 0)
	_, prov := provenanceOf(statement(t, commitA, p), p)
	many := make([]SubjectInfo, MaxProvenanceSubjects+1)
	for i := range many {
		many[i] = SubjectInfo{Name: "a", Digest: map[string]string{"sha256": strings.Repeat("a", 64)}}
	}
	for _, tc := range []struct {
		name     string
		subjects []SubjectInfo
	}{
		{"no subject", nil},
		{"no sha256", []SubjectInfo{{Name: "a", Digest: map[string]string{"gitCommit": commitA}}}},
		{"upper-case hex", []SubjectInfo{{Name: "a", Digest: map[string]string{"sha256": strings.Repeat("A", 64)}}}},
		{"no name", []SubjectInfo{{Digest: map[string]string{"sha256": strings.Repeat("a", 64)}}}},
		{"too many", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ProvenanceStatement(tc.subjects, prov); err == nil {
				t.Error("made a statement")
			}
		})
	}
}

// VerifyArtifact: the signature first, then the artifact's digest among
// the subjects, then the run attestation next to it (its statement the
// provenance's byproduct) and the compliance policy over its predicate.
func TestVerifyArtifact(t *testing.T) {
	keys := keyFiles(t)
	agentJob := signJob(t, keys["ecdsa"], predicate(3, 20, 1))
	human := predicate(3, 20, 1)
	human.Policy.Agent = &AgentDecision{Agent: false, Reason: "author alice is not an agent"}
	humanJob := signJob(t, keys["ecdsa"], human)
	otherKey := signJob(t, keys["ed25519"], predicate(3, 20, 1))
	tampered := []byte(strings.Replace(string(agentJob.prov), `"payload":"`, `"payload":"A`, 1))
	noAgents := []byte("predicate: policy: agent: agent: false\n")
	for _, tc := range []struct {
		name       string
		prov, run  []byte
		artifact   []byte
		v          signature.Verifier
		compliance []byte
		want       string // "" verified
	}{
		{"the provenance alone", agentJob.prov, nil, artifactBytes, agentJob.verifier, nil, ""},
		{"with its run attestation", agentJob.prov, agentJob.run, artifactBytes, agentJob.verifier, nil, ""},
		{"a tampered artifact", agentJob.prov, nil, append([]byte("x"), artifactBytes...), agentJob.verifier, nil, "none of the provenance's subjects (2)"},
		{"a provenance changed after signing", tampered, nil, artifactBytes, agentJob.verifier, nil, "not a Sigstore bundle"},
		{"the wrong key", otherKey.prov, nil, artifactBytes, agentJob.verifier, nil, "signature"},
		{"another job's run attestation", agentJob.prov, humanJob.run, artifactBytes, agentJob.verifier, nil, "not this job's run attestation"},
		{"a run attestation for the provenance", agentJob.run, nil, artifactBytes, agentJob.verifier, nil, "predicate type"},
		{"compliance: a human's job", humanJob.prov, humanJob.run, artifactBytes, humanJob.verifier, noAgents, ""},
		{"compliance: an agent's job", agentJob.prov, agentJob.run, artifactBytes, agentJob.verifier, noAgents, "compliance"},
		{"compliance without the run attestation", humanJob.prov, nil, artifactBytes, humanJob.verifier, noAgents, "not at hand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := VerifyArtifact(tc.prov, tc.v, ArtifactOptions{SHA256: sha256Hex(tc.artifact), Run: tc.run, Compliance: tc.compliance, ComplianceName: "compliance.cue"})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.Subject.Name != "dist.zip" || (tc.run != nil) != (got.Run != nil) {
					t.Errorf("verified %+v", got)
				}
				return
			}
			if !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// A provenance bundle given where a run attestation is expected says
// what it is.
func TestVerifySaysItIsAProvenance(t *testing.T) {
	job := signJob(t, keyFiles(t)["ecdsa"], predicate(0, 0, 0))
	if _, err := Verify(job.prov, job.verifier, VerifyOptions{}); err == nil || !strings.Contains(err.Error(), "verify --artifact") {
		t.Errorf("err = %v", err)
	}
}

// The provenance decodes strictly: a field SLSA has but airlock does not
// write, added to a signed statement, is refused.
func TestProvenanceStrict(t *testing.T) {
	k := keyFiles(t)["ecdsa"]
	p := predicate(0, 0, 0)
	stmt, _ := ProvenanceStatement(provenanceOf(statement(t, commitA, p), p))
	var m map[string]any
	json.Unmarshal(stmt, &m)
	m["predicate"].(map[string]any)["runDetails"].(map[string]any)["extra"] = true
	b, _ := json.Marshal(m)
	s, _ := LoadSigner(context.Background(), k.ref, nil)
	signed, _ := Sign(s, b)
	v, _ := LoadVerifier(k.pub)
	if _, err := VerifyProvenance(signed.Bundle, v); err == nil || !strings.Contains(err.Error(), "extra") {
		t.Errorf("err = %v", err)
	}
}

// A signed provenance with a key twice (exactly, or in another case,
// which encoding/json would read as the same field) is not verified,
// and is not taken for another statement type that may be passed over.
func TestProvenanceDuplicateKey(t *testing.T) {
	k := keyFiles(t)["ecdsa"]
	p := predicate(0, 0, 0)
	stmt, _ := ProvenanceStatement(provenanceOf(statement(t, commitA, p), p))
	s, _ := LoadSigner(context.Background(), k.ref, nil)
	v, _ := LoadVerifier(k.pub)
	for name, extra := range map[string]string{
		"exactly":         `"predicateType":"https://slsa.dev/provenance/v1",`,
		"in another case": `"PREDICATETYPE":"https://github.com/airlock-ci/airlock/attest/run/v1",`,
	} {
		b := strings.Replace(string(stmt), `{"_type"`, `{`+extra+`"_type"`, 1)
		if name == "in another case" {
			// Last, where encoding/json takes it as the value.
			b = strings.TrimSuffix(string(stmt), "}") + `,` + strings.TrimSuffix(extra, ",") + `}`
		}
		signed, err := Sign(s, []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		_, err = VerifyProvenance(signed.Bundle, v)
		if !errors.Is(err, ErrNotVerified) || errors.Is(err, ErrNotProvenance) || errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), "appears twice") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// A provenance bound to a repository, a commit and a run: each that
// differs is not verified; a run's URL takes its attempts' jobs, and
// not another run whose id it begins.
func TestProvenanceBind(t *testing.T) {
	job := signJob(t, keyFiles(t)["ecdsa"], predicate(0, 0, 0))
	prov, err := VerifyProvenance(job.prov, job.verifier)
	if err != nil {
		t.Fatal(err)
	}
	ext := prov.Provenance.BuildDefinition.ExternalParameters
	for _, tc := range []struct {
		b    Binding
		want string // "" bound
	}{
		{Binding{Repository: ext.Repository, Commit: ext.Ref, Invocation: "https://github.com/acme/app/actions/runs/9"}, ""},
		{Binding{Invocation: "https://github.com/acme/app/actions/runs/9/attempts/1"}, ""},
		{Binding{Invocation: "https://github.com/acme/app/actions/runs/9/attempts/1#job-1"}, ""},
		{Binding{Invocation: "https://github.com/acme/app/actions/runs/9/"}, ""},
		{Binding{Invocation: "https://github.com/acme/app/actions/runs/"}, ""},
		{Binding{Invocation: "https://github.com/acme/app/actions/runs/90"}, "--run"},
		{Binding{Invocation: "https://github.com/acme/app/actions/runs/9/attempts/2"}, "--run"},
		{Binding{Invocation: "https://github.com/acme/app/actions/runs/9/attempts/1#job-10"}, "--run"},
		{Binding{Repository: "https://github.com/acme/ap"}, "--repository"},
		{Binding{Commit: commitA[:39]}, "--commit"},
	} {
		if err := prov.Bind(tc.b); tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrNotVerified) || !strings.Contains(fmt.Sprint(err), tc.want)) {
			t.Errorf("%+v: err = %v, want %q", tc.b, err, tc.want)
		}
	}
	if _, err := VerifyArtifact(job.prov, job.verifier, ArtifactOptions{SHA256: sha256Hex(artifactBytes), Binding: Binding{Repository: "https://github.com/evil/app"}}); !errors.Is(err, ErrNotVerified) {
		t.Errorf("VerifyArtifact does not bind: %v", err)
	}
}
