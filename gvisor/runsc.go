package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// sharedRoot is runsc's system-wide directory for state shared across
// sandboxes (the gofers' empty network namespace).
const sharedRoot = "/run/runsc"

// runsc holds the embedded runsc's global flags for one job directory,
// for runsc's Go API in this process (create.go, control.go) and for a
// runsc process (command).
type runsc struct {
	global []string // global flags, before the subcommand
	logDir string
}

func newRunsc(c Config, dir string) runsc {
	overlay := "root:dir=" + filepath.Join(dir, "overlay")
	if c.Limits.Overlay > 0 {
		overlay += ",size=" + strconv.FormatInt(c.Limits.Overlay, 10)
	}
	network := "none"
	if c.NetNS != "" {
		network = "sandbox"
	}
	g := []string{
		"--root=" + filepath.Join(dir, "runsc"),
		// One shared null network namespace for all gofers, as runsc
		// intends, instead of one bind mount per job directory.
		"--shared-root=" + sharedRoot,
		"--platform=" + c.Platform,
		"--network=" + network,
		"--overlay2=" + overlay,
		"--pod-init-config=" + filepath.Join(dir, "pod-init.json"),
		"--log=" + filepath.Join(dir, "runsc.log"),
		"--host-settings=ignore",
	}
	g = append(g, c.RunscFlags...)
	return runsc{global: g, logDir: dir}
}

// command builds a runsc command line. argv[0] is "runsc" so that Dispatch
// in the re-executed binary hands it to runsc's CLI. The environment is
// empty but for PATH: runsc needs nothing from ours.
func (r runsc) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/proc/self/exe", append(append([]string{}, r.global...), args...)...)
	cmd.Args[0] = "runsc"
	cmd.Env = []string{"PATH=" + DefaultPath}
	return cmd
}

// logTail returns the last lines of runsc's own log, for error messages.
func (r runsc) logTail() string {
	b, err := os.ReadFile(filepath.Join(r.logDir, "runsc.log"))
	if err != nil {
		return ""
	}
	return lastLines(string(b), 5)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
