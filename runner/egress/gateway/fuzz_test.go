package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// The fuzz targets feed what a job's client sends first (sniff, readSNI)
// and whole request streams (the gateway's HTTP servers) with hostile
// bytes. Nothing leaves loopback: the gateway fuzz target reuses the
// tests' harness, whose dialer refuses anything but 127.0.0.1.

// captureConn is a net.Conn that keeps what is written to it and has
// nothing to read: a TLS client's handshake over it writes its first
// flight (the ClientHello) and then fails.
type captureConn struct {
	replayConn
	out bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error) { return c.out.Write(p) }
func (c *captureConn) Read([]byte) (int, error)    { return 0, io.EOF }

// clientHello is crypto/tls's own first flight for serverName. variant
// picks other client settings (TLS 1.2 only, ALPN, TLS 1.3 only), which
// change the extensions around the server name.
func clientHello(serverName string, variant byte) []byte {
	cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: true}
	if variant&1 != 0 {
		cfg.MaxVersion = tls.VersionTLS12
	}
	if variant&2 != 0 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	if variant&4 != 0 && variant&1 == 0 {
		cfg.MinVersion = tls.VersionTLS13
	}
	c := &captureConn{}
	tls.Client(c, cfg).Handshake() // fails at the first read, after the hello
	return c.out.Bytes()
}

// sniEntry is one entry of a server_name extension's list.
type sniEntry struct {
	typ  byte
	name string
}

// handHello builds a ClientHello by hand: one record, one handshake
// message, the one cipher suite, no compression, and a server_name
// extension with entries (none: no extension). extra is appended to the
// extensions as they are.
func handHello(entries []sniEntry, extra []byte) []byte {
	var ext []byte
	if entries != nil {
		var list []byte
		for _, e := range entries {
			list = append(list, e.typ, byte(len(e.name)>>8), byte(len(e.name)))
			list = append(list, e.name...)
		}
		ext = append(ext, 0, 0, byte((len(list)+2)>>8), byte(len(list)+2), byte(len(list)>>8), byte(len(list)))
		ext = append(ext, list...)
	}
	ext = append(ext, extra...)
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)               // random
	body = append(body, 0)                                 // session id
	body = append(body, 0, 2, 0x13, 0x01)                  // TLS_AES_128_GCM_SHA256
	body = append(body, 1, 0)                              // null compression
	body = append(body, byte(len(ext)>>8), byte(len(ext))) // extensions
	body = append(body, ext...)
	hs := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{0x16, 3, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
}

// helloNames is an independent reading of the first record's ClientHello:
// the host_name entries (name type 0) of its server_name extension, and
// whether it had one. ok is false when the bytes do not get that far.
func helloNames(b []byte) (names []string, hasExt, ok bool) {
	if len(b) < 5 || b[0] != 0x16 {
		return nil, false, false
	}
	n := int(b[3])<<8 | int(b[4])
	if len(b) < 5+n {
		return nil, false, false
	}
	rec := b[5 : 5+n]
	if len(rec) < 4 || rec[0] != 1 {
		return nil, false, false
	}
	hl := int(rec[1])<<16 | int(rec[2])<<8 | int(rec[3])
	if len(rec) < 4+hl {
		return nil, false, false
	}
	r := reader(rec[4 : 4+hl])
	if _, ok := r.take(2 + 32); !ok { // version, random
		return nil, false, false
	}
	if _, ok := r.vec(1); !ok { // session id
		return nil, false, false
	}
	if _, ok := r.vec(2); !ok { // cipher suites
		return nil, false, false
	}
	if _, ok := r.vec(1); !ok { // compression methods
		return nil, false, false
	}
	if len(r) == 0 {
		return nil, false, true // no extensions
	}
	exts, ok := r.vec(2)
	if !ok {
		return nil, false, false
	}
	for len(exts) > 0 {
		typ, ok1 := exts.take(2)
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 {
			return nil, false, false
		}
		if typ[0] != 0 || typ[1] != 0 {
			continue
		}
		if hasExt {
			return nil, false, false // a second server_name extension
		}
		hasExt = true
		list, ok := data.vec(2)
		if !ok {
			return nil, false, false
		}
		for len(list) > 0 {
			t, ok1 := list.take(1)
			name, ok2 := list.vec(2)
			if !ok1 || !ok2 {
				return nil, false, false
			}
			if t[0] == 0 {
				names = append(names, string(name))
			}
		}
	}
	return names, hasExt, true
}

