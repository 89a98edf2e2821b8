package testhost

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// GitHub is GitHub as a job's credentials reach it, on a loopback
// address, port 443, over TLS for github.test and its subdomains:
//
//	github.test           git smart HTTP (Debian's git http-backend) for
//	                      acme/app, basic x-access-token:<Token>
//	api.github.test       the REST API: GET /repos/acme/app, "token" or
//	                      "Bearer" <Token>
//	results.github.test   the results service, Bearer <Runtime>: the
//	                      artifact service (v4) and the cache service
//	                      (v2) in twirp JSON (results.go); any other
//	                      path answers one generic JSON with ok true
//	pipelines.github.test the OIDC token endpoint /runtime/oidc/token?audience=,
//	                      Bearer <Runtime> (the request token is the
//	                      runtime token, as on GitHub)
//	blob.github.test      storage behind signed URLs, no token: an
//	                      Azure block blob store (blobstore.go) for
//	                      /artifacts/<run>/<job>/<name>.zip and
//	                      /caches/<id>, whose requests need a URL the
//	                      results service signed; any other path
//	                      answers "blob"
//
// Each endpoint answers 401 without its credential. Every request is
// recorded with the Authorization it carried. Names are the caller's to
// pin to Addr (egress.resolve); CAFile is the CA that signed the
// server's certificate. What the clients uploaded is in Artifacts,
// Blob, CacheEntries and CacheBlob.
type GitHub struct {
	Addr   string // the loopback address it listens on, port 443
	CAFile string
	// Token is the job's GitHub token, Runtime its runtime token (a JWT).
	Token, Runtime string
	// Repo is the bare repository served as acme/app.
	Repo string

	mu   sync.Mutex
	seen []Seen

	sign    urlSigner
	blobs   *blobStore
	results *results
}

// Seen is one request the fake GitHub answered.
type Seen struct {
	Host, Method, Path, Query string
	Authorization             string
	Status                    int
}

// GitHub URLs of the fake, as the runner names them.
const (
	GitHubServerURL = "https://github.test"
	GitHubAPIURL    = "https://api.github.test"
	GitHubResults   = "https://results.github.test/"
	GitHubRuntime   = "https://pipelines.github.test/runtime/"
	// As on github.com, the OIDC token endpoint lies below the runtime
	// service's URL.
	GitHubOIDC = "https://pipelines.github.test/runtime/oidc/token?api-version=2.0"
)

// GitHubHosts are the names the fake answers for.
var GitHubHosts = []string{"github.test", "api.github.test", "results.github.test", "pipelines.github.test", "blob.github.test"}

// NewGitHub starts the fake on addr (a loopback address; port 443) with
// a bare clone of the repository at origin as acme/app. It stops when
// the test ends.
func NewGitHub(t testing.TB, addr, origin string) *GitHub {
	t.Helper()
	dir := t.TempDir()
	g := newGitHub(addr, dir)
	if out, err := exec.Command("git", "clone", "-q", "--bare", origin, g.Repo).CombinedOutput(); err != nil {
		t.Fatalf("bare clone: %v %s", err, out)
	}
	cert, caPEM := ServerCert(t, append([]string{"*.github.test"}, GitHubHosts...)...)
	g.CAFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(g.CAFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "443"))
	if err != nil {
		t.Fatalf("fake GitHub: %v", err)
	}
	srv := &http.Server{Handler: g.handler(dir), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 10 * time.Second}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return g
}

// newGitHub is the fake's state, serving nothing yet.
func newGitHub(addr, dir string) *GitHub {
	g := &GitHub{Addr: addr, Token: "ghs_" + randomAlnum(36), Runtime: runtimeJWT(), Repo: filepath.Join(dir, "acme", "app.git"),
		sign: newURLSigner(), blobs: newBlobStore(blobStoreLimit)}
	g.results = &results{run: runtimeRun, job: runtimeJob, sign: g.sign, blobs: g.blobs}
	return g
}

// Requests are the requests answered so far.
func (g *GitHub) Requests() []Seen {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Seen(nil), g.seen...)
}

var gitPath = regexp.MustCompile(`^/acme/app(\.git)?/(info/refs|git-upload-pack|git-receive-pack)$`)

func (g *GitHub) handler(dir string) http.Handler {
	backend := &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=x-access-token"},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := strings.Cut(r.Host, ":")
		auth := r.Header.Get("Authorization")
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			g.mu.Lock()
			g.seen = append(g.seen, Seen{Host: host, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Authorization: auth, Status: sw.status})
			g.mu.Unlock()
		}()
		unauthorized := func() {
			sw.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(sw, "Bad credentials", http.StatusUnauthorized)
		}
		switch host {
		case "github.test":
			if !gitPath.MatchString(r.URL.Path) {
				fmt.Fprintln(sw, "not a git request")
				return
			}
			if auth != "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+g.Token)) {
				unauthorized()
				return
			}
			r.URL.Path = strings.Replace(r.URL.Path, "/acme/app/", "/acme/app.git/", 1)
			backend.ServeHTTP(sw, r)
		case "api.github.test":
			if auth != "token "+g.Token && auth != "Bearer "+g.Token {
				unauthorized()
				return
			}
			json.NewEncoder(sw).Encode(map[string]any{"full_name": "acme/app", "private": true})
		case "results.github.test":
			if auth != "Bearer "+g.Runtime {
				unauthorized()
				return
			}
			if m := g.results.method(r.URL.Path); m != nil {
				g.results.serve(sw, r, m)
				return
			}
			json.NewEncoder(sw).Encode(map[string]any{"ok": true, "signed_download_url": "https://blob.github.test/cache", "signed_upload_url": "https://blob.github.test/upload"})
		case "pipelines.github.test":
			if auth != "Bearer "+g.Runtime {
				unauthorized()
				return
			}
			json.NewEncoder(sw).Encode(map[string]any{"value": "oidc-token-for-" + r.URL.Query().Get("audience")})
		case "blob.github.test":
			if !strings.HasPrefix(r.URL.Path, "/artifacts/") && !strings.HasPrefix(r.URL.Path, "/caches/") {
				fmt.Fprint(sw, "blob")
				return
			}
			g.blobs.serve(sw, r, g.sign) // storage behind signed URLs: no token
		default:
			http.NotFound(sw, r)
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// The workflow run and job backend ids the runtime token's scope names,
// and the artifact service requires.
const (
	runtimeRun = "run-1"
	runtimeJob = "job-1"
)

// runtimeJWT is a runtime token as the runner's: a JWT whose claims the
// artifact client reads (scp), signed by nobody here.
func runtimeJWT() string {
	enc := base64.RawURLEncoding.EncodeToString
	header := enc([]byte(`{"typ":"JWT","alg":"RS256","x5t":"test"}`))
	claims := enc([]byte(`{"scp":"Actions.ExampleScope Actions.Results:` + runtimeRun + `:` + runtimeJob + `","iss":"vstoken.actions.githubusercontent.com","exp":` + fmt.Sprint(time.Now().Add(time.Hour).Unix()) + `}`))
	sig := make([]byte, 256)
	rand.Read(sig)
	return header + "." + claims + "." + enc(sig)
}

func randomAlnum(n int) string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		k, _ := rand.Int(rand.Reader, big.NewInt(int64(len(chars))))
		b[i] = chars[k.Int64()]
	}
	return string(b)
}

// ServerCert makes a CA and a server certificate it signs for names, and
// returns the CA in PEM (for the clients that must trust it).
func ServerCert(t testing.TB, names ...string) (tls.Certificate, []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock test GitHub CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}
