package credentials

import (
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/internal/textsafe"
)

// Where each credential belongs (from the sources of actions/toolkit and
// actions/checkout):
//
//	runtime token   cache v2 and artifacts v4: ACTIONS_RESULTS_URL
//	                /twirp/github.actions.results.api.v1.{CacheService,ArtifactService}/*
//	                cache v1: ACTIONS_CACHE_URL _apis/artifactcache/*
//	                the runtime service: ACTIONS_RUNTIME_URL
//	OIDC request    GET ACTIONS_ID_TOKEN_REQUEST_URL&audience=...
//	GitHub token    the REST API (GITHUB_API_URL), and git smart HTTP on
//	                GITHUB_SERVER_URL (/<owner>/<repo>(.git)/info/refs,
//	                git-upload-pack, git-receive-pack)
//	a secret        the hosts the policy lists for it
//
// All of them in a header: Bearer, token, or basic for x-access-token.

// endpoint is where a URL points: host, port and the path below which
// its service lives (in lower case: the services match paths without
// regard to case); for an Actions service, the runtime (or OIDC request)
// token of the environment that named it, the only credential ever put
// back on its requests.
type endpoint struct {
	host string
	port int
	path string
	cred *credential
}

func parseEndpoint(raw string) (endpoint, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" {
		return endpoint{}, false
	}
	port := 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err == nil {
			port = n
		}
	}
	p := strings.ToLower(path.Clean("/" + u.Path))
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return endpoint{host: strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")), port: port, path: p}, true
}

// endpoints are the job's own service URLs.
type endpoints struct {
	server, api                    endpoint
	results, cache, runtime, oidcs []endpoint
	// ca are the domains the job's CA may sign for: where a credential
	// may be put back, known when the job starts.
	ca []string
	// services is the domain the Actions services live in (for
	// github.com, actions.githubusercontent.com; on GHES, the server's
	// host): an Actions service URL elsewhere is never learned.
	services string
}

func (e *endpoints) learnGitHub(serverURL, apiURL string) {
	if s, ok := parseEndpoint(serverURL); ok {
		e.server = s
		e.ca = append(e.ca, s.host)
		e.services = s.host
		if s.host == "github.com" {
			e.services = "actions.githubusercontent.com"
			e.ca = append(e.ca, e.services)
		}
	}
	if a, ok := parseEndpoint(apiURL); ok {
		e.api = a
		if !slices.Contains(e.ca, a.host) {
			e.ca = append(e.ca, a.host)
		}
	}
}

// learn takes the Actions service URLs from a step's environment, each
// bound to the token that came with it. The runner sets them for
// JavaScript actions, next to the runtime token; a step can set them too
// (through $GITHUB_ENV) for the steps after it, so a URL is learned only
// in the Actions services' domain, and only the token of its own
// environment is ever put back on its requests: one the job made up
// gets its own value back, never the runner's.
func (v *Vault) learn(env map[string]string) {
	e := &v.ends
	for _, l := range []struct {
		name, token string
		list        *[]endpoint
	}{
		{"ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN", &e.results}, {"ACTIONS_CACHE_URL", "ACTIONS_RUNTIME_TOKEN", &e.cache},
		{"ACTIONS_RUNTIME_URL", "ACTIONS_RUNTIME_TOKEN", &e.runtime}, {"ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", &e.oidcs},
	} {
		ep, ok := parseEndpoint(env[l.name])
		ep.cred = v.byReal[env[l.token]]
		if !ok || ep.cred == nil || e.services == "" || (ep.host != e.services && !strings.HasSuffix(ep.host, "."+e.services)) {
			continue
		}
		if l.name == "ACTIONS_ID_TOKEN_REQUEST_URL" {
			// The request URL is the token endpoint itself.
			ep.path = strings.TrimSuffix(ep.path, "/")
		}
		if !slices.Contains(*l.list, ep) {
			*l.list = append(*l.list, ep)
		}
	}
}