// reader reads TLS's length-prefixed vectors.
type reader []byte

func (r *reader) take(n int) (reader, bool) {
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *reader) vec(lenBytes int) (reader, bool) {
	l, ok := r.take(lenBytes)
	if !ok {
		return nil, false
	}
	n := 0
	for _, c := range l {
		n = n<<8 | int(c)
	}
	return r.take(n)
}

// sniOf runs readSNI on b as a client's first bytes, and checks that it
// consumed none of them.
func sniOf(t *testing.T, b []byte) (string, error) {
	t.Helper()
	br := bufio.NewReaderSize(bytes.NewReader(b), 1<<14+5)
	name, err := readSNI(replayConn{}, br, time.Second)
	if rest, _ := io.ReadAll(br); !bytes.Equal(rest, b) {
		t.Fatalf("readSNI consumed the client's bytes: %d left of %d", len(rest), len(b))
	}
	return name, err
}

// checkSNI asserts that what readSNI made of b is in b: a name it returns
// is the one host_name of b's server_name extension, and no name means
// the hello has none. An error never comes with a name.
func checkSNI(t *testing.T, b []byte, name string, err error) {
	t.Helper()
	if err != nil {
		if name != "" {
			t.Fatalf("readSNI returned %q with its error %v", name, err)
		}
		return
	}
	names, _, ok := helloNames(b)
	switch {
	case !ok:
		t.Fatalf("readSNI read %q from bytes that hold no ClientHello: %x", name, b)
	case name == "" && len(names) != 0:
		t.Fatalf("readSNI read no server name from a hello with %q", names)
	case name != "" && (len(names) != 1 || names[0] != name):
		t.Fatalf("readSNI read %q from a hello whose server names are %q", name, names)
	}
}

// FuzzReadSNI feeds arbitrary bytes to readSNI as a client's first
// flight. Properties: it never panics and consumes nothing; when it
// returns a server name, that name is exactly the host_name of the
// ClientHello's server_name extension, as an independent reading of the
// bytes finds it (so the SNI check decides on what the upstream will
// see, never on a name that is not in the bytes); a hello with no server
// name yields "" (which the Decider refuses as fronting); a record that
// is cut short is an error. Malformed input must be refused, not guessed
// at.
func FuzzReadSNI(f *testing.F) {
	for _, name := range []string{"up.test", "evil.test", "UP.TEST", ""} {
		for v := range byte(8) {
			f.Add(clientHello(name, v))
		}
	}
	f.Add(handHello([]sniEntry{{0, "up.test"}}, nil))
	f.Add(handHello([]sniEntry{{0, "up.test"}, {0, "evil.test"}}, nil)) // two names
	f.Add(handHello([]sniEntry{{1, "evil.test"}, {0, "up.test"}}, nil)) // another name type first
	f.Add(handHello([]sniEntry{{0, "up.test."}}, nil))                  // trailing dot
	f.Add(handHello([]sniEntry{{0, ""}}, nil))                          // empty name
	f.Add(handHello([]sniEntry{{0, "up.test\x00evil.test"}}, nil))      // NUL
	f.Add(handHello([]sniEntry{{0, "up.test"}}, []byte{0, 0, 0, 9, 0, 7, 0, 0, 4, 'e', 'v', 'i', 'l'}))
	f.Add(handHello(nil, nil))
	f.Add(handHello([]sniEntry{}, nil))
	h := clientHello("up.test", 0)
	f.Add(h[:len(h)-1])
	f.Add(h[:5])
	f.Add(append([]byte{0x16, 3, 1, 0x40, 0x01}, make([]byte, 1<<14+1)...)) // record too long
	f.Add([]byte{0x16, 3, 1, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\nHost: up.test\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := sniOf(t, b)
		checkSNI(t, b, name, err)
	})
}

