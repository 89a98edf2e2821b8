package refusal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// protocols are the shapes Write speaks, and one it does not know.
var protocols = []Protocol{Plain, Twirp, CacheReservation, REST, GraphQL, Git, OCI, NPM, Pip, "unknown"}

// jsonText is s as a JSON decoder gives it back: encoding/json writes
// each byte that is not valid UTF-8 as U+FFFD.
func jsonText(s string) string { return string([]rune(s)) }

// readBack is what p's client reads from a refusal's body: the message
// and whether the answer says refused in that client's terms. It is
// strict: one JSON value and a newline, the fields the client reads
// present, with the values that mean no.
func readBack(p Protocol, body []byte) (msg string, refused bool, err error) {
	switch p {
	case Plain, Git, Pip, "unknown":
		return string(body), true, nil
	}
	if len(body) == 0 || body[len(body)-1] != '\n' {
		return "", false, io.ErrUnexpectedEOF
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var v struct {
		OK      *bool             `json:"ok"`
		Message *string           `json:"message"`
		Code    string            `json:"code"`
		Msg     *string           `json:"msg"`
		Meta    map[string]string `json:"meta"`
		Docs    string            `json:"documentation_url"`
		Status  string            `json:"status"`
		Error   *string           `json:"error"`
		Errors  []struct {
			Type, Code string
			Message    *string
			Detail     map[string]string
		} `json:"errors"`
	}
	if err := dec.Decode(&v); err != nil {
		return "", false, err
	}
	if dec.More() || dec.InputOffset() != int64(len(body)-1) {
		return "", false, io.ErrShortBuffer
	}
	str := func(s *string) string {
		if s == nil {
			return "\x00missing"
		}
		return *s
	}
	switch p {
	case CacheReservation:
		return str(v.Message), v.OK != nil && !*v.OK, nil
	case Twirp:
		return str(v.Msg), v.Code == "permission_denied" && v.Meta["refused_by"] == "airlock", nil
	case REST:
		return str(v.Message), v.Docs == DocsURL && v.Status == "403", nil
	case GraphQL:
		if len(v.Errors) != 1 || str(v.Errors[0].Message) != str(v.Message) {
			return "", false, nil
		}
		return str(v.Message), v.Errors[0].Type == "FORBIDDEN" && v.Docs == DocsURL, nil
	case OCI:
		if len(v.Errors) != 1 {
			return "", false, nil
		}
		return str(v.Errors[0].Message), v.Errors[0].Code == "DENIED" && v.Errors[0].Detail["refused_by"] == "airlock", nil
	case NPM:
		return str(v.Error), true, nil
	}
	return "", false, nil
}

// checkWrite asserts the properties of Write(p, msg, detail...) answered
// on w (a recorder).
func checkWrite(t *testing.T, p Protocol, w *httptest.ResponseRecorder, msg string, detail []string) {
	t.Helper()
	wantStatus := http.StatusForbidden
	if p == CacheReservation {
		wantStatus = http.StatusOK // with ok false: the service's own no
	}
	if w.Code != wantStatus {
		t.Fatalf("%s: status %d, want %d", p, w.Code, wantStatus)
	}
	if w.Header().Get("Connection") != "close" {
		t.Fatalf("%s: Connection %q, want close", p, w.Header().Get("Connection"))
	}
	text := strings.Join(append([]string{msg}, detail...), "\n") + "\n"
	want, ctype := jsonText(strings.Join(append([]string{msg}, detail...), "; ")), "application/json; charset=utf-8"
	switch p {
	case Plain, Git, Pip, "unknown":
		want, ctype = text, "text/plain; charset=utf-8"
	}
	if got := w.Header().Get("Content-Type"); got != ctype {
		t.Fatalf("%s: Content-Type %q, want %q", p, got, ctype)
	}
	got, refused, err := readBack(p, w.Body.Bytes())
	if err != nil || !refused {
		t.Fatalf("%s: the client reads refused=%v (%v) from %q", p, refused, err, w.Body.Bytes())
	}
	if got != want {
		t.Fatalf("%s: the client reads %q, want %q", p, got, want)
	}
}

// FuzzWrite writes a refusal with an arbitrary message and details
// (newlines, quotes, invalid UTF-8, NULs, huge strings) in every
// protocol. Properties, per protocol: the answer is a refusal in that
// client's terms, never an allowance (403; for a cache reservation 200
// with ok false; twirp permission_denied; OCI DENIED; GraphQL one
// FORBIDDEN error), with the content type the client parses and
// Connection: close; the body is exactly one JSON value and a newline
// (or the text lines); and reading it back as the client does gives the
// message and details exactly (round trip; JSON turns invalid UTF-8 into
// U+FFFD, byte by byte).
func FuzzWrite(f *testing.F) {
	const msg = "airlock: denied POST api.github.com:443/repos/acme/app/issues: writes with the job's token are refused for agent work"
	for i := range protocols {
		f.Add(byte(i), msg, "to allow it: nothing, for agent work", "", byte(1))
	}
	f.Add(byte(8), "airlock: denied GET registry.test:80/simple/x/: not allowed\r\nInjected: header", "rule: x", "", byte(1))
	f.Add(byte(0), "", "", "", byte(0))
	f.Add(byte(1), "\xff\xfe\"}\n{\"code\":\"ok\"", "\u2028\u2029</script>", "\x00", byte(2))
	f.Add(byte(2), `"ok": true, "message": "`, `\u0000`, "}", byte(2))
	f.Add(byte(7), strings.Repeat("x", 1<<16), "\r\n\r\nHTTP/1.1 200 OK", "", byte(2))
	f.Fuzz(func(t *testing.T, pi byte, msg, d1, d2 string, nd byte) {
		p := protocols[int(pi)%len(protocols)]
		detail := []string{d1, d2}[:int(nd)%3]
		w := httptest.NewRecorder()
		Write(w, p, msg, detail...)
		checkWrite(t, p, w, msg, detail)
	})
}

// pipServer answers every request with Write(Pip, ...) of the message and
// details it carries in its headers (as raw bytes, base 16), with the
// decision header set as the gateway sets it.
func pipServer(tb testing.TB) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Airlock-Decision", "denied; rule=\"x\"")
		var parts []string
		for _, k := range []string{"X-Msg", "X-D1", "X-D2"} {
			if v, ok := r.Header[k]; ok {
				b, _ := hexDecode(v[0])
				parts = append(parts, string(b))
			}
		}
		if len(parts) == 0 {
			parts = []string{""}
		}
		Write(w, Pip, parts[0], parts[1:]...)
	}))
	tb.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func hexDecode(s string) ([]byte, error) {
	b := make([]byte, len(s)/2)
	for i := range b {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, err
		}
		b[i] = byte(v)
	}
	return b, nil
}