// covered reports whether the job's CA may sign for host.
func (e *endpoints) covered(host string) bool {
	for _, d := range e.ca {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// APIHost is the GitHub API's host of the job ("" without a vault).
func (v *Vault) APIHost() string {
	if v == nil {
		return ""
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ends.api.host
}

// CAHosts are the domains the job's CA must be able to sign for, so that
// the gateway can put credentials back into HTTPS requests: the GitHub
// server's and API's hosts (with GitHub's Actions service domain for
// github.com) and the hosts of the policy's secrets.
func (v *Vault) CAHosts() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := slices.Clone(v.ends.ca)
	if v.pol.Artifacts && v.ends.server.host == "github.com" {
		// github.com's artifact service hands out upload URLs in Azure
		// blob storage: the gateway reads what the job writes there to
		// digest its artifacts (package uploads), for those URLs only.
		out = append(out, githubArtifactStorage)
	}
	for _, hosts := range v.pol.Secrets {
		for _, h := range hosts {
			if !slices.Contains(out, h) {
				out = append(out, h)
			}
		}
	}
	slices.Sort(out)
	return out
}

// githubArtifactStorage is the domain of github.com's artifact blobs
// (results-receiver's signed_upload_url).
const githubArtifactStorage = "blob.core.windows.net"

// ServiceHost reports whether name is one of the job's Actions service
// hosts the gateway can inspect: it may be resolved and reached on the
// service's port for the service's requests alone, which the credentials
// policy decides (credentials.*), even where egress.allow does not name
// it.
func (v *Vault) ServiceHost(name string, port int) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ends.covered(name) {
		return false
	}
	for _, l := range [][]endpoint{v.ends.results, v.ends.cache, v.ends.runtime, v.ends.oidcs} {
		for _, e := range l {
			if e.host == name && (port == 0 || e.port == port) {
				return true
			}
		}
	}
	return false
}

// Intercept reports whether requests to name may carry a credential the
// gateway would put back: it then terminates TLS for name (with the job's
// CA) to see them.
func (v *Vault) Intercept(name string) bool {
	if v.ServiceHost(name, 0) {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.ends.covered(name) && !v.secretHost(name) {
		return false
	}
	return name == v.ends.server.host || name == v.ends.api.host || v.secretHost(name)
}

func (v *Vault) secretHost(name string) bool {
	for _, hosts := range v.pol.Secrets {
		if slices.Contains(hosts, name) {
			return true
		}
	}
	return false
}

// route is what a request is to the job's credentials.
type route struct {
	// name is the route for the record ("cache", "artifacts", "oidc",
	// "api", "git", "actions", "secret NPM_TOKEN").
	name string
	// cred is the one credential that may be put back (an Actions
	// service's token); else kind is the kind that may.
	cred *credential
	kind string
	// service: an Actions service route, which the credentials policy
	// allows by itself.
	service bool
	// op is what the request does, for the policy ("read", "write",
	// "push", "unknown", an audience).
	op string
}

// The Actions services' requests airlock knows (actions/toolkit: cache
// v2 and artifacts v4 over twirp, cache v1, artifacts v3), in lower case.
const (
	twirpCache    = "twirp/github.actions.results.api.v1.cacheservice/"
	twirpArtifact = "twirp/github.actions.results.api.v1.artifactservice/"
	cacheV1       = "_apis/artifactcache/"
)

var (
	cacheReads   = []string{"getcacheentrydownloadurl"}
	cacheWrites  = []string{"createcacheentry", "finalizecacheentryupload"}
	rpcName      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z]+$`) })
	artifactsV3  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^_apis/pipelines/workflows/[0-9]+/artifacts($|/)`) })
	gitSmartHTTP = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^/[^/]+/[^/]+/(info/refs|git-upload-pack|git-receive-pack)$`)
	})
)

// classify says which route a request is on. p is the URL's path in
// lower case (services match without regard to case).
func (v *Vault) classify(host string, port int, method string, u *url.URL) (route, bool) {
	p := strings.ToLower(u.Path)
	at := func(e endpoint) (string, bool) {
		if e.host != host || e.port != port || !strings.HasPrefix(p, e.path) {
			return "", false
		}
		return strings.TrimPrefix(p, e.path), true
	}
	// The OIDC token endpoint first, exactly: it lies below the runtime
	// service's URL.
	for _, e := range v.ends.oidcs {
		if e.host == host && e.port == port && p == e.path {
			return route{name: "oidc", cred: e.cred, service: true, op: audience(u.RawQuery)}, true
		}
	}
	for _, e := range v.ends.results {
		if rest, ok := at(e); ok {
			switch {
			case strings.HasPrefix(rest, twirpCache):
				rpc := strings.TrimPrefix(rest, twirpCache)
				op := "unknown"
				switch {
				case slices.Contains(cacheReads, rpc):
					op = "read"
				case slices.Contains(cacheWrites, rpc):
					op = "write"
				}
				return route{name: "cache", cred: e.cred, service: true, op: op}, true
			case strings.HasPrefix(rest, twirpArtifact) && rpcName().MatchString(strings.TrimPrefix(rest, twirpArtifact)):
				return route{name: "artifacts", cred: e.cred, service: true}, true
			}
			return route{name: "actions", cred: e.cred, service: true, op: "unknown"}, true
		}
	}
	for _, e := range v.ends.cache {
		if rest, ok := at(e); ok {
			op := "unknown"
			switch {
			case strings.HasPrefix(rest, cacheV1) && (method == http.MethodGet || method == http.MethodHead):
				op = "read" // look up, download
			case strings.HasPrefix(rest, cacheV1):
				op = "write" // reserve (POST caches), upload (PATCH caches/id), commit (POST caches/id)
			}
			return route{name: "cache", cred: e.cred, service: true, op: op}, true
		}
	}
	for _, e := range v.ends.runtime {
		if rest, ok := at(e); ok {
			if artifactsV3().MatchString(rest) {
				return route{name: "artifacts", cred: e.cred, service: true}, true
			}
			return route{name: "actions", cred: e.cred, service: true, op: "unknown"}, true
		}
	}
	if a := v.ends.api; host == a.host && port == a.port && strings.HasPrefix(p, a.path) {
		op := "write"
		if method == http.MethodGet || method == http.MethodHead {
			op = "read"
		}
		return route{name: "api", kind: GitHubToken, op: op}, true
	}
	if s := v.ends.server; host == s.host && port == s.port {
		gitPath := strings.Replace(strings.TrimPrefix(p, strings.TrimSuffix(s.path, "/")), ".git/", "/", 1)
		if m := gitSmartHTTP().FindStringSubmatch(gitPath); m != nil {
			op := "fetch"
			if m[1] == "git-receive-pack" || strings.Contains(strings.ToLower(u.RawQuery), "receive-pack") {
				op = "push"
			}
			return route{name: "git", kind: GitHubToken, op: op}, true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.pol.Secrets)) {
		if slices.Contains(v.pol.Secrets[name], host) {
			return route{name: "secret " + name, kind: Secret + " " + name}, true
		}
	}
	return route{}, false
}

// audience is the one audience an OIDC token request names, or "" when
// it names none, several, or cannot be read plainly (a ';', a bad
// escape): servers differ in which of several they would take.
func audience(rawQuery string) string {
	var found []string
	for _, part := range strings.Split(rawQuery, "&") {
		if strings.Contains(part, ";") {
			return ""
		}
		k, val, _ := strings.Cut(part, "=")
		k, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(val)
		if err1 != nil || err2 != nil {
			return ""
		}
		if strings.EqualFold(k, "audience") {
			found = append(found, val)
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}

// decide is the credentials policy's verdict on a request of a route.
func (v *Vault) decide(r route) (allowed bool, rule, reason, suggest string) {
	switch r.name {
	case "cache":
		switch {
		case r.op == "unknown":
			return false, "credentials.cache", "this request to the Actions cache is not one airlock knows (restore, save): refused, so that the runtime token goes nowhere else", "use actions/cache or actions/toolkit's cache client"
		case v.pol.Cache == "none":
			return false, "credentials.cache", "the Actions cache is off for this job (credentials.cache: \"none\")", `set credentials.cache: "read" (or "readwrite") in the organisation policy`
		case r.op == "write" && v.pol.Cache != "readwrite":
			return false, "credentials.cache", "this job may restore the Actions cache but not save to it (credentials.cache: \"read\", the default for agent work): a pull request could otherwise poison what other jobs restore", `set credentials.cache: "readwrite" in the organisation policy`
		}
		return true, "credentials.cache", "", ""
	case "artifacts":
		if !v.pol.Artifacts {
			return false, "credentials.artifacts", "artifacts are off for this job (credentials.artifacts: false)", "set credentials.artifacts: true in the organisation policy"
		}
		return true, "credentials.artifacts", "", ""
	case "actions":
		return false, "credentials", "this request to the job's Actions services is not one airlock knows (cache, artifacts, OIDC token): refused, so that the runtime token goes nowhere else", "use the actions/toolkit clients (actions/cache, actions/upload-artifact, core.getIDToken)"
	case "oidc":
		switch {
		case r.op == "":
			return false, "credentials.oidc.audiences", "the OIDC token request does not name exactly one audience, plainly", "request the token with one audience parameter"
		case !slices.Contains(v.pol.OIDCAudiences, r.op):
			return false, "credentials.oidc.audiences", fmt.Sprintf("an OIDC token for audience %q is not allowed (credentials.oidc.audiences: %q)", r.op, v.pol.OIDCAudiences),
				fmt.Sprintf("add %q to credentials.oidc.audiences in the organisation policy", r.op)
		}
		return true, "credentials.oidc.audiences", "", ""
	case "git":
		if r.op == "push" && !v.pol.GitPush {
			return false, "credentials.gitPush", "git push with the job's token is refused for this job (credentials.gitPush: false, the default for agent work)", "set credentials.gitPush: true in the organisation policy"
		}
		return true, "credentials.gitPush", "", ""
	case "api":
		switch {
		case v.pol.API == "none":
			return false, "credentials.api", "the GitHub API with the job's token is off for this job (credentials.api: \"none\")", `set credentials.api: "read" (or "readwrite") in the organisation policy`
		case r.op == "write" && v.pol.API != "readwrite":
			return false, "credentials.api", "this job may read the GitHub API with its token but not write (credentials.api: \"read\", the default for agent work): a write (contents, refs, a merge, GraphQL) could do what git push would", `set credentials.api: "readwrite" in the organisation policy`
		}
		return true, "credentials.api", "", ""
	}
	return true, "credentials." + r.name, "", ""
}

// Decision is the credentials policy's answer for one request.
type Decision struct {
	// Route names the credential route the request is on; empty: none,
	// and the vault has no say in the request.
	Route string
	// Service: an Actions service route, which needs no egress.allow.
	Service bool
	// Allowed, Rule, Reason and Suggest are the verdict.
	Allowed               bool
	Rule, Reason, Suggest string
	// Injected are the credentials put back into the request, Echoes
	// what the gateway must blank in the response (the real values in
	// the forms they were sent in).
	Injected, Echoes []string
}

// Request is the vault's part of one request to host:port (method,
// decoded URL, headers as the sandbox sent them): whether the request is
// on a credential's route and the credentials policy lets it go; and,
// when it does, egressAllowed (or the route is an Actions service's) and
// it goes upstream over TLS, the real value of every credential that
// belongs there put back in place of its placeholder. A credential never
// goes upstream in clear; a placeholder where its credential does not
// belong goes as it is, and is counted. Decided and put back under one
// lock: what is decided is what is sent.
func (v *Vault) Request(host string, port int, method string, u *url.URL, h http.Header, egressAllowed, overTLS bool) Decision {
	v.mu.Lock()
	defer v.mu.Unlock()
	var carried []*credential
	for _, c := range v.creds {
		if c.in(h) {
			carried = append(carried, c)
		}
	}
	refuse := func(route, rule, reason, suggest string) Decision {
		if len(carried) == 0 {
			v.rec.refused("none", host, route, rule)
		}
		for _, c := range carried {
			v.rec.refused(c.label(), host, route, rule)
		}
		return Decision{Route: route, Rule: rule, Reason: reason, Suggest: suggest}
	}
	if len(carried) > 0 && !paths.PlainURLPath(u.Path, u.EscapedPath()) {
		return refuse("path", "credentials", fmt.Sprintf("the request carries the job's credentials to a path that is not in plain form (%q: a doubled slash, a dot segment or an encoded separator), which airlock will not classify", textsafe.Clip(u.EscapedPath(), 200, "...")), "send the request to the path itself")
	}
	r, onRoute := v.classify(host, port, method, u)
	if !onRoute {
		for _, c := range carried {
			v.rec.elsewhere(c.label(), host)
		}
		return Decision{Allowed: true}
	}
	d := Decision{Route: r.name, Service: r.service}
	if d.Allowed, d.Rule, d.Reason, d.Suggest = v.decide(r); !d.Allowed {
		refused := refuse(r.name, d.Rule, d.Reason, d.Suggest)
		refused.Service = r.service
		return refused
	}
	if !egressAllowed && !r.service {
		return d // the egress policy refuses it: nothing is put back
	}
	for _, c := range carried {
		belongs := c == r.cred || (r.kind != "" && slices.Contains(c.kinds, r.kind))
		if !belongs || !overTLS {
			v.rec.elsewhere(c.label(), host)
			continue
		}
		echoes, ok := c.putBack(h, r.kind != "" && strings.HasPrefix(r.kind, Secret+" "))
		if !ok {
			v.rec.elsewhere(c.label(), host) // not in a header it may be put back in
			continue
		}
		d.Injected = append(d.Injected, c.label())
		for _, e := range echoes {
			// And as an upstream could quote it in a URL.
			d.Echoes = append(d.Echoes, e)
			if q := url.QueryEscape(e); q != e {
				d.Echoes = append(d.Echoes, q)
			}
		}
		v.rec.injected(c.label(), host, r.name)
	}
	return d
}

// in reports whether a placeholder of c is in any header value of h
// (also inside basic auth).
func (c *credential) in(h http.Header) bool {
	for k, vs := range h {
		for _, val := range vs {
			if strings.Contains(val, c.ph) || strings.Contains(val, c.forms[1][1]) {
				return true
			}
			if strings.EqualFold(k, "Authorization") && strings.Contains(decodeBasic(val), c.ph) {
				return true
			}
		}
	}
	return false
}

// putBack replaces c's placeholder with its value in h, in every form:
// as it is (Bearer, token), and inside basic auth whatever the user
// name; in the Authorization header only, but for a secret (anyHeader:
// the policy named its hosts, and clients send some in headers of their
// own). It returns the header values as sent (what an upstream's echo
// would repeat) and whether anything was put back.
func (c *credential) putBack(h http.Header, anyHeader bool) (echoes []string, ok bool) {
	for k, vs := range h {
		auth := strings.EqualFold(k, "Authorization")
		if !auth && !anyHeader {
			continue
		}
		for i, val := range vs {
			was := val
			if auth {
				if dec := decodeBasic(val); strings.Contains(dec, c.ph) {
					blob := base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(dec, c.ph, c.real)))
					val = "Basic " + blob
					echoes = append(echoes, blob)
				}
			}
			for _, f := range c.forms {
				val = strings.ReplaceAll(val, f[1], f[0])
			}
			if val != was {
				h[k][i], ok = val, true
				echoes = append(echoes, c.real, val)
			}
		}
	}
	return echoes, ok
}

// decodeBasic is the credentials of an HTTP basic Authorization value,
// or "".
func decodeBasic(val string) string {
	scheme, b64, ok := strings.Cut(strings.TrimSpace(val), " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return ""
	}
	return string(b)
}
