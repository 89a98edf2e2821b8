package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/internal/testhost"
)

func TestPolicyCommands(t *testing.T) {
	repo, git := testhost.NewRepo(t)
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

// airlock run in policy mode: the job, limits and masks come from the
// organisation policy and the repository's policy at the base commit; the
// head's edit of the policy and the agent decision are in the result;
// flags may tighten but not loosen.
func TestRunWithPolicy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	repo, git := testhost.NewRepo(t)
	os.MkdirAll(filepath.Join(repo, ".github"), 0o755)
	os.WriteFile(filepath.Join(repo, ".github", "airlock.cue"), []byte(`sandbox: limits: pids: 300
steps: ci: [{name: "hello", run: "echo from-policy; id -u"}]
`), 0o644)
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	os.WriteFile(filepath.Join(repo, ".github", "airlock.cue"), []byte("steps: ci: [{name: \"evil\", run: \"echo pwned\"}]\n"), 0o644)
	git("commit", "-q", "-am", "agent edits the policy")
	head := git("rev-parse", "HEAD")
	event := filepath.Join(t.TempDir(), "event.json")
	os.WriteFile(event, []byte(`{"action":"opened","number":7,"pull_request":{"number":7,"user":{"login":"Copilot","type":"Bot"},
"head":{"ref":"copilot/x","sha":"`+head+`","repo":{"full_name":"acme/app"}},"base":{"ref":"main","sha":"`+base+`","repo":{"full_name":"acme/app"}}}}`), 0o644)
	org := "../../policies/examples/org"
	state := stateDir(t)

	var out, errb bytes.Buffer
	code := execute([]string{"run", "-w", repo, "--state-dir", state, "--org", org, "--event", event, "--job", "ci", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "from-policy") || strings.Contains(errb.String(), "pwned") {
		t.Errorf("ran the wrong job: %s", errb.String())
	}
	var res struct {
		Sandbox struct {
			Limits struct{ Pids int } `json:"limits"`
		} `json:"sandbox"`
		Policy struct {
			Digest            string
			HeadChangesPolicy struct{ Changed bool } `json:"headChangesPolicy"`
			Agent             struct {
				Agent  bool
				Reason string
			} `json:"agent"`
		} `json:"policy"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.Limits.Pids != 300 || !res.Policy.HeadChangesPolicy.Changed || !res.Policy.Agent.Agent || len(res.Policy.Digest) != 64 {
		t.Errorf("result = %+v", res)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		// Below cmd an input is named in words (input.Name): the error
		// says it as the flag the user gave.
		{"loosen a limit", []string{"--pids", "5000"}, exitUsage, "airlock: --pids: more than the policy's sandbox.limits allow; a request can only tighten"},
		{"add a capability", []string{"--cap", "CAP_NET_RAW"}, exitUsage, "airlock: --cap: CAP_NET_RAW: the policy does not grant it"},
		{"another root filesystem", []string{"--rootfs", "/nonexistent-rootfs"}, exitUsage, "airlock: --rootfs: the policy sets it (sandbox.rootfs)"},
		{"unknown job", []string{"--job", "deploy"}, exitUsage, `no job "deploy"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"run", "-w", repo, "--state-dir", state, "--org", org, "--base", base}, tc.args...)
			if !slices.Contains(tc.args, "--job") {
				args = append(args, "--job", "ci")
			}
			if code := execute(args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d (want %d), stderr %s", code, tc.code, errb.String())
			}
		})
	}
}
