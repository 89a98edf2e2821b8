package review

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/internal/testattest"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

// BenchmarkVerifyPullRequest is `airlock verify --store --pr N` of a
// pull request's 50 jobs, each with a 400 KB bundle (the sample's size),
// on each registry: the listing, then every bundle fetched, its
// signature verified and its labels checked, 8 at a time.
func BenchmarkVerifyPullRequest(b *testing.B) {
	key := testattest.NewKey(b)
	v, err := attest.LoadVerifierFile(key.Pub)
	if err != nil {
		b.Fatal(err)
	}
	for _, reg := range []struct {
		name  string
		start func(testing.TB) *testregistry.Server
	}{
		{"distribution", func(t testing.TB) *testregistry.Server {
			return testregistry.Distribution(t, testregistry.Options{User: "airlock", Password: "pw"})
		}},
		{"ggcr-referrers", func(t testing.TB) *testregistry.Server {
			return testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: "pw", Referrers: true})
		}},
	} {
		b.Run(reg.name, func(b *testing.B) {
			srv := reg.start(b)
			sel := Selection{Store: "oci://" + srv.Host + "/airlock/attestations", Auth: srv.AuthFile(b, "", ""), Query: store.Query{Repository: repo, PullRequest: 9}}
			st, err := sel.Open()
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for i := range 50 {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					commit := fmt.Sprintf("%040x", i/5)
					id := fmt.Sprintf("job-%012x", i)
					bundle := key.Bundle(b, testattest.Job{Repository: repo, Commit: commit, JobID: id, Execs: 1000, Passed: true})
					l := store.Labels{Kind: store.KindAttestation, Repository: repo, PullRequest: 9, Commit: commit, JobID: id, Verdict: store.VerdictPassed,
						Created: time.Date(2026, 12, 7, 12, 0, i, 0, time.UTC), PredicateType: attest.PredicateType}
					if _, err := st.Put(context.Background(), store.Record{Labels: l, Bundle: bundle}); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			var took []float64
			for b.Loop() {
				t0 := time.Now()
				entries, err := sel.Find(context.Background(), st)
				if err != nil || len(entries) != 50 {
					b.Fatalf("Find: %d, %v", len(entries), err)
				}
				for _, r := range VerifyAll(context.Background(), st, entries, v, attest.VerifyOptions{}) {
					if r.Error != "" {
						b.Fatalf("%s: %s", r.Entry.Tag, r.Error)
					}
				}
				took = append(took, float64(time.Since(t0).Microseconds())/1000)
			}
			m := slices.Sorted(slices.Values(took))[len(took)/2]
			b.ReportMetric(m, "ms-verify-50")
			b.Logf("%s: verify --pr of 50 jobs (400 KB each): %.0f ms (median of %d)", reg.name, m, len(took))
		})
	}
}
