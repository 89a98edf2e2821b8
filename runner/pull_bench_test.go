package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/runner/images"
)

// BenchmarkCachedImageStart is a whole job (plan, open, one step, close)
// on an image the cache holds, against the same job on the same root
// given as a directory (--rootfs, as an organisation's sandbox.images
// mapping runs it), interleaved, alternating which goes first. The
// difference is what taking the image from the cache costs a job: the
// reference resolved at the registry (on loopback here), the lease.
func BenchmarkCachedImageStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ref, _ := helloImage(b)
	storeDir := b.TempDir()
	ws := b.TempDir()
	os.Chown(ws, 1000, 1000)
	state := filepath.Join(testStateBase, "bench-cached-image")
	defer os.RemoveAll(state)
	limits := gvisor.DefaultLimits()
	limits.Memory = 1 << 30
	step := []StepSpec{{Name: "hello", Command: []string{"/bin/hello"}}}
	job := func(in Inputs) time.Duration {
		t := time.Now()
		in.Name, in.Workspace, in.StateRoot, in.Steps = "bench", ws, state, step
		plan, err := NewPlan(nil, PullRequest{}, in)
		if err != nil {
			b.Fatal(err)
		}
		plan.Job.Images.StoreDir = storeDir
		var out bytes.Buffer
		plan.Job.Stdout, plan.Job.Stderr, plan.Job.Log = &out, &out, &out
		plan.Job.Sandbox.Limits = limits
		res, err := Run(context.Background(), plan.Job, "bench")
		if err != nil || !res.Passed {
			b.Fatalf("%v %s", err, out.String())
		}
		return time.Since(t)
	}
	job(Inputs{Image: ref}) // the first pull, and the host's platform verdict, untimed
	store, err := images.OpenStore(storeDir, 0)
	if err != nil {
		b.Fatal(err)
	}
	list, err := store.List()
	if err != nil || len(list) != 1 {
		b.Fatalf("cache: %v %v", list, err)
	}
	mapped := Inputs{Requests: Requests{RootFS: list[0].RootFS, Set: map[input.Name]bool{input.RootFS: true}}}
	var cached, dir []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			cached = append(cached, job(Inputs{Image: ref}))
			dir = append(dir, job(mapped))
		} else {
			dir = append(dir, job(mapped))
			cached = append(cached, job(Inputs{Image: ref}))
		}
	}
	var diffs []time.Duration
	for i := range cached {
		diffs = append(diffs, cached[i]-dir[i])
	}
	med := func(xs []time.Duration) time.Duration { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(float64(med(cached).Microseconds())/1000, "cached-image-ms")
	b.ReportMetric(float64(med(dir).Microseconds())/1000, "directory-ms")
	b.ReportMetric(float64(med(diffs).Microseconds())/1000, "added-ms")
}
