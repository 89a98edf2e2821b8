package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/review"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/internal/testattest"
)

// The jobs a pull request ran on airlock's runners, from the GitHub API
// (faked, with the shapes go-github v60 decodes: github/pulls.go
// RepositoryCommit, actions_workflow_runs.go WorkflowRuns,
// actions_workflow_jobs.go Jobs), against what the store holds: the one
// with no stored attestation is named, a job on another runner, one
// skipped before any runner took it, and a push's run are not counted.
func TestMissing(t *testing.T) {
	const head1, head2 = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		job := func(id, run, attempt int, name, runner string, labels ...string) map[string]any {
			return map[string]any{"id": id, "run_id": run, "run_attempt": attempt, "name": name, "status": "completed", "conclusion": "success",
				"head_sha": head1, "labels": labels, "runner_name": runner}
		}
		switch {
		case r.URL.Path == "/repos/octo-org/widgets/pulls/42/commits":
			json.NewEncoder(w).Encode([]map[string]any{{"sha": head1}, {"sha": head2}})
		case r.URL.Path == "/repos/octo-org/widgets/actions/runs" && r.URL.Query().Get("head_sha") == head1:
			json.NewEncoder(w).Encode(map[string]any{"total_count": 2, "workflow_runs": []map[string]any{
				{"id": 901, "name": "CI", "run_attempt": 1, "head_sha": head1, "event": "pull_request", "pull_requests": []any{}},
				{"id": 902, "name": "Release", "run_attempt": 1, "head_sha": head1, "event": "push"},
			}})
		case r.URL.Path == "/repos/octo-org/widgets/actions/runs" && r.URL.Query().Get("head_sha") == head2:
			json.NewEncoder(w).Encode(map[string]any{"total_count": 1, "workflow_runs": []map[string]any{
				{"id": 903, "name": "CI", "run_attempt": 2, "head_sha": head2, "event": "pull_request"},
			}})
		case r.URL.Path == "/repos/octo-org/widgets/actions/runs/901/jobs" && r.URL.Query().Get("filter") == "all":
			skipped := job(14, 901, 1, "deploy", "", "self-hosted", "airlock")
			skipped["conclusion"] = "skipped"
			json.NewEncoder(w).Encode(map[string]any{"total_count": 4, "jobs": []map[string]any{
				job(11, 901, 1, "build", "arc-runner-a", "self-hosted", "airlock"),
				job(12, 901, 1, "test (node 20)", "arc-runner-b", "self-hosted", "airlock"),
				job(13, 901, 1, "lint", "GitHub Actions 7", "ubuntu-latest"),
				skipped,
			}})
		case r.URL.Path == "/repos/octo-org/widgets/actions/runs/903/jobs":
			json.NewEncoder(w).Encode(map[string]any{"total_count": 2, "jobs": []map[string]any{
				job(31, 903, 1, "build", "arc-runner-a", "airlock"),
				job(32, 903, 2, "build", "arc-runner-c", "airlock"),
			}})
		default:
			t.Errorf("unexpected API call %s %s", r.Method, r.URL)
			http.Error(w, `{"message":"Not Found"}`, 404)
		}
	}))
	defer api.Close()
	dir := t.TempDir()
	sel := review.Selection{Store: "file://" + dir, Query: store.Query{Repository: "octo-org/widgets", PullRequest: 42}}
	b, err := sel.Open()
	if err != nil {
		t.Fatal(err)
	}
	key := testattest.NewKey(t)
	for i, j := range []struct{ run, attempt, runner string }{{"901", "1", "arc-runner-a"}, {"903", "1", "arc-runner-a"}, {"903", "2", "arc-runner-c"}} {
		id := "job-00000000000" + string(rune('1'+i))
		l := store.Labels{Kind: store.KindAttestation, Repository: "https://github.com/octo-org/widgets", PullRequest: 42, Commit: head1, RunID: j.run, RunAttempt: j.attempt,
			Runner: j.runner, JobID: id, Verdict: store.VerdictPassed, Created: time.Date(2026, 12, 7, 12, 0, i, 0, time.UTC), PredicateType: attest.PredicateType}
		bundle := key.Bundle(t, testattest.Job{Repository: l.Repository, Commit: head1, JobID: id, PullRequest: 42, RunID: j.run, RunAttempt: j.attempt, Job: "build", Runner: j.runner, Passed: true})
		l.Job = "build"
		if _, err := b.Put(context.Background(), store.Record{Labels: l, Bundle: bundle}); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	// An entry that is the registry's word alone (another key's bundle,
	// labels of the missing job) does not stand for it.
	forged := store.Labels{Kind: store.KindAttestation, Repository: "https://github.com/octo-org/widgets", PullRequest: 42, Commit: head1, RunID: "901", RunAttempt: "1",
		Job: "build", Runner: "arc-runner-b", JobID: "job-0000000000ff", Verdict: store.VerdictPassed, Created: time.Date(2026, 12, 7, 12, 1, 0, 0, time.UTC), PredicateType: attest.PredicateType}
	other := testattest.NewKey(t)
	if _, err := b.Put(context.Background(), store.Record{Labels: forged, Bundle: other.Bundle(t, testattest.Job{Repository: forged.Repository, Commit: head1, JobID: forged.JobID, PullRequest: 42, RunID: "901", Job: "build", Runner: "arc-runner-b", Passed: true})}); err != nil {
		t.Fatal(err)
	}
	err = Missing(context.Background(), MissingRequest{Store: sel, RunsOn: []string{"airlock"}, KeyFile: key.Pub, Token: "ghp_test", BaseURL: api.URL}, &out)
	if !errors.Is(err, ErrMissing) || strings.Count(out.String(), "MISSING") != 1 || !strings.Contains(out.String(), "MISSING  run 901 attempt 1  CI / test (node 20) (job 12) on arc-runner-b") ||
		!strings.Contains(out.String(), "1 of 4 job(s) on airlock's runners have no stored attestation") {
		t.Fatalf("Missing: %v\n%s", err, out.String())
	}
	for _, tc := range []struct {
		req  MissingRequest
		want string
	}{
		{MissingRequest{Store: review.Selection{Store: sel.Store, Query: store.Query{Repository: "widgets", PullRequest: 42}}, RunsOn: []string{"airlock"}, KeyFile: key.Pub, Token: "t"}, "owner/name"},
		{MissingRequest{Store: sel, KeyFile: key.Pub, Token: "t"}, "runs-on label"},
		{MissingRequest{Store: sel, RunsOn: []string{"airlock"}, KeyFile: key.Pub}, "no GitHub token"},
		{MissingRequest{Store: sel, RunsOn: []string{"airlock"}, Token: "t"}, "only a stored attestation that verifies"},
	} {
		if err := Missing(context.Background(), tc.req, &out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.req, err, tc.want)
		}
	}
}
