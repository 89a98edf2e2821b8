// Package gateway is the TCP side of the egress gateway. It accepts the
// sandbox's connections on the gateway namespace's listeners and has the
// job's rules.Decider decide each one (it combines no checks itself):
//
//   - a connection to a gateway-owned address stands for the name the DNS
//     server handed that address out for; its port must be allowed for
//     that name. TLS must carry a matching SNI (else it is fronting) and
//     plain HTTP a matching Host header, checked request by request with
//     the rule's methods and paths; anything else is spliced as is.
//   - a connection to the explicit proxy (HTTP_PROXY/HTTPS_PROXY) is an
//     HTTP proxy: CONNECT and absolute-URI requests, with the same rules.
//
// Allowed traffic is dialled upstream from the host's network by address,
// after the name's every resolved address passed the deny ranges. Refused
// raw connections are reset at once; refused HTTP requests get a 403 that
// names the rule and the policy line that would allow them. Every attempt
// becomes a rules.Decision.
//
// Layer 3: it asks rules.Decider and records into a rules.Log; it puts the
// job's credentials back with credentials.Vault; it must not import the
// DNS server, the namespaces (its listeners are opened by the caller) or
// anything above runner/egress.
package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// Names maps gateway-owned addresses back to the names they stand for.
type Names interface {
	Name(addr netip.Addr) (string, bool)
}

// Config configures a Gateway. Zero durations and counts take defaults.
type Config struct {
	// Decider decides every connection and request.
	Decider *rules.Decider
	Names   Names
	// Proxy is the explicit proxy's address (gateway address and proxy
	// port); connections to it are served as an HTTP proxy.
	Proxy netip.AddrPort
	// DNS is the DNS server's address: TCP connections to it go to
	// DNSListener.
	DNS netip.AddrPort
	// Log receives every decision.
	Log *rules.Log
	// Resolver resolves names on the host. Nil: net.DefaultResolver.
	Resolver Resolver
	// Dialer dials upstream. Nil: a net.Dialer with a 10 s timeout.
	Dialer *net.Dialer
	// ResolveTimeout bounds a host-side lookup (5 s).
	ResolveTimeout time.Duration
	// PeekTimeout is how long the gateway waits for a client's first bytes
	// before treating it as a server-speaks-first protocol (300 ms).
	PeekTimeout time.Duration
	// IdleTimeout ends a connection with nothing moving either way (5 m).
	IdleTimeout time.Duration
	// MaxDuration ends any connection (1 h).
	MaxDuration time.Duration
	// MaxConns bounds connections open at once (4096); more are reset.
	MaxConns int
	// CA, when set, lets the gateway terminate TLS for hosts that have
	// secrets or where the job's credentials may go (and only those), to
	// add them to HTTPS requests.
	CA *CA
	// Credentials, when set, is the job's vault: the gateway puts a
	// credential back in place of its placeholder on requests where it
	// belongs, and has the Decider weigh the credentials policy's answer
	// on them (the vault's service hosts are the Decider's too).
	Credentials *credentials.Vault
	// UpstreamRoots verify upstream servers when the gateway terminated
	// TLS. Nil: the host's roots.
	UpstreamRoots *x509.CertPool
	// Uploads, when set, records the artifacts the job uploads: the
	// gateway shows it the artifact service's RPCs and every request to
	// a blob URL it learned, and terminates TLS for those URLs' hosts
	// where the CA may sign for them.
	Uploads *uploads.Recorder
}

func (c *Config) defaults() {
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Dialer == nil {
		c.Dialer = &net.Dialer{Timeout: 10 * time.Second}
	}
	if c.ResolveTimeout == 0 {
		c.ResolveTimeout = 5 * time.Second
	}
	if c.PeekTimeout == 0 {
		c.PeekTimeout = 300 * time.Millisecond
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 5 * time.Minute
	}
	if c.MaxDuration == 0 {
		c.MaxDuration = time.Hour
	}
	if c.MaxConns == 0 {
		c.MaxConns = 4096
	}
	if c.Log == nil {
		c.Log = &rules.Log{}
	}
}

