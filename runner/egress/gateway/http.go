package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner/egress/refusal"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// DecisionHeader carries a refusal's rule and reason to the client.
const DecisionHeader = "X-Airlock-Decision"

type connKey struct{}

func (g *Gateway) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// Bound each request, as MaxDuration bounds a spliced connection.
		ReadTimeout:    g.cfg.MaxDuration,
		WriteTimeout:   g.cfg.MaxDuration,
		IdleTimeout:    g.cfg.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		// The sandbox's malformed requests are its own business: they are
		// answered with 400 and must not flood airlock's log (nil would
		// print them to airlock's standard error).
		ErrorLog: log.New(io.Discard, "", 0),
	}
}

// serveDirectHTTP handles a plain HTTP request sent to a gateway-owned
// address (or inside a CONNECT tunnel): the Host header must name the
// address's name, and the request must pass the rule (the Decider
// decides both).
func (g *Gateway) serveDirectHTTP(w http.ResponseWriter, r *http.Request) {
	sc, _ := r.Context().Value(connKey{}).(*slotConn)
	if sc == nil {
		http.Error(w, "airlock: internal error", http.StatusInternalServerError)
		return
	}
	local := addrPort(sc.LocalAddr())
	proto := rules.ProtoHTTP
	switch {
	case sc.proto == rules.ProtoProxyConnect:
		proto = rules.ProtoProxyConnect
	case sc.tls:
		proto = rules.ProtoHTTPS
	}
	d := rules.Decision{Time: time.Now().UTC(), Protocol: proto, Name: sc.name, Address: local.Addr().String(), Port: sc.port, Method: r.Method, Path: textsafe.Clip(r.URL.Path, 512, ""), Client: r.RemoteAddr}
	if v := g.cfg.Decider.HTTPHost(sc.name, r.Host); !v.Allowed {
		g.refuse(w, r, &d, v)
		return
	}
	g.forward(w, r, &d, sc.tls)
}

// serveProxy is the explicit proxy (HTTP_PROXY and HTTPS_PROXY in the
// sandbox).
func (g *Gateway) serveProxy(w http.ResponseWriter, r *http.Request) {
	sc, _ := r.Context().Value(connKey{}).(*slotConn)
	local := g.cfg.Proxy
	if sc != nil {
		local = addrPort(sc.LocalAddr())
	}
	d := rules.Decision{Time: time.Now().UTC(), Protocol: rules.ProtoProxyHTTP, Address: local.Addr().String(), Port: int(local.Port()), Method: r.Method, Client: r.RemoteAddr}
	if r.Method == http.MethodConnect {
		d.Protocol = rules.ProtoProxyConnect
		g.serveConnect(w, r, &d)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		d.Path = textsafe.Clip(r.URL.Path, 512, "")
		g.refuse(w, r, &d, rules.Verdict{Rule: rules.RuleID{Kind: rules.KindProxy}, Reason: "this is airlock's egress proxy: send CONNECT host:port or an absolute http:// URL"})
		return
	}
	name, port, v := g.target(r.URL.Host, 80)
	d.Name, d.Port, d.Path = name, port, textsafe.Clip(r.URL.Path, 512, "")
	if !v.Allowed {
		g.refuse(w, r, &d, v)
		return
	}
	g.forward(w, r, &d, false)
}

// target turns a proxy request's host[:port] into the name it is for. An
// address literal counts only when it is a gateway-owned address (then it
// stands for its name); any other address has no name to allow.
func (g *Gateway) target(hostport string, defPort int) (string, int, rules.Verdict) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portStr = hostport, strconv.Itoa(defPort)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return host, 0, rules.Verdict{Rule: rules.RuleID{Kind: rules.KindProxy}, Reason: fmt.Sprintf("invalid port in %q", textsafe.Clip(hostport, 255, ""))}
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if a, err := netip.ParseAddr(host); err == nil {
		if name, ok := g.cfg.Names.Name(a.Unmap()); ok {
			return name, port, rules.Verdict{Allowed: true}
		}
		return host, port, g.cfg.Decider.AddressLiteral(host)
	}
	return host, port, rules.Verdict{Allowed: true}
}

