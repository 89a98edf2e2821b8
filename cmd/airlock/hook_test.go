package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/runner/hook"
)

// `airlock hook` is wired to runner/hook, and main dispatches the job
// daemon that prepare_job starts by re-executing this binary: a job goes
// through the CLI from prepare_job to cleanup_job. (The hook's own tests,
// in runner/hook, attack it.)
func TestHookCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	work := workspace(t)
	os.MkdirAll(filepath.Join(work, "_temp"), 0o755)
	org := t.TempDir()
	// The job's image is not mapped, and nothing is pulled: this test
	// dials no registry.
	os.WriteFile(filepath.Join(org, "org.cue"), []byte("package airlock\nimages: pull: false\n"), 0o644)
	env := []string{hook.JobsRootEnv + "=" + filepath.Join(stateDir(t), "hooks"), hook.OrgDirEnv + "=" + org, hook.AttestKeyEnv + "="}
	call := func(input any) (int, string) {
		b, _ := json.Marshal(input)
		cmd := cli(t, "hook")
		cmd.Env = append(cmd.Env, env...)
		cmd.Stdin = bytes.NewReader(b)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, out := call("not the runner's call"); code != exitUsage || !strings.Contains(out, "not the runner's JSON") {
		t.Errorf("bad input: exit %d: %s", code, out)
	}
	resp := filepath.Join(work, "_temp", "response.json")
	os.WriteFile(resp, nil, 0o644)
	code, out := call(map[string]any{"command": "prepare_job", "responseFile": resp, "state": nil, "args": map[string]any{
		"container": map[string]any{"image": "debian", "workingDirectory": "/__w", "systemMountVolumes": []map[string]any{
			{"sourceVolumePath": work, "targetVolumePath": "/__w", "readOnly": false},
		}},
	}})
	if code != 0 {
		t.Fatalf("prepare_job: exit %d: %s", code, out)
	}
	var r struct {
		State map[string]any `json:"state"`
	}
	if b, _ := os.ReadFile(resp); json.Unmarshal(b, &r) != nil || r.State["jobDir"] == nil {
		t.Fatalf("response %s", b)
	}
	code, out = call(map[string]any{"command": "run_script_step", "state": r.State, "args": map[string]any{
		"entryPoint": "sh", "entryPointArgs": strings.Split(`-c 'echo hello from $(pwd); exit 3'`, " "), "workingDirectory": "/__w",
	}})
	if code != 3 || !strings.Contains(out, "hello from /__w") {
		t.Errorf("step: exit %d: %s", code, out)
	}
	code, out = call(map[string]any{"command": "cleanup_job", "state": r.State, "args": map[string]any{}})
	if code != 0 || !strings.Contains(out, "step sh failed; the runner reports the steps") {
		t.Errorf("cleanup of a job whose step failed: exit %d: %s", code, out)
	}
	if _, err := os.Stat(r.State["jobDir"].(string)); err == nil {
		t.Error("the job's directory is left")
	}
}
