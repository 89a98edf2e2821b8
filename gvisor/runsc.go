package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/gvisor/platform"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/textsafe"
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
	// exe is the binary runsc's processes run from (Config.RunscExe);
	// empty: this process's own.
	exe string
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
		// The sandbox's panic (and its goroutine dump) goes to a file of
		// its own: bootFailure reads its first line.
		"--panic-log=" + filepath.Join(dir, panicLogFile),
		"--host-settings=ignore",
	}
	if c.ExclusiveMounts {
		g = append(g, "--file-access-mounts=exclusive")
	}
	g = append(g, c.RunscFlags...)
	return runsc{global: g, logDir: dir, exe: c.RunscExe}
}

// command builds a runsc command line. argv[0] is "runsc" so that Dispatch
// in the re-executed binary (this one, or the sidecar) hands it to runsc's
// CLI. The environment is empty but for PATH: runsc needs nothing from
// ours.
func (r runsc) command(ctx context.Context, args ...string) *exec.Cmd {
	exe := r.exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	cmd := exec.CommandContext(ctx, exe, append(append([]string{}, r.global...), args...)...)
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

// panicLogFile is where, in a job directory, runsc's processes write a
// panic.
const panicLogFile = "panic.log"

// bootFailure says in one line why a sandbox did not start: runsc's
// error, with the cause its sandbox process gave (its panic, or the first
// error it logged) where the error alone does not tell (the sandbox
// died: "waiting for sandbox to start: EOF").
func bootFailure(err error, dir string) string {
	why := err.Error()
	cause := logCause(filepath.Join(dir, panicLogFile), filepath.Join(dir, "runsc.log"), why)
	if cause != "" {
		why += " (" + cause + ")"
	}
	// The fix after the bound: a long runsc error must not cut it off.
	line := textsafe.Line(platform.OneLine(why))
	if fix := ContainerFix(why); fix != "" {
		line += "; " + fix
	}
	return line
}

// ContainerFix says what a container that is not privileged (a
// Kubernetes pod's) must be given when runsc's error is one that its
// restrictions cause, or "" for another error. The values are those of
// deploy/arc/values.yaml.
func ContainerFix(err string) string {
	const profile = "give the runner container airlock's seccomp profile as a Localhost profile (deploy/arc/seccomp.json; docs/runner.md, Actions Runner Controller)"
	switch {
	case strings.Contains(err, "pivot_root") && strings.Contains(err, "operation not permitted"):
		return "the container's seccomp profile forbids pivot_root, which runsc needs (the runtime's RuntimeDefault profile does): " + profile
	case strings.Contains(err, "don't have CAP_SYS_ADMIN"), strings.Contains(err, "fork/exec /proc/self/exe: operation not permitted"):
		return "runsc makes namespaces and mounts: add CAP_SYS_ADMIN to the runner container's capabilities, and " + profile
	}
	return ""
}

// logCause returns the first line of the panic log, else the first error
// runsc logged that is not already in said, else "".
func logCause(panicLog, log, said string) string {
	if b, _ := readHead(panicLog); len(bytes.TrimSpace(b)) > 0 {
		return platform.OneLine(string(b))
	}
	b, _ := readHead(log)
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var line struct{ Msg, Level string }
		if dec.Decode(&line) != nil {
			return ""
		}
		if line.Level == "error" && line.Msg != "" && !strings.Contains(said, line.Msg) {
			return platform.OneLine(line.Msg)
		}
	}
}

// maxStartLogs is how many failed starts' logs the state root keeps.
const maxStartLogs = 20

// keepStartLog copies the logs of a failed start in job directory dir to
// logs/<id>-<platform>.log under stateRoot (the newest maxStartLogs are
// kept), and returns its path, or "" when it could not.
func keepStartLog(stateRoot, id, platform, dir string) string {
	logs := filepath.Join(stateRoot, "logs")
	if os.MkdirAll(logs, 0o700) != nil {
		return ""
	}
	path := filepath.Join(logs, id+"-"+platform+".log")
	if keepLog(path, nil, filepath.Join(dir, panicLogFile), filepath.Join(dir, "runsc.log"), filepath.Join(dir, "create.err")) != nil {
		return ""
	}
	pruneLogs(logs, maxStartLogs)
	return path
}

// keepLog writes out and the given log files, each under a heading, to
// path (mode 0600).
func keepLog(path string, out []byte, logs ...string) error {
	var b bytes.Buffer
	if out != nil {
		b.WriteString("== output\n")
		b.Write(out)
	}
	for _, l := range logs {
		if body, err := readHead(l); err == nil && len(body) > 0 {
			fmt.Fprintf(&b, "\n== %s\n", filepath.Base(l))
			b.Write(body)
		}
	}
	return files.WriteAtomic(path, b.Bytes())
}

// pruneLogs removes all but the newest keep *.log files of dir.
func pruneLogs(dir string, keep int) {
	names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(names) <= keep {
		return
	}
	type aged struct {
		name string
		mod  time.Time
	}
	var all []aged
	for _, n := range names {
		if fi, err := os.Lstat(n); err == nil {
			all = append(all, aged{n, fi.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.After(all[j].mod) })
	for _, a := range all[min(keep, len(all)):] {
		os.Remove(a.name)
	}
}