func hexEncode(b string) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for i := 0; i < len(b); i++ {
		out = append(out, digits[b[i]>>4], digits[b[i]&15])
	}
	return string(out)
}

// FuzzWritePip writes pip's refusal over a real connection, where it
// takes the connection over to put airlock's words in the status line.
// Properties: exactly one response comes back, and nothing after it
// (the message cannot split it in two); its status is 403 with a reason
// of printable ASCII, at most 400 bytes, that is the message itself when
// the message is printable ASCII that fits; its headers are the ones set
// (the message adds none); and the body is the message and details,
// one per line, exactly.
func FuzzWritePip(f *testing.F) {
	addr := pipServer(f)
	f.Add("airlock: denied GET registry.test:80/simple/x/: not allowed\r\nInjected: header", "rule: x", "", byte(1))
	f.Add("airlock: denied GET registry.test:80/simple/requests/: registry.test is not in egress.allow", "rule: default-deny", "to allow it: add {host: \"registry.test\", ports: [80]} to egress.allow", byte(2))
	f.Add("", "", "", byte(0))
	f.Add("x\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "\n", "\r", byte(2))
	f.Add(strings.Repeat("é", 300), "\xff", "\x00\x7f", byte(2))
	f.Fuzz(func(t *testing.T, msg, d1, d2 string, nd byte) {
		if len(msg)+len(d1)+len(d2) > 12<<10 {
			return // past the request headers that carry them
		}
		detail := []string{d1, d2}[:int(nd)%3]
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req := "GET /simple/x/ HTTP/1.1\r\nHost: registry.test\r\nUser-Agent: pip/23.2.1\r\nX-Msg: " + hexEncode(msg) + "\r\n"
		for i, d := range detail {
			req += "X-D" + strconv.Itoa(i+1) + ": " + hexEncode(d) + "\r\n"
		}
		if _, err := io.WriteString(c, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading the refusal: %v", err)
		}
		br := bufio.NewReader(bytes.NewReader(raw))
		line, _ := br.ReadString('\n')
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("the refusal does not parse: %v: %q", err, raw)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("the refusal's body: %v", err)
		}
		text := strings.Join(append([]string{msg}, detail...), "\n") + "\n"
		if string(body) != text {
			t.Fatalf("body %q, want %q", body, text)
		}
		if n := len(raw) - len(body); !bytes.HasSuffix(raw, body) || !bytes.Contains(raw[:n], []byte("\r\n\r\n")) || bytes.Index(raw, []byte("\r\n\r\n")) != n-4 {
			t.Fatalf("more than one response, or bytes after it: %q", raw)
		}
		reason, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r\n"), "HTTP/1.1 403 ")
		if !ok || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status line %q", line)
		}
		if len(reason) > 400 || strings.IndexFunc(reason, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			t.Fatalf("reason %q: not printable ASCII of at most 400 bytes", reason)
		}
		if printable := strings.IndexFunc(msg, func(r rune) bool { return r < 0x20 || r > 0x7e }) < 0; printable && len(msg) <= 400 && reason != msg {
			t.Fatalf("reason %q, want the message %q", reason, msg)
		}
		if !resp.Close {
			t.Fatalf("the refusal does not say Connection: close: %q", raw)
		}
		// (net/http takes Connection out of the header into Close.)
		want := map[string]string{"Content-Type": "text/plain; charset=utf-8", "Content-Length": strconv.Itoa(len(text)), "X-Airlock-Decision": "denied; rule=\"x\""}
		for k, v := range resp.Header {
			if len(v) != 1 || want[k] != v[0] {
				if k == "Date" {
					continue
				}
				t.Fatalf("header %s: %q, want %q (all: %v)", k, v, want[k], resp.Header)
			}
		}
		if len(resp.Header) < len(want) {
			t.Fatalf("headers %v, want %v", resp.Header, want)
		}
	})
}

