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
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-ci/airlock/gvisor/cgroup"
	"github.com/airlock-ci/airlock/gvisor/quota"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Limit names, as reported in StepResult.Limit.
const (
	LimitTimeout = "timeout"
	LimitOOM     = "oom"
	LimitPids    = "pids"
	LimitDisk    = "disk"
	LimitOutput  = "output"
	// LimitWorkspace: the step filled its workspace (package quota).
	LimitWorkspace = "workspace"
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
	timeout := st.Timeout
	if timeout == 0 {
		timeout = s.cfg.Limits.StepTimeout
	}
	stepCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		stepCtx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()

	dir := st.Dir
	if dir == "" {
		dir = s.cfg.WorkspaceMount
	}
	proc := specs.Process{
		Args:            s.viaShim(st.Args),
		Env:             mergeEnv(baseEnv(DefaultPath), st.Env),
		Cwd:             dir,
		User:            specs.User{UID: s.cfg.User.UID, GID: s.cfg.User.GID},
		Capabilities:    capabilities(s.cfg.Capabilities),
		NoNewPrivileges: true,
	}
	before := s.usage()

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
	res := StepResult{Start: time.Now().UTC()}
	pid, err := s.startProcess(proc, stdoutW, stderrW)
	// The sandbox holds its own copies of the write ends now.
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdoutR.Close()
		stderrR.Close()
		if !s.ctl.running() {
			s.markDead(s.crashReason(s.children.gone(time.Second)))
		}
		return StepResult{}, fmt.Errorf("start step in sandbox %s: %w", s.cfg.ID, err)
	}
	outDone := out.drain(stdoutR, st.Stdout, 0)
	errDone := out.drain(stderrR, st.Stderr, 1)

	exited := make(chan exit, 1)
	go func() {
		ws, err := s.ctl.wait(pid)
		exited <- exit{ws, err}
	}()

	var ex exit
	limit := ""
	select {
	case ex = <-exited:
	case <-stepCtx.Done():
		limit = LimitTimeout
		ex = s.stopStep(pid, exited)
	case <-out.exceeded:
		limit = LimitOutput
		ex = s.stopStep(pid, exited)
	}
	res.End = time.Now().UTC()
	res.Duration = res.End.Sub(res.Start)
	res.ExitCode = exitCode(ex.ws, ex.err)

	// Give the pipes a moment to deliver what the step wrote just before it
	// exited. A background process that keeps them open is not waited for:
	// its output keeps streaming until it exits or the sandbox is destroyed.
	waitDrain(outDone, errDone, 500*time.Millisecond)
	out.summarize(&res)

	detected := s.detectLimit(res.ExitCode, before, func() bool { return s.diskFull(ctx) })
	if limit == LimitTimeout && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		limit = stoppedCancelled // SIGINT/SIGTERM, not a timeout
	}
	s.settle(&res, ex.err, limit, detected, timeout)
	if res.Limit == LimitPids {
		// The step's processes may still be forking in the background
		// (a fork bomb's main process can exit 0): stop the whole group.
		s.ctl.kill(pid)
	}
	return res, nil
}

// Reasons other than a limit why airlock stopped a step or container.
const (
	stoppedCancelled = "cancelled"
	stoppedKilled    = "killed"
)

// usage is what the limit detection compares before and after a process.
type usage struct {
	forksRefused, oomKills, pidsHits uint64
}

func (s *Sandbox) usage() usage {
	kills, _ := s.cg.OOMKills()
	return usage{forksRefused: s.record.ForkRefused(), oomKills: kills, pidsHits: s.cg.PidsHits()}
}

