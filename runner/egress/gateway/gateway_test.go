package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// These tests run the gateway on loopback in the test's own namespace:
// 127.0.0.2 stands for the gateway-owned address of "up.test" (as the DNS
// server would have handed it out), 127.0.0.4 is the explicit proxy, and
// the upstream servers listen on 127.0.0.1. Nothing else is dialled: the
// dialer refuses any other address, and records every dial.

var (
	nameAddr  = netip.MustParseAddr("127.0.0.2")
	proxyAddr = netip.MustParseAddr("127.0.0.4")
)

type staticNames map[netip.Addr]string

func (s staticNames) Name(a netip.Addr) (string, bool) { n, ok := s[a]; return n, ok }

type staticResolver map[string][]netip.Addr

func (s staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(host, ".")
	if a, ok := s[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type harness struct {
	g     *Gateway
	port  int // the upstream's port, also the gateway's on nameAddr
	proxy string
	mu    sync.Mutex
	dials []string
}

// upstream serves each connection to a loopback listener with handle
// until the test ends.
func upstream(tb testing.TB, handle func(net.Conn)) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln
}

// echo sends back what the connection sends.
func echo(c net.Conn) { io.Copy(c, c) }

// portOf is an httptest server's port.
func portOf(s *httptest.Server) int {
	u, _ := url.Parse(s.URL)
	p, _ := strconv.Atoi(u.Port())
	return p
}

// newHarness starts a gateway in front of an upstream listening on
// 127.0.0.1:port, with the egress section e(port).
func newHarness(t testing.TB, port int, e func(port int) policies.Egress, secrets map[string]string, opts ...func(*Config)) *harness {
	t.Helper()
	pol, err := rules.Compile(e(port), func(k string) (string, bool) { v, ok := secrets[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{port: port}
	dialer := &net.Dialer{Timeout: 2 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		h.mu.Lock()
		h.dials = append(h.dials, address)
		h.mu.Unlock()
		if !strings.HasPrefix(address, "127.0.0.1:") {
			return fmt.Errorf("test dialer: refusing %s (tests dial loopback only)", address)
		}
		return nil
	}}
	ln, err := net.Listen("tcp4", net.JoinHostPort(nameAddr.String(), strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	pln, err := net.Listen("tcp4", net.JoinHostPort(proxyAddr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	h.proxy = pln.Addr().String()
	cfg := Config{
		Decider: rules.NewDecider(pol, nil), Names: staticNames{nameAddr: "up.test"}, Proxy: netip.MustParseAddrPort(h.proxy),
		Resolver: staticResolver{
			"up.test":       {netip.MustParseAddr("127.0.0.1")},
			"internal.test": {netip.MustParseAddr("10.0.0.1")},
			"meta.test":     {netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")},
		},
		Dialer: dialer, IdleTimeout: 5 * time.Second, PeekTimeout: 100 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	h.g = New(cfg)
	h.g.Serve(ln)
	h.g.Serve(pln)
	t.Cleanup(func() { h.g.Close() })
	return h
}

func (h *harness) direct() string { return net.JoinHostPort(nameAddr.String(), strconv.Itoa(h.port)) }

func (h *harness) dialed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.dials...)
}

// last returns the newest decision once there are more than seen
// (decisions are recorded when a connection ends, asynchronously).
func (h *harness) last(t *testing.T, seen int) rules.Decision {
	t.Helper()
	for i := 0; i < 200; i++ {
		ds, _ := h.g.Log().Snapshot()
		if len(ds) > seen {
			return ds[len(ds)-1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no new decision recorded")
	return rules.Decision{}
}

func pinnedUp(port int) policies.Egress {
	return policies.Egress{
		Allow:      []policies.EgressRule{{Host: "up.test", Ports: []int{port}}},
		Resolve:    map[string]string{"up.test": "127.0.0.1"},
		AllowCIDRs: []string{"127.0.0.1/32"},
	}
}

func hello(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "hello %s %s auth=%q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
}

// Plain HTTP to the name's address: allowed, forwarded, bytes counted;
// a Host header naming something else is refused as fronting.
func TestDirectHTTP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), pinnedUp, nil)
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}

	resp, err := client.Get("http://" + h.direct() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	// The client sent Host 127.0.0.2:port: not the name.
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get(DecisionHeader), "fronting") {
		t.Fatalf("Host by address: %d %q %s", resp.StatusCode, resp.Header.Get(DecisionHeader), body)
	}

	req, _ := http.NewRequest("GET", "http://"+h.direct()+"/ok", nil)
	req.Host = "up.test"
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello GET /ok") {
		t.Fatalf("allowed request: %d %s", resp.StatusCode, body)
	}
	d := h.last(t, 1)
	if d.Decision != rules.Allowed || d.Protocol != rules.ProtoHTTP || d.BytesIn != int64(len(body)) || d.Upstream != "127.0.0.1:"+strconv.Itoa(h.port) {
		t.Fatalf("decision = %+v", d)
	}
}

// TLS with a ClientHello naming another host is fronting: reset, recorded,
// nothing dialled. A matching name is spliced through to the upstream.
func TestTLSServerNameMustMatch(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), pinnedUp, nil)

	for _, tc := range []struct {
		sni   string
		allow bool
	}{{"evil.test", false}, {"up.test", true}} {
		t.Run(tc.sni, func(t *testing.T) {
			before, seen := len(h.dialed()), h.g.Log().Len()
			c, err := tls.Dial("tcp", h.direct(), &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true})
			if tc.allow {
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: up.test\r\n\r\n")
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Close()
				if !strings.Contains(line, "200") {
					t.Fatalf("status line %q", line)
				}
				if d := h.last(t, seen); d.Decision != rules.Allowed || d.Protocol != rules.ProtoTLS || d.BytesOut == 0 || d.BytesIn == 0 {
					t.Fatalf("decision = %+v", d)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("TLS handshake with a fronted SNI succeeded")
			}
			d := h.last(t, seen)
			if d.Decision != rules.Denied || d.Rule != "fronting" || !strings.Contains(d.Reason, "evil.test") {
				t.Fatalf("decision = %+v", d)
			}
			if len(h.dialed()) != before {
				t.Fatalf("fronted connection was dialled upstream: %v", h.dialed())
			}
		})
	}
}

// Names whose host resolution lands on internal addresses are refused
// before any dial: private, metadata, and loopback without the explicit
// CIDR (rebinding).
func TestUpstreamDenyRangesBeforeDial(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	for _, tc := range []struct {
		name string
		host string
		rule string
	}{
		{"private", "internal.test", "10.0.0.0/8"},
		{"metadata", "meta.test", "169.254.0.0/16"},
		{"rebinding", "up.test", "127.0.0.0/8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, portOf(up), func(port int) policies.Egress {
				// No allowCIDRs and no pin: the resolver's answer counts.
				return policies.Egress{Allow: []policies.EgressRule{{Host: tc.host, Ports: []int{port}}}}
			}, nil)
			resp, err := proxyGet(h.proxy, "http://"+tc.host+":"+strconv.Itoa(h.port)+"/")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get(DecisionHeader), tc.rule) {
				t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get(DecisionHeader))
			}
			if d := h.dialed(); len(d) != 0 {
				t.Fatalf("dialled %v", d)
			}
		})
	}
}

