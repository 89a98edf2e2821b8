package credentials

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/policies"
)

// A runtime token as the runner hands it out: a JWT whose claims the
// artifact client reads (scp).
func runtimeToken(t testing.TB) string {
	t.Helper()
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"typ": "JWT", "alg": "RS256"}) + "." + enc(map[string]any{"scp": "Actions.Results:1:2 Actions.GenericRead:00000000", "ac": "[]"}) + ".c2lnbmF0dXJlLW9mLXRoZS1ydW5uZXI"
}

const (
	ghToken = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
	npm     = "npm_Zx8Qw3Er7Ty2Ui9Op4As6Df1Gh5Jk0Lz"
)

// stepEnv is a JavaScript action's environment as the runner sets it
// (NodeScriptActionHandler.cs), with checkout's token input and a
// workflow secret.
func stepEnv(t testing.TB) map[string]string {
	return map[string]string{
		"ACTIONS_RUNTIME_TOKEN":          runtimeToken(t),
		"ACTIONS_ID_TOKEN_REQUEST_TOKEN": runtimeToken(t),
		"ACTIONS_RUNTIME_URL":            "https://pipelines.actions.githubusercontent.com/abc123/",
		"ACTIONS_RESULTS_URL":            "https://results-receiver.actions.githubusercontent.com/",
		"ACTIONS_CACHE_URL":              "https://artifactcache.actions.githubusercontent.com/abc123/",
		"ACTIONS_ID_TOKEN_REQUEST_URL":   "https://token.actions.githubusercontent.com/.well-known/openid-configuration/token?api-version=2.0",
		"INPUT_TOKEN":                    ghToken,
		"INPUT_REPOSITORY":               "acme/app",
		"NPM_TOKEN":                      npm,
		"AUTH_HEADER":                    "Authorization: Bearer " + ghToken,
		"GIT_EXTRAHEADER":                "AUTHORIZATION: basic " + basicAuth(ghToken),
		"SHORT":                          "abc",
		"HOME":                           "/github/home",
	}
}

func newTestVault(p Policy) *Vault {
	if p.Secrets == nil {
		p.Secrets = map[string][]string{"NPM_TOKEN": {"registry.npmjs.org"}}
	}
	return NewVault(p, "https://github.com", "https://api.github.com")
}

// Every credential in a step's environment becomes a placeholder: whole
// values, values inside others, the basic form git uses; nothing else
// changes; placeholders keep what clients read (a JWT's claims, a
// GitHub token's prefix) and are random per job.
func TestWithhold(t *testing.T) {
	v := newTestVault(Policy{})
	env := stepEnv(t)
	got := v.Withhold(env)
	for k, val := range got {
		for _, real := range []string{runtimeToken(t), ghToken, npm, basicAuth(ghToken)} {
			if strings.Contains(val, real) {
				t.Errorf("%s still holds a credential: %q", k, val)
			}
		}
	}
	for _, k := range []string{"INPUT_REPOSITORY", "SHORT", "HOME", "ACTIONS_RESULTS_URL"} {
		if got[k] != env[k] {
			t.Errorf("%s changed: %q", k, got[k])
		}
	}
	rt := strings.Split(got["ACTIONS_RUNTIME_TOKEN"], ".")
	real := strings.Split(runtimeToken(t), ".")
	if len(rt) != 3 || rt[0] != real[0] || rt[1] != real[1] || rt[2] == real[2] || len(rt[2]) != len(real[2]) {
		t.Errorf("runtime token placeholder %q: a JWT with the real claims and another signature", got["ACTIONS_RUNTIME_TOKEN"])
	}
	if got["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] != got["ACTIONS_RUNTIME_TOKEN"] {
		t.Error("one value, one placeholder: the OIDC request token is the runtime token")
	}
	if !strings.HasPrefix(got["INPUT_TOKEN"], "ghs_") || len(got["INPUT_TOKEN"]) != len(ghToken) {
		t.Errorf("GitHub token placeholder %q", got["INPUT_TOKEN"])
	}
	if got["AUTH_HEADER"] != "Authorization: Bearer "+got["INPUT_TOKEN"] || got["GIT_EXTRAHEADER"] != "AUTHORIZATION: basic "+basicAuth(got["INPUT_TOKEN"]) {
		t.Errorf("values inside others: %q, %q", got["AUTH_HEADER"], got["GIT_EXTRAHEADER"])
	}
	if again := newTestVault(Policy{}).Withhold(env); again["INPUT_TOKEN"] == got["INPUT_TOKEN"] {
		t.Error("placeholders are the same in two jobs")
	}
	// A later step's variable holding a known value is withheld too.
	if later := v.Withhold(map[string]string{"MY_TOKEN": ghToken}); later["MY_TOKEN"] != got["INPUT_TOKEN"] {
		t.Errorf("a known value under another name: %q", later["MY_TOKEN"])
	}
	// An environment that already went through the vault (a step's, built
	// on the job's) keeps its placeholders: they are never learned as
	// credentials of their own, which would put a placeholder, not the
	// real value, back on the way out.
	if twice := v.Withhold(got); !maps.Equal(twice, got) {
		t.Errorf("withheld twice, the placeholders changed:\n%v\n%v", got, twice)
	}
	rec := v.Record()
	var names []string
	for _, w := range rec.Withheld {
		names = append(names, w.Name)
	}
	if !slices.Equal(names, []string{"runtime token", "GitHub token", "secret NPM_TOKEN"}) {
		t.Errorf("withheld: %+v", rec.Withheld)
	}
}

