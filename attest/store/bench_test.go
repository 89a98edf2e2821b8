package store

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/testattest"
)

// BenchmarkKeep is what the store adds to cleanup_job: Keep of a job's
// 400 KB bundle (the sample's is 378 KB) to each kind of store on
// loopback, interleaved in every iteration with the signing of the same
// statement, which every job's cleanup does anyway (the baseline).
// Medians, and each store's ratio to the signing.
func BenchmarkKeep(b *testing.B) {
	key := testattest.NewKey(b)
	stores := map[string]storeref.Ref{"file": fileRef(b)}
	opts := map[string]Options{"file": {}}
	for _, k := range registries {
		r, o, _ := k.start(b)
		o.Attempts, o.AttemptTimeout, o.Deadline = 4, 30*time.Second, 2*time.Minute
		stores[k.name], opts[k.name] = r, o
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range stores {
			if !yield(n) {
				return
			}
		}
	})
	dir := b.TempDir()
	times := map[string][]float64{}
	for i := 0; b.Loop(); i++ {
		commit := commitOf(fmt.Sprint("bench", i))
		t0 := time.Now()
		bundle := key.Bundle(b, testattest.Job{Repository: "https://github.com/octo-org/widgets", Commit: commit, Execs: 1000, Passed: true})
		times["sign (baseline)"] = append(times["sign (baseline)"], ms(time.Since(t0)))
		for _, n := range names {
			// The first job of a commit puts the commit's subject
			// manifest too, unless it was prepared while the job ran
			// (Prepare, untimed: the job's own time); a later one finds
			// it there.
			for _, which := range []string{" first of its commit", " later of its commit", " first of its commit, prepared"} {
				jobID := fmt.Sprintf("job-%012x", i*64+len(times))
				file := jobID + ".sigstore.json"
				os.WriteFile(filepath.Join(dir, file), bundle, 0o644)
				k := Keeper{Stores: []storeref.Ref{stores[n]}, Options: opts[n], Dir: dir}
				c := commit
				if strings.HasSuffix(which, "prepared") {
					c = commitOf(fmt.Sprint("bench-prepared", i))
					k.Prepare(context.Background(), labels(KindAttestation, 1, c, jobID, i).Repository, c)
				}
				t0 := time.Now()
				out := k.Keep(context.Background(), jobID, []Bundle{{File: file, Labels: labels(KindAttestation, 1, c, jobID, i)}})
				times[n+which] = append(times[n+which], ms(time.Since(t0)))
				if len(Failed(out)) > 0 {
					b.Fatalf("Keep to %s: %+v", n, out)
				}
			}
		}
		if i == 0 {
			b.Logf("bundle: %d bytes", len(bundle))
		}
	}
	base := median(times["sign (baseline)"])
	b.ReportMetric(base, "ms-sign")
	for _, n := range slices.Sorted(maps.Keys(times)) {
		if n == "sign (baseline)" {
			continue
		}
		m := median(times[n])
		b.ReportMetric(m, "ms-"+strings.ReplaceAll(strings.TrimSpace(n), " ", "-"))
		b.Logf("%s: Keep of a 400 KB bundle %.1f ms (median of %d), %.2f× the signing (%.1f ms)", n, m, len(times[n]), m/base, base)
	}
}

// BenchmarkList is `airlock attestations ls` of a repository that holds
// 1,000 jobs (100 commits of 10 jobs, over 20 pull requests), and of
// one pull request's 50, on each registry.
func BenchmarkList(b *testing.B) {
	key := testattest.NewKey(b)
	small := key.Bundle(b, testattest.Job{Repository: "https://github.com/octo-org/widgets", Commit: commitOf("x"), Execs: 1, Passed: true})
	for _, k := range registries {
		b.Run(k.name, func(b *testing.B) {
			ref, o, _ := k.start(b)
			st, err := Open(ref, o)
			if err != nil {
				b.Fatal(err)
			}
			fill(b, st, small, 1000)
			for _, q := range []struct {
				name string
				q    Query
				want int
			}{{"repository-1000", Query{Repository: "octo-org/widgets"}, 1000}, {"pr-50", Query{Repository: "octo-org/widgets", PullRequest: 7}, 50}} {
				var took []float64
				for range 5 {
					t0 := time.Now()
					got, err := st.List(context.Background(), q.q)
					took = append(took, ms(time.Since(t0)))
					if err != nil || len(got) != q.want {
						b.Fatalf("List %s: %d entries, %v", q.name, len(got), err)
					}
				}
				b.ReportMetric(median(took), "ms-"+q.name)
				b.Logf("%s: ls of %s: %.0f ms (median of 5)", k.name, q.name, median(took))
			}
			for b.Loop() {
				st.List(context.Background(), Query{Repository: "octo-org/widgets"})
			}
		})
	}
}

// fill stores n small jobs: 10 per commit, 5 commits per pull request.
func fill(b *testing.B, st Backend, bundle []byte, n int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			l := labels(KindAttestation, 1+i/50, commitOf(fmt.Sprint("commit", i/10)), fmt.Sprintf("job-%012x", i), i%60)
			if _, err := st.Put(context.Background(), Record{Labels: l, Bundle: bundle}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
