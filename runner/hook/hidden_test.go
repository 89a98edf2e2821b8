package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
)

// In the hook, what airlock and the runner keep on the host is hidden
// from the job, found from the configuration and from the runner itself
// (issue 25): the signing key, the organisation policy, the hook's
// directory, and the runner's installation directory with its
// credentials, none under a path airlock masks by default; the job runs
// as root.
func TestHookHidesWhatAirlockUses(t *testing.T) {
	h := newRunnerHost(t)
	base, err := os.MkdirTemp("/var/tmp", "alh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	org, keys, hooks, install := filepath.Join(base, "org"), filepath.Join(base, "keys"), filepath.Join(base, "h"), filepath.Join(base, "actions-runner")
	for _, d := range []string{org, keys, hooks, filepath.Join(install, "bin")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(org, "org.cue"), []byte("package airlock\n// org-marker\negress: default: \"deny\"\nsandbox: user: {uid: 0, gid: 0}\nimages: pull: false\n"), 0o644)
	if err := attest.WriteKeyPair(filepath.Join(keys, "ci"), nil); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(keys, "ci.key"), 0o644)
	os.WriteFile(filepath.Join(hooks, "hooks-marker"), nil, 0o644)
	os.WriteFile(filepath.Join(install, ".runner"), []byte(`{"agentName":"runner-marker"}`), 0o644)
	os.WriteFile(filepath.Join(install, ".credentials_rsaparams"), []byte("rsa-marker"), 0o644)
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	h.worker = filepath.Join(install, "bin", "Runner.Worker")
	os.WriteFile(h.worker, sh, 0o755)
	h.env = []string{JobsRootEnv + "=" + hooks, OrgDirEnv + "=" + org, AttestKeyEnv + "=" + filepath.Join(keys, "ci.key")}

	state := h.prepare()
	script := strings.Join([]string{"id -u", "cat " + filepath.Join(keys, "ci.key"), "ls -A " + org, "ls -A " + hooks,
		"cat " + filepath.Join(install, ".runner"), "cat " + filepath.Join(install, ".credentials_rsaparams"), "ls -A " + install, "echo done"}, " 2>&1 || true; ")
	code, out := h.step(state, script)
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "0") || !strings.Contains(out, "done") {
		t.Fatalf("the job did not run as root to its end: exit %d: %s", code, out)
	}
	for _, secret := range []string{"PRIVATE KEY", "\norg.cue", "org-marker", "hooks-marker", "runner-marker", "rsa-marker", "\nbin\n", ".credentials_rsaparams\n"} {
		if strings.Contains(out, secret) {
			t.Errorf("the sandbox saw %q:\n%s", secret, out)
		}
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Errorf("cleanup: exit %d: %s", code, out)
	}
}
