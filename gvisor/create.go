package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/specutils"
)

// The job's sandbox (its root container) is created and started in
// airlock's own process, with runsc's container package, the way `runsc
// run --detach` (and `runsc do`) does it: one exec of a large binary and
// its start-up fewer per job than running runsc as a process. Three
// things make that work:
//
//   - The root skeleton (rootfs.go) is built by the container's gofer, in
//     the mount namespace runsc gives it, before runsc's own gofer code
//     runs (prepareGoferRoot): runsc starts the gofer as a new process of
//     this same binary, named runsc-gofer, and hands it the container's
//     spec, which carries the plan (planAnnotation).
//   - runsc hands the creating process's os.Stdin, os.Stdout and
//     os.Stderr to the container's init as its stdio (and chowns them to
//     the sandbox's user), and its whole environment to the gofer.
//     asRunscProcess gives runsc what the `runsc run` process had: the
//     job's own files as stdio, and PATH alone as environment, so the
//     sandbox never holds airlock's output (the runner's pipe, the user's
//     terminal) and the gofer never holds airlock's secrets.
//   - The gofer and sandbox are children of this process. runsc waits
//     for its children only through the container object that created
//     them, which is dropped here; reapChildren collects them when they
//     exit, as init did for the children of the exited `runsc run`, so
//     that runsc's later checks (kill(pid, 0)) never take a zombie for a
//     live sandbox.
//
// Sub-containers (container.go) are still created by a `runsc run
// --detach` process: a running job's sandbox cgroup may be at its limits
// (a fork bomb), and on hosts without CLONE_INTO_CGROUP (cgroup v1) runsc
// joins the creating process to that cgroup while it starts the gofer;
// that must not be airlock. (For the root container the cgroup is new and
// empty.)

// runscProcessMu serialises asRunscProcess: what it swaps is the
// process's.
var runscProcessMu sync.Mutex

// asRunscProcess runs fn with os.Stdin, os.Stdout and os.Stderr set to
// the given files and the environment reduced to PATH, and puts the
// process's own back afterwards. airlock's own output goes through
// writers taken before (cmd/airlock's, the hook daemon's log) and its
// secrets were read from the environment before the job started, so
// nothing of it is lost meanwhile; a write to os.Stdout or os.Stderr by
// name from another goroutine during these few hundred milliseconds would
// land in the container's files.
func asRunscProcess(stdin, stdout, stderr *os.File, fn func() error) error {
	runscProcessMu.Lock()
	defer runscProcessMu.Unlock()
	in, out, errf := os.Stdin, os.Stdout, os.Stderr
	env := os.Environ()
	os.Stdin, os.Stdout, os.Stderr = stdin, stdout, stderr
	os.Clearenv()
	os.Setenv("PATH", DefaultPath)
	defer func() {
		os.Stdin, os.Stdout, os.Stderr = in, out, errf
		os.Clearenv()
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				os.Setenv(k, v)
			}
		}
	}()
	return fn()
}

// createRoot creates and starts the job's root container from the bundle
// in dir/bundle, with the given files as its init's stdin, stdout and
// stderr.
// It returns the watch on the sandbox's and the gofer's processes.
func createRoot(r runsc, dir, id string, stdin, stdout, stderr *os.File) (*childExits, error) {
	conf, err := r.config()
	if err != nil {
		return nil, err
	}
	bundle := filepath.Join(dir, "bundle")
	spec, err := specutils.ReadSpec(bundle, conf)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	if err := specutils.FixConfig(conf, spec); err != nil {
		return nil, fmt.Errorf("runsc config from the bundle: %w", err)
	}
	os.Remove(filepath.Join(dir, rootErrFile))
	var c *container.Container
	err = asRunscProcess(stdin, stdout, stderr, func() error {
		// runsc starts the gofer and the sandbox from ExePath.
		if r.exe != "" {
			defer func(was string) { specutils.ExePath = was }(specutils.ExePath)
			specutils.ExePath = r.exe
		}
		var err error
		if c, err = container.New(conf, container.Args{ID: id, Spec: spec, BundleDir: bundle}); err != nil {
			return err
		}
		if err := c.Start(conf); err != nil {
			sandboxPID, goferPID := c.Sandbox.Pid.Load(), c.GoferPid.Load()
			// This object knows its children and waits for them, unless
			// its destroy stops half-way: then they are reaped here.
			c.Destroy()
			reapChildren(sandboxPID, goferPID)
			return err
		}
		return nil
	})
	if err != nil {
		if why := goferRootError(dir); why != "" {
			return nil, fmt.Errorf("%s (%w)", why, err)
		}
		return nil, err
	}
	exits := &childExits{}
	exits.watch("the gofer", c.GoferPid.Load())
	exits.watch("the sandbox's process", c.Sandbox.Pid.Load())
	return exits, nil
}

// childExits watches the sandbox's and the gofer's processes (children
// of this one): each is waited for, so it does not linger as a zombie,
// and how it ended is kept, for a step that fails because one of them
// is gone (killed by an administrator or the OOM killer) to say which.
type childExits struct {
	mu      sync.Mutex
	watched int
	ended   []childExit
}

// childExit is how one watched process ended.
type childExit struct {
	what     string // "the gofer (pid 12) was killed by signal SIGKILL"
	signaled bool
}

