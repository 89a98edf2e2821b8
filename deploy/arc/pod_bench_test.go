package arc

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/runnersim"
)

// BenchmarkPodToFirstStep times a runner pod of the values from nothing
// to its job's first step, on containerd's CRI, per iteration: the pod
// sandbox and the runner container started (the kubelet's part: airlock
// has none in it); a bare exec into the container (crictl exec true: the
// cost of reaching the pod, the baseline); airlock's first job in the
// pod (`airlock run -- true` in policy mode: the organisation policy
// from the Secret, the egress gateway, the bounded workspace, a signed
// attestation); a second job in the same pod; and a job through the
// hook, as the runner in the pod runs one (internal/runnersim's
// payloads): prepare_job (the hook's set-up: node runs index.js, airlock
// reads the event, the policies and the checkout, and boots the job's
// sandbox and gateway), a first script step (sh -e, `true`) and
// cleanup_job. It reports the medians, and what airlock adds before a
// first step: the first job less the bare exec, and for the hook
// prepare_job and the first step less two bare execs.
func BenchmarkPodToFirstStep(b *testing.B) {
	c, v, n := setUp(b)
	var pods, bare, first, second, prepare, hookStep []time.Duration
	const job = "mkdir -p /home/runner/_work/w && chown 1001:1001 /home/runner/_work/w && cd /home/runner/_work/w && airlock run -- true >/dev/null 2>&1"
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("bench-%d", i)
		t0 := time.Now()
		pod := c.runPod(b, name)
		id := c.startRunner(b, pod, v, n, name, "", nil)
		t1 := time.Now()
		if out, code := c.exec(id, time.Minute, "true"); code != 0 {
			b.Fatalf("exec true: %d %s", code, out)
		}
		t2 := time.Now()
		if out, code := c.exec(id, 3*time.Minute, "/bin/sh", "-c", job); code != 0 {
			b.Fatalf("first job: %d %s", code, out)
		}
		t3 := time.Now()
		if out, code := c.exec(id, 3*time.Minute, "/bin/sh", "-c", job); code != 0 {
			b.Fatalf("second job: %d %s", code, out)
		}
		t4 := time.Now()
		r := podRunner(b, n)
		state, took := c.prepareJob(b, r, id)
		t5 := time.Now()
		if code, out, _ := c.hookCall(b, r, id, runnersim.RunScriptStep, r.ScriptStep(b, state, "sh", "-e {0}", "true", nil)); code != 0 {
			b.Fatalf("the hook's first step: %d %s", code, out)
		}
		t6 := time.Now()
		if code, out, _ := c.hookCall(b, r, id, runnersim.CleanupJob, runnersim.Payload{State: state}); code != 0 {
			b.Fatalf("cleanup_job: %d %s", code, out)
		}
		pods, bare, first, second = append(pods, t1.Sub(t0)), append(bare, t2.Sub(t1)), append(first, t3.Sub(t2)), append(second, t4.Sub(t3))
		prepare, hookStep = append(prepare, took), append(hookStep, t6.Sub(t5))
		c.run("stop", "--timeout", "5", id)
		c.run("rm", "--force", id)
		c.removePod(pod)
	}
	ms := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(ms(pods), "pod-start-ms")
	b.ReportMetric(ms(bare), "bare-exec-ms")
	b.ReportMetric(ms(first), "first-job-ms")
	b.ReportMetric(ms(second), "second-job-ms")
	b.ReportMetric(ms(first)-ms(bare), "airlock-before-first-step-ms")
	b.ReportMetric(ms(prepare), "hook-prepare-job-ms")
	b.ReportMetric(ms(hookStep), "hook-first-step-ms")
	b.ReportMetric(ms(prepare)+ms(hookStep)-2*ms(bare), "hook-before-first-step-ms")
	b.ReportMetric((ms(pods)+ms(first))/ms(pods), "pod-to-first-step/pod-start")
}