// Gateway serves the sandbox's TCP connections.
type Gateway struct {
	cfg   Config
	slots chan struct{}
	ctx   context.Context
	stop  context.CancelFunc

	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	active    map[*rules.Decision]struct{}
	// spliced are the connections passed upstream unread, for
	// endSplicedTo.
	spliced map[*tunnel]struct{}
	wg      sync.WaitGroup

	// httpIn feeds connections found to carry plain HTTP (to a gateway
	// address or inside a CONNECT tunnel) to one HTTP server; proxyIn
	// feeds connections to the explicit proxy to another.
	httpIn, proxyIn, dnsIn *connQueue
	httpSrv                *http.Server
	proxySrv               *http.Server
}

// New returns a gateway; give it listeners with Serve.
func New(cfg Config) *Gateway {
	cfg.defaults()
	ctx, stop := context.WithCancel(context.Background())
	g := &Gateway{cfg: cfg, slots: make(chan struct{}, cfg.MaxConns), ctx: ctx, stop: stop, conns: map[net.Conn]struct{}{}, active: map[*rules.Decision]struct{}{}, spliced: map[*tunnel]struct{}{}}
	if cfg.Uploads != nil {
		cfg.Uploads.SetOnWatch(g.endSplicedTo)
	}
	g.httpIn, g.proxyIn, g.dnsIn = newConnQueue(), newConnQueue(), newConnQueue()
	g.httpSrv = g.newHTTPServer(http.HandlerFunc(g.serveDirectHTTP))
	g.proxySrv = g.newHTTPServer(http.HandlerFunc(g.serveProxy))
	go g.httpSrv.Serve(g.httpIn)
	go g.proxySrv.Serve(g.proxyIn)
	return g
}

// DNSListener yields the TCP connections to the DNS address, for the DNS
// server to serve.
func (g *Gateway) DNSListener() net.Listener { return g.dnsIn }

// Log is where the decisions go.
func (g *Gateway) Log() *rules.Log { return g.cfg.Log }

// Serve accepts connections on ln until Close. ln is opened by the
// caller, in the gateway namespace.
func (g *Gateway) Serve(ln net.Listener) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		ln.Close()
		return
	}
	g.listeners = append(g.listeners, ln)
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// EMFILE and friends: back off instead of spinning.
				slog.Warn("egress gateway: accept", "err", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			g.accept(c)
		}
	}()
}

// Close stops accepting, ends every open connection and waits for the
// handlers.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	for _, ln := range g.listeners {
		ln.Close()
	}
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.stop()
	g.httpSrv.Close()
	g.proxySrv.Close()
	g.httpIn.Close()
	g.proxyIn.Close()
	g.dnsIn.Close()
	g.wg.Wait()
	return nil
}

// track registers a connection to close on Close; it returns false (and
// closes c) when the gateway is already closed.
func (g *Gateway) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		c.Close()
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// begin counts a handler that Close waits for; false once closed.
func (g *Gateway) begin() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// accept takes a slot for c or resets it when the gateway is full.
func (g *Gateway) accept(c net.Conn) {
	local := addrPort(c.LocalAddr())
	select {
	case g.slots <- struct{}{}:
	default:
		d := rules.Decision{Time: time.Now().UTC(), Protocol: rules.ProtoTCP, Address: local.Addr().String(), Port: int(local.Port())}
		d.Apply(rules.Verdict{Rule: rules.RuleID{Kind: rules.KindCapacity}, Reason: fmt.Sprintf("more than %d connections open at once", g.cfg.MaxConns)})
		g.cfg.Log.Add(d)
		reset(c)
		return
	}
	if !g.track(c) {
		<-g.slots
		return
	}
	// Whoever ends up owning the connection (a handler here, or one of
	// the HTTP servers) closes it, which frees its slot.
	sc := &slotConn{Conn: c, release: func() { g.untrack(c); <-g.slots }}
	if !g.begin() {
		sc.Close()
		return
	}
	go func() {
		defer g.wg.Done()
		switch {
		case local == g.cfg.Proxy:
			g.proxyIn.Put(sc)
		case local == g.cfg.DNS:
			g.dnsIn.Put(sc)
		case local.Addr() == g.cfg.Proxy.Addr() || local.Addr() == g.cfg.DNS.Addr():
			d := rules.Decision{Time: time.Now().UTC(), Protocol: rules.ProtoTCP, Address: local.Addr().String(), Port: int(local.Port())}
			d.Apply(g.cfg.Decider.OwnAddress(g.cfg.DNS.Port(), g.cfg.Proxy.Port()))
			g.finish(&d)
			reset(sc)
		default:
			g.serveDirect(sc, local)
		}
	}()
}

