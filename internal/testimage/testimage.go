// Package testimage builds container images in tests, never pulling one:
// layers from files or a directory, images for a platform with their
// config, pushed to a registry the test runs on loopback, and a host's
// binaries copied into an image's root with their libraries. The pull,
// the cache, the hook's and the runner pod's tests share it.
//
// Layer 0: the bottom, for tests only; imports nothing of airlock's.
package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Layer is a layer of files: name -> content, in name order; a name
// ending in "/" is a directory, mode 0755; files are 0644, or 0755 when
// their name is in exec.
func Layer(t testing.TB, files map[string]string, exec ...string) v1.Layer {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var hdrs []*tar.Header
	var data [][]byte
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(files[n]))}
		switch {
		case strings.HasSuffix(n, "/"):
			h = &tar.Header{Name: n, Mode: 0o755, Typeflag: tar.TypeDir}
		case contains(exec, n):
			h.Mode = 0o755
		}
		hdrs, data = append(hdrs, h), append(data, []byte(files[n]))
	}
	return fromTar(t, hdrs, data)
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// LayerOfDir is a directory as a layer: its directories, regular files
// and symlinks, owned by root, with their modes.
func LayerOfDir(t testing.TB, dir string) v1.Layer {
	t.Helper()
	var hdrs []*tar.Header
	var data [][]byte
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm())}
		var b []byte
		switch {
		case d.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case d.Type()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case d.Type().IsRegular():
			h.Typeflag = tar.TypeReg
			if b, err = os.ReadFile(p); err != nil {
				return err
			}
			h.Size = int64(len(b))
		default:
			return nil
		}
		hdrs, data = append(hdrs, h), append(data, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fromTar(t, hdrs, data)
}

// fromTar is a layer of the tar of hdrs, each followed by its data.
func fromTar(t testing.TB, hdrs []*tar.Header, data [][]byte) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data[i])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// Compressed fast: layers of whole binaries are compressed when the
	// digest is taken and again when they are pushed.
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image is an image of layers for linux/arch whose config has env,
// entrypoint and working directory (empty ones left out).
func Image(t testing.TB, arch string, env, entrypoint []string, workdir string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Env, cf.Config.Entrypoint, cf.Config.WorkingDir = env, entrypoint, workdir
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// Push puts img at ref (host/repo:tag) and returns its digest.
func Push(t testing.TB, ref string, img v1.Image, opts ...remote.Option) v1.Hash {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	h, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// CopyLibraries copies the shared libraries a host binary loads (as ldd
// lists them, the dynamic loader included) to their paths under root: a
// host binary in an image needs them where the loader looks.
func CopyLibraries(t testing.TB, root, bin string) {
	t.Helper()
	out, _ := exec.Command("ldd", bin).Output()
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				CopyIntoRoot(t, root, f)
			}
		}
	}
}

// CopyIntoRoot copies a host file to the same path under root, following
// the host's symlinks (/lib64 -> usr/lib64) to the real file.
func CopyIntoRoot(t testing.TB, root, p string) {
	t.Helper()
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{p, real} {
		d := filepath.Join(root, dst)
		os.MkdirAll(filepath.Dir(d), 0o755)
		if err := os.WriteFile(d, b, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
}