// The gateway's question for each request: on which credential's route
// is it, may it go, and which real values go back into its headers.
func TestRequest(t *testing.T) {
	type req struct {
		host   string
		port   int
		method string
		url    string
		auth   string // Authorization, with PH for the placeholder of cred
		cred   string // "runtime", "github", "npm"
	}
	for _, tc := range []struct {
		name     string
		policy   Policy
		req      req
		route    string
		allowed  bool
		injected bool
		rule     string
	}{
		{"cache restore", Policy{Cache: "read"}, req{"results-receiver.actions.githubusercontent.com", 443, "POST", "/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL", "Bearer PH", "runtime"}, "cache", true, true, "credentials.cache"},
		{"cache save, read only", Policy{Cache: "read"}, req{"results-receiver.actions.githubusercontent.com", 443, "POST", "/twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry", "Bearer PH", "runtime"}, "cache", false, false, "credentials.cache"},
		{"cache finalize, read only", Policy{Cache: "read"}, req{"results-receiver.actions.githubusercontent.com", 443, "POST", "/twirp/github.actions.results.api.v1.CacheService/FinalizeCacheEntryUpload", "Bearer PH", "runtime"}, "cache", false, false, "credentials.cache"},
		{"cache save, readwrite", Policy{Cache: "readwrite"}, req{"results-receiver.actions.githubusercontent.com", 443, "POST", "/twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry", "Bearer PH", "runtime"}, "cache", true, true, ""},
		{"cache v1 restore", Policy{Cache: "read"}, req{"artifactcache.actions.githubusercontent.com", 443, "GET", "/abc123/_apis/artifactcache/cache?keys=k&version=v", "Bearer PH", "runtime"}, "cache", true, true, ""},
		{"cache v1 reserve, read only", Policy{Cache: "read"}, req{"artifactcache.actions.githubusercontent.com", 443, "POST", "/abc123/_apis/artifactcache/caches", "Bearer PH", "runtime"}, "cache", false, false, "credentials.cache"},
		{"cache v1 upload, read only", Policy{Cache: "read"}, req{"artifactcache.actions.githubusercontent.com", 443, "PATCH", "/abc123/_apis/artifactcache/caches/7", "Bearer PH", "runtime"}, "cache", false, false, "credentials.cache"},
		{"cache, none", Policy{Cache: "none"}, req{"results-receiver.actions.githubusercontent.com", 443, "POST", "/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL", "Bearer PH", "runtime"}, "cache", false, false, "credentials.cache"},
		{"artifact upload", Policy{Artifacts: true}, req{"results-receiver.actions.githubusercontent.com", 443, "POST", "/twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact", "Bearer PH", "runtime"}, "artifacts", true, true, ""},
		{"artifacts off", Policy{}, req{"results-receiver.actions.githubusercontent.com", 443, "POST", "/twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact", "Bearer PH", "runtime"}, "artifacts", false, false, "credentials.artifacts"},
		{"OIDC, allowed audience", Policy{OIDCAudiences: []string{"sts.amazonaws.com"}}, req{"token.actions.githubusercontent.com", 443, "GET", "/.well-known/openid-configuration/token?api-version=2.0&audience=sts.amazonaws.com", "Bearer PH", "runtime"}, "oidc", true, true, ""},
		{"OIDC, another audience", Policy{OIDCAudiences: []string{"sts.amazonaws.com"}}, req{"token.actions.githubusercontent.com", 443, "GET", "/.well-known/openid-configuration/token?api-version=2.0&audience=evil", "Bearer PH", "runtime"}, "oidc", false, false, "credentials.oidc.audiences"},
		{"OIDC, none allowed", Policy{}, req{"token.actions.githubusercontent.com", 443, "GET", "/.well-known/openid-configuration/token?api-version=2.0&audience=sts.amazonaws.com", "Bearer PH", "runtime"}, "oidc", false, false, "credentials.oidc.audiences"},
		{"REST API, token form", Policy{API: "read"}, req{"api.github.com", 443, "GET", "/repos/acme/app", "token PH", "github"}, "api", true, true, ""},
		{"REST API write, read only", Policy{API: "read"}, req{"api.github.com", 443, "PUT", "/repos/acme/app/contents/x", "token PH", "github"}, "api", false, false, "credentials.api"},
		{"GraphQL, read only", Policy{API: "read"}, req{"api.github.com", 443, "POST", "/graphql", "bearer PH", "github"}, "api", false, false, "credentials.api"},
		{"REST API write, readwrite", Policy{API: "readwrite"}, req{"api.github.com", 443, "PATCH", "/repos/acme/app/git/refs/heads/main", "token PH", "github"}, "api", true, true, ""},
		{"git fetch, basic x-access-token", Policy{}, req{"github.com", 443, "POST", "/acme/app/git-upload-pack", "basic PHBASIC", "github"}, "git", true, true, ""},
		{"git fetch, basic another user", Policy{}, req{"github.com", 443, "GET", "/acme/app.git/info/refs?service=git-upload-pack", "Basic PHBASICUSER", "github"}, "git", true, true, ""},
		{"git push refused", Policy{GitPush: false}, req{"github.com", 443, "POST", "/acme/app.git/git-receive-pack", "basic PHBASIC", "github"}, "git", false, false, "credentials.gitPush"},
		{"git push advertisement refused", Policy{GitPush: false}, req{"github.com", 443, "GET", "/acme/app/info/refs?service=git-receive-pack", "basic PHBASIC", "github"}, "git", false, false, "credentials.gitPush"},
		{"git push allowed", Policy{GitPush: true}, req{"github.com", 443, "POST", "/acme/app.git/git-receive-pack", "basic PHBASIC", "github"}, "git", true, true, ""},
		{"GitHub web page: not a credential route", Policy{}, req{"github.com", 443, "GET", "/acme/app/settings", "token PH", "github"}, "", true, false, ""},
		{"the runtime token to the API: not its route", Policy{API: "read"}, req{"api.github.com", 443, "GET", "/user", "Bearer PH", "runtime"}, "api", true, false, ""},
		{"the GitHub token to an attacker", Policy{}, req{"evil.example", 443, "POST", "/", "Bearer PH", "github"}, "", true, false, ""},
		{"a secret to its host", Policy{}, req{"registry.npmjs.org", 443, "PUT", "/pkg", "Bearer PH", "npm"}, "secret NPM_TOKEN", true, true, ""},
		{"a secret elsewhere", Policy{}, req{"evil.example", 443, "PUT", "/pkg", "Bearer PH", "npm"}, "", true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVault(tc.policy)
			ph := v.Withhold(stepEnv(t))
			real := map[string]string{"runtime": runtimeToken(t), "github": ghToken, "npm": npm}[tc.req.cred]
			placeholder := map[string]string{"runtime": ph["ACTIONS_RUNTIME_TOKEN"], "github": ph["INPUT_TOKEN"], "npm": ph["NPM_TOKEN"]}[tc.req.cred]
			auth := strings.NewReplacer(
				"PHBASICUSER", base64.StdEncoding.EncodeToString([]byte("oauth2:"+placeholder)),
				"PHBASIC", basicAuth(placeholder), "PH", placeholder).Replace(tc.req.auth)
			h := http.Header{"Authorization": {auth}, "User-Agent": {"git/2.39"}}
			u, _ := url.Parse("https://" + tc.req.host + tc.req.url)
			d := v.Request(tc.req.host, tc.req.port, tc.req.method, u, h, true, true)
			injected, values := d.Injected, d.Echoes
			if d.Route != tc.route || d.Allowed != tc.allowed || (tc.rule != "" && d.Rule != tc.rule) {
				t.Errorf("decision %+v; want route %q allowed %v rule %q", d, tc.route, tc.allowed, tc.rule)
			}
			if !d.Allowed && (d.Reason == "" || d.Suggest == "") {
				t.Errorf("a refusal must say why and what to change: %+v", d)
			}
			got := h.Get("Authorization")
			hasReal := strings.Contains(got, real) || strings.Contains(decodeBasic(got), real)
			if hasReal != tc.injected || (len(injected) > 0) != tc.injected {
				t.Errorf("Authorization %q: real value put back %v, want %v (injected %v)", got, hasReal, tc.injected, injected)
			}
			if !tc.injected && got != auth {
				t.Errorf("a request the credential does not belong to was changed: %q", got)
			}
			if tc.injected && !slices.Contains(values, real) {
				t.Errorf("the real value is not given for echo redaction: %v", values)
			}
		})
	}
}

