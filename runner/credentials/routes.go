package credentials

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-ci/airlock/policies"
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

// Policy is what requests carrying the job's credentials may do.
type Policy struct {
	// Cache is "readwrite", "read" or "none".
	Cache         string
	GitPush       bool
	Artifacts     bool
	OIDCAudiences []string
	// Secrets maps a workflow secret's variable to the hosts it may go to.
	Secrets map[string][]string
}

// PolicyFor is the policy's credentials section for a job; agent work
// gets the stricter defaults (cache read only, no git push).
func PolicyFor(c policies.Credentials, agent bool) Policy {
	p := Policy{Cache: c.Cache, Artifacts: c.Artifacts, OIDCAudiences: c.OIDC.Audiences, Secrets: map[string][]string{}}
	if p.Cache == "" {
		p.Cache = "readwrite"
		if agent {
			p.Cache = "read"
		}
	}
	p.GitPush = !agent
	if c.GitPush != nil {
		p.GitPush = *c.GitPush
	}
	for name, s := range c.Secrets {
		for _, h := range s.Hosts {
			p.Secrets[name] = append(p.Secrets[name], strings.ToLower(h))
		}
	}
	return p
}

// cacheRank orders the cache modes from the strictest.
var cacheRank = map[string]int{"none": 0, "read": 1, "readwrite": 2}

// Loosens lists what p allows that org does not: where a repository's
// policy would loosen the organisation's (each for the same job, its
// defaults applied). A repository may only narrow.
func (p Policy) Loosens(org Policy) []string {
	var out []string
	if cacheRank[p.Cache] > cacheRank[org.Cache] {
		out = append(out, fmt.Sprintf("credentials.cache: %q where the organisation's is %q", p.Cache, org.Cache))
	}
	if p.GitPush && !org.GitPush {
		out = append(out, "credentials.gitPush: true where the organisation's is false")
	}
	if p.Artifacts && !org.Artifacts {
		out = append(out, "credentials.artifacts: true where the organisation's is false")
	}
	for _, a := range p.OIDCAudiences {
		if !slices.Contains(org.OIDCAudiences, a) {
			out = append(out, fmt.Sprintf("credentials.oidc.audiences: %q, which the organisation's does not list", a))
		}
	}
	for name, hosts := range p.Secrets {
		if orgHosts, ok := org.Secrets[name]; ok {
			for _, h := range hosts {
				if !slices.Contains(orgHosts, h) {
					out = append(out, fmt.Sprintf("credentials.secrets.%s: host %q, which the organisation's does not list", name, h))
				}
			}
		}
	}
	return out
}

