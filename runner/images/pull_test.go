package images

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// fast are timeouts and retries short enough for a test to wait them out.
var fast = &timeouts{dial: time.Second, header: 2 * time.Second, idleRead: 2 * time.Second}
var fastBackoff = &remote.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: 3}

func testPuller(t testing.TB, s *Store) *Puller {
	return &Puller{Store: s, timeouts: fast, backoff: fastBackoff}
}

// human is the decision for a human's job with no images section.
func human(t testing.TB, ref Ref) Decision { return Decide(ref, nil, false) }

// A first pull brings the image's layers into the cache, verified, and
// unpacks them once; the next pull of the same image (by tag or digest)
// takes it from the cache without a blob from the registry; the record
// names the reference, the digest it resolved to and the platform.
func TestPullAndCache(t *testing.T) {
	reg := newTestRegistry(t)
	img := testImage(t, "amd64",
		tarLayer(t, map[string]string{"etc/": "", "etc/os-release": "ID=test\n", "bin/": ""}),
		tarLayer(t, map[string]string{"srv/": "", "srv/app.txt": "hello\n"}))
	digest := push(t, reg.host, "team/app:1", img)
	p := testPuller(t, newStore(t, 0))

	ref := mustRef(t, reg.host+"/team/app:1")
	got, res, lease, err := p.Pull(bg, ref, human(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	if res.Digest != digest.String() || res.ImageDigest != digest.String() || res.Platform != "linux/amd64" || !res.Pulled || res.Ref != ref.Written {
		t.Errorf("record %+v, want digest %s", res, digest)
	}
	if b, err := os.ReadFile(filepath.Join(got.RootFS, "srv/app.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("unpacked root: %q %v", b, err)
	}
	if got.WorkingDir != "/srv" || !strings.Contains(strings.Join(got.Env, " "), "IMAGE_VAR=from-the-image") {
		t.Errorf("image config %+v", got)
	}
	first := reg.blobGETs()

	byDigest := mustRef(t, reg.host+"/team/app@"+digest.String())
	again, res2, lease2, err := p.Pull(bg, byDigest, human(t, byDigest))
	if err != nil {
		t.Fatal(err)
	}
	defer lease2.Close()
	if res2.Pulled || again.RootFS != got.RootFS || reg.blobGETs() != first {
		t.Errorf("second pull: pulled %v, root %s (first %s), blob GETs %d then %d", res2.Pulled, again.RootFS, got.RootFS, first, reg.blobGETs())
	}
}

// A multi-platform image gives the runner's platform; an image built for
// another platform alone is refused, saying which.
func TestPullPlatform(t *testing.T) {
	reg := newTestRegistry(t)
	amd := testImage(t, "amd64", tarLayer(t, map[string]string{"arch": "amd64"}))
	arm := testImage(t, "arm64", tarLayer(t, map[string]string{"arch": "arm64"}))
	idx := pushIndex(t, reg.host, "multi:1", map[string]v1.Image{"amd64": amd, "arm64": arm})
	push(t, reg.host, "armonly:1", arm)
	p := testPuller(t, newStore(t, 0))

	ref := mustRef(t, reg.host+"/multi:1")
	img, res, lease, err := p.Pull(bg, ref, human(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	lease.Close()
	amdDigest, _ := amd.Digest()
	if res.Digest != idx.String() || res.ImageDigest != amdDigest.String() || res.Platform != "linux/amd64" {
		t.Errorf("record %+v: want the index %s resolved to the amd64 image %s", res, idx, amdDigest)
	}
	if b, _ := os.ReadFile(filepath.Join(img.RootFS, "arch")); string(b) != "amd64" {
		t.Errorf("unpacked %q", b)
	}

	ref = mustRef(t, reg.host+"/armonly:1")
	_, _, _, err = p.Pull(bg, ref, human(t, ref))
	if !errors.Is(err, ErrPlatform) || !strings.Contains(err.Error(), "is an image for linux/arm64, and this runner runs linux/amd64") {
		t.Errorf("arm64-only image: %v", err)
	}
}

// An agent's job reaches a registry only where the egress deny ranges
// allow its addresses: loopback is refused when the connection is made,
// unless the organisation opened it (egress.allowCIDRs), as the gateway
// does for the job's own connections.
func TestPullChecksAgentsAddresses(t *testing.T) {
	reg := newTestRegistry(t)
	digest := push(t, reg.host, "team/app:1", testImage(t, "amd64", tarLayer(t, map[string]string{"f": "x"})))
	section := &policies.Images{Allow: []policies.ImageRule{{Name: "127.0.0.1:*/team/*", Digest: "agents", Mode: "enforce"}}}
	ref := mustRef(t, reg.host+"/team/app@"+digest.String())
	d := Decide(ref, section, true)
	if !d.Allowed || !d.CheckAddresses {
		t.Fatalf("%+v", d)
	}
	for _, tc := range []struct {
		name  string
		allow []string
		err   string
	}{
		{"deny ranges as built in", nil, "is in the deny range 127.0.0.0/8"},
		{"loopback opened by the organisation", []string{"127.0.0.0/8"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ranges, err := rules.NewRanges(tc.allow, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := testPuller(t, newStore(t, 0))
			p.Check = func(a netip.Addr) error {
				if v := ranges.Check(a); !v.Allowed {
					return errors.New(v.Reason)
				}
				return nil
			}
			before := reg.blobGETs()
			_, _, lease, err := p.Pull(bg, ref, d)
			lease.Close()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || reg.blobGETs() != before {
				t.Fatalf("%v (blob GETs %d → %d): want refused before any byte, saying %q", err, before, reg.blobGETs(), tc.err)
			}
		})
	}
}

// A registry that is down, answers 503, stalls or resets fails the pull
// within the bounds (timeouts and retries), saying what happened.
func TestPullFromARegistryThatFails(t *testing.T) {
	reg := newTestRegistry(t)
	push(t, reg.host, "team/app:1", testImage(t, "amd64", tarLayer(t, map[string]string{"f": "x"})))
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadHost := dead.Addr().String()
	dead.Close()
	for _, tc := range []struct {
		name  string
		host  string
		fault func(w http.ResponseWriter, r *http.Request) bool
		says  string
	}{
		{"down", deadHost, nil, "did not answer, 4 tries"},
		{"503 always", "", func(w http.ResponseWriter, r *http.Request) bool {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return true
		}, "answered HTTP 503, 4 tries"},
		{"stalls before answering", "", func(w http.ResponseWriter, r *http.Request) bool {
			<-r.Context().Done()
			return true
		}, "did not answer"},
		{"resets the connection", "", func(w http.ResponseWriter, r *http.Request) bool {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			return true
		}, "connection reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg.mu.Lock()
			reg.fault = tc.fault
			reg.mu.Unlock()
			defer func() { reg.mu.Lock(); reg.fault = nil; reg.mu.Unlock() }()
			host := tc.host
			if host == "" {
				host = reg.host
			}
			ref := mustRef(t, host+"/team/app:1")
			start := time.Now()
			_, _, _, err := testPuller(t, newStore(t, 0)).Pull(bg, ref, human(t, ref))
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), ref.Written) {
				t.Fatalf("%v: want an error naming the image and saying %q", err, tc.says)
			}
			t.Logf("failed in %s: %v", took.Round(time.Millisecond), err)
		})
	}
}

// A private registry: the runner's credentials are used, a pull without
// them is refused in the registry's words, and no error shows them.
func TestPullPrivateRegistry(t *testing.T) {
	reg := newTestRegistry(t)
	const user, pass = "ci-bot", "s3cret-registry-password"
	digest := push(t, reg.host, "private/app:1", testImage(t, "amd64", tarLayer(t, map[string]string{"f": "x"})))
	reg.mu.Lock()
	reg.user, reg.pass = user, pass
	reg.mu.Unlock()
	ref := mustRef(t, reg.host+"/private/app:1")

	p := testPuller(t, newStore(t, 0))
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no host config
	_, _, _, err := p.Pull(bg, ref, human(t, ref))
	if err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("without credentials: %v", err)
	}
	p.Credentials = []Credentials{{Registry: reg.host, Username: user, Password: "wrong"}}
	if _, _, _, err = p.Pull(bg, ref, human(t, ref)); err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong password: %v", err)
	}
	p.Credentials = []Credentials{{Registry: reg.host, Username: user, Password: pass}}
	_, res, lease, err := p.Pull(bg, ref, human(t, ref))
	if err != nil {
		t.Fatal(err)
	}
	lease.Close()
	if res.Digest != digest.String() || strings.Contains(fmt.Sprintf("%+v %v", res, p.Credentials[0]), pass) {
		t.Errorf("record %+v", res)
	}

	// The host's Docker config, as the runner's Docker would read it.
	cfg := t.TempDir()
	auth := authn.AuthConfig{Username: user, Password: pass}
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":%q}}}`, reg.host, auth.Username, auth.Password)), 0o600)
	t.Setenv("DOCKER_CONFIG", cfg)
	p = testPuller(t, newStore(t, 0))
	if _, _, lease, err = p.Pull(bg, ref, human(t, ref)); err != nil {
		t.Fatalf("with the host's Docker config: %v", err)
	}
	lease.Close()
}

// Two jobs that pull the same image at once download it once, and both
// get the one root.
func TestConcurrentPullsDownloadOnce(t *testing.T) {
	reg := newTestRegistry(t)
	layers := []v1.Layer{tarLayer(t, map[string]string{"a": strings.Repeat("a", 1<<20)}), tarLayer(t, map[string]string{"b": strings.Repeat("b", 1<<20)})}
	push(t, reg.host, "team/app:1", testImage(t, "amd64", layers...))
	store := newStore(t, 0)
	ref := mustRef(t, reg.host+"/team/app:1")
	var wg sync.WaitGroup
	roots := make([]string, 4)
	errs := make([]error, 4)
	for i := range roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img, _, lease, err := testPuller(t, store).Pull(bg, ref, human(t, ref))
			roots[i], errs[i] = img.RootFS, err
			lease.Close()
		}()
	}
	wg.Wait()
	for i := range roots {
		if errs[i] != nil || roots[i] != roots[0] {
			t.Fatalf("pull %d: %s, %v (first %s)", i, roots[i], errs[i], roots[0])
		}
	}
	if n := reg.blobGETs(); n != 3 { // the config and two layers
		t.Errorf("%d blob GETs for 4 pulls at once, want 3 (config and layers, once)", n)
	}
}

