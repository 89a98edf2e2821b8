package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/hashicorp/go-retryablehttp"
)

// newTransport is the OCI store's HTTP transport: go-retryablehttp's
// bounded retries with exponential back-off (Retry-After honoured) over
// a plain transport, each try bounded by o.AttemptTimeout.
//
// Redirects are not followed here: the response goes back up to
// go-containerregistry's client, whose auth transport adds credentials
// only to requests for the registry they belong to, so a registry that
// sends a blob to a storage host (as registries do) never sends our
// credentials there.
func newTransport(o Options) http.RoundTripper {
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: o.AttemptTimeout,
		ExpectContinueTimeout: time.Second,
	}
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{
		Transport:     base,
		Timeout:       o.AttemptTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	rc.RetryMax = o.Attempts - 1
	rc.RetryWaitMin, rc.RetryWaitMax = o.RetryWaitMin, o.RetryWaitMax
	rc.CheckRetry = retryable
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	rc.Logger = nil // it would print URLs; errors say what we choose
	return &sessionAware{retrying: &retryablehttp.RoundTripper{Client: rc}, once: rc.HTTPClient}
}

// sessionAware sends a request that continues a blob upload (PATCH or
// PUT to an upload's location) once: the registry may have taken part
// of it, so the same bytes again are an error ("upload resumed at wrong
// offset"); Put retries such an upload whole, from a new session. Every
// other request (GETs, HEADs, a manifest's PUT, the POST that starts an
// upload) is idempotent and retried here.
type sessionAware struct {
	retrying http.RoundTripper
	once     *http.Client
}

func (s *sessionAware) RoundTrip(r *http.Request) (*http.Response, error) {
	// A PATCH continues an upload; a PUT with ?digest= finishes one (the
	// distribution spec's, whatever the location's path, which a
	// registry chooses).
	if r.Method == http.MethodPatch || (r.Method == http.MethodPut && r.URL.Query().Has("digest")) || (r.Method != http.MethodPost && strings.Contains(r.URL.Path, "/blobs/uploads/")) {
		return s.once.Transport.RoundTrip(r)
	}
	return s.retrying.RoundTrip(r)
}

// transient says whether an operation that failed with err may pass if
// it is done again: what retryable retries, seen after the fact (a
// registry's answer by its status; no connection, or a try that timed
// out; never a certificate not trusted, a TLS handshake that met plain
// HTTP, or plain HTTP refused).
func transient(err error) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		c := terr.StatusCode
		return c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500 && c != http.StatusNotImplemented
	}
	if errors.Is(err, errPlainHTTP) || errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") || certificateError(err) {
		return false
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// go-retryablehttp's policy looks at the *url.Error itself.
		retry, _ := retryablehttp.DefaultRetryPolicy(context.Background(), nil, uerr)
		return retry
	}
	var nerr net.Error
	return errors.As(err, &nerr) // not the network's (ErrConflict, a manifest that does not parse): no
}

// retryable retries what may pass on a later try: go-retryablehttp's
// own policy (no connection, a try that timed out, 429, the server
// errors but 501; never a certificate that is not trusted or a URL that
// is wrong), 408, and never a TLS handshake that met plain HTTP (go-
// containerregistry tries https first even on loopback, and must fall
// back to http at once). Other 4xx are answers: never retried.
func retryable(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil && (errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")) {
		return false, nil
	}
	if resp != nil && resp.StatusCode == http.StatusRequestTimeout {
		return true, nil
	}
	return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
}

// certificateError says whether err is a TLS certificate that does not
// verify: never better on a later try.
func certificateError(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}
