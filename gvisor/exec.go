package gvisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Limit names, as reported in StepResult.Limit.
const (
	LimitTimeout = "timeout"
	LimitOOM     = "oom"
	LimitPids    = "pids"
	LimitDisk    = "disk"
	LimitOutput  = "output"
)

// Step is one command to execute in the sandbox.
type Step struct {
	// Args is the command; Args[0] is looked up in PATH inside the sandbox.
	Args []string
	// Env is added to the base environment (KEY=VALUE). Later entries win.
	Env []string
	// Dir is the working directory inside the sandbox. Empty: the
	// workspace mount.
	Dir string
	// Timeout bounds the step. Zero: the sandbox's StepTimeout. The
	// context's deadline (the job's timeout) applies as well.
	Timeout time.Duration
	// Stdout and Stderr receive the step's output live. Nil: discarded.
	Stdout, Stderr io.Writer
}

// StepResult is how a step ended.
type StepResult struct {
	Start    time.Time     `json:"start"`
	End      time.Time     `json:"end"`
	Duration time.Duration `json:"durationNs"`
	// ExitCode is the command's exit status; 128+N when killed by signal N.
	ExitCode int `json:"exitCode"`
	// Limit names the limit the step hit ("timeout", "oom", "pids",
	// "disk", "output"), or is empty. A step that hit a limit has failed,
	// whatever its exit code.
	Limit string `json:"limit,omitempty"`
	// Message explains a failure in one sentence.
	Message string `json:"message,omitempty"`
	// Output sizes and digests (of everything the step wrote, also past
	// the cap).
	StdoutBytes  int64  `json:"stdoutBytes"`
	StderrBytes  int64  `json:"stderrBytes"`
	StdoutSHA256 string `json:"stdoutSha256"`
	StderrSHA256 string `json:"stderrSha256"`
}

// baseEnv is the whole environment a step starts from: nothing of the host.
func baseEnv(path string) []string {
	return []string{"PATH=" + path, "HOME=/tmp", "LANG=C.UTF-8", "CI=true"}
}

// mergeEnv applies overrides on top of base; later keys win, order kept.
func mergeEnv(base []string, overrides ...[]string) []string {
	idx := map[string]int{}
	var out []string
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			return
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range base {
		add(kv)
	}
	for _, o := range overrides {
		for _, kv := range o {
			add(kv)
		}
	}
	return out
}