// settle completes the result of a step or container whose process has
// exited with res.ExitCode. stopped is why airlock stopped it (a limit
// name, stoppedCancelled, stoppedKilled or ""); detected is the limit
// found afterwards. A fork or memory bomb often ends by the timeout, but
// the limit it ran into is the more useful report.
func (s *Sandbox) settle(res *StepResult, waitErr error, stopped, detected string, timeout time.Duration) {
	limit := stopped
	switch {
	case detected == LimitPids, detected == LimitOOM:
		limit = detected
	case limit == "":
		limit = detected
	}
	if limit == stoppedCancelled || limit == stoppedKilled {
		res.Message = limit
		limit = ""
	}
	res.Limit = limit
	if limit != "" {
		res.Message = limitMessage(limit, s.cfg.Limits, s.cg, timeout)
		// It may have exited on its own just before the kill landed: a
		// limit still means it did not succeed.
		if res.ExitCode == 0 {
			res.ExitCode = 137
		}
	}
	if why := s.Dead(); why != "" && res.Message == "" {
		res.Message = why
	}
	if waitErr != nil && res.Message == "" {
		// The wait through the control API ends as the sentry dies,
		// perhaps before its process is reaped (a zombie still counts as
		// running): which of the sandbox's processes ended says why.
		if gone := s.children.gone(time.Second); gone != "" {
			s.markDead(s.crashReason(gone))
			res.Message = s.Dead()
		} else {
			res.Message = "lost track of the process: " + waitErr.Error()
		}
	}
}

