package images

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlock-ci/airlock/internal/testimage"
)

// testRegistry is go-containerregistry's registry on a loopback port,
// counting the blobs it serves, optionally behind basic auth or a fault.
type testRegistry struct {
	srv   *httptest.Server
	host  string
	mu    sync.Mutex
	blobs map[string]int // GETs per blob path
	// fault, when set, answers instead of the registry.
	fault func(w http.ResponseWriter, r *http.Request) bool
	user  string
	pass  string
	// tamper flips a byte of every blob served.
	tamper bool
}

func newTestRegistry(t testing.TB) *testRegistry {
	t.Helper()
	tr := &testRegistry{blobs: map[string]int{}}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		fault, user, pass, tamper := tr.fault, tr.user, tr.pass, tr.tamper
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			tr.blobs[r.URL.Path]++
		}
		tr.mu.Unlock()
		if user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		if fault != nil && fault(w, r) {
			return
		}
		if tamper && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			rec := httptest.NewRecorder()
			reg.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			if len(body) > 0 {
				body[len(body)/2] ^= 0xff
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(body)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(tr.srv.Close)
	tr.host = strings.TrimPrefix(tr.srv.URL, "http://")
	return tr
}

// blobGETs is how often the registry served blobs.
func (tr *testRegistry) blobGETs() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.blobs {
		n += c
	}
	return n
}

// tarLayer is a layer holding files (name -> content; a name ending in
// "/" is a directory).
func tarLayer(t testing.TB, files map[string]string) v1.Layer { return testimage.Layer(t, files) }

// testImage is an image for platform (os/arch) of the given layers, with
// an environment and a working directory in its config.
func testImage(t testing.TB, arch string, layers ...v1.Layer) v1.Image {
	return testimage.Image(t, arch, []string{"PATH=/usr/bin:/bin", "IMAGE_VAR=from-the-image"}, nil, "/srv", layers...)
}

// push puts img at host/repo:tag and returns its digest.
func push(t testing.TB, host, repo string, img v1.Image, opts ...remote.Option) v1.Hash {
	return testimage.Push(t, host+"/"+repo, img, opts...)
}

// pushIndex puts a multi-platform index of imgs at host/repo:tag.
func pushIndex(t testing.TB, host, repo string, imgs map[string]v1.Image) v1.Hash {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for arch, img := range imgs {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	ref, err := name.ParseReference(host + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	h, _ := idx.Digest()
	return h
}

func mustRef(t testing.TB, s string) Ref {
	t.Helper()
	r, err := ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newStore(t testing.TB, max int64) *Store {
	t.Helper()
	s, err := OpenStore(t.TempDir(), max)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var bg = context.Background()