// Exec runs one step to completion and reports how it ended. Only airlock's
// own failures are returned as errors (the sandbox is gone, runsc failed);
// a failing command is a StepResult with a non-zero ExitCode.
func (s *Sandbox) Exec(ctx context.Context, st Step) (StepResult, error) {
	s.execMu.Lock()
	defer s.execMu.Unlock()
	if why := s.Dead(); why != "" {
		return StepResult{}, fmt.Errorf("sandbox %s is not running (%s): later steps cannot run", s.cfg.ID, why)
	}
	if len(st.Args) == 0 {
		return StepResult{}, errors.New("step has no command")
	}
	s.execSeq++
	n := s.execSeq

	timeout := st.Timeout
	if timeout == 0 {
		timeout = s.cfg.Limits.StepTimeout
	}
	stepCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		stepCtx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()

	procFile := filepath.Join(s.dir, fmt.Sprintf("exec-%d.json", n))
	pidFile := filepath.Join(s.dir, fmt.Sprintf("exec-%d.pid", n))
	dir := st.Dir
	if dir == "" {
		dir = s.cfg.WorkspaceMount
	}
	proc := specs.Process{
		Args:            st.Args,
		Env:             mergeEnv(baseEnv(defaultPath), st.Env),
		Cwd:             dir,
		User:            specs.User{UID: s.cfg.User.UID, GID: s.cfg.User.GID},
		Capabilities:    capabilities(s.cfg.Capabilities),
		NoNewPrivileges: true,
		Rlimits:         rlimits(s.cfg.Limits),
	}
	if err := writeJSON(procFile, proc); err != nil {
		return StepResult{}, err
	}
	defer os.Remove(procFile)
	defer os.Remove(pidFile)

	forkBefore := s.record.ForkRefused()
	oomBefore, _ := s.cg.oomKills()

	out := newCappedOutput(s.cfg.Limits.Output)
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return StepResult{}, fmt.Errorf("create stdout pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return StepResult{}, fmt.Errorf("create stderr pipe: %w", err)
	}
	// Not bound to ctx: killing runsc exec would orphan the step inside the
	// sandbox. The step is killed through runsc kill instead, below.
	cmd := s.runsc.command(context.Background(), "exec", "--process="+procFile, "--internal-pid-file="+pidFile, s.cfg.ID)
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW

	res := StepResult{Start: time.Now().UTC()}
	startErr := cmd.Start()
	stdoutW.Close()
	stderrW.Close()
	if startErr != nil {
		stdoutR.Close()
		stderrR.Close()
		return StepResult{}, fmt.Errorf("start runsc exec: %w", startErr)
	}
	outDone := out.drain(stdoutR, st.Stdout, 0)
	errDone := out.drain(stderrR, st.Stderr, 1)

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()

	var werr error
	limit := ""
	select {
	case werr = <-waitErr:
	case <-stepCtx.Done():
		limit = LimitTimeout
		werr = s.stopStep(pidFile, waitErr)
	case <-out.exceeded:
		limit = LimitOutput
		werr = s.stopStep(pidFile, waitErr)
	}
	res.End = time.Now().UTC()
	res.Duration = res.End.Sub(res.Start)
	res.ExitCode = exitCode(cmd, werr)

	// Give the pipes a moment to deliver what the step wrote just before it
	// exited. A background process that keeps them open is not waited for:
	// its output keeps streaming until it exits or the sandbox is destroyed.
	waitDrain(outDone, errDone, 500*time.Millisecond)
	out.summarize(&res)

	if _, err := os.Stat(pidFile); err != nil && limit == "" {
		// The process never started: this is runsc's failure, not the step's.
		return res, fmt.Errorf("runsc exec in sandbox %s failed (exit %d): %s", s.cfg.ID, res.ExitCode, s.runsc.logTail())
	}
	// A fork bomb or a memory bomb often ends by the timeout; the limit
	// it ran into is the more useful report.
	switch detected := s.detectLimit(ctx, res.ExitCode, forkBefore, oomBefore); {
	case detected == LimitPids, detected == LimitOOM:
		limit = detected
	case limit == "":
		limit = detected
	}
	if limit == LimitTimeout && ctx.Err() != nil && stepCtx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// Cancelled (SIGINT/SIGTERM), not timed out.
		limit = ""
		res.Message = "cancelled"
	}
	if limit == LimitPids {
		// The step's processes may still be forking in the background
		// (a fork bomb's main process can exit 0): stop the whole group.
		s.killStep(pidFile)
	}
	res.Limit = limit
	if limit != "" {
		res.Message = limitMessage(limit, s.cfg.Limits, timeout)
	}
	return res, nil
}

// stopStep kills a running step and returns runsc exec's exit. The step
// may be so young that runsc has not written its pid yet: keep trying
// until it has, and if the step will not die, kill everything in the
// sandbox rather than hang.
func (s *Sandbox) stopStep(pidFile string, waitErr <-chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	killed := false
	for {
		if !killed {
			killed = s.killStep(pidFile)
		}
		select {
		case err := <-waitErr:
			return err
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.runsc.run(ctx, "kill", "--all", s.cfg.ID, "KILL")
			cancel()
			deadline = time.Now().Add(10 * time.Second)
		}
	}
}

// killStep kills the step's process group (the exec'd process and every
// child that did not start a new group), then the process itself. It
// reports false when the step's pid is not known yet.
func (s *Sandbox) killStep(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || pid <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.runsc.run(ctx, "kill", "--pgid="+strconv.Itoa(pid), s.cfg.ID, "KILL")
	s.runsc.run(ctx, "kill", "--pid="+strconv.Itoa(pid), s.cfg.ID, "KILL")
	return true
}

// detectLimit works out which limit, if any, a finished step ran into.
func (s *Sandbox) detectLimit(ctx context.Context, exitCode int, forkBefore, oomBefore uint64) string {
	if kills, _ := s.cg.oomKills(); kills > oomBefore {
		s.markDead("killed by the host after hitting the memory limit")
		return LimitOOM
	}
	if !s.running(ctx) {
		if _, hits := s.cg.oomKills(); hits > 0 {
			s.markDead("killed by the host after hitting the memory limit")
			return LimitOOM
		}
		s.markDead("the sandbox exited unexpectedly")
		return ""
	}
	if s.record.ForkRefused() > forkBefore {
		return LimitPids
	}
	if exitCode != 0 && s.diskFull(ctx) {
		return LimitDisk
	}
	return ""
}

