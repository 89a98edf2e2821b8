package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// airlock's own files are hidden from the sandbox wherever its
// configuration puts them (issue 25): a job running as root reads
// nothing of the signing key (in a directory of airlock's: the
// directory is hidden too), its password file, or the organisation
// policy, none of them under a path airlock masks by default. airlock
// itself still signs with them.
func TestAirlocksOwnFilesAreHidden(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// Not under /tmp: the sandbox's /tmp is fresh, only a path in the
	// visible host root proves the mask.
	base, err := os.MkdirTemp("/var/tmp", "airlock-hidden-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	keyDir, pwDir, orgDir := filepath.Join(base, "airlock-keys"), filepath.Join(base, "secrets"), filepath.Join(base, "org")
	for _, d := range []string{keyDir, pwDir, orgDir} {
		os.MkdirAll(d, 0o755)
	}
	pw := filepath.Join(pwDir, "pw")
	os.WriteFile(pw, []byte("pw-s3cret-value\n"), 0o644)
	t.Setenv("AIRLOCK_KEY_PASSWORD", "pw-s3cret-value")
	var out, errb bytes.Buffer
	if code := execute([]string{"keys", "generate", "--out", filepath.Join(keyDir, "ci")}, &out, &errb); code != 0 {
		t.Fatalf("keys generate: %d %s", code, errb.String())
	}
	os.Unsetenv("AIRLOCK_KEY_PASSWORD")
	os.Chmod(filepath.Join(keyDir, "ci.key"), 0o644) // readable by anyone on the host: the mask alone hides it
	os.WriteFile(filepath.Join(orgDir, "org.cue"), []byte("package airlock\n// org-policy-marker\nsandbox: user: {uid: 0, gid: 0}\n"), 0o644)
	script := strings.Join([]string{"id -u", "cat " + filepath.Join(keyDir, "ci.key"), "ls -A " + keyDir, "cat " + pw, "cat " + filepath.Join(orgDir, "org.cue"), "ls -A " + orgDir, "echo done"}, "; ")
	out.Reset()
	errb.Reset()
	att := filepath.Join(t.TempDir(), "att")
	code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--org", orgDir, "--attest-dir", att,
		"--attest-key", filepath.Join(keyDir, "ci.key"), "--attest-key-password-file", pw, "--json", "--", "sh", "-c", script}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	job := errb.String()
	if !strings.HasPrefix(job, "0\n") || !strings.Contains(job, "done") {
		t.Fatalf("the job did not run as root to its end: %s", job)
	}
	for _, secret := range []string{"PRIVATE KEY", "\nci.key\n", "ci.pub", "pw-s3cret-value", "org-policy-marker", "\norg.cue\n"} {
		if strings.Contains(job, secret) {
			t.Errorf("the sandbox saw %q:\n%s", secret, job[:min(len(job), 3000)])
		}
	}
	var res struct {
		Attestation struct{ Bundle string } `json:"attestation"`
	}
	json.Unmarshal(out.Bytes(), &res)
	if res.Attestation.Bundle == "" {
		t.Errorf("airlock did not sign with the hidden key: %s", out.String())
	}
}
