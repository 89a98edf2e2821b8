package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/gvisor/platform"
	"github.com/airlock-ci/airlock/internal/textsafe"
)

// How a host's KVM is judged: a probe sandbox, `runsc --platform=kvm do
// true` run by this binary, boots gVisor's KVM platform exactly as a
// job's sandbox would (the same vCPU set-up, the same ring0, the same
// runsc), which a cheaper check (opening /dev/kvm, or creating a VM and
// a vCPU by hand) would only imitate: on the nested-virtualisation hosts
// where /dev/kvm answers but KVM_SET_SREGS refuses gVisor's CR4, only
// gVisor's own vCPU set-up fails. It costs a few hundred milliseconds
// where KVM works, and its whole timeout where KVM hangs, once per boot
// and gVisor build: package platform keeps the verdict and runs the
// first probe beside the first job, never before it.
//
// The probe runs with no network and no cgroups (the platform is the
// question, not the host's cgroup layout), its state and logs in a
// directory of its own under the state root, removed afterwards; runsc's
// log of the last probe (a panic and its goroutine dump, say) is kept in
// platform/<platform>-probe.log, never printed.

// ProbePlatform boots a sandbox on platform that runs `true`, and returns
// how long it took, or why it failed in one line (the full log is kept
// in platform/<platform>-probe.log under stateRoot). It leaves no
// process, mount or file behind but that log.
func ProbePlatform(ctx context.Context, stateRoot, platform string) (time.Duration, error) {
	return probeIn(ctx, platformDir(stateRoot), platform, "", probeTimeout)
}

// probeIn boots a probe sandbox on plat with its work in a directory
// of its own under pdir, running runsc ("" is this binary, whose runsc
// is compiled in) within timeout.
func probeIn(ctx context.Context, pdir, plat, runsc string, timeout time.Duration) (time.Duration, error) {
	if err := checkHost(); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(pdir, 0o700); err != nil {
		return 0, fmt.Errorf("create %s: %w", pdir, err)
	}
	removeStaleProbes(pdir)
	dir, err := os.MkdirTemp(pdir, "probe-"+plat+"-")
	if err != nil {
		return 0, fmt.Errorf("create probe directory: %w", err)
	}
	// Held while the probe runs, as a job's: an airlock killed mid-probe
	// leaves a directory whose lock is free, and the next probe removes
	// it with whatever still runs from it.
	lock, err := lockJobDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return 0, err
	}
	defer func() {
		killProcessesUsing(dir)
		unmountUnder(dir)
		os.RemoveAll(dir)
		lock.Close()
	}()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if runsc == "" {
		runsc = "/proc/self/exe"
	}
	log, panicLog := filepath.Join(dir, "runsc.log"), filepath.Join(dir, "panic.log")
	cmd := exec.CommandContext(ctx, runsc,
		"--root="+filepath.Join(dir, "runsc"),
		// runsc do's own null network namespace would be a new mount
		// under /tmp per probe, never removed.
		"--shared-root="+sharedRoot,
		"--platform="+plat,
		"--network=none",
		"--ignore-cgroups",
		"--host-settings=ignore",
		// An overlay in memory: `do` would otherwise keep the root's
		// upper layer in a file next to the host root.
		"--overlay2=root:memory",
		"--log="+log,
		"--panic-log="+panicLog,
		"do", "--quiet", "true")
	cmd.Args[0] = "runsc"
	// runsc do makes its own directory in TMPDIR and removes it when it
	// ends; a probe that does not answer is killed, so the directory is
	// made in the probe's, which the cleanup above removes.
	cmd.Env = []string{"PATH=" + DefaultPath, "TMPDIR=" + dir}
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	// A process of the probe's that left its group may still hold the
	// output pipe: the wait for it is bounded too.
	cmd.WaitDelay = 2 * time.Second
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	keepLog(filepath.Join(pdir, plat+"-probe.log"), out.Bytes(), panicLog, log)
	if err == nil {
		return took, nil
	}
	if ctx.Err() != nil {
		return took, fmt.Errorf("%w in %s (%v)", platform.ErrNoAnswer, timeout, context.Cause(ctx))
	}
	return took, errors.New(probeFailure(out.Bytes(), panicLog, log, err))
}

// removeStaleProbes removes the probe directories of pdir whose lock is
// free (their airlock died), with their processes and mounts. A directory
// younger than two probe timeouts is left alone: it may be one whose
// probe has not taken its lock yet.
func removeStaleProbes(pdir string) {
	stale, _ := filepath.Glob(filepath.Join(pdir, "probe-*"))
	removeUnlocked(stale, 2*probeTimeout, func(d string) {
		killProcessesUsing(d)
		unmountUnder(d)
	})
}

// probeFailure picks the line that says why a probe failed: the cause
// in runsc's logs (logCause), else the last line it printed.
func probeFailure(out []byte, panicLog, log string, err error) string {
	last := ""
	if s := strings.TrimSpace(string(out)); s != "" {
		lines := strings.Split(s, "\n")
		last = lines[len(lines)-1]
	}
	if cause := logCause(panicLog, log, ""); cause != "" {
		return textsafe.Line(platform.OneLine(cause))
	}
	if last != "" {
		return textsafe.Line(platform.OneLine(last))
	}
	return err.Error()
}

// maxProbeLog bounds what is read of a probe's logs.
const maxProbeLog = 1 << 20

func readHead(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxProbeLog))
}