// The record says which credentials were withheld and where each went,
// never a value; Redact blanks withheld and masked values.
func TestRecordAndRedact(t *testing.T) {
	v := newTestVault(Policy{Cache: "read"})
	ph := v.Withhold(stepEnv(t))
	u, _ := url.Parse("https://api.github.com/repos/acme/app")
	v.Request("api.github.com", 443, "GET", u, http.Header{"Authorization": {"token " + ph["INPUT_TOKEN"]}}, true, true)
	u, _ = url.Parse("https://evil.example/x")
	v.Request("evil.example", 443, "GET", u, http.Header{"Authorization": {"token " + ph["INPUT_TOKEN"]}}, true, true)
	u, _ = url.Parse("https://results-receiver.actions.githubusercontent.com/twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry")
	v.Request("results-receiver.actions.githubusercontent.com", 443, "POST", u, http.Header{"Authorization": {"Bearer " + ph["ACTIONS_RUNTIME_TOKEN"]}}, true, true)
	u, _ = url.Parse("http://registry.npmjs.org/pkg")
	v.Request("registry.npmjs.org", 80, "GET", u, http.Header{"X-Token": {ph["NPM_TOKEN"]}}, true, false)
	v.Mask("hunter2-masked")
	rec := v.Record()
	b, _ := json.Marshal(rec)
	for _, secret := range []string{ghToken, npm, runtimeToken(t), ph["INPUT_TOKEN"], "hunter2"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the record holds a value: %s", b)
		}
	}
	want := []Use{
		{Credential: "GitHub token", Host: "api.github.com", Route: "api", Injected: 1},
		{Credential: "GitHub token", Host: "evil.example", Elsewhere: 1},
		{Credential: "runtime token", Host: "results-receiver.actions.githubusercontent.com", Route: "cache", Refused: 1, Rule: "credentials.cache"},
		{Credential: "secret NPM_TOKEN", Host: "registry.npmjs.org", Elsewhere: 1},
	}
	if !slices.Equal(rec.Uses, want) || rec.Masked != 1 {
		t.Errorf("uses %+v masked %d", rec.Uses, rec.Masked)
	}
	line := "curl -H 'Authorization: token " + ghToken + "' -u x-access-token:" + npm + " " + basicAuth(ghToken) + " hunter2-masked"
	if got := v.Redact(line); strings.Contains(got, ghToken) || strings.Contains(got, npm) || strings.Contains(got, basicAuth(ghToken)) || strings.Contains(got, "hunter2") {
		t.Errorf("Redact(%q) = %q", line, got)
	}
}

