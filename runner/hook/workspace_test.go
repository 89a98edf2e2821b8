package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The runner's work directory is bounded by sandbox.limits.workspace: a
// step that writes past it fails with ENOSPC and airlock names the limit;
// the runner sees what the job writes as it writes it; the runner's own
// directories (file commands, hook responses) keep working when the job
// has filled the rest; cleanup_job merges what the job wrote and leaves
// nothing mounted, so the runner can remove its work directory.
func TestHookWorkspaceLimit(t *testing.T) {
	h := newRunnerHost(t)
	os.WriteFile(filepath.Join(h.org, "org.cue"), []byte("package airlock\negress: default: \"deny\"\nsandbox: limits: workspace: \"64M\"\nimages: pull: false\n"), 0o644)
	state := h.prepare()
	if code, out := h.step(state, `echo made by the job > /__w/app/app/out.txt`); code != 0 {
		t.Fatalf("step: exit %d: %s", code, out)
	}
	// hashFiles and the runner's other readers see it on the host now.
	if b, err := os.ReadFile(filepath.Join(h.repo, "out.txt")); string(b) != "made by the job\n" {
		t.Fatalf("the runner does not see what the job wrote: %q %v", b, err)
	}
	runnerFile := filepath.Join(h.temp, fileCommandsDir, "set_output_full")
	os.WriteFile(runnerFile, nil, 0o644)
	code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}",
		`head -c 200000000 /dev/zero > /__w/app/app/big || { echo "filled: $?"; echo after=1 >> "$GITHUB_OUTPUT"; exit 3; }`,
		map[string]string{"GITHUB_OUTPUT": "/__w/_temp/_runner_file_commands/set_output_full"})
	if code == 0 || !strings.Contains(out, "No space left on device") || !strings.Contains(out, "filled: 1") {
		t.Fatalf("a step writing 200 MB into a 64 MiB workspace: exit %d: %s", code, out)
	}
	if !strings.Contains(out, "sandbox.limits.workspace") {
		t.Errorf("the step's log does not name the limit: %s", out)
	}
	if b, _ := os.ReadFile(runnerFile); string(b) != "after=1\n" {
		t.Errorf("the runner's file command after the workspace filled up: %q", b)
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Fatalf("cleanup_job after the workspace filled up: exit %d: %s", code, out)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), h.work) {
		t.Errorf("still mounted below the runner's work directory after cleanup_job:\n%s", mounts)
	}
	if b, err := os.ReadFile(filepath.Join(h.repo, "out.txt")); string(b) != "made by the job\n" {
		t.Errorf("what the job wrote is not in the work directory after cleanup_job: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(h.repo, "big")); err != nil || fi.Size() > 64<<20 {
		t.Errorf("the filler's file after cleanup_job: %v %v", fi, err)
	}
	if err := os.RemoveAll(h.work); err != nil {
		t.Errorf("the runner cannot remove its work directory after the job: %v", err)
	}
}
