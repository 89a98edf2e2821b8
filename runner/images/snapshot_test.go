package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// rawLayer is a layer of the given tar entries, in order (whiteouts
// included, which tarLayer's map cannot order).
func rawLayer(t testing.TB, entries ...*tar.Header) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		data := strings.Repeat("x", int(h.Size))
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, data)
	}
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// diskUse is what the files under dir take on disk, each inode once.
func diskUse(t testing.TB, dir string) int64 {
	seen := map[uint64]bool{}
	n := int64(0)
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// Images that share a base share its files on disk: the cache holds
// about one base plus each image's own layers. A later layer that
// replaces or removes a base file changes its own image only: the base's
// file, and every other image's, stay as they were.
func TestImagesShareTheirBase(t *testing.T) {
	reg := newTestRegistry(t)
	const baseSize, ownSize = 4 << 20, 64 << 10
	base := rawLayer(t,
		&tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "usr/big", Size: baseSize},
		&tar.Header{Name: "usr/config", Size: 10},
		&tar.Header{Name: "usr/gone", Size: 10})
	var refs []Ref
	for i, own := range []v1.Layer{
		rawLayer(t, &tar.Header{Name: "app1", Size: ownSize}),
		rawLayer(t, &tar.Header{Name: "app2", Size: ownSize}, &tar.Header{Name: "usr/config", Size: 20}),
		rawLayer(t, &tar.Header{Name: "app3", Size: ownSize}, &tar.Header{Name: "usr/.wh.gone"}),
	} {
		name := []string{"one", "two", "three"}[i]
		push(t, reg.host, "team/"+name+":1", testImage(t, "amd64", base, own))
		refs = append(refs, mustRef(t, reg.host+"/team/"+name+":1"))
	}
	store := newStore(t, 0)
	p := testPuller(t, store)
	var roots []string
	for _, ref := range refs {
		img, _, lease, err := p.Pull(bg, ref, human(t, ref))
		if err != nil {
			t.Fatal(err)
		}
		lease.Close()
		roots = append(roots, img.RootFS)
	}
	// What each image sees.
	for i, want := range []struct{ config, gone bool }{{true, true}, {false, true}, {true, false}} {
		cfg, _ := os.ReadFile(filepath.Join(roots[i], "usr/config"))
		_, goneErr := os.Lstat(filepath.Join(roots[i], "usr/gone"))
		if (len(cfg) == 10) != want.config || (goneErr == nil) != want.gone {
			t.Errorf("image %d: usr/config %d bytes, usr/gone %v", i+1, len(cfg), goneErr)
		}
	}
	// One copy of the base on disk.
	a, _ := os.Stat(filepath.Join(roots[0], "usr/big"))
	for _, r := range roots[1:] {
		b, err := os.Stat(filepath.Join(r, "usr/big"))
		if err != nil || !os.SameFile(a, b) {
			t.Errorf("%s: usr/big is not the base's file: %v", r, err)
		}
	}
	use := diskUse(t, filepath.Join(store.Dir(), "snapshots"))
	want := int64(baseSize + 3*ownSize)
	t.Logf("snapshots take %d bytes on disk for a %d-byte base and three %d-byte layers (%.2f× one base plus the layers); the cache counts %d, blobs included", use, baseSize, ownSize, float64(use)/float64(want), store.Size())
	if use > want*12/10 {
		t.Errorf("the snapshots take %d bytes, more than 1.2× one base plus the images' own layers (%d)", use, want)
	}
}