// dnsName reports whether s is a plain DNS name that crypto/tls's client
// sends as it is: letters, digits, '-' and '.', no empty label, at most
// 253 bytes, and not an IP address.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 || net.ParseIP(s) != nil {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// FuzzClientHelloRoundTrip builds real ClientHellos with crypto/tls's
// client for a fuzzed server name and settings. Properties: a hello for
// a plain DNS name X sniffs as exactly X (round trip); any other name
// sniffs as what the hello's bytes hold, or is refused; the hello cut
// anywhere inside its record is refused; the hello with one byte changed
// sniffs as what the changed bytes hold, or is refused.
func FuzzClientHelloRoundTrip(f *testing.F) {
	f.Add("up.test", byte(0), uint16(0), uint16(0), byte(0))
	f.Add("evil.test", byte(1), uint16(100), uint16(60), byte(0x20))
	f.Add("UP.test", byte(2), uint16(7), uint16(200), byte(1))
	f.Add("up.test.", byte(4), uint16(9999), uint16(3), byte(0xff))
	f.Add("up.test..", byte(0), uint16(0), uint16(0), byte(0))
	f.Add("127.0.0.1", byte(0), uint16(0), uint16(0), byte(0))
	f.Add("[::1]", byte(0), uint16(0), uint16(0), byte(0))
	f.Add("up.test\x00evil.test", byte(3), uint16(50), uint16(120), byte(0x80))
	f.Add(strings.Repeat("a.", 126)+"b", byte(0), uint16(0), uint16(0), byte(0))
	f.Add("xn--bcher-kva.test", byte(6), uint16(1), uint16(4), byte(0x16))
	f.Fuzz(func(t *testing.T, serverName string, variant byte, cut, pos uint16, flip byte) {
		if len(serverName) > 1<<10 {
			return // past any name; only slows the client down
		}
		hello := clientHello(serverName, variant)
		if len(hello) < 5 {
			return // the client sent nothing for this name
		}
		name, err := sniOf(t, hello)
		checkSNI(t, hello, name, err)
		if dnsName(serverName) && (err != nil || name != serverName) {
			t.Fatalf("a ClientHello for %q sniffs as %q (%v)", serverName, name, err)
		}
		recLen := 5 + (int(hello[3])<<8 | int(hello[4]))
		if c := int(cut); c < recLen && c < len(hello) {
			if name, err := sniOf(t, hello[:c]); err == nil {
				t.Fatalf("a ClientHello cut to %d of its record's %d bytes sniffs as %q", c, recLen, name)
			}
		}
		if flip != 0 {
			m := bytes.Clone(hello)
			m[int(pos)%len(m)] ^= flip
			name, err := sniOf(t, m)
			checkSNI(t, m, name, err)
		}
	})
}

// timeoutErr is what a read deadline gives.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// pausedReader yields b[:at], then a timeout (the client paused past the
// sniffing window), then the rest.
type pausedReader struct {
	b      []byte
	at     int
	paused bool
}

func (p *pausedReader) Read(buf []byte) (int, error) {
	if p.at > 0 {
		n := copy(buf, p.b[:p.at])
		p.b, p.at = p.b[n:], p.at-n
		return n, nil
	}
	if !p.paused {
		p.paused = true
		return 0, timeoutErr{}
	}
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := copy(buf, p.b)
	p.b = p.b[n:]
	return n, nil
}

// sniffOf classifies what r yields as a client's first bytes, and checks
// that none of data was consumed.
func sniffOf(t *testing.T, r io.Reader, data []byte, size int) int {
	t.Helper()
	br := bufio.NewReaderSize(r, size)
	kind := sniff(replayConn{}, br, time.Second)
	var rest []byte
	buf := make([]byte, 512)
	for {
		n, err := br.Read(buf)
		rest = append(rest, buf[:n]...)
		if err != nil && !isTimeout(err) {
			break
		}
	}
	if !bytes.Equal(rest, data) {
		t.Fatalf("sniff consumed the client's bytes: %q left of %q", rest, data)
	}
	return kind
}

