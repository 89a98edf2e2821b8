package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/runner/report"
)

// keys generate, a signed attestation at the end of airlock run, verify
// (with a compliance policy) and report: the whole round trip through the
// CLI, and the refusals.
func TestAttestationRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	t.Setenv(report.PasswordEnv, "pw-for-test")
	var out, errb bytes.Buffer
	if code := execute([]string{"keys", "generate", "--out", filepath.Join(dir, "k")}, &out, &errb); code != 0 {
		t.Fatalf("keys generate: %d %s", code, errb.String())
	}
	if fi, err := os.Stat(filepath.Join(dir, "k.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "k.key")); !bytes.Contains(b, []byte("ENCRYPTED SIGSTORE PRIVATE KEY")) {
		t.Fatal("key not encrypted although a password was given")
	}
	if code := execute([]string{"keys", "generate", "--out", filepath.Join(dir, "k")}, &out, &errb); code != exitUsage {
		t.Errorf("overwriting a key: exit %d", code)
	}

	att := filepath.Join(dir, "att")
	errb.Reset()
	code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--attest-dir", att, "--attest-key", filepath.Join(dir, "k.key"), "--", "sh", "-c", "echo hi; exit 3"}, &out, &errb)
	if code != 3 {
		t.Fatalf("run: exit %d: %s", code, errb.String())
	}
	bundles, _ := filepath.Glob(filepath.Join(att, "*.sigstore.json"))
	if len(bundles) != 1 || !strings.Contains(errb.String(), "attestation: "+bundles[0]) {
		t.Fatalf("bundles %v, stderr %s", bundles, errb.String())
	}
	pub := filepath.Join(dir, "k.pub")
	policy := filepath.Join(dir, "compliance.cue")
	// The bare DSSE envelope written beside the bundle verifies the same.
	envelope := strings.TrimSuffix(bundles[0], ".sigstore.json") + ".dsse.json"
	for _, tc := range []struct {
		name   string
		file   string
		policy string
		code   int
		want   string
	}{
		{"verified", bundles[0], "predicate: steps: [...{name: string}]\n", 0, "VERIFIED"},
		{"envelope verified", envelope, "predicate: steps: [...{name: string}]\n", 0, "VERIFIED"},
		{"failed job fails compliance", bundles[0], "predicate: verdict: passed: true\n", 1, "NOT VERIFIED: compliance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(policy, []byte(tc.policy), 0o644)
			var out, errb bytes.Buffer
			code := execute([]string{"verify", "--key", pub, "--policy", policy, tc.file}, &out, &errb)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
				t.Errorf("exit %d, output %s%s", code, out.String(), errb.String())
			}
		})
	}
	// A changed byte: not verified, whatever the policy.
	b, _ := os.ReadFile(bundles[0])
	tampered := filepath.Join(dir, "tampered.json")
	i := bytes.Index(b, []byte(`"payload":"`)) + 20
	b[i] ^= 0x01
	os.WriteFile(tampered, b, 0o644)
	out.Reset()
	errb.Reset()
	if code := execute([]string{"verify", "--key", pub, tampered}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "NOT VERIFIED") {
		t.Errorf("tampered bundle: exit %d %s", code, errb.String())
	}
	// The report is one HTML file.
	html := filepath.Join(dir, "r.html")
	if code := execute([]string{"report", "--key", pub, "-o", html, bundles[0]}, &out, &errb); code != 0 {
		t.Fatalf("report: %d %s", code, errb.String())
	}
	if page, _ := os.ReadFile(html); !bytes.Contains(page, []byte("FAILED")) || !bytes.Contains(page, []byte("<!doctype html>")) {
		t.Errorf("report page: %.200s", page)
	}
}

// Without a key the statement is still written, named and announced as
// unsigned.
func TestAttestationUnsigned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	att := t.TempDir()
	var out, errb bytes.Buffer
	if code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--attest-dir", att, "--", "true"}, &out, &errb); code != 0 {
		t.Fatalf("run: %d %s", code, errb.String())
	}
	files, _ := filepath.Glob(filepath.Join(att, "*.UNSIGNED.intoto.json"))
	if len(files) != 1 || !strings.Contains(errb.String(), "ATTESTATION NOT SIGNED") {
		t.Fatalf("files %v, stderr %s", files, errb.String())
	}
}

// airlock's own attestation directory keeps a bounded past: with
// --keep-attestations 1, the second run leaves only its own statement.
func TestAttestationRetention(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ws, state := workspace(t), stateDir(t)
	for i := 0; i < 2; i++ {
		var out, errb bytes.Buffer
		if code := execute([]string{"run", "-w", ws, "--state-dir", state, "--keep-attestations", "1", "--", "true"}, &out, &errb); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, errb.String())
		}
	}
	left, _ := filepath.Glob(filepath.Join(state, "attestations", "*"))
	if len(left) != 1 || !strings.HasSuffix(left[0], ".UNSIGNED.intoto.json") {
		t.Errorf("left: %v", left)
	}
}
