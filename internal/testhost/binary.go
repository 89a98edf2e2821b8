package testhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/buildinfo"
)

// MadeBinaries is a directory holding the airlock and airlock-runsc that
// make build makes: AIRLOCK_TEST_BINARY's (the airlock CI built, its
// sidecar beside it), or both built here into a directory of the test's
// with the Makefile's own recipe (make build BIN=...), so that the test
// runs what users install. Building links two large binaries: call it
// once per test.
func MadeBinaries(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AIRLOCK_TEST_BINARY"); p != "" {
		dir := filepath.Dir(p)
		if filepath.Base(p) != "airlock" {
			t.Fatalf("AIRLOCK_TEST_BINARY %s: name the airlock that make build made (bin/airlock), its sidecar beside it", p)
		}
		for _, name := range []string{"airlock", gvisor.RunscSidecar} {
			if ok, err := buildinfo.Static(filepath.Join(dir, name)); err != nil || !ok {
				t.Fatalf("AIRLOCK_TEST_BINARY: %s is missing or not static (%v): make build makes airlock and %s side by side (CGO_ENABLED=0)", filepath.Join(dir, name), err, gvisor.RunscSidecar)
			}
		}
		return dir
	}
	dir := t.TempDir()
	_, self, _, _ := runtime.Caller(0)
	cmd := exec.Command("make", "-s", "build", "BIN="+dir)
	cmd.Dir = filepath.Join(filepath.Dir(self), "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "PATH="+filepath.Join(runtime.GOROOT(), "bin")+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build BIN=%s: %v\n%s", dir, err, out)
	}
	return dir
}
