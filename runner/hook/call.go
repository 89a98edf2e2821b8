package hook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner"
	workspacetidy "github.com/airlock-ci/airlock/runner/workspace"
)

// The hook process: the runner starts one per call. prepare_job starts
// the job's daemon and answers with the job's state; the other calls
// reach the daemon through the socket in the job's directory.

// Files of a job's directory, and the daemon's bounds.
const (
	safePath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	prepareTimeout   = 2 * time.Minute
	cleanupTimeout   = 5 * time.Minute
	daemonSocket     = "daemon.sock"
	daemonReady      = "ready"
	daemonFailed     = "failed"
	prepareInputFile = "prepare.json"
	daemonLogFile    = "daemon.log"
	daemonPIDFile    = "daemon.pid"
	daemonArg0       = "airlock-hook-daemon"
	jobDirPrefix     = "hook-"
)

// ready is what the daemon tells prepare_job once the job runs (the
// daemonReady file, written whole): what the runner's response needs.
type ready struct {
	Services []ResponseContainer `json:"services"`
	IsAlpine bool                `json:"isAlpine"`
}

// Handle is one hook process's whole life: it reads the runner's call
// from stdin and carries it out. It returns the exit code of a step (0
// for the other calls); an error is a failed call, and an InputError one
// whose input was not what the runner sends. SIGINT and SIGTERM (the
// runner cancelling a step) end the call.
func Handle(ctx context.Context, cfg Config, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	// The runner prepends the job's $GITHUB_PATH entries to the hook's
	// PATH: nothing here, nor in the daemon, may look a program up
	// through it.
	os.Setenv("PATH", safePath)
	in, err := ReadInput(stdin)
	if err != nil {
		return 0, runner.InputError{Err: err}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch in.Command {
	case PrepareJob:
		return 0, prepare(ctx, cfg, in, stdout)
	case RunScriptStep:
		var args ScriptArgs
		if err := json.Unmarshal(in.Args, &args); err != nil {
			return 0, runner.InputError{Err: fmt.Errorf("run_script_step: %v", err)}
		}
		return Call(ctx, socketOf(cfg, in.State), Request{Op: "step", Step: &args}, stdout, stderr)
	case RunContainerStep:
		var args ContainerStepArgs
		if err := json.Unmarshal(in.Args, &args); err != nil {
			return 0, runner.InputError{Err: fmt.Errorf("run_container_step: %v", err)}
		}
		return Call(ctx, socketOf(cfg, in.State), Request{Op: "container-step", Container: &args}, stdout, stderr)
	default:
		return 0, cleanup(ctx, cfg, in, stdout, stderr)
	}
}

// socketOf is the daemon socket of a job, from the runner's state. The
// directory must be one of ours (a job directory in the jobs root).
func socketOf(cfg Config, st State) string {
	dir := filepath.Clean(st.JobDir)
	if st.JobDir == "" || filepath.Dir(dir) != filepath.Clean(cfg.JobsRoot) || !strings.HasPrefix(filepath.Base(dir), jobDirPrefix) {
		return filepath.Join(cfg.JobsRoot, "no-such-job", daemonSocket)
	}
	return filepath.Join(dir, daemonSocket)
}

// prepare starts the job's daemon and answers the runner.
func prepare(ctx context.Context, cfg Config, in Input, stdout io.Writer) error {
	if in.ResponseFile == nil || *in.ResponseFile == "" {
		return runner.InputError{Err: errors.New("prepare_job: no responseFile")}
	}
	var args PrepareArgs
	if err := json.Unmarshal(in.Args, &args); err != nil || args.Container == nil {
		return runner.InputError{Err: fmt.Errorf("prepare_job: %w", errNoContainer)}
	}
	if work, ok := Mounts(args.Container.SystemMountVolumes).Host(containerWork); ok {
		endStaleJobs(cfg, work, stdout)
	}
	// The registry credentials go to the daemon through a pipe, never
	// to disk: the payload stored below has every registry null (see
	// Registry and registry.go).
	creds, err := json.Marshal(registryCredentials(args))
	if err != nil {
		return fmt.Errorf("prepare_job: %w", err)
	}
	// Stored for the daemon and endStaleJobs, which read it back.
	plan, err := encodeBounded(args)
	if err != nil {
		return runner.InputError{Err: fmt.Errorf("prepare_job: %w", err)}
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := jobDirPrefix + hex.EncodeToString(b)
	dir := filepath.Join(cfg.JobsRoot, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("prepare_job: job directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, prepareInputFile), plan, 0o600); err != nil {
		return fmt.Errorf("prepare_job: %w", err)
	}
	prepared, err := startDaemon(ctx, cfg, dir, creds)
	if err != nil {
		return err
	}
	resp := Response{
		State:    State{Container: id, JobDir: dir},
		Context:  ResponseContext{Container: ResponseContainer{ID: id, Network: "airlock", Ports: map[string]string{}}, Services: prepared.Services},
		IsAlpine: prepared.IsAlpine,
	}
	line, _ := json.Marshal(resp)
	// The runner made the file; a symlink there is not the runner's.
	f, err := os.OpenFile(*in.ResponseFile, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("prepare_job: response file: %w", err)
	}
	_, werr := f.Write(append(line, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	fmt.Fprintf(stdout, "airlock: job %s prepared in a gVisor sandbox\n", id)
	return werr
}

// startDaemon starts the job's daemon on its directory and returns what
// it says of the job once it runs (see waitReady). The daemon outlives
// this process: its own session, no terminal, output to the job's log
// file. creds, the registry credentials, are its standard input: a pipe,
// which it reads to its end first (readCredentials).
func startDaemon(ctx context.Context, cfg Config, dir string, creds []byte) (ready, error) {
	logf, err := os.OpenFile(filepath.Join(dir, daemonLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return ready{}, err
	}
	defer logf.Close()
	cmd := exec.Command("/proc/self/exe", dir)
	cmd.Args[0] = daemonArg0
	cmd.Env = os.Environ()
	cmd.Stdin = bytes.NewReader(creds)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return ready{}, fmt.Errorf("prepare_job: start the job daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitReady(ctx, cfg, dir, cmd, exited); err != nil {
		return ready{}, err
	}
	var prepared ready
	b, err := os.ReadFile(filepath.Join(dir, daemonReady))
	if err == nil {
		err = json.Unmarshal(b, &prepared)
	}
	if err != nil || prepared.Services == nil {
		// Never seen: the daemon writes the file whole. The runner gets no
		// state to clean up with, so the job ends here.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(cleanupTimeout):
			cmd.Process.Kill()
			<-exited
		}
		removeJob(cfg, dir)
		return ready{}, fmt.Errorf("prepare_job: the job daemon's account of the job is unreadable (%v)", err)
	}
	cmd.Process.Release()
	return prepared, nil
}

// waitReady waits for the job's daemon to say that the job runs (its
// ready file). A daemon that exits first (it says why in its failed
// file), one that does not start within prepareTimeout, and a call
// cancelled meanwhile end the job: the daemon is killed, what it left
// removed.
func waitReady(ctx context.Context, cfg Config, dir string, cmd *exec.Cmd, exited <-chan error) error {
	deadline := time.NewTimer(prepareTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(filepath.Join(dir, daemonReady)); err == nil {
			return nil
		}
		select {
		case <-tick.C:
			continue
		case err := <-exited:
			msg, _ := os.ReadFile(filepath.Join(dir, daemonFailed))
			removeJob(cfg, dir)
			return fmt.Errorf("prepare_job: the job could not start: %s (%v)", strings.TrimSpace(string(msg)), err)
		case <-deadline.C:
			cmd.Process.Kill()
			<-exited
			removeJob(cfg, dir)
			return fmt.Errorf("prepare_job: the job daemon did not start within %v", prepareTimeout)
		case <-ctx.Done():
			cmd.Process.Kill()
			<-exited
			removeJob(cfg, dir)
			return ctx.Err()
		}
	}
}

// cleanup ends the job through its daemon; without one (a failed
// prepare, a crash, a second cleanup) it removes what is left.
func cleanup(ctx context.Context, cfg Config, in Input, stdout, stderr io.Writer) error {
	if in.State.JobDir == "" {
		return nil // prepare_job never answered: nothing was kept
	}
	sock := socketOf(cfg, in.State)
	dir := filepath.Dir(sock)
	// Bounded: a daemon that hangs must not hang the runner; what it
	// leaves is reaped below.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	pid := daemonPID(dir)
	_, statErr := os.Lstat(dir)
	gone := errors.Is(statErr, fs.ErrNotExist)
	_, err := Call(cctx, sock, Request{Op: "cleanup"}, stdout, stderr)
	var verdict *DaemonError
	switch {
	case err == nil:
	case errors.As(err, &verdict):
	case errors.Is(err, errNoDaemon) && gone:
		err = nil // cleaned up already (a second cleanup_job): nothing left
	default:
		// A daemon that is gone (killed, crashed) or did not answer: it
		// is stopped (if that pid is still our daemon), its sandbox is
		// reaped as any leftover, and the job fails: it has no
		// attestation.
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		err = fmt.Errorf("cleanup_job: the job's daemon ended without finishing the job, so no attestation was signed: %w", err)
		logTail(dir, stderr)
	}
	// cleanup_job returns once the daemon is gone, not just answered.
	waitGone(pid, 10*time.Second)
	removeJob(cfg, dir)
	return err
}

// maxLogTail is how much of a failed daemon's log cleanup_job shows.
const maxLogTail = 8 << 10

// logTail prints the end of the job daemon's log (which goes with the
// job's directory), control characters shown as '?'.
func logTail(dir string, w io.Writer) {
	f, err := os.Open(filepath.Join(dir, daemonLogFile))
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxLogTail {
		f.Seek(-maxLogTail, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, maxLogTail))
	if len(b) > 0 {
		fmt.Fprintf(w, "airlock: the end of the job daemon's log:\n%s\n", strings.TrimRight(textsafe.Lines(string(b)), "\n"))
	}
}

// staleWait is how long a stale job's daemon gets to end its job.
const staleWait = time.Minute

// endStaleJobs ends the jobs whose daemons still run on the work
// directory a new job is given: the runner died or restarted without
// cleanup_job, and a sandbox of the old job could otherwise still write
// into the new job's checkout. Each daemon is asked to end its job (and
// attest it) as at cleanup_job, then killed; what it leaves is reaped.
func endStaleJobs(cfg Config, work string, w io.Writer) {
	dirs, _ := filepath.Glob(filepath.Join(cfg.JobsRoot, jobDirPrefix+"*"))
	for _, dir := range dirs {
		b, err := files.ReadCapped(filepath.Join(dir, prepareInputFile), maxInput)
		if err != nil {
			continue
		}
		var old PrepareArgs
		if json.Unmarshal(b, &old) != nil || old.Container == nil {
			continue
		}
		if h, ok := Mounts(old.Container.SystemMountVolumes).Host(containerWork); !ok || filepath.Clean(h) != filepath.Clean(work) {
			continue
		}
		fmt.Fprintf(w, "airlock: job %s still runs on %s (its runner never ran cleanup_job): ending it\n", filepath.Base(dir), work)
		if pid := daemonPID(dir); pid > 0 {
			syscall.Kill(pid, syscall.SIGTERM)
			waitGone(pid, staleWait)
			if daemonPID(dir) == pid {
				syscall.Kill(pid, syscall.SIGKILL)
				waitGone(pid, 10*time.Second)
			}
		}
		removeJob(cfg, dir)
	}
}

// daemonPID is the pid of the job's daemon when it is running (the pid
// in its file, checked against the process's command line: a pid can be
// reused), or 0.
func daemonPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, daemonPIDFile))
	if err != nil {
		return 0
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 1 {
		return 0
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !strings.HasPrefix(string(cmdline), daemonArg0+"\x00"+dir) {
		return 0
	}
	return pid
}

// waitGone waits for a process to exit, up to timeout.
func waitGone(pid int, timeout time.Duration) {
	if pid <= 0 {
		return
	}
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		// A zombie is gone for our purposes.
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
			return
		}
	}
}

// removeJob reaps what a job left (its sandbox, if the daemon could not
// destroy it), tidies the workspace, and removes the job's directory.
func removeJob(cfg Config, dir string) {
	if filepath.Dir(dir) != filepath.Clean(cfg.JobsRoot) {
		return
	}
	reaped, _ := gvisor.Reap(context.Background(), filepath.Join(dir, "state"))
	for _, r := range reaped {
		if r.Workspace != "" {
			workspacetidy.Tidy(r.Workspace, r.SandboxUID)
		}
	}
	os.RemoveAll(dir)
}
