// Package refusal writes the gateway's refusal of an HTTP request in the
// protocol of the endpoint it refuses, so that the client stops at once
// and shows airlock's reason in its own words: a twirp error for the
// Actions services, GitHub's JSON error for its REST API, an errors array
// for GraphQL, a text body that git prints as "remote: ...", the OCI
// distribution error for registries, npm's JSON error, and plain text
// for anything else. A client that cannot parse a refusal takes it for a
// flaky server and retries: @actions/cache's twirp client retries a body
// that is not JSON five times, with back-off, and then blames another
// job (its cacheTwirpClient.ts, retryableRequest).
//
// Layer 1: imports nothing of airlock's.
package refusal

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Protocol is how a client expects to be refused.
type Protocol string

// The protocols a refusal speaks.
const (
	Plain Protocol = "text"
	Twirp Protocol = "twirp"
	// CacheReservation is the cache service's answer to a reservation
	// (or a finalisation) it does not grant: 200 with ok false and a
	// message, which @actions/cache shows as a warning ("Cache
	// reservation failed: ..."); a twirp error there it logs only as
	// debug and replaces with "another job may be creating this cache"
	// (cache.ts, saveCacheV2).
	CacheReservation Protocol = "cache-reservation"
	REST             Protocol = "github-rest"
	GraphQL          Protocol = "graphql"
	Git              Protocol = "git"
	OCI              Protocol = "oci"
	NPM              Protocol = "npm"
	// Pip is plain text with airlock's words in the status line's
	// reason: pip shows requests' "403 Client Error: <reason> for url",
	// never the body.
	Pip Protocol = "pip"
)

// Of tells the protocol from the request: twirp's path (/twirp/...),
// GitHub's API (its host, a GHES /api/v3 path, or its media types), its
// GraphQL endpoint, git's smart HTTP paths and user agent, the OCI
// distribution paths (/v2/), npm's and pip's user agents. apiHost is the
// GitHub API host of the job ("" for api.github.com).
func Of(r *http.Request, apiHost string) Protocol {
	p, host := strings.ToLower(r.URL.Path), strings.ToLower(r.Host)
	if h, _, ok := strings.Cut(host, ":"); ok {
		host = h
	}
	if apiHost == "" {
		apiHost = "api.github.com"
	}
	ua := strings.ToLower(r.Header.Get("User-Agent"))
	api := host == strings.ToLower(apiHost) || strings.HasPrefix(p, "/api/v3/") || strings.Contains(r.Header.Get("Accept"), "vnd.github")
	switch {
	case strings.HasPrefix(p, "/twirp/") && (strings.HasSuffix(p, ".cacheservice/createcacheentry") || strings.HasSuffix(p, ".cacheservice/finalizecacheentryupload")):
		return CacheReservation
	case strings.HasPrefix(p, "/twirp/"):
		return Twirp
	case strings.HasSuffix(p, "/graphql") && (api || strings.HasPrefix(p, "/api/graphql") || p == "/graphql"):
		return GraphQL
	case api:
		return REST
	case strings.HasSuffix(p, "/info/refs") || strings.HasSuffix(p, "/git-upload-pack") || strings.HasSuffix(p, "/git-receive-pack") || strings.HasPrefix(ua, "git/"):
		return Git
	case p == "/v2" || strings.HasPrefix(p, "/v2/"):
		return OCI
	case strings.HasPrefix(ua, "npm/") || r.Header.Get("Npm-Command") != "":
		return NPM
	case strings.HasPrefix(ua, "pip/"):
		return Pip
	}
	return Plain
}

// DocsURL is where GitHub-shaped refusals point: what airlock refused and
// why is in the job's log and attestation.
const DocsURL = "https://github.com/airlock-ci/airlock/blob/main/docs/runner.md"

// Write answers 403 in p's shape (200 for a cache reservation, as the
// service itself declines one; the decision header says denied all the
// same). msg is airlock's one-line reason, starting "airlock: "; detail
// are more parts (the rule, what would allow it), lines of their own in
// plain text.
func Write(w http.ResponseWriter, p Protocol, msg string, detail ...string) {
	h := w.Header()
	h.Set("Connection", "close")
	full := strings.Join(append([]string{msg}, detail...), "; ")
	var body any
	status := http.StatusForbidden
	switch p {
	case CacheReservation:
		body, status = map[string]any{"ok": false, "message": full}, http.StatusOK
	case Twirp:
		// twirp's error: permission_denied is its 403.
		body = map[string]any{"code": "permission_denied", "msg": full, "meta": map[string]string{"refused_by": "airlock"}}
	case REST:
		body = map[string]any{"message": full, "documentation_url": DocsURL, "status": "403"}
	case GraphQL:
		// octokit's request error takes message; its GraphQL client
		// reads errors.
		body = map[string]any{"message": full, "documentation_url": DocsURL,
			"errors": []map[string]any{{"type": "FORBIDDEN", "message": full}}}
	case OCI:
		body = map[string]any{"errors": []map[string]any{{"code": "DENIED", "message": full, "detail": map[string]string{"refused_by": "airlock"}}}}
	case NPM:
		body = map[string]any{"error": full}
	}
	if body == nil {
		// Plain text, one line per part: git prints each line of a
		// text/plain error as "remote: ...".
		h.Set("Content-Type", "text/plain; charset=utf-8")
		text := strings.Join(append([]string{msg}, detail...), "\n") + "\n"
		if p == Pip && writeWithReason(w, msg, text) {
			return
		}
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(text))
		return
	}
	b, _ := json.Marshal(body)
	h.Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeWithReason writes a whole 403 response on the connection itself,
// with reason as its status line's reason phrase (net/http writes only
// the standard one), and closes it. False when the connection cannot be
// taken over (HTTP/2, a recorder): then nothing was written.
func writeWithReason(w http.ResponseWriter, reason, body string) bool {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return false
	}
	defer conn.Close()
	h := w.Header().Clone()
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Connection", "close")
	fmt.Fprintf(buf, "HTTP/1.1 403 %s\r\n", phrase(reason))
	h.Write(buf)
	buf.WriteString("\r\n" + body)
	buf.Flush()
	return true
}

// phrase keeps what a status line's reason may hold: printable ASCII,
// at most 400 bytes.
func phrase(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
	if len(s) > 400 {
		s = s[:400]
	}
	return s
}