// FuzzOf parses arbitrary bytes as a request (as the gateway's HTTP
// server does) and tells its protocol. Properties: Of never panics and
// names one of the protocols Write speaks; twirp's path is always
// answered in twirp (a cache reservation or finalisation exactly on
// their two RPCs, which get the service's own "no"); a request to the
// job's API host is answered in GitHub's shapes; and the refusal Write
// then gives is a refusal in that protocol (FuzzWrite's properties).
func FuzzOf(f *testing.F) {
	for _, s := range []struct{ req, apiHost string }{
		{"POST /twirp/github.actions.results.api.v1.CacheService/CreateCacheEntry HTTP/1.1\r\nHost: results-receiver.actions.githubusercontent.com\r\n\r\n", ""},
		{"POST /twirp/github.actions.results.api.v1.CacheService/FinalizeCacheEntryUpload HTTP/1.1\r\nHost: results-receiver.actions.githubusercontent.com\r\n\r\n", ""},
		{"POST /twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL HTTP/1.1\r\nHost: results-receiver.actions.githubusercontent.com\r\n\r\n", ""},
		{"POST /twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact HTTP/1.1\r\nHost: results-receiver.actions.githubusercontent.com\r\n\r\n", ""},
		{"POST /repos/acme/app/issues HTTP/1.1\r\nHost: api.github.com\r\nAccept: application/vnd.github.v3+json\r\n\r\n", ""},
		{"DELETE /api/v3/repos/acme/app/git/refs/heads/x HTTP/1.1\r\nHost: ghes.example\r\n\r\n", "ghes.example"},
		{"POST /graphql HTTP/1.1\r\nHost: api.github.com\r\n\r\n", ""},
		{"POST /api/graphql HTTP/1.1\r\nHost: ghes.example\r\n\r\n", "ghes.example"},
		{"GET /acme/app.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: github.com\r\nUser-Agent: git/2.39.5\r\n\r\n", ""},
		{"POST /acme/app.git/git-receive-pack HTTP/1.1\r\nHost: github.com\r\n\r\n", ""},
		{"GET /v2/ HTTP/1.1\r\nHost: ghcr.io\r\nUser-Agent: docker/28.2.2\r\n\r\n", ""},
		{"HEAD /v2/acme/app/manifests/latest HTTP/1.1\r\nHost: registry.test\r\n\r\n", ""},
		{"GET /left-pad HTTP/1.1\r\nHost: registry.test\r\nUser-Agent: npm/11.1.0 node/v20.20.2 linux x64\r\nNpm-Command: install\r\n\r\n", ""},
		{"GET /simple/requests/ HTTP/1.1\r\nHost: registry.test\r\nUser-Agent: pip/23.2.1 {}\r\n\r\n", ""},
		{"GET /x HTTP/1.1\r\nHost: registry.test\r\nUser-Agent: curl/7.88.1\r\n\r\n", ""},
		{"GET http://API.GITHUB.COM:443/TWIRP/x HTTP/1.1\r\nHost: evil\r\n\r\n", ""},
		{"GET /%74wirp/x HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", "::1"},
		{"CONNECT api.github.com:443 HTTP/1.1\r\nHost: api.github.com:443\r\n\r\n", ""},
	} {
		f.Add([]byte(s.req), s.apiHost)
	}
	f.Fuzz(func(t *testing.T, raw []byte, apiHost string) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		p := Of(r, apiHost)
		known := false
		for _, q := range protocols[:len(protocols)-1] {
			known = known || p == q
		}
		if !known {
			t.Fatalf("Of = %q, not a protocol Write speaks", p)
		}
		path := strings.ToLower(r.URL.Path)
		twirp := strings.HasPrefix(path, "/twirp/")
		reservation := twirp && (strings.HasSuffix(path, ".cacheservice/createcacheentry") || strings.HasSuffix(path, ".cacheservice/finalizecacheentryupload"))
		switch {
		case reservation != (p == CacheReservation):
			t.Fatalf("path %q: Of = %s", r.URL.Path, p)
		case twirp && !reservation && p != Twirp, !twirp && p == Twirp:
			t.Fatalf("path %q: Of = %s", r.URL.Path, p)
		}
		host := strings.ToLower(r.Host)
		if h, _, ok := strings.Cut(host, ":"); ok {
			host = h
		}
		api := apiHost
		if api == "" {
			api = "api.github.com"
		}
		if host == strings.ToLower(api) && !twirp && p != REST && p != GraphQL {
			t.Fatalf("a request to the API host %q: Of = %s", r.Host, p)
		}
		w := httptest.NewRecorder()
		Write(w, p, "airlock: denied "+r.Method+" "+r.Host+r.URL.Path, "rule: x")
		checkWrite(t, p, w, "airlock: denied "+r.Method+" "+r.Host+r.URL.Path, []string{"rule: x"})
	})
}
