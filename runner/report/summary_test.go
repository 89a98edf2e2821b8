package report

import (
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/runner"
)

// A job bounded by the enclosing cgroup (a pod's) says so in its
// summary, with the enclosing limits, and "none" where the pod sets none;
// a job in its own cgroup says nothing of it.
func TestSummarySaysWhoEnforcesLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sb      runner.SandboxInfo
		want    []string
		without string
	}{
		{name: "own cgroup", sb: runner.SandboxInfo{Limits: runner.Limits{Memory: 4 << 30, Pids: 1024}}, without: "limits:"},
		{name: "a pod with limits", sb: runner.SandboxInfo{LimitsEnforcedBy: runner.EnclosingCgroup, Limits: runner.Limits{Memory: 8 << 30, CPUs: 2, Pids: 1024}},
			want: []string{"limits: enforced by the enclosing cgroup", "memory 8.0 GiB", "CPUs 2", "pids 1024 (gVisor)"}},
		{name: "a pod without limits", sb: runner.SandboxInfo{LimitsEnforcedBy: runner.EnclosingCgroup, Limits: runner.Limits{Pids: 1024}},
			want: []string{"memory none", "CPUs none"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			WriteSummary(&b, runner.Result{Job: "j", Passed: true, Sandbox: tc.sb})
			out := b.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("summary does not say %q:\n%s", w, out)
				}
			}
			if tc.without != "" && strings.Contains(out, tc.without) {
				t.Errorf("summary says %q:\n%s", tc.without, out)
			}
		})
	}
}
