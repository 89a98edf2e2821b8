package images

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-ci/airlock/internal/testimage"
	"github.com/airlock-ci/airlock/policies"
)

// An agent's pull never uses the host's own registry credentials (its
// Docker config): an agent could name any image they can read and run on
// it. A human's pull does, as the runner's Docker would.
func TestAgentsPullsDoNotUseHostCredentials(t *testing.T) {
	reg := newTestRegistry(t)
	push(t, reg.host, "private/app:1", testImage(t, "amd64", tarLayer(t, map[string]string{"f": "x"})))
	reg.mu.Lock()
	reg.user, reg.pass = "host-bot", "host-token"
	reg.mu.Unlock()
	cfg := t.TempDir()
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(fmt.Sprintf(`{"auths":{%q:{"username":"host-bot","password":"host-token"}}}`, reg.host)), 0o600)
	t.Setenv("DOCKER_CONFIG", cfg)
	ref := mustRef(t, reg.host+"/private/app:1")
	section := &policies.Images{Pull: true, Allow: []policies.ImageRule{{Name: "127.0.0.1:*/**", Digest: "never", Mode: "enforce"}}}
	if _, _, lease, err := testPuller(t, newStore(t, 0)).Pull(bg, ref, Decide(ref, section, false)); err != nil {
		t.Fatalf("a human's pull with the host's credentials: %v", err)
	} else {
		lease.Close()
	}
	_, _, _, err := testPuller(t, newStore(t, 0)).Pull(bg, ref, Decide(ref, section, true))
	if err == nil || !strings.Contains(err.Error(), "refused it (HTTP 401)") {
		t.Fatalf("an agent's pull: %v, want the registry's refusal (no host credentials)", err)
	}
}

// An image's bounds hold across its layers: the bytes of all its layers
// (not each one's) against the cache's size, at most 127 layers, a small
// config; all checked before a layer is downloaded where the manifest
// tells.
func TestImageBounds(t *testing.T) {
	reg := newTestRegistry(t)
	var three []v1.Layer
	for i := 0; i < 3; i++ {
		three = append(three, tarLayer(t, map[string]string{fmt.Sprintf("f%d", i): strings.Repeat("z", 700<<10)}))
	}
	push(t, reg.host, "bounds/three:1", testImage(t, "amd64", three...))
	var many []v1.Layer
	for i := 0; i < maxLayers+1; i++ {
		many = append(many, tarLayer(t, map[string]string{fmt.Sprintf("f%d", i): "x"}))
	}
	push(t, reg.host, "bounds/many:1", testImage(t, "amd64", many...))
	for _, tc := range []struct {
		name, ref string
		max       int64
		says      string
		noBlobs   bool
	}{
		// Compressed, the three layers fit in 1 MiB: their content does not.
		{"three layers over the cache's size", "bounds/three:1", 1 << 20, "image larger than the cache allows", false},
		{"more layers than Docker allows", "bounds/many:1", 0, fmt.Sprintf("%d layers, more than %d", maxLayers+1, maxLayers), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reg.blobGETs()
			ref := mustRef(t, reg.host+"/"+tc.ref)
			store := newStore(t, tc.max)
			_, _, _, err := testPuller(t, store).Pull(bg, ref, human(t, ref))
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, want ErrTooLarge saying %q", err, tc.says)
			}
			if tc.noBlobs && reg.blobGETs() != before {
				t.Errorf("%d blobs fetched before the refusal", reg.blobGETs()-before)
			}
			if list, _ := store.List(); len(list) != 0 {
				t.Errorf("cached after the refusal: %v", list)
			}
		})
	}
	big := bigConfig{testImage(t, "amd64", tarLayer(t, map[string]string{"f": "x"}))}
	if err := testPuller(t, newStore(t, 0)).checkSizes(mustRef(t, "x:1"), big); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "its config is 419430400 bytes") {
		t.Errorf("a 400 MiB config: %v", err)
	}
}

// bigConfig is an image whose manifest declares a 400 MiB config.
type bigConfig struct{ v1.Image }

func (b bigConfig) Manifest() (*v1.Manifest, error) {
	m, err := b.Image.Manifest()
	if err != nil {
		return nil, err
	}
	m = m.DeepCopy()
	m.Config.Size = 400 << 20
	return m, nil
}

