package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

// testKey is a real ECDSA key pair written to files, and its signer.
type testKey struct {
	priv, pub string
	signer    signature.Signer
}

func newTestKey(t testing.TB) testKey {
	t.Helper()
	privPEM, pubPEM, err := attest.GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k := testKey{priv: filepath.Join(dir, "key.pem"), pub: filepath.Join(dir, "key.pub")}
	os.WriteFile(k.priv, privPEM, 0o600)
	os.WriteFile(k.pub, pubPEM, 0o644)
	if k.signer, err = attest.LoadSigner(context.Background(), k.priv, nil); err != nil {
		t.Fatal(err)
	}
	return k
}

// signedBundle is a real signed run attestation of commit with execs
// processes (about 250 bytes each), and the predicate's verdict.
func signedBundle(t testing.TB, k testKey, commit string, execs int, passed bool) []byte {
	t.Helper()
	var p attest.Predicate
	p.Verdict.Passed, p.Verdict.Final = passed, true
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i := range execs {
		p.Processes.Execs = append(p.Processes.Execs, attest.Exec{Time: now, PID: int32(i + 2), PPID: 1, Source: "execve", Binary: "/usr/bin/go", Argv: []string{"go", "test", fmt.Sprintf("./pkg%d/...", i)}, SHA256: hex.EncodeToString(make([]byte, 32))})
	}
	subject := attest.Subject(attest.Meta{Repository: "https://github.com/octo-org/widgets", HeadSHA: commit}, "")
	stmt, err := attest.Statement(subject, p)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := attest.Sign(k.signer, stmt)
	if err != nil {
		t.Fatal(err)
	}
	return signed.Bundle
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
