package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// airlock run bounds the workspace: a step that writes past the limit
// fails with ENOSPC, inside the sandbox, for a job that runs as root too;
// the result names the limit; the flag may only lower the policy's; and
// what the job wrote within the limit is in the workspace afterwards,
// with nothing left mounted.
func TestRunWorkspaceLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	fill := "echo within > kept.txt; head -c 100000000 /dev/zero > big; exit 7"
	for _, tc := range []struct {
		name     string
		org      string // organisation policy body; "" for none
		args     []string
		wantCode int
		wantErr  string // in stderr
	}{
		{name: "the flag", args: []string{"--workspace-size", "32M"}, wantCode: 7, wantErr: "No space left on device"},
		{name: "the policy, a root job", org: "sandbox: user: {uid: 0, gid: 0}\nsandbox: capabilities: [\"CAP_DAC_OVERRIDE\", \"CAP_SYS_RESOURCE\"]\nsandbox: limits: workspace: \"32M\"\n", wantCode: 7, wantErr: "No space left on device"},
		{name: "a flag that raises the policy's", org: "sandbox: limits: workspace: *\"32M\" | string\n", args: []string{"--workspace-size", "64M"}, wantCode: 64,
			wantErr: "--workspace-size: more than the policy's sandbox.limits allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := workspace(t)
			args := []string{"run", "-w", ws, "--state-dir", stateDir(t), "--json"}
			if tc.org != "" {
				args = append(args, "--org", orgPolicy(t, tc.org))
			}
			args = append(append(args, tc.args...), "--", "sh", "-c", fill)
			var out, errb bytes.Buffer
			code := execute(args, &out, &errb)
			if code != tc.wantCode || !strings.Contains(errb.String(), tc.wantErr) {
				t.Fatalf("exit %d, want %d with %q: %s", code, tc.wantCode, tc.wantErr, errb.String())
			}
			if code == 64 {
				return
			}
			var res struct {
				Steps []struct {
					Limit   string `json:"limit"`
					Message string `json:"message"`
				} `json:"steps"`
				WorkspaceVolume struct {
					Limit int64 `json:"limit"`
				} `json:"workspaceVolume"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			if len(res.Steps) != 1 || res.Steps[0].Limit != "workspace" || !strings.Contains(res.Steps[0].Message, "sandbox.limits.workspace") || res.WorkspaceVolume.Limit != 32<<20 {
				t.Errorf("result: %+v", res)
			}
			if fi, err := os.Stat(filepath.Join(ws, "big")); err != nil || fi.Size() > 32<<20 {
				t.Errorf("the filler's file in the workspace: %v %v", fi, err)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "kept.txt")); string(b) != "within\n" {
				t.Errorf("kept.txt: %q %v", b, err)
			}
			if m, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(m, []byte(ws)) {
				t.Errorf("still mounted on the workspace:\n%s", m)
			}
		})
	}
}
