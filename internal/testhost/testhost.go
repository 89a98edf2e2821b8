// Package testhost has the helpers that tests of several packages need on
// the host: a workspace the sandbox's user owns, a state directory that is
// reaped whatever the test left, a git repository to commit in, and a
// fake GitHub on loopback (github.go) whose artifact and cache services
// and blob storage the real Actions clients upload to and download from.
// Only tests import it.
//
// Layer 3: above gvisor (it reaps sandboxes), below everything that tests
// jobs; see internal/layers.
package testhost

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
)

// Workspace is a fresh directory owned by uid 1000, the sandbox's user
// when root owns nothing else.
func Workspace(t testing.TB) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	return ws
}

// StateDir is a fresh state directory below base (a test binary's own,
// which leakcheck watches). Whatever a failed test left running in it is
// cleaned at the end as after a crash.
func StateDir(t testing.TB, base string) string {
	t.Helper()
	d := filepath.Join(base, filepath.Base(t.TempDir()))
	t.Cleanup(func() {
		gvisor.Reap(context.Background(), d)
		os.RemoveAll(d)
	})
	return d
}

// NewRepo makes an empty directory for a git repository and a function
// that runs git in it (as user t, with no global config), failing the
// test on error.
func NewRepo(t testing.TB) (string, func(args ...string) string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	return repo, func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
}