// crashReason explains a sandbox that stopped on its own, with which of
// its processes ended (gone, from childExits.gone) and what runsc and the
// sentry last said about it.
func (s *Sandbox) crashReason(gone string) string {
	why := "the sandbox exited unexpectedly"
	if gone != "" {
		why = "the sandbox stopped: " + gone
	}
	var lines []string
	for _, f := range []string{"runsc.log", "create.err"} {
		b, err := os.ReadFile(filepath.Join(s.dir, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			low := strings.ToLower(l)
			if strings.Contains(low, "panic") || strings.Contains(low, "fatal") || strings.Contains(low, "killed") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	if len(lines) > 0 {
		why += ": " + strings.Join(lines, " | ")
	}
	return why
}

// exit is how waiting for a step's process ended.
type exit struct {
	ws  unix.WaitStatus
	err error
}

// stopStep kills a running step and waits for its exit. If it will not
// die, it kills everything in the sandbox rather than hang.
func (s *Sandbox) stopStep(pid int32, exited <-chan exit) exit {
	s.ctl.kill(pid)
	for {
		select {
		case ex := <-exited:
			return ex
		case <-time.After(10 * time.Second):
			s.ctl.killAll()
		}
	}
}

// detectLimit works out which limit, if any, a finished step ran into.
// diskFull, when not nil, tells whether its writable filesystems are full.
func (s *Sandbox) detectLimit(exitCode int, before usage, diskFull func() bool) string {
	if kills, _ := s.cg.OOMKills(); kills > before.oomKills {
		s.markDead("killed by the host after hitting the memory limit")
		return LimitOOM
	}
	// A step that exited 0 ran in a live sandbox; only a failure can
	// mean the sandbox itself died.
	if exitCode != 0 && !s.ctl.running() {
		if _, hits := s.cg.OOMKills(); hits > 0 {
			s.markDead("killed by the host after hitting the memory limit")
			return LimitOOM
		}
		if s.cg.PidsHits() > before.pidsHits {
			s.markDead("stopped after the host's process limit refused it a thread")
			return LimitPids
		}
		s.markDead(s.crashReason(s.children.gone(time.Second)))
		return ""
	}
	// The sentry outlives its gofer, but not usefully: the job's files
	// are gone with it.
	if exitCode != 0 {
		if gone := s.children.gone(0); gone != "" {
			s.markDead("the sandbox lost its files: " + gone)
			return ""
		}
	}
	if s.record.ForkRefused() > before.forksRefused || s.cg.PidsHits() > before.pidsHits {
		return LimitPids
	}
	// Under a flood of events the sentry may drop the refused forks; a
	// failed step that leaves the sandbox at its process limit hit it.
	if exitCode != 0 && s.cfg.Limits.Pids > 0 && s.ctl.taskCount() >= s.cfg.Limits.Pids*9/10 {
		return LimitPids
	}
	if exitCode != 0 && s.workspaceFull() {
		return LimitWorkspace
	}
	if exitCode != 0 && diskFull != nil && diskFull() {
		return LimitDisk
	}
	return ""
}

// startProcess starts a process of airlock's through the control API (its
// Args begin with the shim: viaShim) and tells the record, so that the
// program's exec is on record as airlock's.
func (s *Sandbox) startProcess(proc specs.Process, stdout, stderr *os.File) (int32, error) {
	since := time.Now()
	pid, err := s.ctl.start(proc, stdout, stderr)
	if err == nil {
		s.record.Started(pid, since)
	}
	return pid, err
}

// workspaceFull reports whether the job has (almost) filled its
// workspace's limit, in bytes or files.
func (s *Sandbox) workspaceFull() bool {
	if s.volume == nil {
		return false
	}
	u, err := s.volume.Usage()
	return err == nil && u.Full()
}

// diskFull runs the statfs helper inside the sandbox and reports whether
// the overlay or /tmp is (almost) full.
func (s *Sandbox) diskFull(ctx context.Context) bool {
	r, w, err := os.Pipe()
	if err != nil {
		return false
	}
	defer r.Close()
	proc := specs.Process{
		Args: s.viaShim([]string{initPath, "statfs", "/", "/tmp"}), Env: baseEnv(DefaultPath), Cwd: "/",
		User: specs.User{UID: s.cfg.User.UID, GID: s.cfg.User.GID}, Capabilities: capabilities(nil), NoNewPrivileges: true,
	}
	pid, err := s.startProcess(proc, w, w)
	w.Close()
	if err != nil {
		return false
	}
	done := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
		done <- b
	}()
	var out []byte
	select {
	case out = <-done:
	case <-time.After(10 * time.Second):
		s.ctl.kill(pid)
		return false
	case <-ctx.Done():
	}
	s.ctl.wait(pid)
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

// limitMessage says which limit a step hit, with its value: l's, or for
// memory, where the job runs in the cgroup enclosing airlock (cg), that
// cgroup's.
func limitMessage(limit string, l Limits, cg cgroup.Set, timeout time.Duration) string {
	switch limit {
	case LimitTimeout:
		return fmt.Sprintf("step killed: it ran longer than its timeout (%s)", timeout)
	case LimitOOM:
		if cg.Enclosed() {
			return fmt.Sprintf("sandbox killed: the job exceeded the memory limit of the cgroup enclosing airlock (%s; the pod's); later steps cannot run", humanBytes(cg.EnclosingLimits().Memory))
		}
		return fmt.Sprintf("sandbox killed: the job exceeded its memory limit (%s); later steps cannot run", humanBytes(l.Memory))
	case LimitPids:
		return fmt.Sprintf("step hit the process limit (%d processes and threads): fork/clone failed with EAGAIN", l.Pids)
	case LimitDisk:
		return fmt.Sprintf("step filled its writable filesystem (overlay limit %s, /tmp limit %s)", humanBytes(l.Overlay), humanBytes(l.Tmp))
	case LimitOutput:
		return fmt.Sprintf("step killed: it printed more than the output cap (%s)", humanBytes(l.Output))
	case LimitWorkspace:
		return fmt.Sprintf("step filled the workspace: writes past %s or %d files fail with ENOSPC (sandbox.limits.workspace; a repository may lower it, the organisation policy raise it)", humanBytes(l.Workspace), quota.Limit{Bytes: l.Workspace}.Inodes())
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

// exitCode maps a wait status to a shell-style exit code: 128+N for a
// process killed by signal N, 125 when the status is unknown.
func exitCode(ws unix.WaitStatus, err error) int {
	switch {
	case err != nil:
		return 125
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 125
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