// A pull killed halfway (here: its context ends while a layer streams)
// leaves nothing a later job trusts: no root, no blob; the next pull
// completes and removes the leftovers.
func TestPullKilledHalfway(t *testing.T) {
	reg := newTestRegistry(t)
	push(t, reg.host, "team/app:1", testImage(t, "amd64", tarLayer(t, map[string]string{"big": strings.Repeat("x", 4<<20)})))
	store := newStore(t, 0)
	ctx, cancel := context.WithCancel(bg)
	reg.mu.Lock()
	reg.fault = func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/") {
			return false
		}
		w.Header().Set("Content-Length", "4200000")
		w.WriteHeader(http.StatusOK)
		w.Write(make([]byte, 1<<20))
		w.(http.Flusher).Flush()
		cancel()
		<-r.Context().Done()
		return true
	}
	reg.mu.Unlock()
	ref := mustRef(t, reg.host+"/team/app:1")
	if _, _, _, err := testPuller(t, store).Pull(ctx, ref, human(t, ref)); err == nil {
		t.Fatal("a pull whose context ended succeeded")
	}
	list, _ := store.List()
	blobs, _ := os.ReadDir(filepath.Join(store.Dir(), "blobs", "sha256"))
	if len(list) != 0 || len(blobs) > 1 { // at most the config, which is verified
		t.Fatalf("after a killed pull: images %v, blobs %d", list, len(blobs))
	}
	reg.mu.Lock()
	reg.fault = nil
	reg.mu.Unlock()
	if _, _, lease, err := testPuller(t, store).Pull(bg, ref, human(t, ref)); err != nil {
		t.Fatal(err)
	} else {
		lease.Close()
	}
	if tmp, _ := os.ReadDir(filepath.Join(store.Dir(), "tmp")); len(tmp) != 0 {
		t.Errorf("leftovers in tmp: %v", tmp)
	}
}

// A registry that serves other bytes than a blob's digest says is
// refused; nothing of it is kept.
func TestPullRefusesTamperedBlobs(t *testing.T) {
	reg := newTestRegistry(t)
	push(t, reg.host, "team/app:1", testImage(t, "amd64", tarLayer(t, map[string]string{"f": strings.Repeat("y", 4096)})))
	reg.mu.Lock()
	reg.tamper = true
	reg.mu.Unlock()
	store := newStore(t, 0)
	ref := mustRef(t, reg.host+"/team/app:1")
	_, _, _, err := testPuller(t, store).Pull(bg, ref, human(t, ref))
	if err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("tampered blobs: %v", err)
	}
	list, _ := store.List()
	blobs, _ := os.ReadDir(filepath.Join(store.Dir(), "blobs", "sha256"))
	if len(list) != 0 || len(blobs) != 0 {
		t.Errorf("kept after a tampered pull: images %v, blobs %d", list, len(blobs))
	}
	t.Logf("refused: %v", err)
}
