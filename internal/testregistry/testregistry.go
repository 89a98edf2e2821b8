// Package testregistry starts real OCI registry servers on loopback for
// tests: Debian's docker-registry (distribution 2.8, which has no
// referrers API) with htpasswd auth from a config file of its own, and
// go-containerregistry's registry in process (which answers referrers),
// behind an optional fault, basic auth and a recorder of requests.
//
// Layer 1: for tests only; above internal/testtool.
package testregistry

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"golang.org/x/crypto/bcrypt"

	"github.com/airlock-ci/airlock/internal/testtool"
)

// DockerRegistry is Debian's docker-registry package.
var DockerRegistry = testtool.Tool{Names: []string{"docker-registry"}, Install: "apt-get install docker-registry", Require: "AIRLOCK_REQUIRE_DOCKER_REGISTRY"}

// Server is a registry on loopback.
type Server struct {
	// Host is host:port, URL http://Host.
	Host string
	// User and Password are what its auth takes (empty: none).
	User, Password string
	// Root is where distribution keeps its blobs (empty in process).
	Root string

	mu       sync.Mutex
	fault    func(w http.ResponseWriter, r *http.Request) bool
	requests []Request
	cmd      *exec.Cmd
}

// Request is one request the server had, as a test checks it.
type Request struct {
	Method, Path, Host string
	Authorization      bool
}

// SetFault makes f answer, where it returns true, before the registry.
func (s *Server) SetFault(f func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// Requests are the requests the server had so far (in process only).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Options configure a server.
type Options struct {
	// User and Password turn basic auth on.
	User, Password string
	// Referrers turns go-containerregistry's referrers API on (in
	// process).
	Referrers bool
	// Root is distribution's storage directory (default: a temp dir).
	Root string
	// Port is distribution's loopback port (default: a free one).
	Port int
}

// InProcess starts go-containerregistry's registry on a loopback port.
func InProcess(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{User: o.User, Password: o.Password}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(o.Referrers))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _, hasAuth := r.BasicAuth()
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Host: r.Host, Authorization: hasAuth || r.Header.Get("Authorization") != ""})
		fault := s.fault
		s.mu.Unlock()
		if fault != nil && fault(w, r) {
			return
		}
		if s.User != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != s.User || p != s.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.Host = strings.TrimPrefix(srv.URL, "http://")
	return s
}

// Distribution starts Debian's docker-registry (distribution 2.8) on a
// loopback port with a config file of its own: filesystem storage in
// o.Root, htpasswd auth when o.User is set. It is stopped (and waited
// for) when t ends.
func Distribution(t testing.TB, o Options) *Server {
	t.Helper()
	bin := testtool.Path(t, DockerRegistry, "the attestation store is tested against a real distribution 2.8 registry, which has no referrers API")
	dir := t.TempDir()
	if o.Root == "" {
		o.Root = filepath.Join(dir, "storage")
	}
	s := &Server{User: o.User, Password: o.Password, Root: o.Root}
	auth := ""
	if o.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(o.User+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: airlock-test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	}
	port := o.Port
	if port == 0 {
		port = FreePort(t)
	}
	s.Host = fmt.Sprintf("127.0.0.1:%d", port)
	conf := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: false
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
%s`, o.Root, s.Host, auth)
	confPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "serve", confPath)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		<-exited
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + s.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("docker-registry exited at start:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s within 20 s", s.Host)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// Log is what distribution wrote to its log.
func (s *Server) Log(t testing.TB) string {
	if s.cmd == nil {
		return ""
	}
	f, ok := s.cmd.Stdout.(*os.File)
	if !ok {
		return ""
	}
	b, _ := os.ReadFile(f.Name())
	return string(b)
}

// Stop stops a distribution server now (it is down for the rest of the
// test).
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
}

// AuthFile writes a Docker config.json holding the server's
// credentials (or user:password when given) and returns its path.
func (s *Server) AuthFile(t testing.TB, user, password string) string {
	t.Helper()
	if user == "" {
		user, password = s.User, s.Password
	}
	p := filepath.Join(t.TempDir(), "config.json")
	body := fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":%q}}}`, s.Host, user, password)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Tags is the registry's tag list of repository, as it answers it (its
// JSON, or the error): for a test that watches tags appear.
func (s *Server) Tags(repository string) string {
	req, err := http.NewRequest("GET", "http://"+s.Host+"/v2/"+repository+"/tags/list", nil)
	if err != nil {
		return err.Error()
	}
	if s.User != "" {
		req.SetBasicAuth(s.User, s.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return string(b)
}

// FreePort is a loopback TCP port nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
