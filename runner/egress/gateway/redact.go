package gateway

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// redactResponse blanks every copy of an injected secret's value that an
// upstream echoes back (in headers or an uncompressed body), so the value
// does not reach the sandbox through an answer either. The replacement
// has the same length, so Content-Length stays right.
func redactResponse(resp *http.Response, echoes []string) {
	var values [][]byte
	for _, s := range echoes {
		values = append(values, []byte(s))
	}
	redactHeader(resp.Header, values)
	if resp.Body != nil {
		resp.Body = &redactor{r: resp.Body, values: values, resp: resp}
	}
}

// redactHeader blanks the values in every header value of h.
func redactHeader(h http.Header, values [][]byte) {
	for k, vs := range h {
		for i, v := range vs {
			for _, s := range values {
				v = strings.ReplaceAll(v, string(s), strings.Repeat("*", len(s)))
			}
			h[k][i] = v
		}
	}
}

// redactor replaces values in a stream. It holds back the last
// (longest value - 1) bytes of what it has read, so a value split across
// reads is still caught.
type redactor struct {
	r      io.ReadCloser
	values [][]byte
	buf    []byte // read but not yet returned
	out    []byte // redacted, ready to return
	eof    bool
	resp   *http.Response // its trailers are blanked at the end of the body
}

func (x *redactor) Read(p []byte) (int, error) {
	for len(x.out) == 0 {
		if x.eof {
			if len(x.buf) == 0 {
				if x.resp != nil {
					// Trailers arrive with the end of the body; the proxy
					// copies them after it.
					redactHeader(x.resp.Trailer, x.values)
				}
				return 0, io.EOF
			}
			x.out, x.buf = x.redact(x.buf), nil
			break
		}
		chunk := make([]byte, 32<<10)
		n, err := x.r.Read(chunk)
		x.buf = append(x.buf, chunk[:n]...)
		if err == io.EOF {
			x.eof = true
		} else if err != nil {
			return 0, err
		}
		x.buf = x.redact(x.buf)
		keep := x.longest() - 1
		if !x.eof && len(x.buf) > keep {
			x.out = append(x.out, x.buf[:len(x.buf)-keep]...)
			x.buf = append([]byte(nil), x.buf[len(x.buf)-keep:]...)
		}
	}
	n := copy(p, x.out)
	x.out = x.out[n:]
	return n, nil
}

func (x *redactor) redact(b []byte) []byte {
	for _, v := range x.values {
		b = bytes.ReplaceAll(b, v, bytes.Repeat([]byte("*"), len(v)))
	}
	return b
}

func (x *redactor) longest() int {
	m := 1
	for _, v := range x.values {
		m = max(m, len(v))
	}
	return m
}

func (x *redactor) Close() error { return x.r.Close() }