// httpMethod is the request line's method token as sniff promises to
// know it: a letter, then letters, '-' and '_' (which nginx accepts).
func httpMethod(m string) bool {
	if m == "" || len(m) > 24 {
		return false
	}
	for i, c := range []byte(m) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || (c == '-' || c == '_') && i > 0) {
			return false
		}
	}
	return true
}

// FuzzSniff feeds arbitrary bytes to sniff as a client's first bytes,
// arriving at once, a byte at a time, and with a pause (a read timeout)
// at a fuzzed point. Properties: it never panics and consumes nothing;
// TLS is exactly a first byte of 0x16; how the bytes arrive never turns
// what is HTTP at once into something else (else a client could pause,
// or trickle, its request past the Host check); and whatever net/http
// parses as a request (after the blank lines servers skip) with a method
// of letters, '-' and '_' is HTTP, as sniff's contract says.
func FuzzSniff(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: up.test\r\n\r\n",
		"PROPFIND / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"get / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"M-SEARCH / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"SSH-2.0-client\r\n",
		"ping\n",
		"\x01hi",
		"\x16\x03\x01\x00\x05hello",
		strings.Repeat("\r\n", 40) + "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		strings.Repeat("A", 30) + " / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"-GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"G_T / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"",
	} {
		f.Add([]byte(s), uint16(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, at uint16) {
		whole := sniffOf(t, bytes.NewReader(data), data, 1<<14+5)
		switch {
		case len(data) == 0 && whole != kindClosed:
			t.Fatalf("no bytes: kind %d, want closed", whole)
		case len(data) > 0 && (whole == kindTLS) != (data[0] == 0x16):
			t.Fatalf("kind %d for a first byte of %#x", whole, data[0])
		}
		if trickled := sniffOf(t, iotest.OneByteReader(bytes.NewReader(data)), data, 1<<14+5); trickled != whole {
			t.Fatalf("%q: kind %d at once, %d a byte at a time", data, whole, trickled)
		}
		if len(data) > 1 {
			k := 1 + int(at)%(len(data)-1)
			paused := sniffOf(t, &pausedReader{b: data, at: k}, data, 1<<14+5)
			if whole == kindHTTP && paused != kindHTTP {
				t.Fatalf("%q: HTTP at once, kind %d with a pause after %d bytes", data, paused, k)
			}
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(bytes.TrimLeft(data, "\r\n"))))
		if err == nil && httpMethod(req.Method) && whole != kindHTTP {
			t.Fatalf("%q: net/http reads a %s request, sniff says kind %d", data, req.Method, whole)
		}
	})
}

// upstreamRecord is what reached the fuzz target's upstream: a request it
// parsed, or bytes it could not parse as one.
type upstreamRecord struct {
	method, host, uri, path, escaped string
	hosts                            []string
	garbage                          error
}

// recorder is an upstream that parses every request on a connection (so
// a second, smuggled request shows too), records it and answers 200.
type recorder struct {
	mu     sync.Mutex
	recs   []upstreamRecord
	active int // connections being served
}

func (u *recorder) serve(c net.Conn) {
	u.mu.Lock()
	u.active++
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.active--
		u.mu.Unlock()
	}()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			var ne net.Error
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "connection reset") {
				u.add(upstreamRecord{garbage: err})
			}
			return
		}
		u.add(upstreamRecord{method: req.Method, host: req.Host, uri: req.RequestURI, path: req.URL.Path, escaped: req.URL.EscapedPath(), hosts: req.Header.Values("Host")})
		io.Copy(io.Discard, req.Body)
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nupstream!"); err != nil {
			return
		}
	}
}

