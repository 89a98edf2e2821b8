package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// How a host's KVM is judged: a probe sandbox, `runsc --platform=kvm do
// true` run by this binary, boots gVisor's KVM platform exactly as a
// job's sandbox would (the same vCPU set-up, the same ring0, the same
// runsc), which a cheaper check (opening /dev/kvm, or creating a VM and
// a vCPU by hand) would only imitate: on the nested-virtualisation hosts
// where /dev/kvm answers but KVM_SET_SREGS refuses gVisor's CR4, only
// gVisor's own vCPU set-up fails. It costs a few hundred milliseconds,
// once per boot of the host and binary: its verdict is kept in the state
// directory (verdictCache), keyed by hostKey.
//
// The probe runs with no network and no cgroups (the platform is the
// question, not the host's cgroup layout), its state and logs in a
// directory of its own under the state root, removed afterwards; runsc's
// log of the last probe (a panic and its goroutine dump, say) is kept in
// platform/<platform>-probe.log, never printed.

// probeTimeout bounds a probe: a sandbox boots in well under a second.
const probeTimeout = 20 * time.Second

// platformDir is the state root's directory for platform verdicts and
// probe logs.
func platformDir(stateRoot string) string { return filepath.Join(stateRoot, "platform") }

// probeKVM boots a probe sandbox on kvm (see ProbePlatform).
func probeKVM(ctx context.Context, stateRoot string) error {
	_, err := ProbePlatform(ctx, stateRoot, PlatformKVM)
	return err
}

// ProbePlatform boots a sandbox on platform that runs `true`, and returns
// how long it took, or why it failed in one line (the full log is kept
// in platform/<platform>-probe.log under stateRoot). It leaves no
// process, mount or file behind but that log.
func ProbePlatform(ctx context.Context, stateRoot, platform string) (time.Duration, error) {
	if err := checkHost(); err != nil {
		return 0, err
	}
	pdir := platformDir(stateRoot)
	if err := os.MkdirAll(pdir, 0o700); err != nil {
		return 0, fmt.Errorf("create %s: %w", pdir, err)
	}
	removeStaleProbes(pdir)
	dir, err := os.MkdirTemp(pdir, "probe-"+platform+"-")
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
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	log, panicLog := filepath.Join(dir, "runsc.log"), filepath.Join(dir, "panic.log")
	cmd := exec.CommandContext(ctx, "/proc/self/exe",
		"--root="+filepath.Join(dir, "runsc"),
		// runsc do's own null network namespace would be a new mount
		// under /tmp per probe, never removed.
		"--shared-root="+sharedRoot,
		"--platform="+platform,
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
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	keepLog(filepath.Join(pdir, platform+"-probe.log"), out.Bytes(), panicLog, log)
	if err == nil {
		return took, nil
	}
	if ctx.Err() != nil {
		return took, fmt.Errorf("no answer in %s (%v)", probeTimeout, context.Cause(ctx))
	}
	return took, errors.New(probeFailure(out.Bytes(), panicLog, log, err))
}

// removeStaleProbes removes the probe directories of pdir whose lock is
// free (their airlock died), with their processes and mounts. A directory
// younger than two probe timeouts is left alone: it may be one whose
// probe has not taken its lock yet.
func removeStaleProbes(pdir string) {
	stale, _ := filepath.Glob(filepath.Join(pdir, "probe-*"))
	for _, d := range stale {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < 2*probeTimeout {
			continue
		}
		lock, err := lockJobDir(d)
		if err != nil {
			continue // a probe running now
		}
		killProcessesUsing(d)
		unmountUnder(d)
		os.RemoveAll(d)
		lock.Close()
	}
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
		return textsafe.Line(oneLine(cause))
	}
	if last != "" {
		return textsafe.Line(oneLine(last))
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

// hostKey names what a KVM verdict holds for: this boot of the host
// (boot_id), this airlock binary and this /dev/kvm. The binary is named
// by its file's identity (device, inode, size, times) rather than its
// digest: hashing its 127 MB takes about 0.35 s, hundreds of times the
// millisecond a job may spend on the choice, and a rebuilt or replaced
// binary has a new identity as surely as a new digest. The device's identity changes when
// the KVM module is reloaded.
func hostKey() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	var exe, dev unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &exe); err != nil {
		return "", fmt.Errorf("stat own binary: %w", err)
	}
	if err := unix.Stat(kvmDevice, &dev); err != nil {
		return "", fmt.Errorf("stat %s: %w", kvmDevice, err)
	}
	return fmt.Sprintf("boot=%s exe=%d:%d:%d:%d.%d:%d.%d kvm=%d:%d:%d.%d",
		strings.TrimSpace(string(boot)),
		exe.Dev, exe.Ino, exe.Size, exe.Mtim.Sec, exe.Mtim.Nsec, exe.Ctim.Sec, exe.Ctim.Nsec,
		dev.Rdev, dev.Ino, dev.Ctim.Sec, dev.Ctim.Nsec), nil
}