// serveDirect handles a connection to a gateway-owned address.
func (g *Gateway) serveDirect(c net.Conn, local netip.AddrPort) {
	d := rules.Decision{Time: time.Now().UTC(), Protocol: rules.ProtoTCP, Address: local.Addr().String(), Port: int(local.Port()), Client: c.RemoteAddr().String()}
	name, ok := g.cfg.Names.Name(local.Addr())
	if !ok {
		d.Apply(g.cfg.Decider.UnknownAddress(local.Addr()))
		g.finish(&d)
		reset(c)
		return
	}
	d.Name = name
	rule, v := g.cfg.Decider.Connect(name, int(local.Port()))
	if !v.Allowed {
		d.Apply(v)
		g.finish(&d)
		reset(c)
		return
	}
	g.tunnel(c, bufio.NewReaderSize(c, 1<<14+5), &d, rule, v)
}

// intercepts reports whether the gateway terminates TLS for name: a host
// with secrets, or one where the job's credentials may be put back.
func (g *Gateway) intercepts(name string) bool {
	if g.cfg.CA == nil {
		return false
	}
	return g.cfg.Decider.HasSecrets(name) || (g.cfg.Credentials != nil && g.cfg.Credentials.Intercept(name)) ||
		(g.cfg.Uploads.Host(name) && g.cfg.CA.Permits(name))
}

// tunnel carries an allowed connection to name:port (d.Name, d.Port)
// upstream, after the client's first bytes passed the Decider's SNI and
// Host checks. c is already accepted (or CONNECT-ed); br reads it. cv is
// the connection's verdict: allowed by rule, or let through by audit
// (would-deny), which is what the record says of it. The Decider's
// checks of what it carries (fronting, web ports) and of where it is
// dialled (deny ranges) hold either way.
func (g *Gateway) tunnel(c net.Conn, br *bufio.Reader, d *rules.Decision, rule rules.Rule, cv rules.Verdict) {
	t := &tunnel{g: g, c: c, br: br, d: d, rule: rule, cv: cv}
	defer t.untrackUpstream()
	kind, ok := t.classify()
	if !ok {
		return
	}
	dec := g.cfg.Decider
	switch kind {
	case kindClosed, kindUnknown:
		t.end(dec.Passed(rule, cv, "closed or idle before anything was sent"))
		return
	case kindHTTP:
		t.closeUpstream() // the HTTP server dials per request
		// Checked request by request (Host, method, path) by the HTTP
		// server, which records each one.
		g.httpIn.Put(&slotConn{Conn: &bufConn{Conn: c, r: br}, name: d.Name, port: d.Port, proto: d.Protocol})
		return
	case kindTLS:
		if d.Protocol == rules.ProtoTCP {
			d.Protocol = rules.ProtoTLS
		}
		sni, err := readSNI(c, br, 5*time.Second)
		if v := dec.ServerName(rule, d.Name, sni, err); !v.Allowed {
			t.deny(v)
			return
		}
		if g.intercepts(d.Name) {
			t.closeUpstream() // the HTTP server dials per request
			g.intercept(c, br, d, rule)
			return
		}
	}
	if v := dec.Splice(rule, d.Name, d.Port, kind == kindTLS); !v.Allowed {
		t.deny(v)
		return
	}
	t.splice()
}

