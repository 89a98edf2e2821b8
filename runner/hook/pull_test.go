package hook

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlock-ci/airlock/internal/runnersim"
	"github.com/airlock-ci/airlock/internal/testimage"
	"github.com/airlock-ci/airlock/runner/images"
)

// Images the hook pulls: a job whose container and services name images
// that no policy maps, pulled on the host from registries on loopback,
// with the runner's registry credentials for the job container's image.
// The registries and the images are the test's own (go-containerregistry's
// registry, images built here): nothing is pulled from anywhere else.

// hookRegistry is go-containerregistry's registry on a loopback port.
// With user set it wants those credentials (Basic) for everything, and
// its refusal of wrong ones quotes what it was sent (a hostile registry:
// airlock must not print it). Without, it challenges for Basic at /v2/
// only and serves everyone, so that a client holding credentials for it
// would send them: it records every Authorization it sees.
type hookRegistry struct {
	srv        *httptest.Server
	host       string
	user, pass string

	mu       sync.Mutex
	requests int
	auths    []string
}

func newHookRegistry(t testing.TB, user, pass string) *hookRegistry {
	t.Helper()
	hr := &hookRegistry{user: user, pass: pass}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	hr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hr.mu.Lock()
		hr.requests++
		if a := r.Header.Get("Authorization"); a != "" {
			hr.auths = append(hr.auths, a)
		}
		hr.mu.Unlock()
		refuse := func(msg string) {
			w.Header().Set("WWW-Authenticate", `Basic realm="airlock-test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]any{"errors": []any{map[string]any{"code": "UNAUTHORIZED", "message": msg}}})
		}
		u, p, ok := r.BasicAuth()
		switch {
		case hr.user != "" && !ok:
			refuse("authentication required")
			return
		case hr.user != "" && (u != hr.user || p != hr.pass):
			refuse(fmt.Sprintf("invalid username or password: %s:%s (Authorization: %s)", u, p, r.Header.Get("Authorization")))
			return
		case hr.user == "" && r.URL.Path == "/v2/" && r.Header.Get("Authorization") == "":
			refuse("log in, or do not")
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(hr.srv.Close)
	hr.host = strings.TrimPrefix(hr.srv.URL, "http://")
	return hr
}

// seen is how many requests the registry had, and the Authorization
// headers among them.
func (hr *hookRegistry) seen() (int, []string) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return hr.requests, slices.Clone(hr.auths)
}

// push puts img in the registry as repo:tag and returns its reference by
// digest, as an agent's workflow must name it.
func (hr *hookRegistry) push(t testing.TB, repo string, img v1.Image) (string, v1.Hash) {
	t.Helper()
	auth := authn.Anonymous
	if hr.user != "" {
		auth = &authn.Basic{Username: hr.user, Password: hr.pass}
	}
	h := testimage.Push(t, hr.host+"/"+repo+":1", img, remote.WithAuth(auth))
	return hr.host + "/" + repo + "@" + h.String(), h
}

// pulledImages are the three images of the job: its container's (bash
// and the tools its steps use, a marker file no host has) on the
// registry with credentials, and two services' (the static test binary
// as a tiny server, on two ports) on the open one.
type pulledImages struct {
	withAuth, open        *hookRegistry
	job, db, cache        string // references by digest
	jobTag                string // the job's image by tag
	jobHash, dbH, cacheH  v1.Hash
	user, password, basic string
}

func pushPulledImages(t testing.TB) pulledImages {
	t.Helper()
	// Made here, not a literal: the test binary is in the services'
	// images, and the needle must be nowhere but where it leaks.
	pi := pulledImages{user: "octocat", password: "pull-secret-" + randomHex(6)}
	pi.basic = base64.StdEncoding.EncodeToString([]byte(pi.user + ":" + pi.password))
	pi.withAuth = newHookRegistry(t, pi.user, pi.password)
	pi.open = newHookRegistry(t, "", "")

	root := imageRootFS(t, "image-pulled-ci")
	for _, bin := range []string{"grep"} {
		p, err := exec.LookPath(bin)
		if err != nil {
			t.Skipf("needs %s", bin)
		}
		testimage.CopyIntoRoot(t, root, p)
		testimage.CopyLibraries(t, root, p)
	}
	// An Alpine image, as far as the runner's isAlpine looks (its
	// os-release), whose PATH goes first to a directory of its own.
	os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("NAME=\"Alpine Linux\"\nID=alpine\n"), 0o644)
	pi.job, pi.jobHash = pi.withAuth.push(t, "acme/ci", testimage.Image(t, runtime.GOARCH, []string{"PATH=/opt/pulled/bin:/usr/bin:/bin", "CI_IMAGE=pulled"}, []string{"/usr/bin/bash"}, "", testimage.LayerOfDir(t, root)))
	pi.jobTag = pi.withAuth.host + "/acme/ci:1"

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svc := t.TempDir()
	for _, d := range []string{"usr/bin", "etc", "tmp", "proc", "dev", "sys"} {
		os.MkdirAll(filepath.Join(svc, d), 0o755)
	}
	for _, f := range []string{"resolv.conf", "hosts", "hostname"} {
		os.WriteFile(filepath.Join(svc, "etc", f), nil, 0o644)
	}
	copyFile(t, self, filepath.Join(svc, "usr", "bin", "svc"))
	layer := testimage.LayerOfDir(t, svc) // one layer for both: pulled once
	pi.db, pi.dbH = pi.open.push(t, "acme/db", testimage.Image(t, runtime.GOARCH, []string{testServiceEnv + "=127.0.0.1:6379"}, []string{"/usr/bin/svc"}, "", layer))
	pi.cache, pi.cacheH = pi.open.push(t, "acme/cache", testimage.Image(t, runtime.GOARCH, []string{testServiceEnv + "=127.0.0.1:5432"}, []string{"/usr/bin/svc"}, "", layer))
	return pi
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// pullPolicy is the organisation policy of these tests: services, pulls
// from any registry on loopback (by digest, for an agent's job), and,
// with loopback, the exception to the deny ranges an agent's pull from
// loopback needs.
func pullPolicy(loopback bool) string {
	p := "package airlock\negress: default: \"deny\"\nsandbox: services: true\nimages: allow: [{name: \"127.0.0.1:*/**\"}]\n"
	if loopback {
		p += "egress: allowCIDRs: [\"127.0.0.0/8\"]\n"
	}
	return p
}

// withPulls makes h's organisation policy pol (in place of the harness's
// images: pull: false) and gives the hook an image cache of the test's.
func withPulls(t testing.TB, h *runnerHost, pol string) string {
	t.Helper()
	os.WriteFile(filepath.Join(h.org, "org.cue"), []byte(pol), 0o644)
	cache := t.TempDir()
	h.env = append(h.env, ImageCacheEnv+"="+cache)
	return cache
}

// secretIn says where under dir (walked without following symlinks) one
// of the needles is, skipping the bounded workspaces' images (16 GiB of
// mostly hole).
func secretIn(t testing.TB, dir string, needles ...string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (d.Name() == "volumes" || d.Name() == "volume-templates") {
			return filepath.SkipDir
		}
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			for _, n := range needles {
				if bytes.Contains(b, []byte(n)) {
					found = append(found, p)
				}
			}
		}
		return nil
	})
	return found
}

// The whole job with the runner's payloads, through index.js: a job
// container and two services whose images are pulled from registries on
// loopback for an agent's pull request (by digest, as the organisation
// policy requires; loopback allowed by egress.allowCIDRs), the job
// container's with the registry credentials of the payload
// (HookContainer.Registry), which go to that registry alone. The steps
// run on the pulled image; the job reaches both services by name; the
// attestation records the three images with their digests; and the
// password is nowhere: not in the sandbox (its environment, every
// process's, every file it can see), not in the hook's output, the job's
// directory, the daemon's environment, the attestation, the image cache
// or the runner's directories.
func TestHookPulledImages(t *testing.T) {
	pi := pushPulledImages(t)
	h := newRunnerHost(t)
	cache := withPulls(t, h, pullPolicy(true))
	h.job.Image, h.job.RegistryUser, h.job.RegistryPassword = pi.job, pi.user, pi.password
	h.job.Services = []servicePayload{
		{Image: pi.db, Args: []string{}, Env: map[string]string{}, Ports: []string{"6379:6379"}},
		{Image: pi.cache, Args: []string{}, Env: map[string]string{}, Ports: []string{"5432/tcp"}},
	}
	needles := []string{pi.password, pi.basic}
	var outputs []string
	code, out, resp := h.send(PrepareJob, h.job)
	outputs = append(outputs, out)
	if code != 0 {
		t.Fatalf("prepare_job: exit %d: %s", code, out)
	}
	r, err := runnersim.ReadResponse(resp, true, 2)
	if err != nil {
		t.Fatalf("the runner cannot read the response: %v", err)
	}
	var state map[string]any
	json.Unmarshal(r.State, &state)
	t.Cleanup(func() { h.cleanup(state) })
	if s := r.Services(); s[0].ID != "service-db" || s[1].ID != "service-cache" {
		t.Errorf("services: %+v", s)
	}
	// isAlpine is the pulled root's (prepare-job-test.ts's test, read
	// inside the root), not the host's.
	if r.IsAlpine == nil || !*r.IsAlpine {
		t.Errorf("isAlpine is not true for a pulled Alpine image")
	}

	// The daemon has the credentials in its memory alone: its standard
	// input (the pipe they came through) is /dev/null now, its
	// environment and command line are the hook's, and the payload it
	// keeps names no registry.
	dir := state["jobDir"].(string)
	pid := daemonPID(dir)
	if pid == 0 {
		t.Fatal("no daemon")
	}
	if in, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", pid)); in != os.DevNull {
		t.Errorf("the daemon's standard input is %q, want %s", in, os.DevNull)
	}
	for _, f := range []string{"environ", "cmdline"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if bytes.Contains(b, []byte(pi.password)) {
			t.Errorf("the registry password is in the daemon's %s", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, prepareInputFile)); !bytes.Contains(b, []byte(`"registry":null`)) || bytes.Contains(b, []byte(pi.user)) {
		t.Errorf("the payload the daemon keeps: %s", b)
	}

	steps := []struct {
		name, script string
		want         []string
	}{
		// A step's prependPath goes before the pulled image's PATH, as
		// before a container's under Docker.
		{"the pulled image", `cat /etc/image-release; echo "CI_IMAGE=$CI_IMAGE"; test -e /etc/debian_version && echo host-root || echo not-the-host; echo "PATH=$PATH"`,
			[]string{"image-pulled-ci", "CI_IMAGE=pulled", "not-the-host", "PATH=/__w/_temp/bin:/opt/pulled/bin:/usr/bin:/bin\n"}},
		{"both services by name", `for s in db:6379 cache:5432; do
  n=${s%:*}; p=${s#*:}
  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do exec 3<>/dev/tcp/$n/$p && break; sleep 0.2; done 2>/dev/null
  echo "ping $n" >&3; read -r line <&3; echo "$n answered: $line"; exec 3<&-
done`, []string{"db answered: pong ping db", "cache answered: pong ping cache"}},
		// The password, put together here so that the script holds it
		// nowhere: not in the job's environment, any process's
		// environment or command line, nor any file the job can read.
		// It goes to grep as a pattern file written by a builtin: never
		// in a command line, which the attestation records.
		{"the password is nowhere in the sandbox", `a=pull-secret-; b=` + strings.TrimPrefix(pi.password, "pull-secret-") + `
needle() { printf '%s\n' "$a$b"; }
echo "env: $(env | grep -cF -f <(needle))"
echo "procs: $(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -caF -f <(needle))"
for d in /*; do case "$d" in /proc|/sys|/dev) continue;; esac; { grep -rlsF -f <(needle) "$d" || true; } | while read -r f; do echo "found: $f"; done; done
echo "control: $(grep -rlsF -f <(printf '%s\n' image-pulled-ci) /etc)"
echo searched`, []string{"env: 0", "procs: 0", "control: /etc/image-release", "searched"}},
	}
	for _, s := range steps {
		code, out := h.step(state, s.script)
		outputs = append(outputs, out)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", s.name, code, out)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: the output lacks %q: %s", s.name, w, out)
			}
		}
		if strings.Contains(out, "found: ") {
			t.Errorf("%s: %s", s.name, out)
		}
	}
	if found := secretIn(t, h.hooksRoot(), needles...); len(found) > 0 {
		t.Errorf("the registry password is in the hook's directory while the job runs: %v", found)
	}
	code, out = h.cleanup(state)
	outputs = append(outputs, out)
	if code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}

	// The credentials went to the registry of the image they came with,
	// and to no other.
	if n, auths := pi.withAuth.seen(); n == 0 || !slices.Contains(auths, "Basic "+pi.basic) {
		t.Errorf("the job container's registry never saw the payload's credentials (%d requests)", n)
	}
	if _, auths := pi.open.seen(); len(auths) > 0 {
		t.Errorf("the services' registry was sent credentials: %q", auths)
	}
	// The attestation records the three images as written and what they
	// resolved to.
	_, v, vj := h.finalAttestation("")
	want := map[string]v1.Hash{pi.job: pi.jobHash, pi.db: pi.dbH, pi.cache: pi.cacheH}
	if len(v.Predicate.Job.Images) != 3 {
		t.Errorf("the attestation's images: %+v", v.Predicate.Job.Images)
	}
	for _, im := range v.Predicate.Job.Images {
		if h, ok := want[im.Ref]; !ok || im.Digest != h.String() || im.ImageDigest != h.String() || !strings.HasPrefix(im.Rule, "images.allow[0]") {
			t.Errorf("the attestation records %+v; want the references %v with their digests", im, want)
		}
	}
	for _, n := range needles {
		if strings.Contains(vj, n) {
			t.Error("the registry password is in the attestation")
		}
	}
	for i, o := range outputs {
		for _, n := range needles {
			if strings.Contains(o, n) {
				t.Errorf("the registry password is in the hook's output (call %d): %s", i+1, o)
			}
		}
	}
	for _, d := range []string{h.hooksRoot(), cache, h.root} {
		if found := secretIn(t, d, needles...); len(found) > 0 {
			t.Errorf("the registry password is in %v", found)
		}
	}
}

// An agent's job whose images the policy refuses, or whose registry
// refuses the credentials, fails prepare_job with a message that names
// the image and what to do, and never the password; a refusal by policy
// comes before any dial.
func TestHookPulledImageRefused(t *testing.T) {
	pi := pushPulledImages(t)
	wrong := "wrong-secret-" + randomHex(6)
	for _, tc := range []struct {
		name     string
		image    string
		password string
		loopback bool
		dials    bool
		want     []string
	}{
		{"a tag where the policy wants a digest", pi.jobTag, pi.password, true, false,
			[]string{"the job's image", pi.jobTag, "the rule requires a digest for an agent's pull request", "pin it: write " + pi.withAuth.host + "/acme/ci@sha256:<digest>"}},
		{"a registry on loopback without egress.allowCIDRs", pi.job, pi.password, false, false,
			[]string{pi.job, "is at an address an agent's job may not reach", "is in the deny range 127.0.0.0/8", "allowCIDRs"}},
		{"a wrong password", pi.job, wrong, true, true,
			[]string{pi.job, "registry " + pi.withAuth.host + " refused it (HTTP 401)", "invalid username or password: octocat:***"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunnerHost(t)
			withPulls(t, h, pullPolicy(tc.loopback))
			h.job.Image, h.job.RegistryUser, h.job.RegistryPassword = tc.image, pi.user, tc.password
			before, _ := pi.withAuth.seen()
			code, out, _ := h.send(PrepareJob, h.job)
			if code == 0 {
				t.Fatalf("prepare_job passed: %s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the output lacks %q: %s", w, out)
				}
			}
			for _, n := range []string{tc.password, base64.StdEncoding.EncodeToString([]byte(pi.user + ":" + tc.password))} {
				if strings.Contains(out, n) {
					t.Errorf("the password is in the output: %s", out)
				}
				if found := secretIn(t, h.root, n); len(found) > 0 {
					t.Errorf("the password is in %v", found)
				}
			}
			if after, _ := pi.withAuth.seen(); (after > before) != tc.dials {
				t.Errorf("the registry had %d requests, want dials %v", after-before, tc.dials)
			}
			if code, out := h.cleanup(map[string]any{}); code != 0 {
				t.Errorf("cleanup after the failed prepare: exit %d: %s", code, out)
			}
		})
	}
}

// The runner's registry block is read whole, used for the registry of
// the image it came with (not the serverUrl it says), kept only where
// both a username and a password are given, and never written out nor
// printed.
func TestRegistryCredentials(t *testing.T) {
	args := runnerArgs(t, payload{Image: "127.0.0.1:5000/acme/ci@sha256:" + strings.Repeat("a", 64), RegistryPassword: "registry-secret-bar",
		Services: []servicePayload{
			{Image: "acme/team/db:1", RegistryUser: "svc", RegistryPassword: "svc-secret-1"}, // serverUrl "acme": Docker Hub's
			{Image: "redis:7"}, // no credentials: registry null
			{Image: "ghcr.io/acme/x:1", RegistryUser: "nopass"}, // a username alone
		}}, `"serverUrl":"127.0.0.1:5000"`, `"serverUrl":"evil.example:443"`)
	if args.Container.Registry == nil || args.Container.Registry.ServerURL != "evil.example:443" || args.Services[1].Registry != nil {
		t.Fatalf("registry blocks: %#v %#v", args.Container.Registry, args.Services[1].Registry)
	}
	got := registryCredentials(args)
	want := []pullCredentials{
		{Ref: args.Container.Image, Credentials: images.Credentials{Registry: "127.0.0.1:5000", Username: "octocat", Password: "registry-secret-bar"}},
		{Ref: "acme/team/db:1", Credentials: images.Credentials{Registry: "docker.io", Username: "svc", Password: "svc-secret-1"}},
	}
	if !slices.Equal(got, want) {
		t.Errorf("credentials:\n got %v\nwant %v", got, want)
	}
	// Stored (prepare.json), sent to the daemon, printed: never the
	// password.
	b, _ := json.Marshal(args)
	req, _ := json.Marshal(Request{Op: "container-step", Container: &args.Services[0]})
	for _, s := range []string{string(b), string(req), fmt.Sprintf("%v %+v %#v %s", args.Container, *args.Container, args.Container.Registry, got)} {
		if strings.Contains(s, "registry-secret-bar") || strings.Contains(s, "svc-secret-1") {
			t.Errorf("a password is written out: %s", s)
		}
	}
	if !strings.Contains(string(b), `"registry":null`) {
		t.Errorf("the stored payload: %s", b)
	}
	// A malformed block is refused without quoting it.
	var c Container
	if err := json.Unmarshal([]byte(`{"image":"x","registry":"registry-secret-bar"}`), &c); err == nil || strings.Contains(err.Error(), "registry-secret-bar") {
		t.Errorf("a malformed registry: %v", err)
	}
	// The pipe to the daemon: read whole, then /dev/null.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(got)
	go func() { pw.Write(line); pw.Close() }()
	read, err := readCredentials(pr)
	if err != nil || !slices.Equal(read, want) {
		t.Errorf("readCredentials: %v %v", read, err)
	}
	if fi, err := pr.Stat(); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Errorf("the pipe is not /dev/null after the read: %v %v", fi, err)
	}
	pr.Close()
	if m := byRef(read); m[args.Container.Image].Registry != "127.0.0.1:5000" || len(m) != 2 {
		t.Errorf("byRef: %v", m)
	}
	// What a registry could echo is redacted.
	msg := "UNAUTHORIZED: octocat:registry-secret-bar Basic " + base64.StdEncoding.EncodeToString([]byte("octocat:registry-secret-bar"))
	if r := redact(msg, read); r != "UNAUTHORIZED: octocat:*** Basic ***" {
		t.Errorf("redact: %s", r)
	}
}
