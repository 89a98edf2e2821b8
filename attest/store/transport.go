package store

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

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
	return &retryablehttp.RoundTripper{Client: rc}
}

// retryable retries what may pass on a later try: no connection, a
// timed-out try, 408, 429 and the server errors but 501 (not
// implemented: it will not be later). 4xx are answers: never retried.
func retryable(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return !errors.Is(err, context.Canceled), nil
	}
	switch c := resp.StatusCode; {
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests:
		return true, nil
	case c >= 500 && c != http.StatusNotImplemented:
		return true, nil
	}
	return false, nil
}
