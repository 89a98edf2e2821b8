package hook

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// The real Actions client packages (testdata/clients, installed from npm
// at pinned versions by make test), run in an agent's job through the
// hook: each refusal comes in its client's protocol, so the client stops
// at once and shows airlock's reason: a cache save (twirp, which the
// client would otherwise retry five times, about 28 s, and then blame
// another job), a REST write and a GraphQL mutation with the job's token.
func TestHookRealClientsAreRefusedInTheirProtocol(t *testing.T) {
	h := newRunnerHost(t)
	clients := clientPackages(t)
	// The packages where the job finds them, wherever the checkout is
	// (the sandbox's /tmp is its own).
	os.WriteFile(filepath.Join(h.org, "clients.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: mounts: [{source: %q, destination: \"/opt/clients\"}]\n", clients)), 0o644)
	_, env := h.fakeGitHub(t)
	env["GITHUB_API_URL"] = testhost.GitHubAPIURL // as the runner sets it
	state := h.prepare()
	code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", "/__e/node20/bin/node /opt/clients/refused.js; getent hosts airlock", env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{
		// cache.ts, saveCacheV2: a reservation the service does not
		// grant, as a warning.
		"::warning::Cache reservation failed: airlock: denied POST results.github.test",
		// @octokit/request: the error's message is GitHub's "message".
		"rest write threw: 403 airlock: denied POST api.github.test",
		"graphql mutation threw: airlock: denied POST api.github.test",
		// The sandbox's own name is in its /etc/hosts.
		"airlock\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the step's log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Attempt 2 of") || strings.Contains(out, "went through") || strings.Contains(out, "airlock (dns)") {
		t.Errorf("a client retried, a write went through, or the sandbox's name was looked up in DNS:\n%s", out)
	}
	m := regexp.MustCompile(`cache save took (\d+) ms`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no timing: %s", out)
	}
	// Not a timing assertion on airlock: a bound on the client's own
	// retries (five attempts with back-off take about 28 s).
	t.Logf("the refused cache save took %s ms in all (archive, reservation refused, warning)", m[1])
	if ms, _ := strconv.Atoi(m[1]); ms > 10000 {
		t.Errorf("the refused cache save took %d ms: the client retried", ms)
	}
}

// The same packages in a human's job, where the policy lets them
// through: the cache save and its restore (twirp, then the blob storage
// behind the signed URLs, through the gateway) and a REST write work,
// and GitHub saw the real credentials.
func TestHookRealClientsWorkForHumans(t *testing.T) {
	h := newRunnerHost(t)
	clients := clientPackages(t)
	h.humanPullRequest()
	gh, env := h.fakeGitHub(t)
	h.allowBlobStorage()
	// The cache's blob storage is not read by the gateway (only
	// artifacts' are): its TLS passes through, and the job must trust
	// the fake's CA as it trusts Azure's public one.
	os.WriteFile(filepath.Join(h.org, "clients.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: mounts: [{source: %q, destination: \"/opt/clients\"}, {source: %q, destination: \"/opt/fakeca\"}]\n", clients, filepath.Dir(gh.CAFile))), 0o644)
	env["GITHUB_API_URL"] = testhost.GitHubAPIURL
	state := h.prepare()
	script := "cat \"$NODE_EXTRA_CA_CERTS\" /opt/fakeca/" + filepath.Base(gh.CAFile) + " > /tmp/roots.pem\nNODE_EXTRA_CA_CERTS=/tmp/roots.pem /__e/node20/bin/node /opt/clients/allowed.js"
	code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", script, env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{"cache save returned ", "cache restore hit airlock-human-", ": cached by a human job", "rest write answered 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("the step's log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "airlock: denied") || strings.Contains(out, "Attempt 2 of") {
		t.Errorf("a request was refused or retried:\n%s", out)
	}
	entries := gh.CacheEntries()
	if len(entries) != 1 || !entries[0].Finalized || entries[0].SHA256 == "" {
		t.Errorf("GitHub's cache holds %+v, want one finalized entry", entries)
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
}

// humanPullRequest makes the job's event a human's pull request.
func (h *runnerHost) humanPullRequest() {
	event := map[string]any{"action": "opened", "number": 7, "pull_request": map[string]any{
		"number": 7, "user": map[string]any{"login": "alice", "type": "User"},
		"head": map[string]any{"ref": "feature/x", "sha": h.head, "repo": map[string]any{"full_name": "acme/app"}},
		"base": map[string]any{"ref": "main", "sha": h.base, "repo": map[string]any{"full_name": "acme/app"}},
	}}
	eb, _ := json.Marshal(event)
	if err := os.WriteFile(filepath.Join(h.temp, "_github_workflow", "event.json"), eb, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// clientPackages is testdata/clients, where make test installs the real
// Actions client packages (npm ci); without them the test is skipped, or
// fails under AIRLOCK_REQUIRE_CLIENTS, which CI sets.
func clientPackages(t *testing.T) string {
	t.Helper()
	return testtool.Clients(t, "the job runs the real Actions client packages (cache, artifact, REST and GraphQL) through the hook and its egress gateway")
}
