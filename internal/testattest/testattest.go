// Package testattest makes real signed attestations for tests: a key
// pair written to files, and Sigstore bundles of run statements signed
// with it, of the size a test needs.
//
// Layer 2: for tests only; above attest.
package testattest

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
)

// Key is a real ECDSA P-256 key pair in files, and its signer.
type Key struct {
	Priv, Pub string
	Signer    signature.Signer
}

// NewKey writes a key pair to a temporary directory.
func NewKey(t testing.TB) Key {
	t.Helper()
	privPEM, pubPEM, err := attest.GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k := Key{Priv: filepath.Join(dir, "key.pem"), Pub: filepath.Join(dir, "key.pub")}
	if err := os.WriteFile(k.Priv, privPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.Pub, pubPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if k.Signer, err = attest.LoadSigner(context.Background(), k.Priv, nil); err != nil {
		t.Fatal(err)
	}
	return k
}

// Job is what a test's run statement says.
type Job struct {
	Repository, Commit, JobID string
	PullRequest               int
	// RunID, RunAttempt (default 1), Job (default build) and Runner are
	// the Actions run's, when RunID is set.
	RunID, RunAttempt, Job, Runner string
	Passed                         bool
	// Execs is how many processes it records (about 250 bytes each).
	Execs int
}

// Bundle is a Sigstore bundle of j's run statement, signed with k.
func (k Key) Bundle(t testing.TB, j Job) []byte {
	t.Helper()
	var p attest.Predicate
	p.Verdict.Passed, p.Verdict.Final = j.Passed, true
	p.Sandbox.ID = j.JobID
	p.Job.Repository, p.Job.HeadSHA = j.Repository, j.Commit
	if j.RunID != "" {
		p.Runner.GitHub = &attest.GitHubRun{RunID: j.RunID, RunAttempt: cmp.Or(j.RunAttempt, "1"), Job: cmp.Or(j.Job, "build"), RunnerName: j.Runner}
	}
	p.Job.PullRequest = j.PullRequest
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i := range j.Execs {
		p.Processes.Execs = append(p.Processes.Execs, attest.Exec{Time: now, PID: int32(i + 2), PPID: 1, Source: "execve", Binary: "/usr/bin/go",
			Argv: []string{"go", "test", fmt.Sprintf("./pkg%d/...", i)}, SHA256: hex.EncodeToString(make([]byte, 32))})
	}
	stmt, err := attest.Statement(attest.Subject(attest.Meta{Repository: j.Repository, HeadSHA: j.Commit}, ""), p)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := attest.Sign(k.Signer, stmt)
	if err != nil {
		t.Fatal(err)
	}
	return signed.Bundle
}