// serveConnect opens a CONNECT tunnel that then goes through the same
// checks as a direct connection (SNI, or Host per request).
func (g *Gateway) serveConnect(w http.ResponseWriter, r *http.Request, d *rules.Decision) {
	name, port, v := g.target(r.Host, 443)
	d.Name, d.Port = name, port
	if !v.Allowed {
		g.refuse(w, r, d, v)
		return
	}
	rule, v := g.cfg.Decider.Connect(name, port)
	if !v.Allowed {
		g.refuse(w, r, d, v)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "airlock: cannot open a tunnel", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		c.Close()
		return
	}
	// Requests inside the tunnel are checked against the tunnel's name
	// and port.
	inner := &slotConn{Conn: c, name: name, port: port, proto: rules.ProtoProxyConnect}
	br := brw.Reader
	if br.Size() < 1<<14+5 {
		br = bufio.NewReaderSize(br, 1<<14+5)
	}
	if !g.begin() {
		inner.Close()
		return
	}
	defer g.wg.Done()
	g.tunnel(inner, br, d, rule, v)
}

// forward sends an allowed-so-far HTTP request upstream (over TLS when
// overTLS) once the Decider allowed it (the rule's methods and paths, the
// credentials policy): the policy's secrets for the name are added, and
// the response comes back with any echo of a secret blanked.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, d *rules.Decision, overTLS bool) {
	out, ok := g.decideRequest(w, r, d, overTLS)
	if !ok {
		return
	}
	ex, err := g.cfg.Uploads.Begin(out.route, d.Name, r)
	if err != nil {
		// Refused by the artifact record, or its spool failed: either
		// way the upload does not pass unrecorded.
		v := rules.Verdict{Rule: rules.RuleID{Kind: rules.KindCredentials, Detail: "credentials.artifacts"}, Reason: err.Error()}
		var refusal *uploads.Refusal
		if errors.As(err, &refusal) {
			v.Suggest = refusal.Suggest
		}
		g.refuse(w, r, d, v)
		return
	}
	defer ex.Done()
	out.upload = ex
	reqBody := &countingReader{r: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = reqBody
	}
	cw := &countingWriter{ResponseWriter: w}
	// Recorded however the request ends: the proxy panics with
	// http.ErrAbortHandler when either side goes away mid-response.
	defer func() {
		p := recover()
		if d.Decision == "" { // not refused or failed, so not yet recorded
			d.Apply(out.v)
			if p != nil {
				d.Reason = "ended mid-response (a side went away)"
			}
			d.Upstream = out.upstream
			d.BytesOut, d.BytesIn = reqBody.n, cw.n
			g.finish(d)
		}
		if p != nil {
			panic(p)
		}
	}()
	out.proxy().ServeHTTP(cw, r)
}

// decideRequest has the Decider decide r, weighing the credentials
// policy's answer when the job has a vault (which then puts back the
// credentials that belong in r, over TLS only); false: refused, and
// answered.
func (g *Gateway) decideRequest(w http.ResponseWriter, r *http.Request, d *rules.Decision, overTLS bool) (*outbound, bool) {
	dec := g.cfg.Decider
	v := dec.Request(d.Name, d.Port, r.Method, r.URL.Path, r.URL.EscapedPath())
	var injected, echoes []string
	route := ""
	if vault := g.cfg.Credentials; vault != nil {
		// Audit never puts a credential back on what the rules would
		// deny.
		cd := vault.Request(d.Name, d.Port, r.Method, r.URL, r.Header, v.RulesAllow(), overTLS)
		v = dec.WithCredentials(v, rules.CredentialVerdict{Service: cd.Service, Allowed: cd.Allowed, Rule: cd.Rule, Reason: cd.Reason, Suggest: cd.Suggest})
		injected, echoes, route = cd.Injected, cd.Echoes, cd.Route
	}
	if !v.Allowed {
		g.refuse(w, r, d, v)
		return nil, false
	}
	out := &outbound{g: g, d: d, v: v, overTLS: overTLS, secrets: dec.Secrets(d.Name, v), echoes: echoes, route: route}
	for _, s := range out.secrets {
		d.SecretsInjected = append(d.SecretsInjected, s.Header)
		out.echoes = append(out.echoes, s.Value)
	}
	d.SecretsInjected = append(d.SecretsInjected, injected...)
	return out, true
}

