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

func TestPolicyCommands(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(text string) {
		os.MkdirAll(filepath.Join(repo, ".github"), 0o755)
		os.WriteFile(filepath.Join(repo, ".github", "airlock.cue"), []byte(text), 0o644)
	}
	git("init", "-q")
	write("sandbox: limits: pids: 300\n")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	write("egress: default: \"allow\"\n")
	git("commit", "-q", "-am", "agent loosens its policy")
	head := git("rev-parse", "HEAD")
	org := "../../policies/examples/org"

	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stdoutHas []string
		stderrHas string
	}{
		{"vet examples", []string{"policy", "vet", "--org", org, "../../policies/examples/go.cue", "../../policies/examples/strict.cue"}, 0, []string{"ok ../../policies/examples/go.cue"}, ""},
		{"vet head's file", []string{"policy", "vet", "--org", org, filepath.Join(repo, ".github", "airlock.cue")}, exitDataErr, nil, "conflicting values"},
		{"eval base", []string{"policy", "eval", "--org", org, "--repo", repo, "--base", base, "--head", head}, 0, []string{"pids:        300", "the head commit changes .github/airlock.cue", `default: "deny"`}, ""},
		{"repo without base", []string{"policy", "eval", "--repo", repo}, exitUsage, nil, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := execute(tc.args, &out, &errb); code != tc.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tc.code, errb.String())
			}
			for _, w := range tc.stdoutHas {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			if !strings.Contains(errb.String(), tc.stderrHas) {
				t.Errorf("stderr lacks %q: %s", tc.stderrHas, errb.String())
			}
		})
	}

	var out, errb bytes.Buffer
	if code := execute([]string{"policy", "eval", "--org", org, "--repo", repo, "--base", base, "--head", head, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("eval --json: %d %s", code, errb.String())
	}
	var res struct {
		Effective struct {
			Digest  string `json:"digest"`
			Sources []struct {
				Kind, Path, Commit, SHA256 string
			} `json:"sources"`
		} `json:"effective"`
		HeadChangesPolicy struct{ Changed bool } `json:"headChangesPolicy"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	last := res.Effective.Sources[len(res.Effective.Sources)-1]
	if len(res.Effective.Digest) != 64 || last.Kind != "repo" || last.Commit != base || !res.HeadChangesPolicy.Changed {
		t.Errorf("json = %+v", res)
	}
}