// The job's CA covers where credentials may be put back, and only that;
// the Actions service hosts are reachable (for their requests alone)
// once a step named them, and only where the CA covers them.
func TestHostsAndInterception(t *testing.T) {
	v := newTestVault(Policy{})
	if got, want := v.CAHosts(), []string{"actions.githubusercontent.com", "api.github.com", "github.com", "registry.npmjs.org"}; !slices.Equal(got, want) {
		t.Errorf("CA hosts %v, want %v", got, want)
	}
	if v.ServiceHost("results-receiver.actions.githubusercontent.com", 443) {
		t.Error("a service host before any step named it")
	}
	v.Withhold(stepEnv(t))
	v.Withhold(map[string]string{"ACTIONS_RESULTS_URL": "https://results.evil.example/"})
	for _, tc := range []struct {
		host               string
		service, intercept bool
	}{
		{"results-receiver.actions.githubusercontent.com", true, true},
		{"token.actions.githubusercontent.com", true, true},
		{"github.com", false, true},
		{"api.github.com", false, true},
		{"registry.npmjs.org", false, true},
		{"results.evil.example", false, false}, // named by a step, not covered by the CA
		{"example.com", false, false},
	} {
		if got := v.ServiceHost(tc.host, 443); got != tc.service {
			t.Errorf("ServiceHost(%s) = %v", tc.host, got)
		}
		if got := v.Intercept(tc.host); got != tc.intercept {
			t.Errorf("Intercept(%s) = %v", tc.host, got)
		}
	}
}

