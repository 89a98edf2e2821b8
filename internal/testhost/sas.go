package testhost

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// blobHost is the name of the fake's storage behind signed URLs.
const blobHost = "blob.github.test"

// urlSigner signs the blob store's URLs in the shape of Azure's shared
// access signatures: the query carries the permissions (sp), the expiry
// (se, RFC 3339) and sig, an HMAC-SHA256 over both and the blob's path
// with a key only this fake knows. A URL is good for its one blob, its
// permissions and its lifetime only; the blob store checks each
// request's signature against the request's own URL.
type urlSigner struct{ key []byte }

func newURLSigner() urlSigner {
	key := make([]byte, 32)
	rand.Read(key)
	return urlSigner{key: key}
}

// sign is the URL of the blob at path (unescaped, from "/") with
// permissions perm ("r" to read, "cw" to create and write) until expiry.
func (s urlSigner) sign(path, perm string, expiry time.Time) string {
	se := expiry.UTC().Format(time.RFC3339)
	u := url.URL{Scheme: "https", Host: blobHost, Path: path}
	return u.String() + "?sig=" + url.QueryEscape(s.mac(path, perm, se)) + "&se=" + url.QueryEscape(se) + "&sp=" + url.QueryEscape(perm)
}

func (s urlSigner) mac(path, perm, expiry string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(perm + "\n" + expiry + "\n" + path))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// verify checks r's signature against its URL and returns the
// permissions it grants. The failures are Azure's: 403
// AuthenticationFailed, with the detail Azure gives.
func (s urlSigner) verify(r *http.Request) (string, *azureError) {
	q := r.URL.Query()
	sig, se, sp := q.Get("sig"), q.Get("se"), q.Get("sp")
	if sig == "" || se == "" || sp == "" {
		return "", authenticationFailed("the URL carries no shared access signature (sig, se and sp)")
	}
	if !hmac.Equal([]byte(sig), []byte(s.mac(r.URL.Path, sp, se))) {
		return "", authenticationFailed("Signature did not match. String to sign used was " + strings.Join([]string{sp, se, r.URL.Path}, "\n"))
	}
	expiry, err := time.Parse(time.RFC3339, se)
	if now := time.Now(); err != nil || !now.Before(expiry) {
		return "", authenticationFailed("Signature not valid in the specified time frame: Expiry [" + se + "] - Current [" + now.UTC().Format(http.TimeFormat) + "]")
	}
	return sp, nil
}

func authenticationFailed(detail string) *azureError {
	return &azureError{status: http.StatusForbidden, code: "AuthenticationFailed",
		message: "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.",
		detail:  detail}
}
