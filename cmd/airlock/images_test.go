package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/airlock-ci/airlock/internal/testimage"
	"github.com/airlock-ci/airlock/runner/images"
)

// airlock images ls and prune, on a cache that real pulls from a
// registry on loopback filled: ls names each image and the one a job
// runs on; prune removes the others, never that one; an absent cache is
// listed as empty and not made; a size that is not one is a usage error.
func TestImagesLsAndPrune(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := filepath.Join(t.TempDir(), "images")
	store, err := images.OpenStore(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"team/app", "team/db"} {
		img := testimage.Image(t, runtime.GOARCH, nil, nil, "", testimage.Layer(t, map[string]string{"f": strings.Repeat(name, 1000)}))
		testimage.Push(t, host+"/"+name+":1", img)
		ref, err := images.ParseRef(host + "/" + name + ":1")
		if err != nil {
			t.Fatal(err)
		}
		_, _, l, err := (&images.Puller{Store: store}).Pull(context.Background(), ref, images.Decide(ref, nil, false))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			defer l.Close() // a job runs on team/app
		} else {
			l.Close()
		}
	}

	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := execute(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errOut := run("images", "ls", "--cache-dir", dir)
	if code != 0 {
		t.Fatalf("images ls: %d %s", code, errOut)
	}
	t.Logf("images ls:\n%s", out)
	for _, want := range []string{"REFERENCE", host + "/team/app:1", host + "/team/db:1", "linux/" + runtime.GOARCH, "yes", "2 image(s) in " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("images ls does not say %q", want)
		}
	}
	code, out, _ = run("images", "ls", "--cache-dir", dir, "--json")
	var l images.Listing
	if err := json.Unmarshal([]byte(out), &l); code != 0 || err != nil || len(l.Images) != 2 || l.Size <= 0 {
		t.Fatalf("images ls --json: %d %v %+v", code, err, l)
	}

	code, out, errOut = run("images", "prune", "--cache-dir", dir)
	t.Logf("images prune:\n%s", out)
	if code != 0 || !strings.Contains(out, "removed sha256:") || !strings.Contains(out, host+"/team/db:1") || !strings.Contains(out, "1 image(s) removed; 1 left (1 in use by a job)") {
		t.Fatalf("images prune: %d %q %s", code, out, errOut)
	}
	left, err := images.ListCache(dir)
	if err != nil || len(left.Images) != 1 || left.Images[0].Ref != host+"/team/app:1" {
		t.Fatalf("after prune: %+v %v; want team/app, which a job runs on", left, err)
	}

	absent := filepath.Join(t.TempDir(), "none")
	if code, out, _ := run("images", "ls", "--cache-dir", absent); code != 0 || !strings.Contains(out, "0 image(s)") {
		t.Errorf("ls of an absent cache: %d %q", code, out)
	}
	if _, err := os.Stat(absent); err == nil {
		t.Errorf("ls made the cache %s", absent)
	}
	if code, _, errOut := run("images", "prune", "--cache-dir", dir, "--keep", "lots"); code != exitUsage || !strings.Contains(errOut, "keep") {
		t.Errorf("prune --keep lots: %d %q, want a usage error", code, errOut)
	}
}
