package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/testattest"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

// testKey is a real key pair, and signedBundle a real signed run
// attestation of commit with execs processes (about 250 bytes each).
type testKey = testattest.Key

func newTestKey(t testing.TB) testKey { return testattest.NewKey(t) }

func signedBundle(t testing.TB, k testKey, commit string, execs int, passed bool) []byte {
	return k.Bundle(t, testattest.Job{Repository: "https://github.com/octo-org/widgets", Commit: commit, Execs: execs, Passed: passed})
}

// commitOf is a commit id made from s.
func commitOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:20])
}

// labels of a job of octo-org/widgets.
func labels(kind string, pr int, commit, jobID string, run int) Labels {
	return Labels{
		Kind: kind, Repository: "https://github.com/octo-org/widgets", PullRequest: pr, Commit: commit,
		RunID: fmt.Sprint(8800000 + run), RunAttempt: "1", Job: "build", Runner: "arc-runner-x7k2p",
		JobID: jobID, Verdict: VerdictPassed, Created: time.Date(2026, 12, 7, 12, 0, run, 0, time.UTC), PredicateType: attest.PredicateType,
	}
}

// registryKind is one of the servers a store test runs against.
type registryKind struct {
	name  string
	start func(t testing.TB) (storeref.Ref, Options, *testregistry.Server)
}

// registries: distribution 2.8 with htpasswd (no referrers API: the
// fallback tag), and go-containerregistry's registry with referrers.
var registries = []registryKind{
	{"distribution", func(t testing.TB) (storeref.Ref, Options, *testregistry.Server) {
		s := testregistry.Distribution(t, testregistry.Options{User: "airlock", Password: "s3cret-push-pass"})
		return ociRef(t, s.Host), fastOptions(s.AuthFile(t, "", "")), s
	}},
	{"ggcr-referrers", func(t testing.TB) (storeref.Ref, Options, *testregistry.Server) {
		s := testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: "s3cret-push-pass", Referrers: true})
		return ociRef(t, s.Host), fastOptions(s.AuthFile(t, "", "")), s
	}},
}

func ociRef(t testing.TB, host string) storeref.Ref {
	t.Helper()
	r, err := storeref.Parse("oci://" + host + "/airlock/attestations")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fileRef(t testing.TB) storeref.Ref {
	t.Helper()
	r, err := storeref.Parse("file://" + t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fastOptions retry quickly: the faults' tests wait for every try.
func fastOptions(auth string) Options {
	return Options{AuthFile: auth, Attempts: 3, AttemptTimeout: 2 * time.Second, Deadline: 8 * time.Second, RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond}
}