func (u *recorder) add(r upstreamRecord) {
	u.mu.Lock()
	u.recs = append(u.recs, r)
	u.mu.Unlock()
}

// settled waits until the upstream serves no connection, so that what an
// input sent has all been recorded before it is checked; false when that
// takes longer than d.
func (u *recorder) settled(d time.Duration) bool {
	for end := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		u.mu.Lock()
		n := u.active
		u.mu.Unlock()
		if n == 0 {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

func (u *recorder) take() []upstreamRecord {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.recs
	u.recs = nil
	return r
}

// forUp reports whether a Host (or an absolute URI's host) names up.test,
// the one name the fuzz policy allows: by name (any case, a trailing
// dot, any port) or by its gateway-owned address, which stands for it.
func forUp(hostport string) bool {
	host := hostOnlyOf(hostport)
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap() == nameAddr
	}
	return host == "up.test"
}

func hostOnlyOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.Trim(h, "[]")
	}
	return strings.Trim(hostport, "[]")
}

// problem says what is wrong with a request that reached the upstream,
// "" when the policy allows it.
func (r upstreamRecord) problem() string {
	switch {
	case r.garbage != nil:
		return "bytes that are no HTTP request reached the upstream: " + r.garbage.Error()
	case !forUp(r.host):
		return "a request for Host " + strconv.Quote(r.host) + " reached the upstream"
	case r.method != "GET" && r.method != "POST":
		return "a " + strconv.Quote(r.method) + " request reached the upstream"
	case r.path != "/ok" && !strings.HasPrefix(r.path, "/ok/"), !paths.PlainURLPath(r.path, r.escaped):
		return "a request for path " + strconv.Quote(r.uri) + " reached the upstream"
	}
	if strings.Contains(r.uri, "://") {
		if i := strings.Index(r.uri, "://"); !forUp(strings.SplitN(r.uri[i+3:], "/", 2)[0]) {
			return "a request for URI " + strconv.Quote(r.uri) + " reached the upstream"
		}
	}
	for _, h := range r.hosts {
		if !forUp(h) {
			return "a request with a Host header " + strconv.Quote(h) + " reached the upstream"
		}
	}
	return ""
}

// fuzzEgress allows GET and POST under /ok/ on up.test (pinned to the
// upstream) and nothing else.
func fuzzEgress(port int) policies.Egress {
	e := pinnedUp(port)
	e.Allow[0].Methods = []string{"GET", "POST"}
	e.Allow[0].PathPrefixes = []string{"/ok/"}
	return e
}

// fuzzEnd follows each input: blank lines that end any header block the
// input left open, then a request the policy refuses (its path is not
// under /ok/), after which the gateway closes the connection.
const fuzzEnd = "\r\n\r\nGET /fuzz-end HTTP/1.1\r\nHost: up.test\r\n\r\n"