// outbound is one allowed request on its way upstream: its verdict, the
// secrets the gateway adds, what it must blank in the answer (echoes),
// and what the dial found (the upstream's address, or the Decider's
// refusal of it).
type outbound struct {
	g        *Gateway
	d        *rules.Decision
	v        rules.Verdict
	overTLS  bool
	secrets  []rules.Secret
	echoes   []string
	upstream string
	refused  *rules.Verdict
	// route is the credentials vault's route of the request ("" off
	// every route); upload is the artifact recorder's watch of it.
	route  string
	upload *uploads.Exchange
}

// proxy is the reverse proxy that sends the request.
func (o *outbound) proxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: o.rewrite,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return o.dial(ctx) },
			DialTLSContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return o.dialTLS(ctx) },
			DisableCompression:    true,
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: o.g.cfg.IdleTimeout,
		},
		ModifyResponse: func(resp *http.Response) error {
			if err := o.upload.Respond(resp); err != nil {
				return err
			}
			if len(o.echoes) > 0 {
				redactResponse(resp, o.echoes)
			}
			return nil
		},
		ErrorHandler: o.fail,
	}
}

// rewrite points the request at the name (never at what the sandbox
// wrote in the URL), drops the proxy's headers and adds the secrets.
func (o *outbound) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	if o.overTLS {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = net.JoinHostPort(o.d.Name, strconv.Itoa(o.d.Port))
	pr.Out.Host = pr.In.Host
	pr.Out.Header.Del("Proxy-Authorization")
	pr.Out.Header.Del("Proxy-Connection")
	for _, s := range o.secrets {
		pr.Out.Header.Set(s.Header, s.Value)
	}
	if len(o.echoes) > 0 {
		// An echo of the secret must come back where it can be
		// blanked: uncompressed, and whole.
		pr.Out.Header.Set("Accept-Encoding", "identity")
		pr.Out.Header.Del("Range")
	}
}

// dial dials the upstream past the deny ranges (dialUpstream).
func (o *outbound) dial(ctx context.Context) (net.Conn, error) {
	c, v, err := o.g.dialUpstream(ctx, o.d.Name, o.d.Port, o.v.WouldDeny)
	if err != nil {
		o.refused = &v
		return nil, err
	}
	o.upstream = c.RemoteAddr().String()
	return c, nil
}

// dialTLS dials and verifies the upstream as the name.
func (o *outbound) dialTLS(ctx context.Context) (net.Conn, error) {
	c, err := o.dial(ctx)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, &tls.Config{ServerName: o.d.Name, RootCAs: o.g.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS with upstream %s: %w", o.d.Name, err)
	}
	return tc, nil
}

// fail answers a request that did not reach its upstream: 403 for a dial
// the Decider refused, else 502, recorded with the upstream's error.
func (o *outbound) fail(w http.ResponseWriter, r *http.Request, err error) {
	d := o.d
	if o.refused != nil {
		o.g.refuse(w, r, d, *o.refused)
		return
	}
	uv := o.v
	uv.Reason = strings.TrimPrefix(o.v.Reason+"; upstream error: "+err.Error(), "; ")
	d.Apply(uv)
	w.WriteHeader(http.StatusBadGateway)
	fmt.Fprintf(w, "airlock: upstream %s:%d: %v\n", d.Name, d.Port, err)
	o.g.finish(d)
}

// refuse answers 403 with the decision in a header and, in the body in
// the refused endpoint's own protocol (package refusal), why and the
// policy line that would allow the request; and records it. r is nil
// where no request was read.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, d *rules.Decision, v rules.Verdict) {
	d.Apply(v)
	g.finish(d)
	w.Header().Set(DecisionHeader, headerSafe(fmt.Sprintf("denied; rule=%q; reason=%q", v.Rule.String(), v.Reason)))
	p := refusal.Plain
	if r != nil && r.Method != http.MethodConnect {
		p = refusal.Of(r, g.cfg.Credentials.APIHost())
	}
	detail := []string{"rule: " + v.Rule.String()}
	if v.Suggest != "" {
		detail = append(detail, "to allow it: "+v.Suggest)
	}
	refusal.Write(w, p, fmt.Sprintf("airlock: denied %s %s:%d%s: %s", d.Method, d.Name, d.Port, d.Path, v.Reason), detail...)
}

// headerSafe drops bytes that cannot go in a header value.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
