package gvisor

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/specutils"
)

// controller drives a running sandbox through runsc's own Go API, in this
// process, instead of starting a runsc process per operation: each step,
// kill and delete would otherwise pay for loading a 100 MB binary. It is
// the same code `runsc exec`, `runsc kill` and `runsc delete` run.
type controller struct {
	conf *config.Config
	c    *container.Container
}

// quietRunscLogs sends the log output of runsc's packages, when they run
// inside airlock, nowhere: runsc logs Info lines to stderr by default, and
// the real diagnostics live in the job's runsc.log written by the sandbox.
func quietRunscLogs() {
	log.SetTarget(log.GoogleEmitter{Writer: &log.Writer{Next: io.Discard}})
}

// newController loads the sandbox's root container with the same global
// flags the sandbox was created with.
func newController(r runsc, id string) (*controller, error) {
	return loadController(r, id, id)
}

// loadController loads container cid of sandbox sandboxID: the root
// container when both are the job id, or a sub-container.
func loadController(r runsc, sandboxID, cid string) (*controller, error) {
	conf, err := r.config()
	if err != nil {
		return nil, err
	}
	c, err := container.Load(conf.RootDir, container.FullID{SandboxID: sandboxID, ContainerID: cid}, container.LoadOpts{Exact: true})
	if err != nil {
		return nil, fmt.Errorf("load container %s of sandbox %s: %w", cid, sandboxID, err)
	}
	return &controller{conf: conf, c: c}, nil
}

// config parses the global flags into runsc's configuration.
func (r runsc) config() (*config.Config, error) {
	fs := flag.NewFlagSet("runsc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config.RegisterFlags(fs)
	if err := fs.Parse(r.global); err != nil {
		return nil, fmt.Errorf("runsc flags: %w", err)
	}
	conf, err := config.NewFromFlags(fs)
	if err != nil {
		return nil, fmt.Errorf("runsc config: %w", err)
	}
	return conf, nil
}

// start starts a process in the sandbox with the given stdio and returns
// its pid in the sandbox's root PID namespace.
func (k *controller) start(p specs.Process, stdout, stderr *os.File) (int32, error) {
	caps, err := specutils.Capabilities(false, p.Capabilities)
	if err != nil {
		return 0, fmt.Errorf("capabilities: %w", err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devNull.Close()
	args := &control.ExecArgs{
		Argv:             p.Args,
		Envv:             p.Env,
		WorkingDirectory: p.Cwd,
		KUID:             auth.KUID(p.User.UID),
		KGID:             auth.KGID(p.User.GID),
		Capabilities:     caps,
		NoNewPrivileges:  p.NoNewPrivileges,
		FilePayload:      control.NewFilePayload(map[int]*os.File{0: devNull, 1: stdout, 2: stderr}, nil),
	}
	// Right after a step hit the process limit, its killed processes take
	// a moment to be reaped and new ones fail with EAGAIN; a sentry busy
	// tearing down a fork bomb may also drop the control connection.
	// Retry briefly. (Errors cross urpc as text, so they are matched as
	// text.)
	var pid int32
	for wait := 20 * time.Millisecond; ; wait *= 2 {
		pid, err = k.c.Execute(k.conf, args)
		if err == nil || !isTransient(err) || wait > 2*time.Second {
			break
		}
		time.Sleep(wait)
	}
	switch {
	case err != nil && strings.Contains(err.Error(), "error finding executable"):
		// The sentry's user.ExecutableResolveError, as text.
		return 0, fmt.Errorf("%w: %v", ErrNoExecutable, err)
	case err != nil:
		return 0, fmt.Errorf("start process: %w", err)
	}
	return pid, nil
}

// wait waits for a process started by start and returns its wait status.
func (k *controller) wait(pid int32) (unix.WaitStatus, error) {
	return k.c.WaitPID(pid)
}

// kill sends SIGKILL to the process group led by pid and to pid itself.
func (k *controller) kill(pid int32) {
	k.c.SignalProcessGroup(unix.SIGKILL, pid)
	k.c.SignalProcess(unix.SIGKILL, pid)
}

// taskCount is how many tasks (threads) the sandbox runs, the unit of
// RLIMIT_NPROC; -1 when it cannot be read.
func (k *controller) taskCount() int {
	procs, err := k.c.Processes()
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range procs {
		n += max(1, len(p.Threads))
	}
	return n
}

// killAll sends SIGKILL to every process in the sandbox but its init
// (pid 1, airlock's reaper): killing init would end the sandbox. Processes
// forked while it runs are caught by the next round.
func (k *controller) killAll() error {
	// Killed processes linger until init has reaped them: give it time.
	for round := 0; round < 100; round++ {
		procs, err := k.c.Processes()
		if err != nil {
			return fmt.Errorf("list processes: %w", err)
		}
		left := 0
		for _, p := range procs {
			if p.PID != 1 {
				left++
				k.c.SignalProcess(unix.SIGKILL, int32(p.PID))
			}
		}
		if left == 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("processes still there 5s after SIGKILL")
}

// destroy stops the container and removes its runsc state: for the root
// container the whole sandbox and its cgroup, for a sub-container its
// processes and gofer.
func (k *controller) destroy() error {
	return k.c.Destroy()
}

// waitContainer waits for a container's init process to exit.
func (k *controller) waitContainer() (unix.WaitStatus, error) {
	return k.c.Wait()
}

// killContainer sends SIGKILL to every process of the container.
func (k *controller) killContainer() error {
	return k.c.SignalContainer(unix.SIGKILL, true)
}

// running reports whether the sandbox is still up.
func (k *controller) running() bool {
	c, err := container.Load(k.conf.RootDir, container.FullID{SandboxID: k.c.ID, ContainerID: k.c.ID}, container.LoadOpts{Exact: true})
	if err != nil {
		return false
	}
	return c.Status == container.Running && c.IsSandboxRunning()
}

// isTransient recognises, in an error that crossed urpc as text, EAGAIN
// (the sentry spells it "try again") and a dropped control connection.
func isTransient(err error) bool {
	msg := err.Error()
	for _, s := range []string{"try again", unix.EAGAIN.Error(), "connection reset", "connection refused", "broken pipe"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
