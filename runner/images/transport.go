package images

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"syscall"
	"time"
)

// timeouts bound how long a registry may keep the runner waiting: a
// registry that is down fails the job within them (and the retries'),
// never hangs.
type timeouts struct {
	dial, header, idleRead time.Duration
}

// defaultTimeouts are a pull's; tests shorten them.
var defaultTimeouts = timeouts{dial: 10 * time.Second, header: 30 * time.Second, idleRead: 60 * time.Second}

// AddressCheck says why an address may not be dialled, or nil.
type AddressCheck func(netip.Addr) error

// AddressRefusedError is a registry connection that the address check
// refused before it was made.
type AddressRefusedError struct {
	Addr netip.Addr
	Err  error
}

func (e *AddressRefusedError) Error() string {
	return fmt.Sprintf("address %s refused: %v", e.Addr, e.Err)
}
func (e *AddressRefusedError) Unwrap() error { return e.Err }

// transport is the HTTP transport of every registry request: each
// connection's address is checked when it is dialled (after DNS, so a
// rebinding name gets nowhere), plain HTTP is spoken only to loopback
// and to the registries the policy names insecure (anything else is
// upgraded to HTTPS: go-containerregistry would speak HTTP to a private
// address), and a connection that stops sending fails after
// its idle timeout.
type transport struct {
	base     *http.Transport
	insecure []string // host[:port] that may speak plain HTTP
}

func newTransport(check AddressCheck, insecure []string, tm timeouts) *transport {
	d := &net.Dialer{Timeout: tm.dial, KeepAlive: 30 * time.Second}
	if check != nil {
		d.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("registry address %q: %w", address, err)
			}
			if err := check(ap.Addr()); err != nil {
				return &AddressRefusedError{Addr: ap.Addr(), Err: err}
			}
			return nil
		}
	}
	base := &http.Transport{
		Proxy: nil, // the runner's proxy settings are the job's concern, not the pull's
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: tm.idleRead}, nil
		},
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   tm.dial,
		ResponseHeaderTimeout: tm.header,
		ExpectContinueTimeout: time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &transport{base: base, insecure: insecure}
}

// RoundTrip sends req, over HTTPS unless its host may speak HTTP.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !t.plainAllowed(req.URL.Host) {
		r := req.Clone(req.Context())
		r.URL.Scheme = "https"
		req = r
	}
	return t.base.RoundTrip(req)
}

// plainAllowed: host (host[:port]) is a loopback address or localhost, or
// a registry the policy names insecure.
func (t *transport) plainAllowed(host string) bool {
	if slices.Contains(t.insecure, host) {
		return true
	}
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

// idleConn fails a read that waits longer than idle: a registry that
// sends headers and then stalls the body cannot hold a job.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}
