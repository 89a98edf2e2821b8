package runner

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlock-ci/airlock/internal/testimage"
	"github.com/airlock-ci/airlock/policies"
)

// helloImage builds, in the test, an image whose /bin/hello (a static Go
// program) prints its environment's IMAGE_VAR, its directory and the
// image's /etc/os-release, and pushes it to a registry on loopback.
func helloImage(t testing.TB) (ref string, digest v1.Hash) {
	t.Helper()
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte(`package main

import (
	"fmt"
	"os"
)

func main() {
	wd, _ := os.Getwd()
	rel, _ := os.ReadFile("/etc/os-release")
	fmt.Printf("IMAGE_VAR=%s wd=%s os-release=%s", os.Getenv("IMAGE_VAR"), wd, rel)
}
`), 0o644)
	bin := filepath.Join(t.TempDir(), "hello")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the image's program: %v %s", err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	layer := testimage.Layer(t, map[string]string{"bin/": "", "bin/hello": string(prog), "etc/": "", "etc/os-release": "ID=pulled-image\n", "srv/": ""}, "bin/hello")
	img := testimage.Image(t, runtime.GOARCH, []string{"PATH=/bin", "IMAGE_VAR=from-the-image"}, nil, "", layer)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref = strings.TrimPrefix(srv.URL, "http://") + "/team/hello:1"
	return ref, testimage.Push(t, ref, img)
}

// A job whose image is in a registry runs on it: pulled on the host,
// unpacked once, the image's environment under the job's own; the
// result records the reference and the digest it resolved to; a second
// job takes it from the cache; an agent's job is refused the loopback
// registry before anything runs, saying what would allow it.
func TestJobOnAPulledImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ref, digest := helloImage(t)
	store := t.TempDir()
	for i, wantPulled := range []bool{true, false} {
		base := testJob(t)
		plan, err := NewPlan(nil, PullRequest{}, Inputs{Name: "pulled", Workspace: base.Sandbox.Workspace, StateRoot: base.Sandbox.StateRoot, Image: ref,
			Steps: []StepSpec{{Name: "hello", Command: []string{"/bin/hello"}, WorkingDirectory: "/srv"}}})
		if err != nil {
			t.Fatal(err)
		}
		plan.Job.Images.StoreDir = store
		var out, log bytes.Buffer
		plan.Job.Stdout, plan.Job.Stderr, plan.Job.Log = &out, &out, &log
		plan.Job.Sandbox.Limits = base.Sandbox.Limits
		res, err := Run(context.Background(), plan.Job, "test")
		if err != nil {
			t.Fatalf("job %d: %v (%s)", i, err, log.String())
		}
		if !res.Passed || !strings.Contains(out.String(), "IMAGE_VAR=from-the-image wd=/srv os-release=ID=pulled-image") {
			t.Fatalf("job %d: passed %v, output %q, log %q", i, res.Passed, out.String(), log.String())
		}
		if len(res.Images) != 1 || res.Images[0].Digest != digest.String() || res.Images[0].Ref != ref || res.Images[0].Pulled != wantPulled {
			t.Errorf("job %d: record %+v, want %s resolved to %s, pulled %v", i, res.Images, ref, digest, wantPulled)
		}
	}

	eff, err := policies.Load(context.Background(), []policies.Source{{Kind: policies.KindOrg, Path: "org.cue", Data: []byte("package airlock\n")}})
	if err != nil {
		t.Fatal(err)
	}
	base := testJob(t)
	ev := &policies.PullRequest{Number: 7, Author: "copilot-swe-agent[bot]"}
	_, err = NewPlan(eff, PullRequest{Event: ev}, Inputs{Name: "agent", Workspace: base.Sandbox.Workspace, StateRoot: base.Sandbox.StateRoot, Image: ref})
	if err == nil || !strings.Contains(err.Error(), "image refused by the policy") || !strings.Contains(err.Error(), "to images.allow in the organisation policy") {
		t.Fatalf("an agent's job on a loopback registry: %v", err)
	}
}