// tunnel is one allowed connection on its way upstream: the client's end
// (c, read through br), its decision, the rule that allowed it with the
// connection's verdict (cv), and the upstream once dialled (up, read
// through upR).
type tunnel struct {
	g    *Gateway
	c    net.Conn
	br   *bufio.Reader
	d    *rules.Decision
	rule rules.Rule
	cv   rules.Verdict
	up   net.Conn
	upR  *bufio.Reader
	// ended: endSplicedTo closed it (under the gateway's lock).
	ended bool
}

// classify sniffs what the client sends first. A silent client may speak
// a protocol whose server speaks first (SSH, SMTP, a database): unless
// the rule allows only HTTP, the upstream is dialled to see who speaks
// first. HTTP and TLS servers never do; if the client does, its bytes are
// checked as if they had come at once, so waiting does not get around
// the SNI and Host checks. false: the dial was refused (and recorded) or
// the gateway is closing.
func (t *tunnel) classify() (int, bool) {
	cfg := &t.g.cfg
	kind := sniff(t.c, t.br, cfg.PeekTimeout)
	switch {
	case kind != kindUnknown:
		return kind, true
	case t.rule.HTTPOnly():
		return sniff(t.c, t.br, cfg.IdleTimeout), true
	case !t.connect():
		return 0, false
	}
	if kind = firstSpeaker(t.c, t.br, t.up, t.upR, cfg.IdleTimeout); kind == kindClient {
		kind = sniff(t.c, t.br, cfg.PeekTimeout)
	}
	return kind, true
}

// connect dials the upstream; false when that was refused (and recorded)
// or the gateway is closing.
func (t *tunnel) connect() bool {
	conn, v, err := t.g.dialUpstream(t.g.ctx, t.d.Name, t.d.Port, t.cv.WouldDeny)
	if err != nil {
		t.deny(v)
		return false
	}
	if !t.g.track(conn) {
		t.c.Close()
		return false
	}
	t.up, t.upR = conn, bufio.NewReaderSize(conn, 4096)
	return true
}

// splice carries the connection upstream as it is, dialling first if
// that is still to do, and records it when it ends.
func (t *tunnel) splice() {
	if t.up == nil && !t.connect() {
		return
	}
	g, d := t.g, t.d
	d.Upstream = t.up.RemoteAddr().String()
	d.Apply(g.cfg.Decider.Passed(t.rule, t.cv, ""))
	g.setActive(d, true)
	g.mu.Lock()
	g.spliced[t] = struct{}{}
	g.mu.Unlock()
	if g.cfg.Uploads.Host(d.Name) {
		// The host began to hold an artifact's blob after this
		// connection was found not to need reading.
		g.endSplicedTo(d.Name)
	}
	out, in := pipe(t.c, t.br, t.up, t.upR, g.cfg.IdleTimeout, g.cfg.MaxDuration)
	g.mu.Lock()
	delete(g.spliced, t)
	ended := t.ended
	g.mu.Unlock()
	g.setActive(d, false)
	d.BytesOut, d.BytesIn = out, in
	if ended {
		d.Reason = strings.TrimPrefix(d.Reason+"; ended by the gateway: "+d.Name+" now holds an artifact's blob, whose writes the gateway must read", "; ")
	}
	t.up.Close()
	t.c.Close()
	g.finish(d)
}

// endSplicedTo ends the spliced connections to host: it has begun to
// hold an artifact's blob (uploads.Recorder), and a connection opened
// before could write it past the record. The job's client reconnects,
// and the new connection is read.
func (g *Gateway) endSplicedTo(host string) {
	var end []*tunnel
	g.mu.Lock()
	for t := range g.spliced {
		if strings.EqualFold(t.d.Name, host) && !t.ended {
			t.ended = true
			end = append(end, t)
		}
	}
	g.mu.Unlock()
	// Closed outside the lock: closing untracks, which takes it.
	for _, t := range end {
		t.c.Close()
		t.up.Close()
	}
}

