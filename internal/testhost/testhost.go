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

// PullRequestRepo makes the repository of an agent's pull request: a base
// commit with the repository policy (.github/airlock.cue: policy) and a
// main.go, and the agent's head commit on it, which changes main.go and
// adds files (path -> content). It returns the repository and the two
// commits.
func PullRequestRepo(t testing.TB, policy string, files map[string]string) (repo, base, head string) {
	t.Helper()
	repo, git := NewRepo(t)
	write := func(name, content string) {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".github/airlock.cue", policy)
	write("main.go", "package main\n")
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base = git("rev-parse", "HEAD")
	write("main.go", "package main\n// agent\n")
	for name, content := range files {
		write(name, content)
	}
	git("add", "-A")
	git("commit", "-q", "-m", "agent")
	return repo, base, git("rev-parse", "HEAD")
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
