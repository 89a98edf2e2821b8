package testhost

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// newFake is the fake's handler, served in process (no socket).
func newFake(t *testing.T) (*GitHub, http.Handler) {
	t.Helper()
	g := newGitHub("127.0.0.1", t.TempDir())
	return g, g.handler(t.TempDir())
}

// request is one request to the fake.
type request struct {
	method, url string
	header      map[string]string
	body        string
	noLength    bool // chunked: no Content-Length
}

func (q request) do(h http.Handler) *httptest.ResponseRecorder {
	r := httptest.NewRequest(q.method, q.url, strings.NewReader(q.body))
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	if q.noLength {
		r.ContentLength = -1
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func blockID(n int) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "block-%06d", n))
}

func blockList(kind string, ids ...string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><BlockList>`)
	for _, id := range ids {
		fmt.Fprintf(&b, "<%s>%s</%s>", kind, id, kind)
	}
	b.WriteString("</BlockList>")
	return b.String()
}

var blockBlob = map[string]string{"x-ms-blob-type": "BlockBlob"}

// A blob made as the SDK makes one: blocks staged out of order (as
// concurrent stageBlock calls arrive), committed in the list's order,
// read whole, by range, by HEAD and conditionally; then replaced whole.
func TestBlobStoreRoundTrip(t *testing.T) {
	g, h := newFake(t)
	const path = "/artifacts/run-1/job-1/my artifact.zip"
	up := g.sign.sign(path, "cw", time.Now().Add(time.Hour))
	down := g.sign.sign(path, "r", time.Now().Add(time.Hour))
	if !strings.Contains(up, "/my%20artifact.zip?sig=") || !strings.HasSuffix(up, "&sp=cw") {
		t.Fatalf("upload URL %s", up)
	}
	parts := []string{"first-", "second-", "third"}
	for _, i := range []int{2, 0, 1} {
		w := request{method: "PUT", url: up + "&comp=block&blockid=" + blockID(i), body: parts[i]}.do(h)
		if w.Code != 201 || w.Header().Get("x-ms-request-id") == "" {
			t.Fatalf("Put Block %d: %d %s", i, w.Code, w.Body)
		}
	}
	w := request{method: "PUT", url: up + "&comp=blocklist", header: map[string]string{"x-ms-blob-content-type": "zip"}, body: blockList("Latest", blockID(0), blockID(1), blockID(2))}.do(h)
	if w.Code != 201 || w.Header().Get("ETag") == "" {
		t.Fatalf("Put Block List: %d %s", w.Code, w.Body)
	}
	etag := w.Header().Get("ETag")
	for _, c := range []struct {
		name   string
		req    request
		status int
		body   string
		header map[string]string
	}{
		{"whole", request{method: "GET", url: down}, 200, "first-second-third",
			map[string]string{"Content-Length": "18", "Content-Type": "zip", "ETag": etag, "x-ms-blob-type": "BlockBlob", "Accept-Ranges": "bytes"}},
		{"x-ms-range across blocks", request{method: "GET", url: down, header: map[string]string{"x-ms-range": "bytes=3-8"}}, 206, "st-sec",
			map[string]string{"Content-Range": "bytes 3-8/18", "Content-Length": "6"}},
		{"open range", request{method: "GET", url: down, header: map[string]string{"Range": "bytes=13-"}}, 206, "third",
			map[string]string{"Content-Range": "bytes 13-17/18"}},
		{"properties", request{method: "HEAD", url: down}, 200, "", map[string]string{"Content-Length": "18", "ETag": etag}},
		{"if-match", request{method: "GET", url: down, header: map[string]string{"If-Match": etag, "x-ms-range": "bytes=0-4"}}, 206, "first", nil},
		{"if-none-match", request{method: "GET", url: down, header: map[string]string{"If-None-Match": etag}}, 304, "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := c.req.do(h)
			if w.Code != c.status || w.Body.String() != c.body {
				t.Errorf("%d %q, want %d %q", w.Code, w.Body, c.status, c.body)
			}
			for k, v := range c.header {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
	if w := (request{method: "PUT", url: up, header: blockBlob, body: "whole"}).do(h); w.Code != 201 {
		t.Fatalf("Put Blob over it: %d %s", w.Code, w.Body)
	}
	if got := g.blobs.content(path); string(got) != "whole" {
		t.Errorf("after Put Blob: %q", got)
	}
	if g.blobs.used != 5 {
		t.Errorf("the store holds %d bytes, want 5 (the replaced blocks freed)", g.blobs.used)
	}
}

// What the blob store refuses, each in Azure's words (x-ms-error-code and
// an XML <Error> with that <Code>).
func TestBlobStoreRefuses(t *testing.T) {
	const path = "/caches/0123"
	for _, c := range []struct {
		name   string
		setup  []request // run first, each must succeed
		req    func(up, down string) request
		status int
		code   string
	}{
		{"tampered signature", nil, func(up, _ string) request {
			return request{method: "PUT", url: strings.Replace(up, "sig=", "sig=A", 1), header: blockBlob, body: "x"}
		}, 403, "AuthenticationFailed"},
		{"no signature", nil, func(string, string) request {
			return request{method: "GET", url: "https://blob.github.test" + path}
		}, 403, "AuthenticationFailed"},
		{"another blob's signature", nil, func(up, _ string) request {
			return request{method: "PUT", url: strings.Replace(up, "/0123?", "/0124?", 1), header: blockBlob, body: "x"}
		}, 403, "AuthenticationFailed"},
		{"permissions widened", nil, func(_, down string) request {
			return request{method: "PUT", url: strings.Replace(down, "sp=r", "sp=rcw", 1), header: blockBlob, body: "x"}
		}, 403, "AuthenticationFailed"},
		{"expired", nil, func(string, string) request {
			return request{method: "GET", url: newURLSigner().sign(path, "r", time.Now().Add(-time.Minute))}
		}, 403, "AuthenticationFailed"},
		{"write with a read URL", nil, func(_, down string) request {
			return request{method: "PUT", url: down + "&comp=block&blockid=" + blockID(0), body: "x"}
		}, 403, "AuthorizationPermissionMismatch"},
		{"read with a write URL", nil, func(up, _ string) request { return request{method: "GET", url: up} }, 403, "AuthorizationPermissionMismatch"},
		{"block list naming a block never staged", []request{{method: "PUT", url: "UP&comp=block&blockid=" + blockID(0), body: "x"}}, func(up, _ string) request {
			return request{method: "PUT", url: up + "&comp=blocklist", body: blockList("Latest", blockID(0), blockID(1))}
		}, 400, "InvalidBlockList"},
		{"committed block that is only staged", []request{{method: "PUT", url: "UP&comp=block&blockid=" + blockID(0), body: "x"}}, func(up, _ string) request {
			return request{method: "PUT", url: up + "&comp=blocklist", body: blockList("Committed", blockID(0))}
		}, 400, "InvalidBlockList"},
		{"block list not XML", nil, func(up, _ string) request {
			return request{method: "PUT", url: up + "&comp=blocklist", body: "<BlockList><Latest>"}
		}, 400, "InvalidXmlDocument"},
		{"block ids of two lengths", []request{{method: "PUT", url: "UP&comp=block&blockid=" + blockID(0), body: "x"}}, func(up, _ string) request {
			return request{method: "PUT", url: up + "&comp=block&blockid=" + base64.StdEncoding.EncodeToString([]byte("short")), body: "y"}
		}, 400, "InvalidBlobOrBlock"},
		{"block id not base64", nil, func(up, _ string) request {
			return request{method: "PUT", url: up + "&comp=block&blockid=not*base64", body: "x"}
		}, 400, "InvalidQueryParameterValue"},
		{"put blob with no blob type", nil, func(up, _ string) request { return request{method: "PUT", url: up, body: "x"} }, 400, "MissingRequiredHeader"},
		{"page blob", nil, func(up, _ string) request {
			return request{method: "PUT", url: up, header: map[string]string{"x-ms-blob-type": "PageBlob"}}
		}, 400, "InvalidHeaderValue"},
		{"no content length", nil, func(up, _ string) request {
			return request{method: "PUT", url: up, header: blockBlob, body: "x", noLength: true}
		}, 411, "MissingContentLengthHeader"},
		{"content-md5 mismatch", nil, func(up, _ string) request {
			return request{method: "PUT", url: up, header: map[string]string{"x-ms-blob-type": "BlockBlob", "Content-MD5": "AAAAAAAAAAAAAAAAAAAAAA=="}, body: "x"}
		}, 400, "Md5Mismatch"},
		{"over the memory bound", nil, func(up, _ string) request {
			return request{method: "PUT", url: up, header: blockBlob, body: strings.Repeat("x", 1025)}
		}, 413, "RequestBodyTooLarge"},
		{"structured body", nil, func(up, _ string) request {
			return request{method: "PUT", url: up, header: map[string]string{"x-ms-blob-type": "BlockBlob", "x-ms-structured-body": "XSM/1.0; properties=crc64"}, body: "x"}
		}, 400, "UnsupportedHeader"},
		{"read of a blob only staged", []request{{method: "PUT", url: "UP&comp=block&blockid=" + blockID(0), body: "x"}}, func(_, down string) request {
			return request{method: "GET", url: down}
		}, 404, "BlobNotFound"},
		{"range past the end", []request{{method: "PUT", url: "UP", header: blockBlob, body: "abc"}}, func(_, down string) request {
			return request{method: "GET", url: down, header: map[string]string{"x-ms-range": "bytes=3-9"}}
		}, 416, "InvalidRange"},
		{"malformed x-ms-range", []request{{method: "PUT", url: "UP", header: blockBlob, body: "abc"}}, func(_, down string) request {
			return request{method: "GET", url: down, header: map[string]string{"x-ms-range": "bytes=2-1"}}
		}, 400, "InvalidHeaderValue"},
		{"if-match another etag", []request{{method: "PUT", url: "UP", header: blockBlob, body: "abc"}}, func(_, down string) request {
			return request{method: "GET", url: down, header: map[string]string{"If-Match": `"0x1"`}}
		}, 412, "ConditionNotMet"},
		{"another verb", nil, func(up, _ string) request { return request{method: "DELETE", url: up} }, 405, "UnsupportedHttpVerb"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, h := newFake(t)
			g.blobs.limit = 1024
			up := g.sign.sign(path, "cw", time.Now().Add(time.Hour))
			down := g.sign.sign(path, "r", time.Now().Add(time.Hour))
			for _, s := range c.setup {
				s.url = strings.Replace(s.url, "UP", up, 1)
				if w := s.do(h); w.Code != 201 {
					t.Fatalf("setup %s %s: %d %s", s.method, s.url, w.Code, w.Body)
				}
			}
			w := c.req(up, down).do(h)
			if w.Code != c.status || w.Header().Get("x-ms-error-code") != c.code {
				t.Fatalf("%d %s, want %d %s: %s", w.Code, w.Header().Get("x-ms-error-code"), c.status, c.code, w.Body)
			}
			if c.status != 304 && !strings.Contains(w.Body.String(), "<Error><Code>"+c.code+"</Code><Message>") {
				t.Errorf("body %s", w.Body)
			}
			if c.code == "RequestBodyTooLarge" && g.blobs.used != 0 {
				t.Errorf("a refused body still counts: %d bytes", g.blobs.used)
			}
		})
	}
}

// A URL that grants only c creates a blob but cannot replace it.
func TestBlobStoreCreateOnly(t *testing.T) {
	g, h := newFake(t)
	create := g.sign.sign("/caches/c", "c", time.Now().Add(time.Hour))
	if w := (request{method: "PUT", url: create, header: blockBlob, body: "one"}).do(h); w.Code != 201 {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	w := request{method: "PUT", url: create, header: blockBlob, body: "two"}.do(h)
	if w.Code != 403 || w.Header().Get("x-ms-error-code") != "AuthorizationPermissionMismatch" {
		t.Fatalf("replace: %d %s", w.Code, w.Body)
	}
	if got := g.blobs.content("/caches/c"); !bytes.Equal(got, []byte("one")) {
		t.Errorf("content %q", got)
	}
}