// running asks runsc whether the sandbox is still up.
func (s *Sandbox) running(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out, err := s.runsc.command(ctx, "state", s.cfg.ID).Output()
	if err != nil {
		return false
	}
	var st struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(out, &st) != nil {
		return false
	}
	return st.Status == "running"
}

// diskFull runs the statfs helper inside the sandbox and reports whether
// the overlay or /tmp is (almost) full.
func (s *Sandbox) diskFull(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cmd := s.runsc.command(ctx, "exec", "--user=0:0", s.cfg.ID, initPath, "statfs", "/", "/tmp")
	out, err := cmd.Output()
	if err != nil {
		return false
	}
	var usage []fsUsage
	if json.Unmarshal(out, &usage) != nil {
		return false
	}
	for _, u := range usage {
		if u.Total > 0 && (u.Free < 1<<20 || u.Free*100 < u.Total) {
			return true
		}
	}
	return false
}

func limitMessage(limit string, l Limits, timeout time.Duration) string {
	switch limit {
	case LimitTimeout:
		return fmt.Sprintf("step killed: it ran longer than its timeout (%s)", timeout)
	case LimitOOM:
		return fmt.Sprintf("sandbox killed: the job exceeded its memory limit (%s); later steps cannot run", humanBytes(l.Memory))
	case LimitPids:
		return fmt.Sprintf("step hit the process limit (%d processes and threads): fork/clone failed with EAGAIN", l.Pids)
	case LimitDisk:
		return fmt.Sprintf("step filled its writable filesystem (overlay limit %s, /tmp limit %s)", humanBytes(l.Overlay), humanBytes(l.Tmp))
	case LimitOutput:
		return fmt.Sprintf("step killed: it printed more than the output cap (%s)", humanBytes(l.Output))
	}
	return ""
}

func humanBytes(n int64) string {
	switch {
	case n <= 0:
		return "unlimited"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// exitCode maps runsc exec's own exit to the step's status; runsc exits
// with the workload's status, 128+N for a signal.
func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState != nil {
		if code := cmd.ProcessState.ExitCode(); code >= 0 {
			return code
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return 128 + int(syscall.SIGKILL)
	}
	if err != nil {
		return 125
	}
	return 0
}

// cappedOutput copies a step's stdout and stderr to their writers until
// the two together pass the cap; after that it keeps reading (so the
// workload never blocks on a full pipe) and hashing, but forwards nothing.
type cappedOutput struct {
	limit    int64
	total    atomic.Int64
	exceeded chan struct{}
	once     sync.Once
	mu       sync.Mutex
	hashes   [2]hash.Hash
	counts   [2]int64
}

func newCappedOutput(limit int64) *cappedOutput {
	return &cappedOutput{limit: limit, exceeded: make(chan struct{}), hashes: [2]hash.Hash{sha256.New(), sha256.New()}}
}

func (o *cappedOutput) drain(r *os.File, w io.Writer, which int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				o.mu.Lock()
				o.hashes[which].Write(buf[:n])
				o.counts[which] += int64(n)
				o.mu.Unlock()
				total := o.total.Add(int64(n))
				keep := n
				if o.limit > 0 && total > o.limit {
					keep = max(0, n-int(total-o.limit))
					o.once.Do(func() { close(o.exceeded) })
				}
				if w != nil && keep > 0 {
					w.Write(buf[:keep])
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return done
}

// summarize fills the result's output sizes and digests with what was
// read so far.
func (o *cappedOutput) summarize(res *StepResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	res.StdoutBytes, res.StderrBytes = o.counts[0], o.counts[1]
	res.StdoutSHA256 = hex.EncodeToString(o.hashes[0].Sum(nil))
	res.StderrSHA256 = hex.EncodeToString(o.hashes[1].Sum(nil))
}

func waitDrain(a, b <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, c := range []<-chan struct{}{a, b} {
		select {
		case <-c:
		case <-t.C:
			return
		}
	}
}
