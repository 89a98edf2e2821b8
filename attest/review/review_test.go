package review

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/internal/testattest"
)

const repo = "https://github.com/octo-org/widgets"

// A stored record verifies only when its signature does and the store's
// labels say what its signed statement says: an index that lies (a
// failed job filed as passed, a job filed under another commit or run)
// and a bundle changed in the store are each NOT VERIFIED, with why.
func TestVerifyAll(t *testing.T) {
	key, other := testattest.NewKey(t), testattest.NewKey(t)
	dir := t.TempDir()
	sel := Selection{Store: "file://" + dir, Query: store.Query{PullRequest: 5}}
	b, err := sel.Open()
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := strings.Repeat("a", 40), strings.Repeat("b", 40)
	put := func(id string, labelCommit string, labelVerdict string, labelRun string, j testattest.Job, k testattest.Key) store.Entry {
		t.Helper()
		j.Repository, j.JobID, j.PullRequest = repo, id, 5
		e, err := b.Put(context.Background(), store.Record{Labels: store.Labels{Kind: store.KindAttestation, Repository: repo, PullRequest: 5, Commit: labelCommit,
			RunID: labelRun, RunAttempt: "1", Job: "build", JobID: id, Verdict: labelVerdict, Created: time.Date(2026, 12, 7, 12, 0, len(id), 0, time.UTC), PredicateType: attest.PredicateType}, Bundle: k.Bundle(t, j)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	put("job-000000000001", c1, store.VerdictPassed, "77", testattest.Job{Commit: c1, Passed: true, RunID: "77"}, key)
	put("job-000000000002", c1, store.VerdictFailed, "77", testattest.Job{Commit: c1, Passed: false, RunID: "77"}, key)
	put("job-000000000003", c1, store.VerdictPassed, "77", testattest.Job{Commit: c1, Passed: false, RunID: "77"}, key)
	put("job-000000000004", c1, store.VerdictPassed, "77", testattest.Job{Commit: c2, Passed: true, RunID: "77"}, key)
	put("job-000000000005", c1, store.VerdictPassed, "78", testattest.Job{Commit: c1, Passed: true, RunID: "77"}, key)
	put("job-000000000006", c1, store.VerdictPassed, "77", testattest.Job{Commit: c1, Passed: true, RunID: "77"}, other)
	tampered := put("job-000000000007", c1, store.VerdictPassed, "77", testattest.Job{Commit: c1, Passed: true, RunID: "77"}, key)
	data, _ := os.ReadFile(tampered.Ref)
	os.WriteFile(tampered.Ref, bytes.Replace(data, []byte(`"sig":"`), []byte(`"sig":"A`), 1), 0o644)

	entries, err := sel.Find(context.Background(), b)
	if err != nil || len(entries) != 7 {
		t.Fatalf("Find: %d entries, %v", len(entries), err)
	}
	v, err := attest.LoadVerifierFile(key.Pub)
	if err != nil {
		t.Fatal(err)
	}
	results := VerifyAll(context.Background(), b, entries, v, attest.VerifyOptions{})
	want := map[string]string{
		"job-000000000001": "",
		"job-000000000002": "",
		"job-000000000003": `the store says verdict "passed", the signed statement "failed"`,
		"job-000000000004": "subject",
		"job-000000000005": `the store says run "78", the signed statement "77"`,
		"job-000000000006": "signature",
		"job-000000000007": "hashes to",
	}
	for _, r := range results {
		w := want[r.Entry.JobID]
		if (w == "") != (r.Error == "") || !strings.Contains(r.Error, w) {
			t.Errorf("%s: error %q, want %q", r.Entry.JobID, r.Error, w)
		}
	}
	var out bytes.Buffer
	failed, err := WriteResults(&out, results, false)
	if err != nil || failed != 5 || !strings.Contains(out.String(), "2 of 7 bundle(s) verified") || strings.Count(out.String(), "NOT VERIFIED") != 5 {
		t.Fatalf("WriteResults: %d failed, %v\n%s", failed, err, out.String())
	}
	out.Reset()
	if _, err := WriteResults(&out, results, true); err != nil || !json.Valid(out.Bytes()) {
		t.Fatalf("WriteResults --json: %v", err)
	}
	// The page over them: every job, verified or not.
	out.Reset()
	if err := Report(context.Background(), b, entries, v, sel.Title(), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "7 job(s)</strong>: 1 passed, 1 failed, 5 not verified") {
		t.Fatalf("the page's count: %.600s", out.String())
	}
}

// A selection that cannot be honoured says what to give.
func TestSelectionRefuses(t *testing.T) {
	for _, tc := range []struct {
		sel  Selection
		want string
	}{
		{Selection{}, "--store is required"},
		{Selection{Store: "s3://x/y"}, `unknown scheme "s3"`},
		{Selection{Store: "file:///tmp", Query: store.Query{Commit: "main"}}, "give a commit id"},
		{Selection{Store: "file:///tmp", Query: store.Query{PullRequest: -1}}, "positive"},
	} {
		if _, err := tc.sel.Open(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.sel, err, tc.want)
		}
	}
	var out bytes.Buffer
	if err := WriteList(&out, nil, true); err != nil || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("an empty list as JSON: %q %v", out.String(), err)
	}
}

// lyingStore is a store that names its record with a path.
type lyingStore struct{ store.Backend }

func (lyingStore) Fetch(context.Context, store.Entry) ([]byte, error) { return []byte("{}"), nil }

// get writes what the store returns inside the directory, or not at all.
func TestGetStaysInItsDirectory(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for _, tag := range []string{"../escaped", "sub/dir", "/abs"} {
		if _, err := Get(context.Background(), lyingStore{}, []store.Entry{{Tag: tag}}, out); err == nil {
			t.Errorf("Get wrote a record named %q", tag)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.sigstore.json")); len(m) != 0 {
		t.Fatalf("written outside the directory: %v", m)
	}
}
