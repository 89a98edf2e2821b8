package refusal

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The requests are shaped as each client sends them: the paths and
// headers from the clients' own code.
func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name, method, url string
		header            map[string]string
		apiHost           string
		want              Protocol
	}{
		// @actions/cache 4.x, src/internal/shared/cacheTwirpClient.ts:
		// POST {ACTIONS_RESULTS_URL}twirp/github.actions.results.api.v1.CacheService/{method}
		{"cache save (its reservation)", "POST", "https://results-receiver.actions.githubusercontent.com/twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry", nil, "", CacheReservation},
		{"cache save (its finalisation)", "POST", "https://results-receiver.actions.githubusercontent.com/twirp/github.actions.results.api.v1.CacheService/FinalizeCacheEntryUpload", nil, "", CacheReservation},
		{"cache restore (twirp)", "POST", "https://results-receiver.actions.githubusercontent.com/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL", nil, "", Twirp},
		// @actions/artifact 2.x, src/internal/shared/artifact-twirp-client.ts.
		{"artifact upload (twirp)", "POST", "https://results-receiver.actions.githubusercontent.com/twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact", nil, "", Twirp},
		// @octokit/core's defaults: Accept: application/vnd.github.v3+json.
		{"REST on github.com", "POST", "https://api.github.com/repos/acme/app/issues", map[string]string{"Accept": "application/vnd.github.v3+json"}, "", REST},
		{"REST on GHES", "DELETE", "https://ghes.example/api/v3/repos/acme/app/git/refs/heads/x", nil, "ghes.example", REST},
		{"GraphQL on github.com", "POST", "https://api.github.com/graphql", nil, "", GraphQL},
		{"GraphQL on GHES", "POST", "https://ghes.example/api/graphql", nil, "ghes.example", GraphQL},
		// git's remote-curl.c: GET .../info/refs?service=..., POST .../git-receive-pack.
		{"git fetch", "GET", "https://github.com/acme/app.git/info/refs?service=git-upload-pack", map[string]string{"User-Agent": "git/2.39.5"}, "", Git},
		{"git push", "POST", "https://github.com/acme/app.git/git-receive-pack", nil, "", Git},
		// The OCI distribution spec's endpoints: GET /v2/, /v2/<name>/manifests/<ref>.
		{"registry ping", "GET", "https://ghcr.io/v2/", map[string]string{"User-Agent": "docker/28.2.2"}, "", OCI},
		{"registry manifest", "HEAD", "https://registry.test/v2/acme/app/manifests/latest", nil, "", OCI},
		// npm-registry-fetch sends npm-command and an npm/ user agent.
		{"npm", "GET", "http://registry.test/left-pad", map[string]string{"User-Agent": "npm/11.1.0 node/v20.20.2 linux x64", "Npm-Command": "install"}, "", NPM},
		{"pip", "GET", "http://registry.test/simple/requests/", map[string]string{"User-Agent": "pip/23.2.1 {}"}, "", Pip},
		{"curl", "GET", "http://registry.test/x", map[string]string{"User-Agent": "curl/7.88.1"}, "", Plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.url, nil)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			if got := Of(r, tc.apiHost); got != tc.want {
				t.Errorf("Of = %s, want %s", got, tc.want)
			}
		})
	}
}

// Each shape carries airlock's words where its client reads them, with a
// 403 and the right content type.
func TestWrite(t *testing.T) {
	const msg = "airlock: denied POST api.github.com:443/repos/acme/app/issues: writes with the job's token are refused for agent work"
	for _, tc := range []struct {
		p        Protocol
		ctype    string
		readBack func(body []byte) (string, error)
	}{
		{CacheReservation, "application/json", func(b []byte) (string, error) {
			var e struct {
				OK      *bool
				Message string
			}
			err := json.Unmarshal(b, &e)
			if e.OK == nil || *e.OK {
				return "", err
			}
			return e.Message, err
		}},
		{Twirp, "application/json", func(b []byte) (string, error) {
			var e struct{ Code, Msg string }
			err := json.Unmarshal(b, &e)
			if e.Code != "permission_denied" {
				return "", nil
			}
			return e.Msg, err
		}},
		{REST, "application/json", func(b []byte) (string, error) {
			var e struct {
				Message string
				Docs    string `json:"documentation_url"`
			}
			err := json.Unmarshal(b, &e)
			if e.Docs == "" {
				return "", err
			}
			return e.Message, err
		}},
		{GraphQL, "application/json", func(b []byte) (string, error) {
			var e struct {
				Errors []struct{ Type, Message string }
			}
			err := json.Unmarshal(b, &e)
			if len(e.Errors) != 1 {
				return "", err
			}
			return e.Errors[0].Message, err
		}},
		{OCI, "application/json", func(b []byte) (string, error) {
			var e struct {
				Errors []struct{ Code, Message string }
			}
			err := json.Unmarshal(b, &e)
			if len(e.Errors) != 1 || e.Errors[0].Code != "DENIED" {
				return "", err
			}
			return e.Errors[0].Message, err
		}},
		{NPM, "application/json", func(b []byte) (string, error) {
			var e struct{ Error string }
			err := json.Unmarshal(b, &e)
			return e.Error, err
		}},
		{Plain, "text/plain", func(b []byte) (string, error) { return strings.SplitN(string(b), "\n", 2)[0], nil }},
		{Git, "text/plain", func(b []byte) (string, error) { return strings.SplitN(string(b), "\n", 2)[0], nil }},
	} {
		t.Run(string(tc.p), func(t *testing.T) {
			w := httptest.NewRecorder()
			Write(w, tc.p, msg, "to allow it: nothing, for agent work")
			want := http.StatusForbidden
			if tc.p == CacheReservation {
				want = http.StatusOK
			}
			if w.Code != want || !strings.HasPrefix(w.Header().Get("Content-Type"), tc.ctype) {
				t.Errorf("status %d, content type %q", w.Code, w.Header().Get("Content-Type"))
			}
			got, err := tc.readBack(w.Body.Bytes())
			if err != nil || !strings.HasPrefix(got, msg) {
				t.Errorf("the client reads %q (%v) from %s", got, err, w.Body.String())
			}
		})
	}
}

// pip's refusal carries airlock's words in the status line itself, over a
// real connection, with the headers the gateway set (the decision).
func TestWritePipReason(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Airlock-Decision", "denied; rule=\"x\"")
		Write(w, Pip, "airlock: denied GET registry.test:80/simple/x/: not allowed\r\nInjected: header", "rule: x")
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/simple/x/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Status, "403 airlock: denied GET registry.test:80/simple/x/") {
		t.Errorf("status %q", resp.Status)
	}
	if resp.Header.Get("X-Airlock-Decision") == "" || resp.Header.Get("Injected") != "" {
		t.Errorf("headers %v", resp.Header)
	}
	if !strings.HasPrefix(string(body), "airlock: denied") || !strings.Contains(string(body), "rule: x") {
		t.Errorf("body %q", body)
	}
}
