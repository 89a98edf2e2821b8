package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/testhost"
)

// A job's gofer and sandbox run from the runsc sidecar that make build
// puts beside airlock (airlock-runsc, without airlock's own packages to
// start). A sidecar of another build, one that others than its owner may
// write, or none, is never run: the job's sandbox starts from airlock
// itself, stderr says why, and the job runs all the same, its processes
// on the record alike (the sentry's trace sink is in both binaries).
func TestSandboxStartsFromTheRunscSidecar(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	made := testhost.MadeBinaries(t)
	tests := []struct {
		name   string
		tamper func(t *testing.T, sidecar string)
		from   string // what the gofer and sandbox run from
		note   string // what stderr says, "" for nothing
	}{
		{name: "the sidecar of its build", from: "sidecar"},
		{name: "a sidecar of another build", from: "airlock", note: "of another build", tamper: func(t *testing.T, sidecar string) {
			copyExe(t, filepath.Join(runtime.GOROOT(), "bin", "gofmt"), sidecar)
		}},
		{name: "a sidecar others may write", from: "airlock", note: "may be written by others", tamper: func(t *testing.T, sidecar string) {
			if err := os.Chmod(sidecar, 0o757); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "no sidecar", from: "airlock", note: "no runsc sidecar", tamper: func(t *testing.T, sidecar string) { os.Remove(sidecar) }},
	}
	recorded := map[string]string{} // case → its summary's process count
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			airlock, sidecar := filepath.Join(dir, "airlock"), filepath.Join(dir, "airlock-runsc")
			copyExe(t, filepath.Join(made, "airlock"), airlock)
			copyExe(t, filepath.Join(made, "airlock-runsc"), sidecar)
			if tc.tamper != nil {
				tc.tamper(t, sidecar)
			}
			state := stateDir(t)
			var stderr bytes.Buffer
			cmd := exec.Command(airlock, "run", "-w", workspace(t), "--state-dir", state, "--", "sh", "-c", "sleep 1.5; echo done")
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			seen := map[string]string{} // role → what it ran from
			for stop := time.Now().Add(time.Minute); len(seen) < 2 && time.Now().Before(stop); time.Sleep(20 * time.Millisecond) {
				for role, exe := range sandboxExes(state) {
					switch {
					case sameFile(exe, sidecar):
						seen[role] = "sidecar"
					case sameFile(exe, airlock):
						seen[role] = "airlock"
					default:
						seen[role] = "another binary"
					}
				}
			}
			stdout, _ := io.ReadAll(out)
			if err := cmd.Wait(); err != nil || !strings.Contains(string(stdout), "done") {
				t.Fatalf("the job: %v\nstdout: %s\nstderr: %s", err, stdout, stderr.String())
			}
			if seen["runsc-gofer"] != tc.from || seen["runsc-sandbox"] != tc.from {
				t.Errorf("the gofer and sandbox ran from %v, want the %s", seen, tc.from)
			}
			recorded[tc.name] = processesRecorded.FindString(stderr.String())
			said := strings.Contains(stderr.String(), "starts from airlock itself")
			if tc.note == "" && said || tc.note != "" && !(said && strings.Contains(stderr.String(), tc.note)) {
				t.Errorf("stderr says %q; want a note saying %q", stderr.String(), tc.note)
			}
		})
	}
	// The same record however the sandbox was started: the init, sh and
	// sleep (echo is sh's own).
	for name, n := range recorded {
		if n != "3 processes recorded" {
			t.Errorf("%s: the summary says %q, want 3 processes recorded (the init, sh, sleep)", name, n)
		}
	}
}

var processesRecorded = regexp.MustCompile(`\d+ processes recorded`)

// sandboxExes maps the runsc roles (runsc-gofer, runsc-sandbox) of the
// live processes of the job under state to the file each runs.
func sandboxExes(state string) map[string]os.FileInfo {
	found := map[string]os.FileInfo{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(state)) {
			continue
		}
		role, _, _ := bytes.Cut(cmdline, []byte{0})
		if r := string(role); r == "runsc-gofer" || r == "runsc-sandbox" {
			if fi, err := os.Stat(filepath.Join(p, "exe")); err == nil {
				found[r] = fi
			}
		}
	}
	return found
}

func sameFile(fi os.FileInfo, path string) bool {
	other, err := os.Stat(path)
	return err == nil && os.SameFile(fi, other)
}

// copyExe copies the executable from to to, mode 0755.
func copyExe(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(to)
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