func (c *childExits) watch(role string, pid int) {
	if pid <= 0 {
		return
	}
	c.mu.Lock()
	c.watched++
	c.mu.Unlock()
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return // not (or no longer) a child: nothing to say
			}
			how := fmt.Sprintf("exited with status %d", ws.ExitStatus())
			if ws.Signaled() {
				how = "was killed by signal " + unix.SignalName(ws.Signal())
			}
			c.mu.Lock()
			c.ended = append(c.ended, childExit{fmt.Sprintf("%s (pid %d) %s", role, pid, how), ws.Signaled()})
			c.mu.Unlock()
			return
		}
	}()
}

// othersGrace is how long gone waits, once one process has ended, for the
// other: when the gofer is killed the sentry exits on its own a moment
// later (and the gofer exits when the sandbox dies), and the one that was
// killed is the cause to report, whichever is reaped first.
const othersGrace = 500 * time.Millisecond

// gone says which watched processes have ended and how ("" when none),
// those killed by a signal first. The waits run beside the caller: a
// process that died a moment ago may not be counted yet, so a caller that
// saw a failure waits up to wait for the first one, and then a little
// for the rest.
func (c *childExits) gone(wait time.Duration) string {
	if c == nil {
		return ""
	}
	deadline := time.Now().Add(wait)
	var firstSeen time.Time
	for {
		c.mu.Lock()
		ended := slices.Clone(c.ended)
		all := len(ended) == c.watched
		c.mu.Unlock()
		now := time.Now()
		if len(ended) > 0 && firstSeen.IsZero() {
			firstSeen = now
		}
		settled := len(ended) > 0 && (all || now.Sub(firstSeen) >= othersGrace)
		if settled || (len(ended) == 0 && now.After(deadline)) {
			// The killed first, each group in the order reaped.
			var killed, exited []string
			for _, e := range ended {
				if e.signaled {
					killed = append(killed, e.what)
				} else {
					exited = append(exited, e.what)
				}
			}
			return strings.Join(append(killed, exited...), "; ")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reapChildren waits for each of pids (children of this process) in a
// goroutine of its own, so that they do not linger as zombies. A pid that
// is not (or no longer) a child is left alone: wait4 fails with ECHILD.
func reapChildren(pids ...int) {
	for _, pid := range pids {
		if pid <= 0 {
			continue
		}
		go func() {
			var ws unix.WaitStatus
			for {
				if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
					return
				}
			}
		}()
	}
}

// maxSpec bounds the spec read for its plan.
const maxSpec = 64 << 20

// planAnnotation carries a container's root plan (JSON) in its OCI spec,
// to its gofer: the plan is exactly as trusted as the rest of the spec.
const planAnnotation = "dev.airlock.rootfs-plan"

// rootErrFile is where the gofer says why it could not build the root
// skeleton (in the job's or sub-container's directory, next to the
// bundle): the gofer's own stderr goes nowhere.
const rootErrFile = "rootfs.err"

// goferRootError returns what the gofer wrote to dir's rootErrFile.
func goferRootError(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, rootErrFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// prepareGoferRoot runs first thing in a runsc gofer (argv[0]
// runsc-gofer, args its command line): when the container's spec (runsc
// passes it as --spec-fd) carries a root plan, it builds that skeleton
// and binds the pinned mount sources in the gofer's mount namespace,
// which runsc created for it and which ends with it. A gofer of a bundle
// without a plan (runsc's own `do`, say) is left alone.
func prepareGoferRoot(args []string) error {
	fd, err := strconv.Atoi(flagValue(args, "spec-fd"))
	if err != nil || fd < 0 {
		return nil
	}
	plan, found, err := planOf(fd)
	if !found {
		return err
	}
	if err == nil {
		// runsc made the namespace with clone(CLONE_NEWNS), which keeps
		// the host's propagation: mounts would show up on the host too.
		err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		if err != nil {
			err = fmt.Errorf("make the gofer's mounts private: %w", err)
		}
	}
	if err == nil {
		err = buildRootSkeleton(plan)
	}
	if err == nil {
		err = bindPins(plan.Pins)
	}
	if err != nil {
		err = fmt.Errorf("prepare root filesystem: %w", err)
		if dir := filepath.Dir(filepath.Clean(flagValue(args, "bundle"))); filepath.IsAbs(dir) {
			os.WriteFile(filepath.Join(dir, rootErrFile), []byte(err.Error()), 0o600)
		}
	}
	return err
}

// planOf reads the root plan from the annotation of the spec open as fd.
// It reads with pread, without an *os.File (whose finalizer would close
// the descriptor runsc's gofer reads the spec from next).
func planOf(fd int) (plan rootPlan, found bool, err error) {
	var b []byte
	buf := make([]byte, 64<<10)
	for len(b) < maxSpec {
		n, err := unix.Pread(fd, buf, int64(len(b)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return plan, false, nil // not ours to judge: runsc will say
		}
		if n == 0 {
			break
		}
		b = append(b, buf[:n]...)
	}
	var spec specs.Spec
	if json.Unmarshal(b, &spec) != nil || spec.Annotations[planAnnotation] == "" {
		return plan, false, nil
	}
	if err := json.Unmarshal([]byte(spec.Annotations[planAnnotation]), &plan); err != nil {
		return plan, true, fmt.Errorf("root plan in the spec: %w", err)
	}
	return plan, true, nil
}

// flagValue returns the value of --name (as "--name value" or
// "--name=value") in args, stopping at "--".
func flagValue(args []string, name string) string {
	for i, a := range args {
		switch {
		case a == "--":
			return ""
		case (a == "--"+name || a == "-"+name) && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"=")
		}
	}
	return ""
}
