package hook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/review"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

// cleanup_job keeps the job's attestation in the host's store before it
// returns: with the registry down it fails the job, and the log and the
// check run say where the bundle lies and why it was not stored; the
// next job on the runner, with the registry back, stores both, and its
// check run names the stored reference and the bundle's digest, whatever
// the bundle's size. The store's labels carry the pull request and the
// Actions run the runner gives its hook in the environment
// (actions/runner src/Runner.Worker/Handlers/ScriptHandler.cs: the
// github context's GITHUB_RUN_ID, GITHUB_RUN_ATTEMPT, GITHUB_JOB, and
// RUNNER_NAME, for the hook script ContainerHookManager.cs runs).
func TestHookKeepsAttestationInStore(t *testing.T) {
	h := newRunnerHost(t)
	const password = "s3cret-push-pass"
	port := testregistry.FreePort(t)
	authDir := t.TempDir()
	auth := filepath.Join(authDir, "config.json")
	os.WriteFile(auth, []byte(fmt.Sprintf(`{"auths":{"127.0.0.1:%d":{"username":"airlock","password":%q}}}`, port, password)), 0o600)
	uri := fmt.Sprintf("oci://127.0.0.1:%d/airlock/attestations", port)
	var mu sync.Mutex
	var conclusion, summary, text string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/repos/acme/app/check-runs":
			json.NewEncoder(w).Encode(map[string]any{"id": 5, "name": "airlock"})
		case r.Method == "PATCH" && r.URL.Path == "/repos/acme/app/check-runs/5":
			var body struct {
				Conclusion string `json:"conclusion"`
				Output     struct{ Summary, Text string }
			}
			json.NewDecoder(r.Body).Decode(&body)
			if body.Conclusion != "" {
				conclusion, summary, text = body.Conclusion, body.Output.Summary, body.Output.Text
			}
			json.NewEncoder(w).Encode(map[string]any{"id": 5})
		default:
			http.Error(w, `{"message":"Not Found"}`, 404)
		}
	}))
	defer api.Close()
	h.env = append(h.env, GitHubAPIEnv+"="+api.URL, GitHubTokenEnv+"=ghp_hooktesttoken",
		AttestStoreEnv+"="+uri, AttestStoreAuthEnv+"="+auth,
		"GITHUB_ACTIONS=true", "GITHUB_RUN_ID=8812345", "GITHUB_RUN_ATTEMPT=2", "GITHUB_JOB=build", "RUNNER_NAME=arc-runner-x7k2p")
	var srv *testregistry.Server // started after the first job
	job := func(script, want string, beforeCleanup func()) (int, string) {
		state := h.prepare()
		if code, out := h.step(state, script); code != 0 || !strings.Contains(out, want) || strings.Contains(out, password) {
			t.Fatalf("step: exit %d, want %q: %s", code, want, out)
		}
		if beforeCleanup != nil {
			beforeCleanup()
		}
		code, out := h.cleanup(state)
		if strings.Contains(out, password) {
			t.Fatalf("the registry's password is in the job's log:\n%s", out)
		}
		return code, out
	}

	// The credentials file is on the host's root, which the sandbox
	// sees: it is hidden.
	code, out := job("cat "+auth+" 2>/dev/null || echo credentials-hidden", "credentials-hidden", nil)
	mu.Lock()
	if code == 0 || !strings.Contains(out, "ATTESTATION NOT STORED in "+uri) || !strings.Contains(out, "the bundle stays at "+h.hooksRoot()+"/attestations/job-") {
		t.Fatalf("cleanup_job with the store down: exit %d\n%s", code, out)
	}
	if conclusion != "failure" || !strings.Contains(summary, "the attestation was not stored in "+uri) || !strings.Contains(summary, "connection refused") || !strings.Contains(summary, "it lies at "+h.hooksRoot()+"/attestations/job-") {
		t.Fatalf("check run with the store down: %s\n%s", conclusion, summary)
	}
	mu.Unlock()

	srv = testregistry.Distribution(t, testregistry.Options{Port: port, User: "airlock", Password: password})
	// The commit's subject manifest goes up while the job runs, so that
	// cleanup_job pushes only the job's own (the first job's record is
	// still pending: nothing else can have put it).
	code, out = job("echo second", "second", func() {
		if got := srv.Tags("airlock/attestations"); !strings.Contains(got, ".commit."+h.head+".") {
			t.Errorf("before cleanup_job, the store has no subject manifest of commit %s: %s", h.head, got)
		}
	})
	if code != 0 || !strings.Contains(out, "attestation stored: 127.0.0.1:") || !strings.Contains(out, ") now stored: 127.0.0.1:") {
		t.Fatalf("cleanup_job with the store back: exit %d\n%s", code, out)
	}
	r, _ := storeref.Parse(uri)
	b, err := store.Open(r, store.Options{AuthFile: auth})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := b.List(context.Background(), store.Query{Repository: "acme/app", PullRequest: 7})
	if err != nil || len(entries) != 2 {
		t.Fatalf("the store holds %d of the pull request's jobs (%v), want 2", len(entries), err)
	}
	for _, e := range entries {
		if e.Commit != h.head || e.RunID != "8812345" || e.RunAttempt != "2" || e.Job != "build" || e.Runner != "arc-runner-x7k2p" || !strings.HasPrefix(e.Tag, "acme_app.pr7."+h.head[:12]+".r8812345-2.build.") {
			t.Errorf("entry %+v", e)
		}
	}
	// What the store says of each job is what its signed statement says.
	v, err := attest.LoadVerifierFile(h.keyPub)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range review.VerifyAll(context.Background(), b, entries, v, attest.VerifyOptions{}) {
		if r.Error != "" {
			t.Errorf("%s: %s", r.Entry.Tag, r.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	last := entries[len(entries)-1]
	if !strings.Contains(text, "- `attestation: "+last.Ref+" (tag "+last.Tag+", bundle "+last.Digest+")`") {
		t.Errorf("the check run does not name the stored reference and digest of %s:\n%.2000s", last.Tag, text)
	}
	if conclusion == "failure" {
		t.Errorf("the second job's check run failed: %s", summary)
	}
}