// verdict is what the probe found, as kept on disk.
type verdict struct {
	Key    string `json:"key"`
	Usable bool   `json:"usable"`
	Reason string `json:"reason"`
}

// verdictCache keeps the KVM verdict in platform/kvm.json under the
// state root. Only root writes there: a file that root does not own, that
// others may write, that is a symlink or that does not decode is ignored
// (and replaced by the next probe), as is one for another key.
type verdictCache struct {
	dir string
}

func newVerdictCache(stateRoot string) *verdictCache {
	return &verdictCache{dir: platformDir(stateRoot)}
}

func (c *verdictCache) path() string { return filepath.Join(c.dir, "kvm.json") }

// maxVerdict bounds the verdict file.
const maxVerdict = 64 << 10

// read returns the verdict kept for key, if there is a trustworthy one.
func (c *verdictCache) read(key string) (verdict, bool) {
	v, err := c.load()
	if err != nil || v.Key != key {
		return verdict{}, false
	}
	return v, true
}

// load reads the kept verdict, or says why there is none to trust.
func (c *verdictCache) load() (verdict, error) {
	var v verdict
	if err := rootOnly(c.dir, true); err != nil {
		return v, err
	}
	f, err := os.OpenFile(c.path(), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return v, err
	}
	defer f.Close()
	if err := rootOnly(f.Name(), false, f); err != nil {
		return v, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxVerdict+1))
	if err != nil {
		return v, err
	}
	if len(b) > maxVerdict {
		return v, fmt.Errorf("%s: larger than %d bytes", c.path(), maxVerdict)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, fmt.Errorf("%s: %w", c.path(), err)
	}
	if v.Key == "" || v.Reason == "" {
		return v, fmt.Errorf("%s: no key or reason", c.path())
	}
	return v, nil
}

// write keeps v (best effort: without it the next job probes again).
func (c *verdictCache) write(v verdict) {
	if os.MkdirAll(c.dir, 0o700) != nil || rootOnly(c.dir, true) != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	writeFileAtomic(c.path(), append(b, '\n'))
}

// lock takes the probe lock, so that one job probes while the others
// wait for its verdict. It returns the unlock.
func (c *verdictCache) lock(ctx context.Context) (func(), error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	if err := rootOnly(c.dir, true); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.dir, "kvm.lock"), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rootOnly checks that path (or the open f) belongs to this process's
// user (root) and that nobody else may write it, or, for a file, read
// it; dir says which kind it must be.
func rootOnly(path string, dir bool, f ...*os.File) error {
	var st unix.Stat_t
	var err error
	if len(f) > 0 {
		err = unix.Fstat(int(f[0].Fd()), &st)
	} else {
		err = unix.Lstat(path, &st)
	}
	if err != nil {
		return err
	}
	kind := uint32(unix.S_IFREG)
	if dir {
		kind = unix.S_IFDIR
	}
	switch {
	case st.Mode&unix.S_IFMT != kind:
		return fmt.Errorf("%s: not a regular %s", path, map[bool]string{true: "directory", false: "file"}[dir])
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%s: owned by uid %d, not by airlock's user", path, st.Uid)
	case dir && st.Mode&0o022 != 0, !dir && st.Mode&0o077 != 0:
		return fmt.Errorf("%s: mode %#o: others may change it", path, st.Mode&0o777)
	}
	return nil
}

// writeFileAtomic writes b to path through a temporary file in the same
// directory, mode 0600: a reader sees the old file or the new one.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