// Pulls, leases and prunes at once, on a cache too small for what is
// pulled: every pull ends with its image whole and leased, and no image a
// job holds loses its root while it is held.
func TestPullsAndPrunesAtOnce(t *testing.T) {
	reg := newTestRegistry(t)
	base := tarLayer(t, map[string]string{"base": strings.Repeat("b", 64<<10)})
	const images = 6
	for i := 0; i < images; i++ {
		push(t, reg.host, fmt.Sprintf("gc/app%d:1", i), testImage(t, "amd64", base, tarLayer(t, map[string]string{"own": strings.Repeat(fmt.Sprint(i), 64<<10)})))
	}
	// Room for one image (its base and own layer, 128 KiB), not for six:
	// pulls prune.
	store := newStore(t, 200<<10)
	end := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var pulls, failures atomic.Int64
	var mu sync.Mutex
	var errs []string
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; time.Now().Before(end); i++ {
				ref := mustRef(t, fmt.Sprintf("%s/gc/app%d:1", reg.host, i%images))
				img, _, lease, err := testPuller(t, store).Pull(bg, ref, human(t, ref))
				pulls.Add(1)
				if err == nil {
					if _, serr := os.Stat(filepath.Join(img.RootFS, "base")); serr != nil {
						err = fmt.Errorf("held image's root lost: %v", serr)
					}
					time.Sleep(5 * time.Millisecond)
					if _, serr := os.Stat(filepath.Join(img.RootFS, "own")); serr != nil && err == nil {
						err = fmt.Errorf("held image's root lost while held: %v", serr)
					}
					lease.Close()
				}
				if err != nil {
					failures.Add(1)
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d pulls, %d failed", pulls.Load(), failures.Load())
	if failures.Load() > 0 {
		t.Fatalf("failures: %q", errs[:min(len(errs), 5)])
	}
	if _, err := store.Prune(store.max); err != nil || store.Size() > store.max {
		t.Errorf("after the pulls, pruned to %d bytes (at most %d): %v", store.Size(), store.max, err)
	}
}

// A mirror the organisation names serves the image under its own name
// and digest; an agent's pull from it is not address-checked (the
// organisation chose it), while the same registry named directly is.
func TestMirror(t *testing.T) {
	reg := newTestRegistry(t)
	digest := push(t, reg.host, "library/tool:1", testImage(t, "amd64", tarLayer(t, map[string]string{"f": "mirrored"})))
	section := &policies.Images{Pull: true, Allow: []policies.ImageRule{{Name: "docker.io/library/*", Digest: "never", Mode: "enforce"}, {Name: "127.0.0.1:*/**", Digest: "never", Mode: "enforce"}},
		Mirrors: map[string]string{"docker.io": reg.host}}
	p := testPuller(t, newStore(t, 0))
	p.Check = func(netip.Addr) error { return errors.New("no address is allowed") }
	ref := mustRef(t, "docker.io/library/tool:1")
	img, res, lease, err := p.Pull(bg, ref, Decide(ref, section, true))
	if err != nil {
		t.Fatal(err)
	}
	lease.Close()
	if res.Ref != "docker.io/library/tool:1" || res.Digest != digest.String() {
		t.Errorf("record %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(img.RootFS, "f")); string(b) != "mirrored" {
		t.Errorf("root: %q", b)
	}
	direct := mustRef(t, reg.host+"/library/tool:1")
	if _, _, _, err := p.Pull(bg, direct, Decide(direct, section, true)); err == nil || !strings.Contains(err.Error(), "no address is allowed") {
		t.Errorf("the registry named directly by an agent: %v", err)
	}
}

// Two images of the same layers (their configs differ: two services on
// one layer, say) share one snapshot: pulling the second while a job
// holds the first does not wait for that job.
func TestImagesOfTheSameLayers(t *testing.T) {
	reg := newTestRegistry(t)
	layer := tarLayer(t, map[string]string{"svc": "server"})
	for i, env := range []string{"PORT=6379", "PORT=5432"} {
		push(t, reg.host, fmt.Sprintf("same/svc%d:1", i), testimage.Image(t, "amd64", []string{env}, nil, "", layer))
	}
	store := newStore(t, 0)
	first := mustRef(t, reg.host+"/same/svc0:1")
	a, _, lease, err := testPuller(t, store).Pull(bg, first, human(t, first))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	second := mustRef(t, reg.host+"/same/svc1:1")
	b, _, lease2, err := testPuller(t, store).Pull(ctx, second, human(t, second))
	if err != nil {
		t.Fatalf("the second image of the same layers, while the first is held: %v", err)
	}
	defer lease2.Close()
	if a.RootFS != b.RootFS || strings.Join(b.Env, " ") != "PORT=5432" {
		t.Errorf("roots %s and %s (want one), env %q", a.RootFS, b.RootFS, b.Env)
	}
}
