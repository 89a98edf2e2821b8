package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/leakcheck"
)

func TestMain(m *testing.M) {
	gvisor.Dispatch()
	leakcheck.Run(m, testStateBase, "")
}

const testStateBase = "/run/airlock-test-runner"

func testJob(t *testing.T, steps ...StepSpec) Job {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ws := t.TempDir()
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(testStateBase, filepath.Base(ws))
	limits := gvisor.DefaultLimits()
	limits.Memory = 1 << 30
	return Job{Name: t.Name(), Steps: steps, Sandbox: gvisor.Config{Workspace: ws, StateRoot: state, Limits: limits}}
}

// A failing step ends the job with its exit code; later steps are skipped;
// output is prefixed per step; the sandbox is gone afterwards.
func TestRunStopsAtFirstFailure(t *testing.T) {
	job := testJob(t,
		StepSpec{Name: "write", Run: "echo built > out.txt; echo to-stderr >&2; echo done"},
		StepSpec{Name: "fail", Run: "cat out.txt; exit 3"},
		StepSpec{Name: "never", Run: "touch never"},
	)
	var stdout, stderr bytes.Buffer
	job.Stdout, job.Stderr = &stdout, &stderr
	res, err := Run(context.Background(), job, "test")
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || res.ExitCode != 3 {
		t.Errorf("passed=%v exit=%d, want failed with 3", res.Passed, res.ExitCode)
	}
	want := []string{StatusPassed, StatusFailed, StatusSkipped}
	for i, s := range res.Steps {
		if s.Status != want[i] {
			t.Errorf("step %s: status %s, want %s", s.Name, s.Status, want[i])
		}
	}
	if got := stdout.String(); got != "[write] done\n[fail] built\n" {
		t.Errorf("stdout = %q", got)
	}
	if !strings.Contains(stderr.String(), "[write] to-stderr\n") {
		t.Errorf("stderr = %q", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(job.Sandbox.Workspace, "never")); err == nil {
		t.Error("a step after the failure ran")
	}
	if jobs, _ := filepath.Glob(filepath.Join(job.Sandbox.StateRoot, "jobs", "*")); len(jobs) != 0 {
		t.Errorf("job state left behind: %v", jobs)
	}
	if res.Sandbox.ID == "" || res.Sandbox.User.UID != 1000 || len(res.Processes.Execs) == 0 {
		t.Errorf("result lacks sandbox identity or process record: %+v", res.Sandbox)
	}
}

// What a step leaves in the workspace gives nobody more rights than the
// workspace owner: set-id bits are cleared, files of the sandbox identity
// go back to the owner.
func TestRunTidiesWorkspace(t *testing.T) {
	job := testJob(t, StepSpec{Name: "plant", Run: "cp /bin/true suid && chmod 6755 suid && mkdir -p d && cp /bin/true d/sgid && chmod 2755 d/sgid && ls -l suid d/sgid"})
	// Root owns the workspace; the job runs as 1000.
	if err := os.Chown(job.Sandbox.Workspace, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(job.Sandbox.Workspace, 0o777); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	job.Stdout = &out
	res, err := Run(context.Background(), job, "test")
	if err != nil || !res.Passed {
		t.Fatalf("run: %v %+v", err, res.Steps)
	}
	if !strings.Contains(out.String(), "rws") {
		t.Fatalf("the step could not set the bits in the sandbox, test proves nothing: %q", out.String())
	}
	for _, p := range []string{"suid", "d/sgid", "d"} {
		fi, err := os.Lstat(filepath.Join(job.Sandbox.Workspace, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s still has set-id bits: %v", p, fi.Mode())
		}
	}
	if len(res.Workspace.SetIDCleared) != 2 || res.Workspace.Chowned < 3 {
		t.Errorf("tidy report = %+v", res.Workspace)
	}
}

// A job timeout stops the running step and skips the rest.
func TestRunJobTimeout(t *testing.T) {
	job := testJob(t, StepSpec{Name: "slow", Run: "sleep 600"}, StepSpec{Name: "after", Run: "true"})
	job.Sandbox.Limits.JobTimeout = 2 * time.Second
	start := time.Now()
	res, err := Run(context.Background(), job, "test")
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 15*time.Second {
		t.Errorf("job timeout took %s", time.Since(start))
	}
	if res.Steps[0].Limit != gvisor.LimitTimeout || res.Steps[1].Status != StatusSkipped || res.Passed {
		t.Errorf("steps = %+v", res.Steps)
	}
}

// Only Run's jobs (nothing of the host writes their mounts between
// steps) keep their mounts exclusive, and only with every step in the
// job's own container and no script written for it on the host.
func TestExclusiveMountsOnlyForTheJobAlone(t *testing.T) {
	script := StepSpec{Run: "true"}
	for _, tc := range []struct {
		name string
		job  Job
		want bool
	}{
		{"airlock run", Job{soleWriter: true, Steps: []StepSpec{script, script}}, true},
		{"the runner hook's session", Job{Steps: []StepSpec{script}}, false},
		{"a step on an image of its own", Job{soleWriter: true, Steps: []StepSpec{script, {Run: "true", Image: &Image{RootFS: "/"}}}}, false},
		{"a script the caller wrote", Job{soleWriter: true, Steps: []StepSpec{{Command: []string{"sh", "/w/_temp/x.sh"}, Scripts: []HostFile{{Base: "/w", Path: "_temp/x.sh"}}}}}, false},
	} {
		if got := exclusiveMounts(tc.job); got != tc.want {
			t.Errorf("%s: exclusive %v, want %v", tc.name, got, tc.want)
		}
	}
}
