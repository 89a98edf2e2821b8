package images

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The cache stays within its bound: the images used longest ago go
// first, never one a job runs on, and their blobs with them.
func TestPruneKeepsWhatJobsUse(t *testing.T) {
	reg := newTestRegistry(t)
	store := newStore(t, 0)
	p := testPuller(t, store)
	var refs []Ref
	for i := 0; i < 3; i++ {
		push(t, reg.host, fmt.Sprintf("team/app%d:1", i), testImage(t, "amd64", tarLayer(t, map[string]string{"f": strings.Repeat(fmt.Sprint(i), 1<<20)})))
		ref := mustRef(t, fmt.Sprintf("%s/team/app%d:1", reg.host, i))
		refs = append(refs, ref)
	}
	var leases []*Lease
	for _, ref := range refs {
		_, _, lease, err := p.Pull(bg, ref, human(t, ref))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
		time.Sleep(20 * time.Millisecond) // distinct last-used times
	}
	// app0 is in use; app1 is not and was used before app2.
	leases[1].Close()
	leases[2].Close()
	defer leases[0].Close()
	list, _ := store.List()
	if len(list) != 3 || !list[2].InUse || list[0].InUse {
		t.Fatalf("list %+v", list)
	}
	removed, err := store.Prune(store.Size() - 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || !strings.Contains(removed[0].Digest, "sha256:") {
		t.Fatalf("removed %+v, want the one image used longest ago that no job holds", removed)
	}
	left, _ := store.List()
	for _, e := range left {
		if e.Digest == removed[0].Digest {
			t.Errorf("%s still listed", e.Digest)
		}
	}
	if _, err := store.Prune(0); err != nil {
		t.Fatal(err)
	}
	left, _ = store.List()
	if len(left) != 1 || !left[0].InUse {
		t.Errorf("pruned to nothing, the image in use must stay: %+v", left)
	}
}

// The cache's directory must be root's alone.
func TestOpenStoreRefusesAnOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	if _, err := OpenStore(dir, 0); err == nil || !strings.Contains(err.Error(), "nobody else may write") {
		t.Fatalf("%v", err)
	}
	if _, err := OpenStore(filepath.Join(t.TempDir(), "new"), 0); err != nil {
		t.Fatalf("a new directory: %v", err)
	}
}

// Plain HTTP only to loopback and the registries the policy names.
func TestPlainHTTPAllowed(t *testing.T) {
	tr := newTransport(nil, []string{"mirror.internal:5000"}, defaultTimeouts)
	for host, want := range map[string]bool{
		"127.0.0.1:5000": true, "localhost:5000": true, "[::1]:5000": true, "localhost": true,
		"mirror.internal:5000": true, "mirror.internal": false, "10.0.0.5:5000": false, "192.168.1.1": false,
		"registry.example.com": false,
	} {
		if got := tr.plainAllowed(host); got != want {
			t.Errorf("%s: %v", host, got)
		}
	}
}

// While a pull holds the cache (the gc lock, shared), prune removes
// nothing and says why, for `airlock images prune` to tell.
func TestPruneWaitsForNoPull(t *testing.T) {
	store := newStore(t, 0)
	gc, err := store.lockFile("gc", gcLock, unix.LOCK_SH)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Prune(0); !errors.Is(err, ErrCacheBusy) {
		t.Fatalf("Prune while a pull holds the cache: %v, want ErrCacheBusy", err)
	}
	var out strings.Builder
	if err := PruneCache(&out, store.Dir(), 0); err == nil || !strings.Contains(err.Error(), "a pull or another prune is under way") {
		t.Fatalf("PruneCache: %v", err)
	}
	gc.Close()
	if _, err := store.Prune(0); err != nil {
		t.Fatalf("Prune once the pull is done: %v", err)
	}
}