func TestPolicyFor(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name  string
		c     policies.Credentials
		agent bool
		want  Policy
	}{
		{"agent defaults", policies.Credentials{Artifacts: true}, true, Policy{Cache: "read", GitPush: false, Artifacts: true}},
		{"human defaults", policies.Credentials{Artifacts: true}, false, Policy{Cache: "readwrite", GitPush: true, Artifacts: true}},
		{"pinned", policies.Credentials{Cache: "none", GitPush: &no, OIDC: policies.OIDC{Audiences: []string{"a"}}}, false, Policy{Cache: "none", OIDCAudiences: []string{"a"}}},
	} {
		got := PolicyFor(tc.c, tc.agent)
		if got.Cache != tc.want.Cache || got.GitPush != tc.want.GitPush || got.Artifacts != tc.want.Artifacts || !slices.Equal(got.OIDCAudiences, tc.want.OIDCAudiences) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// actions/checkout's persisted token in a git config (any user name in
// the basic blob) becomes the placeholder, is learned as the GitHub
// token, and is put back on a fetch from the GitHub server; the rest of
// the file is untouched, and a config without one comes back as it was.
func TestWithholdGitConfig(t *testing.T) {
	for _, tc := range []struct {
		name, user string
	}{
		{"checkout", "x-access-token"},
		{"another user name", "oauth2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVault(Policy{Cache: "read"})
			blob := base64.StdEncoding.EncodeToString([]byte(tc.user + ":" + ghToken))
			config := "[core]\n\tbare = false\n[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic " + blob + "\n[remote \"origin\"]\n\turl = https://github.com/acme/app\n"
			got := v.WithholdGitConfig(config, ".git/config")
			if strings.Contains(got, blob) || strings.Contains(got, ghToken) {
				t.Fatalf("the token is still there:\n%s", got)
			}
			if !strings.HasPrefix(got, "[core]\n\tbare = false\n[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic ") || !strings.HasSuffix(got, "\turl = https://github.com/acme/app\n") {
				t.Errorf("more than the token changed:\n%s", got)
			}
			header := strings.TrimSpace(got[strings.Index(got, "AUTHORIZATION: basic ")+len("AUTHORIZATION: "):])
			header = header[:strings.Index(header, "\n")]
			h := http.Header{"Authorization": {header}}
			u, _ := url.Parse("https://github.com/acme/app.git/git-upload-pack")
			d := v.Request("github.com", 443, "POST", u, h, true, true)
			if !d.Allowed {
				t.Fatalf("fetch refused: %+v", d)
			}
			names := d.Injected
			if len(names) != 1 || decodeBasic(h.Get("Authorization")) != tc.user+":"+ghToken {
				t.Errorf("put back %v: %q", names, decodeBasic(h.Get("Authorization")))
			}
			rec := v.Record()
			if len(rec.Withheld) != 1 || rec.Withheld[0].Name != GitHubToken || !slices.Contains(rec.Withheld[0].Variables, ".git/config") {
				t.Errorf("withheld: %+v", rec.Withheld)
			}
			if plain := "[core]\n\tbare = false\n"; v.WithholdGitConfig(plain, ".git/config") != plain {
				t.Error("a config without a token changed")
			}
		})
	}
}

