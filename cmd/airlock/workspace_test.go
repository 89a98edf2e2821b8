package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
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

// The disk under the workspace volumes fills (the state directory on a
// small disk): before the job, airlock refuses to start it and says
// why; during a step, the loop device fails the writes that the job saw
// succeed, so what the job wrote is lost: the job fails, the result and
// the attestation say so, and none of it reaches the workspace. Nothing
// stays mounted either way.
func TestRunOnAFullVolumeDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("needs mkfs.ext4")
	}
	disk := t.TempDir()
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(img, 96<<20)
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v: %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, disk).CombinedOutput(); err != nil {
		t.Skipf("mount a loop device: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", disk).Run() })
	state := filepath.Join(disk, "state")
	for _, tc := range []struct {
		name string
		fill int64 // bytes written on the disk before the job
		step string
		want string
	}{
		{"full before the job", 75 << 20, "true", "less than the 16 MiB a job needs to start"},
		{"no room for the job's state", 90 << 20, "true", "no space left on device (a disk is full"},
		{"filled during a step", 0, "echo kept > kept; head -c 200000000 /dev/zero > big", "what the job wrote is lost: not merged into"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fill := filepath.Join(disk, "fill")
			os.Remove(fill)
			if tc.fill > 0 {
				f, _ := os.Create(fill)
				f.Write(make([]byte, tc.fill))
				f.Close()
			}
			defer os.Remove(fill)
			ws, att := workspace(t), t.TempDir()
			var out, errb bytes.Buffer
			code := execute([]string{"run", "-w", ws, "--state-dir", state, "--attest-dir", att, "--", "sh", "-c", tc.step}, &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant a failure saying %q", code, errb.String(), tc.want)
			}
			if entries, _ := os.ReadDir(ws); len(entries) != 0 {
				t.Errorf("the workspace holds %v: what the job wrote reached it", entries)
			}
			if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(b, []byte(ws)) {
				t.Error("something is still mounted on the workspace")
			}
			if tc.fill == 0 {
				stmts, _ := filepath.Glob(filepath.Join(att, "*.UNSIGNED.intoto.json"))
				if len(stmts) != 1 {
					t.Fatalf("statements %v", stmts)
				}
				if b, _ := os.ReadFile(stmts[0]); !strings.Contains(string(b), tc.want) || !strings.Contains(string(b), `"passed": false`) && !strings.Contains(string(b), `"passed":false`) {
					t.Errorf("the attestation does not say the job failed because %q", tc.want)
				}
			}
			if jobs, _ := filepath.Glob(filepath.Join(state, "jobs", "*")); len(jobs) != 0 {
				t.Errorf("job state left: %v", jobs)
			}
		})
	}
}