// deny records a refusal and resets the client.
func (t *tunnel) deny(v rules.Verdict) {
	t.d.Apply(v)
	t.g.finish(t.d)
	reset(t.c)
	t.closeUpstream()
}

// end records v and closes both ends.
func (t *tunnel) end(v rules.Verdict) {
	t.d.Apply(v)
	t.g.finish(t.d)
	t.c.Close()
	t.closeUpstream()
}

func (t *tunnel) closeUpstream() {
	if t.up != nil {
		t.up.Close()
	}
}

func (t *tunnel) untrackUpstream() {
	if t.up != nil {
		t.g.untrack(t.up)
	}
}

// setActive adds or removes an open connection's decision from the list
// Active reports.
func (g *Gateway) setActive(d *rules.Decision, on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on {
		g.active[d] = struct{}{}
	} else {
		delete(g.active, d)
	}
}

// Active returns the decisions of connections still open, marked Open.
func (g *Gateway) Active() []rules.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]rules.Decision, 0, len(g.active))
	for d := range g.active {
		c := *d
		c.Open = true
		c.DurationNs = time.Since(c.Time)
		out = append(out, c)
	}
	return out
}

// intercept terminates TLS for a host with secrets, with a certificate
// from the job's CA, and hands the decrypted stream to the HTTP server,
// which checks and forwards each request over a new TLS connection to the
// real host, adding the secrets.
func (g *Gateway) intercept(c net.Conn, br *bufio.Reader, d *rules.Decision, rule rules.Rule) {
	tc := tls.Server(&bufConn{Conn: c, r: br}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return g.cfg.CA.leaf(d.Name)
		},
	})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		d.Apply(rules.Verdict{Rule: rule.ID(), Reason: fmt.Sprintf("TLS with the gateway failed (the client must trust the job CA to send secrets to %s): %v", d.Name, err)})
		g.finish(d)
		c.Close()
		return
	}
	tc.SetDeadline(time.Time{})
	g.httpIn.Put(&slotConn{Conn: tc, name: d.Name, port: d.Port, proto: d.Protocol, tls: true})
}

// finish stamps the duration and records d.
func (g *Gateway) finish(d *rules.Decision) {
	d.DurationNs = time.Since(d.Time)
	g.cfg.Log.Add(*d)
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return netip.AddrPortFrom(ta.AddrPort().Addr().Unmap(), ta.AddrPort().Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// bufConn is a connection whose first bytes were peeked: reads go through
// the reader that holds them.
type bufConn struct {
	net.Conn
	r io.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *bufConn) CloseWrite() error          { return closeWriteOf(b.Conn) }
func (b *bufConn) SetLinger(n int) error      { return setLingerOf(b.Conn, n) }

// slotConn is an accepted connection with what the gateway knows of it
// (the name and port it is for, once decided) and the release of its
// slot, run once when it is closed.
type slotConn struct {
	net.Conn
	name    string
	port    int
	proto   string
	tls     bool // the gateway terminated TLS: requests go upstream over TLS
	once    sync.Once
	release func()
}

func (s *slotConn) Close() error {
	err := s.Conn.Close()
	s.once.Do(func() {
		if s.release != nil {
			s.release()
		}
	})
	return err
}
func (s *slotConn) CloseWrite() error     { return closeWriteOf(s.Conn) }
func (s *slotConn) SetLinger(n int) error { return setLingerOf(s.Conn, n) }

func closeWriteOf(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func setLingerOf(c net.Conn, n int) error {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		return l.SetLinger(n)
	}
	return nil
}

// connQueue is a net.Listener fed by the gateway: an HTTP server serves
// the connections put into it.
type connQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), done: make(chan struct{})}
}

// Put hands c to the server, or closes it when the queue is closed.
func (q *connQueue) Put(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return &net.TCPAddr{} }
