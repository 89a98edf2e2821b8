package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// jobsAtOnce is how many jobs TestJobsAtOnce runs together on one host.
const jobsAtOnce = 8

// Eight policy-mode jobs at once on one host, each its own airlock
// process sharing the host's state directory (as jobs of several runners
// on one machine do), each with egress allowed and refused, and writing
// into its bounded workspace: every job passes, each record holds its
// own requests, refusals and processes and nothing of another's, each
// workspace gets its own job's writes, and nothing of any job is left.
func TestJobsAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Curl, gvisor.DefaultPath, "the jobs fetch through their egress gateways with curl")
	var mu sync.Mutex
	seen := map[string]int{}
	port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		fmt.Fprintf(w, "answer for %s", r.URL.Path)
	})
	org, state := egressOrg(t, port), stateDir(t)
	// token names job i in everything it does; no token is a prefix of
	// another's.
	token := func(i int) string { return fmt.Sprintf("tok%dx", i) }
	type run struct {
		ws          string
		code        int
		out, stderr bytes.Buffer
	}
	runs := make([]*run, jobsAtOnce)
	var wg sync.WaitGroup
	for i := range runs {
		r := &run{ws: workspace(t)}
		runs[i] = r
		step := fmt.Sprintf("curl -sS http://registry.test:%d/%s; curl -sS https://%s.forbidden.test/ 2>/dev/null; head -c 1048576 /dev/urandom > %s.bin; echo %s > mark; true",
			port, token(i), token(i), token(i), token(i))
		cmd := cli(t, "run", "-w", r.ws, "--state-dir", state, "--org", org, "--attest-dir", t.TempDir(), "--json", "--", "sh", "-c", step)
		cmd.Stdout, cmd.Stderr = &r.out, &r.stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd.Run()
			r.code = cmd.ProcessState.ExitCode()
		}()
	}
	wg.Wait()
	for i, r := range runs {
		own := token(i)
		if r.code != 0 {
			t.Errorf("job %d: exit %d: %s", i, r.code, r.stderr.String())
			continue
		}
		var res struct {
			Egress struct {
				Allowed, Denied int
				Decisions       []struct{ Name, Path, Decision string }
			} `json:"egress"`
			WorkspaceVolume *struct{ Limit int64 } `json:"workspaceVolume"`
		}
		if err := json.Unmarshal(r.out.Bytes(), &res); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		if res.Egress.Allowed != 1 || res.Egress.Denied != 1 || res.WorkspaceVolume == nil || res.WorkspaceVolume.Limit == 0 {
			t.Errorf("job %d: egress %+v, workspace volume %+v", i, res.Egress, res.WorkspaceVolume)
		}
		for _, d := range res.Egress.Decisions {
			if !strings.Contains(d.Name+d.Path, own) && d.Name != "registry.test" {
				t.Errorf("job %d records a decision of another job: %+v", i, d)
			}
		}
		if !strings.Contains(r.stderr.String(), "answer for /"+own) || !strings.Contains(r.stderr.String()+r.out.String(), own+".forbidden.test") {
			t.Errorf("job %d: its own fetch or refusal is missing:\n%s", i, r.stderr.String())
		}
		// Nothing of another job anywhere in this job's record.
		for j := range runs {
			if j != i && (bytes.Contains(r.out.Bytes(), []byte(token(j))) || strings.Contains(r.stderr.String(), token(j))) {
				t.Errorf("job %d's record or output names job %d (%s)", i, j, token(j))
			}
		}
		if b, err := os.ReadFile(filepath.Join(r.ws, "mark")); strings.TrimSpace(string(b)) != own {
			t.Errorf("job %d's workspace mark = %q, %v", i, b, err)
		}
		if fi, err := os.Stat(filepath.Join(r.ws, own+".bin")); err != nil || fi.Size() != 1<<20 {
			t.Errorf("job %d's written file: %v", i, err)
		}
	}
	for i := range runs {
		if n := seen["/"+token(i)]; n != 1 {
			t.Errorf("the upstream saw job %d's request %d times", i, n)
		}
	}
	if processNamed(state) {
		t.Error("a process of a job is left")
	}
	if jobs, _ := filepath.Glob(filepath.Join(state, "jobs", "*")); len(jobs) != 0 {
		t.Errorf("job state left: %v", jobs)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(state)) {
		t.Error("a mount of a job is left")
	}
	// The volumes are unmounted lazily: a loop device lets go of its
	// image once the kernel has released the file system, a moment later
	// on a busy host.
	left := volumeLoops(state)
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = volumeLoops(state) {
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("loop devices of the jobs' workspace volumes left: %q", left)
	}
	for _, r := range runs {
		if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(r.ws)) {
			t.Errorf("a mount is left on the workspace %s", r.ws)
		}
	}
}

// volumeLoops lists the backing files of the loop devices that hold the
// workspace volumes of the jobs of state.
func volumeLoops(state string) []string {
	var out []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); bytes.HasPrefix(b, []byte(gvisor.DiskDir(state, "volumes")+"/")) {
			out = append(out, strings.TrimSpace(string(b)))
		}
	}
	return out
}

// BenchmarkJobsAtOnce is a host's throughput with jobsAtOnce jobs at once
// against one at a time: the same jobsAtOnce policy-mode jobs (the
// gateway with an allowed fetch, a bounded workspace, a step that writes
// 1 MiB and reads it back) run one after another, and all together,
// interleaved in each iteration. It reports each batch's time and the
// throughput of each in jobs per minute.
func BenchmarkJobsAtOnce(b *testing.B) {
	port := upstream(b, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	org, state := egressOrg(b, port), stateDir(b)
	step := fmt.Sprintf("curl -sS http://registry.test:%d/m >/dev/null; head -c 1048576 /dev/urandom > out.bin; sha256sum out.bin >/dev/null", port)
	job := func() error {
		return quiet(cli(b, "run", "-w", workspace(b), "--state-dir", state, "--org", org, "--attest-dir", b.TempDir(), "--", "sh", "-c", step))
	}
	batch := func(together bool) func() error {
		return func() error {
			if !together {
				for range jobsAtOnce {
					if err := job(); err != nil {
						return err
					}
				}
				return nil
			}
			errs := make(chan error, jobsAtOnce)
			for range jobsAtOnce {
				go func() { errs <- job() }()
			}
			var first error
			for range jobsAtOnce {
				if err := <-errs; err != nil && first == nil {
					first = err
				}
			}
			return first
		}
	}
	t := interleave(b, []timedRun{
		{"one-at-a-time", batch(false)},
		{"at-once", batch(true)},
	})
	perMinute := func(ms float64) float64 { return jobsAtOnce * 60000 / ms }
	b.ReportMetric(perMinute(t.median("one-at-a-time")), "one-at-a-time-jobs/min")
	b.ReportMetric(perMinute(t.median("at-once")), "at-once-jobs/min")
	// The time one at a time over the time at once: the throughput's gain.
	t.ratio(b, "one-at-a-time", "at-once", "throughput-at-once/one-at-a-time")
}
