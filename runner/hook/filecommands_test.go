package hook

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A step's file commands reach the runner through a directory of the
// job's own: what the step writes is copied into the runner's file, and
// nothing a hostile step puts in its place (a symlink to a host file, a
// FIFO, a hard link, a huge file) makes the hook read a host file, hang,
// or write past the runner's file; the runner's own directory is out of
// the job's reach.
func TestHookFileCommands(t *testing.T) {
	h := newRunnerHost(t)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret\n"), 0o600)
	runnerDir := filepath.Join(h.temp, fileCommandsDir)
	// A file the runner made for a later step.
	os.WriteFile(filepath.Join(runnerDir, "set_env_later"), nil, 0o644)
	state := h.prepare()
	for i, tc := range []struct {
		name, script string
		want         string // the runner's file afterwards
		log          string // in the step's output
	}{
		{"written", `echo "greeting=hi" >> "$GITHUB_OUTPUT"`, "greeting=hi\n", ""},
		{"a symlink to a host file", `rm "$GITHUB_OUTPUT" && ln -s ` + secret + ` "$GITHUB_OUTPUT"`, "", "was not passed to the runner"},
		{"a FIFO", `rm "$GITHUB_OUTPUT" && mkfifo "$GITHUB_OUTPUT"`, "", "was not passed to the runner"},
		{"a hard link", `echo x=y > /__w/_temp/_runner_file_commands/other && ln -f /__w/_temp/_runner_file_commands/other "$GITHUB_OUTPUT"`, "", "not a regular file with one name"},
		{"larger than the bound", fmt.Sprintf(`head -c %d /dev/zero >> "$GITHUB_OUTPUT"`, maxFileCommand+10), strings.Repeat("\x00", maxFileCommand), "cut there"},
		{"the runner's other files", `echo PATH=/evil >> /__w/_temp/_runner_file_commands/set_env_later; ls /__w/_temp/_runner_file_commands`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("set_output_%d", i)
			runnerFile := filepath.Join(runnerDir, name)
			os.WriteFile(runnerFile, nil, 0o644) // as the runner makes it, before the step
			code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", tc.script, map[string]string{"GITHUB_OUTPUT": "/__w/_temp/_runner_file_commands/" + name})
			if code != 0 {
				t.Fatalf("step: exit %d: %s", code, out)
			}
			if b, _ := os.ReadFile(runnerFile); string(b) != tc.want {
				t.Errorf("the runner's file holds %.40q (%d bytes), want %.40q", b, len(b), tc.want)
			}
			if !strings.Contains(out, tc.log) {
				t.Errorf("the step's output does not say %q: %s", tc.log, out)
			}
			if strings.Contains(out, "host secret") {
				t.Errorf("the host file reached the step: %s", out)
			}
			if b, _ := os.ReadFile(filepath.Join(runnerDir, "set_env_later")); len(b) != 0 {
				t.Errorf("the job wrote the runner's file for a later step: %q", b)
			}
		})
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Errorf("cleanup: exit %d: %s", code, out)
	}
}

// What the runner keeps for itself is out of the job's reach: its own
// directory (credentials, configuration, logs) is hidden but for the
// externals, the actions it downloaded are read-only, and its temp
// directory, where it writes as root, cannot be moved (nor by a job that
// runs as root: TestHookServicesAndDockerActions).
func TestHookRunnerDirs(t *testing.T) {
	h := newRunnerHost(t)
	os.WriteFile(filepath.Join(h.root, ".credentials"), []byte(`{"scheme":"OAuth"}`), 0o644)
	os.MkdirAll(filepath.Join(h.work, "_actions", "actions", "checkout", "v4"), 0o755)
	state := h.prepare()
	for _, tc := range []struct {
		name, script, want string
	}{
		{"the runner's directory", `cat ` + h.root + `/.credentials 2>&1 || echo hidden`, "hidden"},
		{"the externals", `test -x /__e/node20/bin/node && echo externals`, "externals"},
		{"the actions", `touch /__w/_actions/actions/checkout/v4/index.js 2>&1 || echo read-only`, "read-only"},
		{"the temp directory", `mv /__w/_temp /__w/app/app/t 2>&1 || echo not-moved`, "not-moved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := h.step(state, tc.script)
			if code != 0 || !strings.Contains(out, tc.want) || strings.Contains(out, "OAuth") {
				t.Errorf("exit %d, want %q: %s", code, tc.want, out)
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(h.work, "_actions", "actions", "checkout", "v4", "index.js")); err == nil {
		t.Error("the job wrote into the runner's actions")
	}
	if fi, err := os.Lstat(h.temp); err != nil || !fi.IsDir() {
		t.Errorf("the runner's temp directory was replaced: %v", err)
	}
}