// BenchmarkVaultRequest: the vault's part of an injected request (the
// credentials policy's decision and the put-back into the headers), as
// the gateway runs it for each request. See BENCHMARKS.md.
func BenchmarkVaultRequest(b *testing.B) {
	v := newTestVault(Policy{Cache: "read", Artifacts: true})
	ph := v.Withhold(stepEnv(b))
	u, _ := url.Parse("https://results-receiver.actions.githubusercontent.com/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL")
	for i := 0; i < b.N; i++ {
		h := http.Header{"Authorization": {"Bearer " + ph["ACTIONS_RUNTIME_TOKEN"]}, "User-Agent": {"actions/cache"}, "Content-Type": {"application/json"}}
		if d := v.Request(u.Host, 443, "POST", u, h, true, true); !d.Allowed || len(d.Injected) != 1 {
			b.Fatal(d)
		}
	}
}

// What a hostile step tries against the routes, with the URLs laid out
// as on github.com (the OIDC token endpoint below the runtime service's
// URL): each is refused, or the real value is not put back.
func TestRequestAttacks(t *testing.T) {
	const runtimeURL = "https://pipelines.actions.githubusercontent.com/abc123/"
	const oidcURL = runtimeURL + "00000000-0000-0000-0000-000000000000/_apis/distributedtask/hubs/Actions/plans/p/jobs/j/idtoken?api-version=2.0"
	const results = "https://results-receiver.actions.githubusercontent.com"
	for _, tc := range []struct {
		name, method, url, auth string
		route                   string
		allowed, injected       bool
	}{
		{"OIDC, allowed audience", "GET", oidcURL + "&audience=sts.amazonaws.com", "Bearer PH", "oidc", true, true},
		{"OIDC for another audience (below the runtime URL)", "GET", oidcURL + "&audience=evil", "Bearer PH", "oidc", false, false},
		{"OIDC, the audience twice", "GET", oidcURL + "&audience=sts.amazonaws.com&audience=evil", "Bearer PH", "oidc", false, false},
		{"OIDC, a ';' hiding a second audience", "GET", oidcURL + "&audience=evil;&audience=sts.amazonaws.com", "Bearer PH", "oidc", false, false},
		{"OIDC, no audience", "GET", oidcURL, "Bearer PH", "oidc", false, false},
		{"OIDC endpoint in other case", "GET", strings.Replace(oidcURL, "idtoken", "IdToken", 1) + "&audience=evil", "Bearer PH", "oidc", false, false},
		{"another request to the runtime service", "POST", runtimeURL + "_apis/distributedtask/hubs/Actions/plans/p/logs", "Bearer PH", "actions", false, false},
		{"another request to the results service", "POST", results + "/twirp/github.actions.results.api.v1.WorkflowService/Anything", "Bearer PH", "actions", false, false},
		{"cache save in lower case", "POST", results + "/twirp/github.actions.results.api.v1.cacheservice/createcacheentry", "Bearer PH", "cache", false, false},
		{"cache save with a trailing slash", "POST", results + "/twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry/", "Bearer PH", "cache", false, false},
		{"cache, an unknown RPC", "POST", results + "/twirp/github.actions.results.api.v1.CacheService/DeleteCacheEntry", "Bearer PH", "cache", false, false},
		{"cache save behind a doubled slash", "POST", results + "//twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry", "Bearer PH", "path", false, false},
		{"a dot segment", "POST", results + "/twirp/x/../github.actions.results.api.v1.CacheService/CreateCacheEntry", "Bearer PH", "path", false, false},
		{"an encoded dot segment", "POST", results + "/twirp/%2e%2e/github.actions.results.api.v1.CacheService/CreateCacheEntry", "Bearer PH", "path", false, false},
		{"an encoded slash", "POST", results + "/twirp%2fgithub.actions.results.api.v1.CacheService/CreateCacheEntry", "Bearer PH", "path", false, false},
		{"cache restore in plain form", "POST", results + "/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL", "Bearer PH", "cache", true, true},
		{"the placeholder in another header", "POST", results + "/twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL", "X-Token: PH", "cache", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newTestVault(Policy{Cache: "read", API: "read", OIDCAudiences: []string{"sts.amazonaws.com"}})
			env := map[string]string{"ACTIONS_RUNTIME_TOKEN": runtimeToken(t), "ACTIONS_ID_TOKEN_REQUEST_TOKEN": runtimeToken(t),
				"ACTIONS_RUNTIME_URL": runtimeURL, "ACTIONS_RESULTS_URL": results + "/", "ACTIONS_ID_TOKEN_REQUEST_URL": oidcURL}
			ph := v.Withhold(env)["ACTIONS_RUNTIME_TOKEN"]
			h := http.Header{}
			if k, val, ok := strings.Cut(tc.auth, ": "); ok {
				h.Set(k, strings.ReplaceAll(val, "PH", ph))
			} else {
				h.Set("Authorization", strings.ReplaceAll(tc.auth, "PH", ph))
			}
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			port := 443
			d := v.Request(u.Hostname(), port, tc.method, u, h, false, true)
			sent := strings.Join(slices.Concat(h.Values("Authorization"), h.Values("X-Token")), " ")
			if d.Route != tc.route || d.Allowed != tc.allowed || strings.Contains(sent, runtimeToken(t)) != tc.injected {
				t.Errorf("route %q allowed %v (%s), sent %.30q; want route %q allowed %v injected %v", d.Route, d.Allowed, d.Reason, sent, tc.route, tc.allowed, tc.injected)
			}
		})
	}
}

