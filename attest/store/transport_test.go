package store

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// What a whole Put is tried again for: the network's trouble and a
// registry's 5xx, 408 and 429; never a certificate not trusted, plain
// HTTP refused, a conflict, or a 4xx answer.
func TestTransient(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "http://r/v2/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	badCert := &url.Error{Op: "Get", URL: "https://r/v2/", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("upload: %w", refused), true},
		{"503", &transport.Error{StatusCode: 503}, true},
		{"429", &transport.Error{StatusCode: 429}, true},
		{"501", &transport.Error{StatusCode: 501}, false},
		{"401", &transport.Error{StatusCode: 401}, false},
		{"a certificate not trusted", fmt.Errorf("upload: %w", badCert), false},
		{"plain HTTP refused", &url.Error{Op: "Get", URL: "http://r/v2/", Err: fmt.Errorf("%w to r", errPlainHTTP)}, false},
		{"a conflict", fmt.Errorf("tag x: %w", ErrConflict), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient = %v, want %v", tc.name, got, tc.want)
		}
	}
}
