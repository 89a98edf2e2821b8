package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// goBinary copies a Go binary of the toolchain (gofmt: small, and of
// another build than any of airlock's) to path, and returns its Go build
// ID as `go tool buildid` prints it.
func goBinary(t *testing.T, path string) string {
	t.Helper()
	src := filepath.Join(runtime.GOROOT(), "bin", "gofmt")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("no gofmt in GOROOT to serve as a Go binary: %v", err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "tool", "buildid", path).Output()
	if err != nil {
		t.Fatalf("go tool buildid %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

// TestGoBuildIDAsGoToolSays: the ID read from the ELF note is the one
// `go tool buildid` prints (what make build records in airlock).
func TestGoBuildIDAsGoToolSays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bin")
	want := goBinary(t, path)
	got, err := goBuildID(path)
	if err != nil || got != want {
		t.Fatalf("goBuildID = %q, %v; go tool buildid says %q", got, err, want)
	}
	notGo := filepath.Join(t.TempDir(), "sh")
	os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755)
	if _, err := goBuildID(notGo); err == nil {
		t.Fatal("a shell script has a Go build ID")
	}
}

// TestFindRunsc: the sidecar is used only when it is a regular file of
// the recorded build, which only its owner (root or airlock's) can
// write, in a directory the same holds for. Anything else is an error
// saying what is wrong, and no path.
func TestFindRunsc(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, sidecar string) // dir holds airlock
		// buildID: "" for none, "same" for the sidecar's own.
		buildID string
		want    string // a part of the error; "" for the sidecar's path
	}{
		{name: "the sidecar of this build", buildID: "same"},
		{name: "no build ID recorded (plain go build)", buildID: "", want: "-"},
		{name: "another build", buildID: "abc/def/ghi/jkl", want: "of another build"},
		{name: "missing", buildID: "same", want: "no runsc sidecar", setup: func(t *testing.T, _, sidecar string) { os.Remove(sidecar) }},
		{name: "writable by others", buildID: "same", want: "may be written by others", setup: func(t *testing.T, _, sidecar string) { os.Chmod(sidecar, 0o757) }},
		{name: "writable by its group", buildID: "same", want: "may be written by others", setup: func(t *testing.T, _, sidecar string) { os.Chmod(sidecar, 0o775) }},
		{name: "its directory writable by others", buildID: "same", want: "its directory may be written", setup: func(t *testing.T, dir, _ string) { os.Chmod(dir, 0o777) }},
		{name: "owned by another user", buildID: "same", want: "is owned by uid 1000", setup: func(t *testing.T, _, sidecar string) { os.Lchown(sidecar, 1000, 1000) }},
		{name: "a symlink to the real one", buildID: "same", want: "not a regular file", setup: func(t *testing.T, dir, sidecar string) {
			real := filepath.Join(t.TempDir(), "real")
			os.Rename(sidecar, real)
			os.Symlink(real, sidecar)
		}},
		{name: "a directory", buildID: "same", want: "not a regular file", setup: func(t *testing.T, _, sidecar string) {
			os.Remove(sidecar)
			os.Mkdir(sidecar, 0o755)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			os.Mkdir(dir, 0o755)
			airlock := filepath.Join(dir, "airlock")
			os.WriteFile(airlock, []byte("airlock"), 0o755)
			sidecar := filepath.Join(dir, RunscSidecar)
			id := goBinary(t, sidecar)
			if tc.setup != nil {
				tc.setup(t, dir, sidecar)
			}
			buildID := tc.buildID
			if buildID == "same" {
				buildID = id
			}
			got, err := FindRunsc(airlock, buildID)
			switch {
			case tc.want == "-":
				if got != "" || err != nil {
					t.Fatalf("FindRunsc = %q, %v; want nothing (no build ID)", got, err)
				}
			case tc.want == "":
				if got != sidecar || err != nil {
					t.Fatalf("FindRunsc = %q, %v; want %s", got, err, sidecar)
				}
			default:
				if got != "" || err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("FindRunsc = %q, %v; want no path and an error saying %q", got, err, tc.want)
				}
			}
			if tc.name == "missing" && !errors.Is(err, ErrNoSidecar) {
				t.Fatalf("a missing sidecar: %v is no ErrNoSidecar", err)
			}
		})
	}
}

// buildSidecar builds cmd/airlock-runsc into a directory of the test's.
func buildSidecar(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), RunscSidecar)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, "../cmd/airlock-runsc")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/airlock-runsc: %v\n%s", err, b)
	}
	return out
}

// A sandbox whose Config.RunscExe is the sidecar runs every runsc
// process of its own from it: the job's gofer and sentry, and a
// sub-container's `runsc run` and gofer. Its steps and containers work
// as from airlock's binary.
func TestSandboxRunsFromRunscExe(t *testing.T) {
	requireRoot(t)
	sidecar := buildSidecar(t)
	want, err := os.Stat(sidecar)
	if err != nil {
		t.Fatal(err)
	}
	sb := newTestSandbox(t, func(c *Config) { c.RunscExe = sidecar })
	// A service that stays up while the runsc processes are looked at.
	var out syncBuffer
	img := newImage(t, map[string]string{"marker": "from-image\n"})
	c := startContainer(t, sb, ContainerConfig{Name: "svc", RootFS: img, Args: tool("serve", "127.0.0.1:18081", "x"), Stdout: &out})
	waitFor(t, 30*time.Second, func() bool { return out.String() == "listening\n" })
	res, err := sb.Exec(context.Background(), Step{Args: tool("id")})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("a step: %+v %v", res, err)
	}
	roles := map[string]int{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), sb.dir) {
			continue
		}
		role, _, _ := strings.Cut(string(cmdline), "\x00")
		if !strings.HasPrefix(role, "runsc") {
			continue
		}
		roles[role]++
		if exe, err := os.Stat(filepath.Join(p, "exe")); err != nil || !os.SameFile(exe, want) {
			t.Errorf("%s (%s) does not run from the sidecar %s", role, p, sidecar)
		}
	}
	// The job's gofer and the service's, the sentry, and the service's
	// `runsc run --detach` if it still waits.
	if roles["runsc-gofer"] < 2 || roles["runsc-sandbox"] != 1 {
		t.Errorf("runsc processes of the job: %v, want two gofers and one sandbox", roles)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
}