func proxyGet(proxy, target string) (*http.Response, error) {
	pu, _ := url.Parse("http://" + proxy)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 5 * time.Second}
	resp, err := c.Get(target)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// The explicit proxy: plain HTTP and CONNECT with the same rules; a
// refusal is a 403 naming the rule and the policy line to add.
func TestExplicitProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), func(port int) policies.Egress {
		e := pinnedUp(port)
		e.Allow[0].Methods = []string{"GET"}
		e.Allow[0].PathPrefixes = []string{"/pkg/"}
		return e
	}, nil)
	p := strconv.Itoa(h.port)
	tests := []struct {
		target string
		status int
		header string
		body   string
	}{
		{"http://up.test:" + p + "/pkg/a", 200, "", ""},
		{"http://up.test:" + p + "/admin", 403, "outside the methods", `pathPrefixes: ["/"]`},
		{"http://other.test:" + p + "/", 403, "other.test is not in egress.allow", `add {host: "other.test", ports: [` + p + `]} to egress.allow`},
		{"http://127.0.0.1:" + p + "/", 403, "egress is allowed by name only", ""},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			pu, _ := url.Parse("http://" + h.proxy)
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
			resp, err := c.Get(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(resp.Header.Get(DecisionHeader), tc.header) || !strings.Contains(string(body), tc.body) {
				t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get(DecisionHeader), body)
			}
		})
	}
	// CONNECT to a name that is not allowed: 403 before any tunnel.
	c, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get(DecisionHeader), "evil.test") {
		t.Fatalf("CONNECT evil.test: %d %q", resp.StatusCode, resp.Header.Get(DecisionHeader))
	}
	// The rule is HTTP-only: a CONNECT tunnel that carries TLS is refused,
	// one that carries a matching plain request passes.
	c2, err := net.Dial("tcp", h.proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "CONNECT up.test:%s HTTP/1.1\r\nHost: up.test\r\n\r\nGET /pkg/x HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n", p)
	br := bufio.NewReader(c2)
	if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT up.test: %v %v", resp, err)
	}
	if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("request in tunnel: %v %v", resp, err)
	}
}

