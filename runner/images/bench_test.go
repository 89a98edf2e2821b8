package images

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-ci/airlock/internal/testtool"
)

// randomLayer is a layer of files of random (incompressible) bytes.
func randomLayer(b testing.TB, prefix string, files, size int) v1.Layer {
	b.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: prefix + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	data := make([]byte, size)
	for i := 0; i < files; i++ {
		rand.Read(data)
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%s/f%03d", prefix, i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(size)})
		tw.Write(data)
	}
	tw.Close()
	raw := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkFirstPull is a first pull and unpack of a 100 MiB image (four
// layers of 25 files of 1 MiB, incompressible) from a registry on
// loopback into an empty cache, against `crane export REF - | tar -x`
// (crane pulls the layers and flattens them; tar writes the files) of the
// same image, interleaved, alternating which goes first.
func BenchmarkFirstPull(b *testing.B) {
	crane := testtool.Path(b, testtool.Crane, "the first-pull benchmark's baseline is crane export | tar -x")
	reg := newTestRegistry(b)
	var layers []v1.Layer
	for i := 0; i < 4; i++ {
		layers = append(layers, randomLayer(b, fmt.Sprintf("l%d", i), 25, 1<<20))
	}
	push(b, reg.host, "bench/big:1", testImage(b, "amd64", layers...))
	ref := mustRef(b, reg.host+"/bench/big:1")
	var ours, theirs []time.Duration
	pull := func() {
		store, err := OpenStore(b.TempDir(), 0)
		if err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		_, _, lease, err := (&Puller{Store: store}).Pull(bg, ref, Decide(ref, nil, false))
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(t))
		lease.Close()
		os.RemoveAll(store.Dir())
	}
	export := func() {
		dir := b.TempDir()
		t := time.Now()
		cmd := exec.Command("sh", "-c", `"$0" export --insecure "$1" - | tar -x -C "$2"`, crane, reg.host+"/bench/big:1", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("crane export | tar -x: %v %s", err, out)
		}
		theirs = append(theirs, time.Since(t))
		os.RemoveAll(dir)
	}
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			pull()
			export()
		} else {
			export()
			pull()
		}
	}
	var ratios []float64
	for i := range ours {
		ratios = append(ratios, float64(ours[i])/float64(theirs[i]))
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(medianDuration(ours).Milliseconds()), "airlock-ms")
	b.ReportMetric(float64(medianDuration(theirs).Milliseconds()), "crane-tar-ms")
	b.ReportMetric(ratios[len(ratios)/2], "airlock/crane-tar")
}

func medianDuration(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkSharedBase is the cache's disk use for eight images on one
// 32 MiB base, each with a 1 MiB layer of its own, against one base plus
// their own layers.
func BenchmarkSharedBase(b *testing.B) {
	reg := newTestRegistry(b)
	base := randomLayer(b, "base", 32, 1<<20)
	const images = 8
	for i := 0; i < images; i++ {
		push(b, reg.host, fmt.Sprintf("bench/app%d:1", i), testImage(b, "amd64", base, randomLayer(b, fmt.Sprintf("app%d", i), 1, 1<<20)))
	}
	for n := 0; n < b.N; n++ {
		store, err := OpenStore(b.TempDir(), 0)
		if err != nil {
			b.Fatal(err)
		}
		p := &Puller{Store: store}
		for i := 0; i < images; i++ {
			ref := mustRef(b, fmt.Sprintf("%s/bench/app%d:1", reg.host, i))
			_, _, lease, err := p.Pull(bg, ref, Decide(ref, nil, false))
			if err != nil {
				b.Fatal(err)
			}
			lease.Close()
		}
		use := diskUse(b, filepath.Join(store.Dir(), "snapshots"))
		want := int64(32<<20 + images*(1<<20))
		b.ReportMetric(float64(use)/float64(want), "disk/(base+own)")
		b.ReportMetric(float64(use)/float64(images*(32<<20+1<<20)), "disk/(flattened)")
		os.RemoveAll(store.Dir())
	}
}