// endpoint is where a URL points: host, port and the path below which
// its service lives.
type endpoint struct {
	host string
	port int
	path string
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
	p := path.Clean("/" + u.Path)
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return endpoint{host: strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")), port: port, path: p}, true
}

// endpoints are the job's own service URLs, as its steps' environments
// name them.
type endpoints struct {
	server, api                    endpoint
	results, cache, runtime, oidcs []endpoint
	// ca are the domains the job's CA may sign for: where a credential
	// may be put back, known when the job starts.
	ca []string
}

func (e *endpoints) learnGitHub(serverURL, apiURL string) {
	if s, ok := parseEndpoint(serverURL); ok {
		e.server = s
		e.ca = append(e.ca, s.host)
		if s.host == "github.com" {
			// GitHub's Actions services (results, cache, pipelines,
			// token) live below this domain.
			e.ca = append(e.ca, "actions.githubusercontent.com")
		}
	}
	if a, ok := parseEndpoint(apiURL); ok {
		e.api = a
		if !slices.Contains(e.ca, a.host) {
			e.ca = append(e.ca, a.host)
		}
	}
}

// learn takes the Actions service URLs from a step's environment.
func (e *endpoints) learn(env map[string]string) {
	for _, l := range []struct {
		name string
		list *[]endpoint
	}{
		{"ACTIONS_RESULTS_URL", &e.results}, {"ACTIONS_CACHE_URL", &e.cache},
		{"ACTIONS_RUNTIME_URL", &e.runtime}, {"ACTIONS_ID_TOKEN_REQUEST_URL", &e.oidcs},
	} {
		if ep, ok := parseEndpoint(env[l.name]); ok && !slices.Contains(*l.list, ep) {
			if l.name == "ACTIONS_ID_TOKEN_REQUEST_URL" {
				// The request URL is the token endpoint itself.
				ep.path = strings.TrimSuffix(ep.path, "/")
			}
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

// CAHosts are the domains the job's CA must be able to sign for, so that
// the gateway can put credentials back into HTTPS requests: the GitHub
// server's and API's hosts (with GitHub's Actions service domain for
// github.com) and the hosts of the policy's secrets.
func (v *Vault) CAHosts() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := slices.Clone(v.ends.ca)
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
	// "api", "git", "runtime", "secret NPM_TOKEN").
	name string
	// kind is the credential kind that may be put back on it.
	kind string
	// service: an Actions service route, which the credentials policy
	// allows by itself.
	service bool
	// op is what the request does, for the policy ("read", "write",
	// "push", an audience).
	op string
}

var (
	twirpCache    = "/twirp/github.actions.results.api.v1.CacheService/"
	twirpArtifact = "/twirp/github.actions.results.api.v1.ArtifactService/"
	gitSmartHTTP  = regexp.MustCompile(`^/[^/]+/[^/]+/(info/refs|git-upload-pack|git-receive-pack)$`)
)

// routeOf classifies a request by where it goes.
func (v *Vault) routeOf(host string, port int, method string, u *url.URL) (route, bool) {
	p := u.Path
	under := func(l []endpoint) (endpoint, bool) {
		for _, e := range l {
			if e.host == host && e.port == port && strings.HasPrefix(p, e.path) {
				return e, true
			}
		}
		return endpoint{}, false
	}
	if _, ok := under(v.ends.results); ok {
		switch {
		case strings.HasPrefix(p, twirpCache):
			op := "read"
			if rpc := strings.TrimPrefix(p, twirpCache); rpc == "CreateCacheEntry" || rpc == "FinalizeCacheEntryUpload" {
				op = "write"
			}
			return route{name: "cache", kind: RuntimeToken, service: true, op: op}, true
		case strings.HasPrefix(p, twirpArtifact):
			return route{name: "artifacts", kind: RuntimeToken, service: true}, true
		}
		return route{name: "results", kind: RuntimeToken, service: true}, true
	}
	if e, ok := under(v.ends.cache); ok {
		op := "read"
		if rest := strings.TrimPrefix(p, e.path); strings.HasPrefix(rest, "_apis/artifactcache/caches") && method != http.MethodGet {
			op = "write" // reserve (POST caches), upload (PATCH caches/id), commit (POST caches/id)
		}
		return route{name: "cache", kind: RuntimeToken, service: true, op: op}, true
	}
	if _, ok := under(v.ends.runtime); ok {
		if strings.Contains(p, "/artifacts") {
			return route{name: "artifacts", kind: RuntimeToken, service: true}, true
		}
		return route{name: "runtime", kind: RuntimeToken, service: true}, true
	}
	for _, e := range v.ends.oidcs {
		if e.host == host && e.port == port && p == e.path {
			return route{name: "oidc", kind: OIDCRequestToken, service: true, op: u.Query().Get("audience")}, true
		}
	}
	if host == v.ends.api.host && port == v.ends.api.port && strings.HasPrefix(p, v.ends.api.path) {
		return route{name: "api", kind: GitHubToken}, true
	}
	if host == v.ends.server.host && port == v.ends.server.port {
		gitPath := strings.Replace(strings.TrimPrefix(p, strings.TrimSuffix(v.ends.server.path, "/")), ".git/", "/", 1)
		if m := gitSmartHTTP.FindStringSubmatch(gitPath); m != nil {
			op := "fetch"
			if m[1] == "git-receive-pack" || u.Query().Get("service") == "git-receive-pack" {
				op = "push"
			}
			return route{name: "git", kind: GitHubToken, op: op}, true
		}
	}
	for name, hosts := range v.pol.Secrets {
		if slices.Contains(hosts, host) {
			return route{name: "secret " + name, kind: Secret + " " + name}, true
		}
	}
	return route{}, false
}

// decide is the credentials policy's verdict on a request of a route.
func (v *Vault) decide(r route) (allowed bool, rule, reason, suggest string) {
	switch r.name {
	case "cache":
		switch {
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
	case "oidc":
		if !slices.Contains(v.pol.OIDCAudiences, r.op) {
			return false, "credentials.oidc.audiences", fmt.Sprintf("an OIDC token for audience %q is not allowed (credentials.oidc.audiences: %q)", r.op, v.pol.OIDCAudiences),
				fmt.Sprintf("add %q to credentials.oidc.audiences in the organisation policy", r.op)
		}
		return true, "credentials.oidc.audiences", "", ""
	case "git":
		if r.op == "push" && !v.pol.GitPush {
			return false, "credentials.gitPush", "git push with the job's token is refused for this job (credentials.gitPush: false, the default for agent work)", "set credentials.gitPush: true in the organisation policy"
		}
		return true, "credentials.gitPush", "", ""
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
}

// Decide says whether a request to host:port (method, decoded URL,
// headers as the sandbox sent them) is on a credential's route, and
// whether the credentials policy lets it go. A refusal is counted for
// each credential whose placeholder the request carried.
func (v *Vault) Decide(host string, port int, method string, u *url.URL, h http.Header) Decision {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, onRoute := v.routeOf(host, port, method, u)
	if !onRoute {
		return Decision{Allowed: true}
	}
	d := Decision{Route: r.name, Service: r.service}
	d.Allowed, d.Rule, d.Reason, d.Suggest = v.decide(r)
	if !d.Allowed {
		carried := false
		for _, c := range v.creds {
			if c.in(h) {
				v.rec.refused(c.label(), host, r.name, d.Rule)
				carried = true
			}
		}
		if !carried {
			v.rec.refused("none", host, r.name, d.Rule)
		}
	}
	return d
}

// PutBack puts the real value of every credential whose route this
// request is on back in place of its placeholder in the headers, in
// every form, and returns their names and real values (for the gateway
// to blank an upstream's echo of them). A placeholder of a credential
// that does not belong here stays as it is, and is counted. Call it only
// for a request that is allowed and goes upstream over TLS.
func (v *Vault) PutBack(host string, port int, method string, u *url.URL, h http.Header) (names, values []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, onRoute := v.routeOf(host, port, method, u)
	for _, c := range v.creds {
		if !c.in(h) {
			continue
		}
		if !onRoute || !slices.Contains(c.kinds, r.kind) {
			v.rec.elsewhere(c.label(), host)
			continue
		}
		c.putBack(h)
		names = append(names, c.label())
		values = append(values, c.real, basicAuth(c.real))
		v.rec.injected(c.label(), host, r.name)
	}
	return names, values
}

// Elsewhere counts the placeholders a request carries that go out as
// they are: a request in clear, into which nothing is ever put back.
func (v *Vault) Elsewhere(host string, h http.Header) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.creds {
		if c.in(h) {
			v.rec.elsewhere(c.label(), host)
		}
	}
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
// as it is (Bearer, token, a custom header), and inside basic auth
// whatever the user name.
func (c *credential) putBack(h http.Header) {
	for k, vs := range h {
		for i, val := range vs {
			if strings.EqualFold(k, "Authorization") {
				if dec := decodeBasic(val); strings.Contains(dec, c.ph) {
					val = "Basic " + base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(dec, c.ph, c.real)))
				}
			}
			for _, f := range c.forms {
				val = strings.ReplaceAll(val, f[1], f[0])
			}
			h[k][i] = val
		}
	}
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