// A secret declared for the host is added by the gateway; the client
// never sees it, even when the upstream echoes it back.
func TestSecretInjectedAndNeverEchoed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		// Split across writes, to catch a value cut between reads.
		v := r.Header.Get("Authorization")
		fmt.Fprintf(w, "got %s", v[:5])
		w.(http.Flusher).Flush()
		fmt.Fprintf(w, "%s end", v[5:])
	}))
	defer up.Close()
	h := newHarness(t, portOf(up), func(port int) policies.Egress {
		e := pinnedUp(port)
		e.Secrets = []policies.Secret{{Host: "up.test", Header: "Authorization", FromEnv: "AIRLOCK_SECRET_TOKEN"}}
		return e
	}, map[string]string{"AIRLOCK_SECRET_TOKEN": "Bearer tok-123456789"})
	pu, _ := url.Parse("http://" + h.proxy)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	req, _ := http.NewRequest("GET", "http://up.test:"+strconv.Itoa(h.port)+"/", nil)
	req.Header.Set("Authorization", "Bearer forged")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "tok-123456789") || strings.Contains(resp.Header.Get("X-Echo"), "tok-") {
		t.Fatalf("secret reached the client: %q %q", body, resp.Header.Get("X-Echo"))
	}
	if string(body) != "got "+strings.Repeat("*", len("Bearer tok-123456789"))+" end" {
		t.Fatalf("body %q: the upstream did not get the injected value", body)
	}
	if d := h.last(t, 0); len(d.SecretsInjected) != 1 || d.SecretsInjected[0] != "Authorization" {
		t.Fatalf("decision = %+v", d)
	}
}

// Refused raw connections are reset at once, never left hanging.
func TestRefusedConnectionsResetAtOnce(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), func(port int) policies.Egress { return policies.Egress{} }, nil)
	start := time.Now()
	c, err := net.Dial("tcp", h.direct())
	if err == nil {
		// The reset may come before or after the dial returns.
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after refusal: %v, want a reset", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("refusal took %v", el)
	}
}

// 2000 connections at once, half allowed and half refused: all end, the
// gateway answers afterwards, and no file descriptor is left behind.
func TestManyParallelConnectionsNoLeak(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), pinnedUp, nil)
	fdsBefore := openFDs(t)
	const n = 2000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", h.direct(), 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			host := "up.test"
			if i%2 == 1 {
				host = "evil.test"
			}
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
		}(i)
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		failed++
		if failed < 5 {
			t.Log(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d connections failed", failed, n)
	}
	ds, _ := h.g.Log().Snapshot()
	allowed, denied := 0, 0
	for _, d := range ds {
		if d.Decision == rules.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	if allowed != n/2 || denied != n/2 {
		t.Fatalf("decisions: %d allowed, %d denied", allowed, denied)
	}
	up.CloseClientConnections()
	waitFDs(t, fdsBefore)
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// waitFDs waits for the descriptor count to come back to want (closing
// is asynchronous on both ends).
func waitFDs(t *testing.T, want int) {
	t.Helper()
	var got int
	for i := 0; i < 100; i++ {
		if got = openFDs(t); got <= want+2 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("open descriptors: %d, %d before", got, want)
}

// Close ends connections that are in the middle of a transfer, and
// leaves no descriptor behind.
func TestCloseEndsOpenConnections(t *testing.T) {
	block := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(block)
	h := newHarness(t, portOf(up), pinnedUp, nil)
	c, err := net.Dial("tcp", h.direct())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: up.test\r\n\r\n")
	br := bufio.NewReader(c)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { h.g.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on an open connection")
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadAll(br); err != nil && isTimeout(err) {
		t.Fatal("connection still open after Close")
	}
}

// A client that waits before sending (past the sniffing window) is still
// checked: its Host header and SNI are read when they come.
func TestSlowClientStillChecked(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), pinnedUp, nil)
	c, err := net.Dial("tcp", h.direct())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(400 * time.Millisecond) // the harness sniffs for 100 ms
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get(DecisionHeader), "fronting") {
		t.Fatalf("slow fronted request: %d %q", resp.StatusCode, resp.Header.Get(DecisionHeader))
	}
}

// A client that pauses in the middle of its request line (past the
// sniffing window), sends blank lines before it, or names a method with
// '_', is still checked: on
// a port that is not a web port the connection would otherwise be
// spliced unread, past the Host check (found by FuzzSniff).
func TestPausedRequestLineStillChecked(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), pinnedUp, nil)
	for _, tc := range []struct{ first, rest string }{
		{"GE", "T / HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		{strings.Repeat("\r\n", 40), "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"},
		// A method with '_' (nginx and net/http take it).
		{"G_T / HTTP/1.1\r\nHost: evil.test\r\n\r\n", ""},
	} {
		c, err := net.Dial("tcp", h.direct())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, tc.first)
		time.Sleep(300 * time.Millisecond) // the harness sniffs for 100 ms
		io.WriteString(c, tc.rest)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		if strings.Contains(string(b), "hello") {
			t.Fatalf("%q, a pause, %q: reached the upstream: %q", tc.first, tc.rest, b)
		}
	}
}