// A step can set the Actions service URLs for the steps after it
// ($GITHUB_ENV), with a runtime token of its own making: a URL outside
// the Actions services' domain is never learned (so never resolved,
// reached or given a token), and the runner's real token is never put
// back on a URL learned with another.
func TestLearnedEndpoints(t *testing.T) {
	v := newTestVault(Policy{Cache: "readwrite"})
	real := v.Withhold(stepEnv(t))["ACTIONS_RUNTIME_TOKEN"]
	fake := "eyJhbGciOiJub25lIn0.eyJzY3AiOiJ4In0.bWFkZS11cA"
	v.Withhold(map[string]string{"ACTIONS_RUNTIME_TOKEN": fake, "ACTIONS_CACHE_URL": "https://gist.github.com/x/", "ACTIONS_RESULTS_URL": "https://evil.actions.githubusercontent.com/"})
	if v.ServiceHost("gist.github.com", 443) || v.Intercept("gist.github.com") {
		t.Error("a job-set URL outside the Actions services' domain was learned")
	}
	u, _ := url.Parse("https://evil.actions.githubusercontent.com/twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry")
	h := http.Header{"Authorization": {"Bearer " + real}}
	if d := v.Request("evil.actions.githubusercontent.com", 443, "POST", u, h, false, true); len(d.Injected) != 0 || strings.Contains(h.Get("Authorization"), runtimeToken(t)) {
		t.Errorf("the runner's token was put back on a URL the job named: %+v", d)
	}
}

// An upstream that echoes what it was sent gets every form blanked: the
// real value, and the basic blob of whatever user name the client used.
func TestEchoes(t *testing.T) {
	v := newTestVault(Policy{})
	ph := v.Withhold(stepEnv(t))["INPUT_TOKEN"]
	h := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("foo:"+ph))}}
	u, _ := url.Parse("https://github.com/acme/app/info/refs?service=git-upload-pack")
	d := v.Request("github.com", 443, "GET", u, h, true, true)
	blob := base64.StdEncoding.EncodeToString([]byte("foo:" + ghToken))
	if !slices.Contains(d.Echoes, ghToken) || !slices.Contains(d.Echoes, blob) {
		t.Errorf("echoes %q lack the token or the blob sent", d.Echoes)
	}
}
