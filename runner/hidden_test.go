package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/policies"
)

// What airlock uses on the host is hidden from the sandbox, found from
// the job's configuration, not from a list of fixed paths.
func TestHiddenPaths(t *testing.T) {
	org := &policies.Effective{Sources: []policies.Source{{Kind: policies.KindOrg, Path: "/srv/org-policy/org.cue"}, {Kind: policies.KindRepo, Path: ".github/airlock.cue"}}}
	for _, tc := range []struct {
		name string
		eff  *policies.Effective
		in   Inputs
		a    AttestConfig
		want []string
	}{
		{"a key in a directory of airlock's: the directory", nil, Inputs{}, AttestConfig{Key: "/opt/airlock/ci.key"}, []string{"/opt/airlock"}},
		{"never over the workspace's mount point", nil, Inputs{RunnerRoot: "/workspace/../workspace"}, AttestConfig{}, nil},
		{"a key elsewhere: the file only", nil, Inputs{}, AttestConfig{Key: "/opt/keys/ci.key", PasswordFile: "/opt/keys/pw"}, []string{"/opt/keys/ci.key", "/opt/keys/pw"}},
		{"a KMS key has no file", nil, Inputs{}, AttestConfig{Key: "awskms://alias/ci"}, nil},
		{"the organisation's directory, the hook's, the runner's", org, Inputs{SharedRoot: "/srv/airlock-hook", RunnerRoot: "/home/runner/actions-runner"}, AttestConfig{},
			[]string{"/srv/org-policy", "/srv/airlock-hook", "/home/runner/actions-runner"}},
		{"nothing to hide", nil, Inputs{}, AttestConfig{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hiddenPaths(tc.eff, tc.in, tc.a, "/workspace/sub"); !slices.Equal(got, tc.want) {
				t.Errorf("hidden %q, want %q", got, tc.want)
			}
		})
	}
	// Both ways of making a plan hide them: without a policy, and under
	// real CUE (the organisation's source is hidden too).
	for _, eff := range []*policies.Effective{nil, effective(t, "", "")} {
		p, err := NewPlan(eff, PullRequest{}, Inputs{AttestKey: "/opt/airlock/ci.key", Workspace: t.TempDir(), StateRoot: t.TempDir()})
		if err != nil {
			t.Fatalf("policy %v: %v", eff != nil, err)
		}
		if !slices.Contains(p.Job.Sandbox.ExtraMasks, "/opt/airlock") {
			t.Errorf("policy %v: masks %q lack the key", eff != nil, p.Job.Sandbox.ExtraMasks)
		}
	}
}

// The runner's installation directory is found from the runner process
// an airlock runs under: a process tree of a fake runner whose
// bin/Runner.Worker (a shell) runs a child.
func TestFindRunnerRoot(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(root, "bin", "Runner.Worker")
	if err := os.WriteFile(worker, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		dotfile bool
		want    string
	}{
		{"an installation", true, root},
		{"no .runner: not a runner's", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(filepath.Join(root, ".runner"))
			if tc.dotfile {
				os.WriteFile(filepath.Join(root, ".runner"), []byte("{}"), 0o600)
			}
			cmd := exec.Command(worker, "-c", "sleep 30 & wait")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			child := 0
			for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				kids, _ := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/task/" + itoa(cmd.Process.Pid) + "/children")
				if n := atoiFirst(string(kids)); n > 0 {
					child = n
				}
			}
			if child == 0 {
				t.Fatal("the fake runner's child did not start")
			}
			defer func() { p, _ := os.FindProcess(child); p.Kill() }()
			if got := FindRunnerRoot(child); got != tc.want {
				t.Errorf("FindRunnerRoot = %q, want %q", got, tc.want)
			}
		})
	}
	if got := FindRunnerRoot(os.Getpid()); got != "" {
		t.Errorf("this test runs under no runner, found %q", got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func atoiFirst(s string) int {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