// FuzzGatewayHTTP sends arbitrary bytes on one connection to the
// gateway, either to up.test's gateway-owned address or to the explicit
// proxy ("PORT" in the input becomes the upstream's port, so absolute
// URIs and CONNECT can name it): pipelined requests, odd Host headers,
// absolute-form URIs, CONNECT tunnels, duplicate Content-Length and
// Transfer-Encoding, obs-fold, NULs. The policy allows only GET and
// POST under /ok/ on up.test, which maps to a recording upstream; the
// host resolver maps evil.test and other.test to the same upstream, so
// any request for them that got past the rules would be seen there.
// Properties: a refusal stays a refusal: every request that reaches the
// upstream is for up.test (Host, absolute URI), with an allowed method
// and a plain path under /ok/, whatever came before it on the
// connection; nothing else (raw or smuggled bytes) reaches it; no more
// requests reach it than the gateway recorded as allowed; and the
// gateway answers or closes every connection within a bounded time.
func FuzzGatewayHTTP(f *testing.F) {
	rec := &recorder{}
	ln := upstream(f, rec.serve)
	port := ln.Addr().(*net.TCPAddr).Port
	h := newHarness(f, port, fuzzEgress, nil, func(c *Config) {
		c.Resolver = staticResolver{
			"up.test":    {netip.MustParseAddr("127.0.0.1")},
			"evil.test":  {netip.MustParseAddr("127.0.0.1")},
			"other.test": {netip.MustParseAddr("127.0.0.1")},
		}
	})
	for _, s := range []struct {
		proxy bool
		req   string
	}{
		// From the tests.
		{false, "GET /ok/x HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "GET /x HTTP/1.1\r\nHost: 127.0.0.2:PORT\r\n\r\n"},
		{false, "PROPFIND / HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "get / HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "M-SEARCH / HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
		{true, "GET http://up.test:PORT/ok/a HTTP/1.1\r\nHost: up.test:PORT\r\n\r\n"},
		{true, "GET http://up.test:PORT/admin HTTP/1.1\r\nHost: up.test:PORT\r\n\r\n"},
		{true, "GET http://other.test:PORT/ HTTP/1.1\r\nHost: other.test:PORT\r\n\r\n"},
		{true, "GET http://127.0.0.1:PORT/ HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\n\r\n"},
		{true, "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n"},
		{true, "CONNECT up.test:PORT HTTP/1.1\r\nHost: up.test\r\n\r\nGET /ok/x HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n"},
		// Pipelined: an allowed request, then refused ones.
		{false, "GET /ok/1 HTTP/1.1\r\nHost: up.test\r\n\r\nGET /ok/2 HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "GET /ok/1 HTTP/1.1\r\nHost: up.test\r\n\r\nDELETE /ok/2 HTTP/1.1\r\nHost: up.test\r\n\r\nGET /admin HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{true, "GET http://up.test:PORT/ok/1 HTTP/1.1\r\nHost: up.test\r\n\r\nGET http://evil.test:PORT/ok/2 HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{true, "CONNECT up.test:PORT HTTP/1.1\r\n\r\nGET /ok/1 HTTP/1.1\r\nHost: up.test\r\n\r\nGET /ok/2 HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		// Host and URI disagree.
		{false, "GET http://evil.test/ok/ HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "GET http://up.test/ok/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{true, "GET http://up.test:PORT/ok/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{true, "GET http://up.test:PORT@evil.test:PORT/ok/ HTTP/1.1\r\n\r\n"},
		{true, "GET http://evil.test:PORT#@up.test:PORT/ok/ HTTP/1.1\r\n\r\n"},
		{true, "GET http://127.0.0.2:PORT/ok/ HTTP/1.1\r\n\r\n"},
		{true, "GET http://[::ffff:127.0.0.2]:PORT/ok/ HTTP/1.1\r\n\r\n"},
		{true, "GET /ok/ HTTP/1.1\r\nHost: up.test:PORT\r\n\r\n"},
		{true, "GET https://up.test:PORT/ok/ HTTP/1.1\r\n\r\n"},
		{true, "CONNECT up.test:PORT HTTP/1.1\r\nHost: evil.test:PORT\r\n\r\nGET /ok/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{true, "CONNECT evil.test:PORT HTTP/1.1\r\nHost: up.test:PORT\r\n\r\nGET /ok/ HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{true, "CONNECT 127.0.0.2:PORT HTTP/1.1\r\n\r\nGET /ok/ HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{true, "CONNECT up.test:PORT HTTP/1.1\r\n\r\n\x16\x03\x01\x00\x05hello"},
		{true, "CONNECT up.test:PORT HTTP/1.1\r\n\r\n\x01raw bytes"},
		// Odd Host headers.
		{false, "GET /ok/ HTTP/1.1\r\nHost: up.test\r\nHost: evil.test\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: evil.test\r\nHost: up.test\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: up.test,evil.test\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: UP.TEST.\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: up.test:1@evil.test\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: up.test\x00evil.test\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: evil.test\r\n up.test\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost:\r\n up.test\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.0\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: [up.test]\r\n\r\n"},
		{false, "GET /ok/ HTTP/1.1\r\nX-Forwarded-Host: evil.test\r\nHost: up.test\r\n\r\n"},
		// Paths and methods outside the rule.
		{false, "GET /ok/../admin HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "GET /ok/%2e%2e/admin HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "GET /ok%2f..%2fadmin HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "GET //ok/ HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "GET * HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "get /ok/ HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		{false, "PUT /ok/ HTTP/1.1\r\nHost: up.test\r\nContent-Length: 0\r\n\r\n"},
		{false, "OPTIONS * HTTP/1.1\r\nHost: up.test\r\n\r\n"},
		// Body framing: smuggling a second request in a body.
		{false, "POST /ok/ HTTP/1.1\r\nHost: up.test\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcdGET /admin HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "POST /ok/ HTTP/1.1\r\nHost: up.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "POST /ok/ HTTP/1.1\r\nHost: up.test\r\nTransfer-Encoding: chunked\r\n\r\n2d\r\nGET /admin HTTP/1.1\r\nHost: evil.test\r\n\r\n\r\n0\r\n\r\n"},
		{false, "POST /ok/ HTTP/1.1\r\nHost: up.test\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "POST /ok/ HTTP/1.1\r\nHost: up.test\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\nGET /ok/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{false, "POST /ok/ HTTP/1.1\r\nHost: up.test\r\nContent-Length: 100\r\n\r\nshort"},
		{false, "POST /ok/ HTTP/1.1\r\nHost: up.test\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"},
		{false, "GET /ok/ HTTP/1.1\r\nHost: up.test\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"},
		{true, "POST http://up.test:PORT/ok/ HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://evil.test:PORT/ HTTP/1.1\r\n\r\n"},
		{false, ""},
		{true, ""},
	} {
		f.Add(s.proxy, []byte(s.req))
	}
	portStr := []byte(strconv.Itoa(port))
	reached, allowed := 0, 0
	f.Fuzz(func(t *testing.T, viaProxy bool, raw []byte) {
		data := bytes.ReplaceAll(raw, []byte("PORT"), portStr)
		addr := h.direct()
		if viaProxy {
			addr = h.proxy
		}
		seen := h.g.Log().Len()
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The input, then a request the gateway refuses and closes the
		// connection after: a half-close right away would have the HTTP
		// server take the client for gone and cancel what it forwards.
		// When the input leaves the server waiting (a body cut short),
		// the client half-closes once nothing came back for a while.
		go c.Write(append(data, fuzzEnd...))
		buf := make([]byte, 4096)
		for halfClosed := false; ; {
			wait := 300 * time.Millisecond
			if halfClosed {
				wait = 15 * time.Second
			}
			c.SetReadDeadline(time.Now().Add(wait))
			if _, err := c.Read(buf); err == nil {
				continue
			} else if !isTimeout(err) {
				break
			} else if halfClosed {
				t.Fatalf("the gateway neither answered nor closed the connection in 15 s after the client's half-close (sent %q)", data)
			}
			c.(*net.TCPConn).CloseWrite()
			halfClosed = true
		}
		c.Close()
		// The upstream may still be reading a request the gateway gave
		// up on (its client's body was cut): wait for it to finish.
		if !rec.settled(10 * time.Second) {
			t.Fatalf("an upstream connection stayed open 10 s after its client's (sent %q)", data)
		}
		recs := rec.take()
		for _, r := range recs {
			if p := r.problem(); p != "" {
				t.Fatalf("%s (sent %q)", p, data)
			}
		}
		// Every request that reached the upstream was recorded allowed,
		// counted over all inputs so far (while the log keeps every
		// decision): a request the upstream parses late counts later.
		reached += len(recs)
		for _, d := range h.g.Log().Since(seen) {
			if d.Decision == rules.Allowed && d.Name == "up.test" {
				allowed++
			}
		}
		// Below MaxLog decisions in all, no outcome's share is full.
		if h.g.Log().Len() < rules.MaxLog && reached > allowed {
			t.Fatalf("%d requests reached the upstream, %d were allowed (last sent %q)", reached, allowed, data)
		}
	})
}