// A protocol whose server speaks first (an SSH-like banner) works through
// the gateway when the rule allows the port.
func TestServerSpeaksFirst(t *testing.T) {
	ln := upstream(t, func(c net.Conn) {
		io.WriteString(c, "SSH-2.0-upstream\r\n")
		echo(c)
	})
	h := newHarness(t, ln.Addr().(*net.TCPAddr).Port, pinnedUp, nil)
	c, err := net.Dial("tcp", h.direct())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	banner, err := br.ReadString('\n')
	if err != nil || banner != "SSH-2.0-upstream\r\n" {
		t.Fatalf("banner %q %v", banner, err)
	}
	io.WriteString(c, "SSH-2.0-client\r\n")
	echo, err := br.ReadString('\n')
	if err != nil || echo != "SSH-2.0-client\r\n" {
		t.Fatalf("echo %q %v", echo, err)
	}
	c.Close()
	if d := h.last(t, 0); d.Decision != rules.Allowed || d.Protocol != rules.ProtoTCP || d.BytesIn != int64(len(banner)+len(echo)) {
		t.Fatalf("decision = %+v", d)
	}
}

// The job CA can vouch only for the hosts that have secrets: a
// certificate it makes for any other name does not verify.
func TestJobCANameConstraints(t *testing.T) {
	ca, err := NewCA([]string{"npm.example.com"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.PEM()) {
		t.Fatal("CA PEM does not parse")
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"npm.example.com", true}, {"github.com", false}, {"evil.npm.example.com.attacker.test", false}} {
		l, err := ca.leaf(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(l.Certificate[0])
		_, err = c.Verify(x509.VerifyOptions{DNSName: tc.name, Roots: roots})
		if (err == nil) != tc.ok {
			t.Errorf("%s: verify error %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// An idle connection ends after the idle timeout; a busy one at the total
// limit.
func TestTimeouts(t *testing.T) {
	ln := upstream(t, echo)
	for _, tc := range []struct {
		name        string
		idle, max   time.Duration
		keepTalking bool
		want        time.Duration
	}{
		{"idle", 300 * time.Millisecond, time.Hour, false, 300 * time.Millisecond},
		{"total", time.Hour, 600 * time.Millisecond, true, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, ln.Addr().(*net.TCPAddr).Port, pinnedUp, nil, func(c *Config) { c.IdleTimeout, c.MaxDuration = tc.idle, tc.max })
			c, err := net.Dial("tcp", h.direct())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			c.SetDeadline(start.Add(10 * time.Second))
			buf := make([]byte, 5)
			for {
				if _, err := io.WriteString(c, "ping\n"); err != nil {
					break
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					break
				}
				if !tc.keepTalking {
					_, err = c.Read(buf) // waits until the gateway ends it
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			el := time.Since(start)
			if el < tc.want || el > tc.want+3*time.Second {
				t.Fatalf("connection ended after %v, want about %v", el, tc.want)
			}
		})
	}
}

// Whatever starts like a request line is HTTP and gets the Host check:
// unknown or lower-case methods, leading blank lines, the h2c preface.
// TLS must name the host.
func TestFrontingVariants(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(hello))
	defer up.Close()
	h := newHarness(t, portOf(up), pinnedUp, nil)
	for _, req := range []string{
		"PROPFIND / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"get / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"M-SEARCH / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
	} {
		t.Run(strings.Fields(req)[0], func(t *testing.T) {
			c, err := net.Dial("tcp", h.direct())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, req)
			line, _ := bufio.NewReader(c).ReadString('\n')
			if strings.Contains(line, " 200 ") || strings.Contains(line, "hello") {
				t.Fatalf("fronted request reached the upstream: %q", line)
			}
		})
	}
	t.Run("h2c preface", func(t *testing.T) {
		c, err := net.Dial("tcp", h.direct())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
		b, _ := io.ReadAll(c)
		if strings.Contains(string(b), "hello") {
			t.Fatalf("h2c reached the upstream: %q", b)
		}
	})
	t.Run("TLS without SNI", func(t *testing.T) {
		seen := h.g.Log().Len()
		c, err := tls.Dial("tcp", h.direct(), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
			t.Fatal("TLS without a server name was let through")
		}
		if d := h.last(t, seen); d.Decision != rules.Denied || d.Rule != "fronting" {
			t.Fatalf("decision = %+v", d)
		}
	})
}

// A secret echoed back compressed or in a trailer is blanked too, and a
// request cut mid-response is still recorded.
func TestSecretEchoVariantsAndAbort(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/abort" {
			w.Header().Set("Content-Length", "1000000")
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Trailer", "X-T")
		w.Header().Set("X-Accept-Encoding-Seen", r.Header.Get("Accept-Encoding"))
		fmt.Fprint(w, "body ", r.Header.Get("Authorization"))
		w.Header().Set("X-T", r.Header.Get("Authorization"))
	}))
	defer up.Close()
	h := newHarness(t, portOf(up), func(port int) policies.Egress {
		e := pinnedUp(port)
		e.Secrets = []policies.Secret{{Host: "up.test", Header: "Authorization", FromEnv: "AIRLOCK_SECRET_TOKEN"}}
		return e
	}, map[string]string{"AIRLOCK_SECRET_TOKEN": "tok-abcdef"})
	pu, _ := url.Parse("http://" + h.proxy)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableCompression: true}}
	req, _ := http.NewRequest("GET", "http://up.test:"+strconv.Itoa(h.port)+"/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "abcdef") || strings.Contains(resp.Trailer.Get("X-T"), "abcdef") || resp.Header.Get("X-Accept-Encoding-Seen") != "identity" {
		t.Fatalf("secret echoed: body %q trailer %q encoding %q", body, resp.Trailer.Get("X-T"), resp.Header.Get("X-Accept-Encoding-Seen"))
	}
	seen := h.g.Log().Len()
	if resp, err := c.Get("http://up.test:" + strconv.Itoa(h.port) + "/abort"); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if d := h.last(t, seen); d.Path != "/abort" {
		t.Fatalf("aborted request not recorded: %+v", d)
	}
}

// A connection the gateway passed unread to a host that then begins to
// hold an artifact's blob is ended: else a job could open one before
// CreateArtifact and write the blob past the record.
func TestSplicedToAnArtifactHostEnded(t *testing.T) {
	ln := upstream(t, echo)
	port := ln.Addr().(*net.TCPAddr).Port
	ca, err := NewCA([]string{"up.test"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rec := uploads.New(filepath.Join(t.TempDir(), "spool"), 0)
	h := newHarness(t, port, pinnedUp, nil, func(c *Config) { c.CA, c.Uploads = ca, rec })
	c, err := net.Dial("tcp4", h.direct())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Not TLS and not HTTP: spliced, echoed.
	msg := []byte{0x01, 'h', 'i'}
	c.Write(msg)
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("the spliced connection does not echo: %v", err)
	}
	learnUpload(t, rec, "https://up.test:"+strconv.Itoa(port)+"/artifacts/run/job/a.zip?sig=x")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.Write(msg)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("the connection still carries bytes (%d) after its host began to hold an artifact's blob", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the connection was not ended")
	}
	if d := h.last(t, 0); !strings.Contains(d.Reason, "now holds an artifact's blob") {
		t.Errorf("decision = %+v, want it to say why it was ended", d)
	}
}
