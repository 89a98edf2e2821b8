package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-ci/airlock/internal/paths"
)

// Sub-containers: a second (third, ...) container in the job's running
// sandbox, the way containerd-shim-runsc runs the containers of a
// Kubernetes pod. It shares the sandbox's kernel, and with it the network
// stack (loopback and the job's egress), the host cgroup limits, the
// RLIMIT_NPROC budget per uid and runtime monitoring; it has its own root
// filesystem (an unpacked image below a throw-away overlay), mounts,
// files, process and PID namespace.
//
// runsc learns that a bundle is such a container from two annotations
// (see containerSpec). `runsc run --detach` for it then asks the sandbox
// to create the container, starts a gofer for its root and mounts, which
// builds the container's skeleton first (rootfs.go), and hands its own
// stdin, stdout and stderr to the container's init: so the stdout and
// stderr of that runsc process are the container's output pipes and its
// stdin is /dev/null.
//
// Lifecycle: everything of a container lives in <job>/containers/<name>
// (bundle, skeleton mount point, files) and in the job's runsc state, and
// its gofer names that directory on its command line. Container.Destroy,
// Sandbox.Destroy and Reap (through destroyJob) remove all of it.

// ContainerConfig describes a sub-container.
type ContainerConfig struct {
	// Name identifies the container in the sandbox: 1-64 letters, digits,
	// '-', '_' or '.', other than the job id.
	Name string
	// RootFS is the absolute path of a host directory holding an unpacked
	// image. The container sees it read-only below a throw-away writable
	// overlay; the directory itself is never modified.
	RootFS string
	// Mounts are host directories (absolute paths) in the container, for
	// example the job's workspace.
	Mounts []Mount
	// Files are small read-only files placed over paths of the image
	// (such as /etc/resolv.conf), as Config.Files.
	Files []File
	// Args is the command; Args[0] is looked up in the PATH of Env.
	Args []string
	// Env is added to the base environment (KEY=VALUE). Later entries win.
	Env []string
	// Dir is the absolute working directory. Empty: "/".
	Dir string
	// User runs the process. Nil: the job's user (Config.User).
	User *User
	// Capabilities the process keeps (e.g. "CAP_SETUID" for an image whose
	// entrypoint drops to another user). Empty: none.
	Capabilities []string
	// Stdout and Stderr receive the output live, up to the job's output
	// limit. Nil: discarded.
	Stdout, Stderr io.Writer
	// Timeout bounds the container's run time from its start: when it
	// passes, the container is killed. Zero: no bound of its own (a
	// service), only the context given to Wait and the sandbox's life.
	Timeout time.Duration
}

// withDefaults checks the configuration against the job's and fills in
// the defaults. It returns a copy.
func (c ContainerConfig) withDefaults(job Config) (ContainerConfig, error) {
	if !validID(c.Name) || c.Name == job.ID {
		return c, fmt.Errorf("%w: container name %q: use 1-64 letters, digits, '-', '_' or '.', other than the job id", ErrInvalidConfig, c.Name)
	}
	root, err := checkImageDir(c.RootFS, job.StateRoot)
	if err != nil {
		return c, err
	}
	c.RootFS = root
	if len(c.Args) == 0 {
		return c, fmt.Errorf("%w: container %s has no command (Args)", ErrInvalidConfig, c.Name)
	}
	if c.Dir == "" {
		c.Dir = "/"
	}
	if !filepath.IsAbs(c.Dir) {
		return c, fmt.Errorf("%w: working directory %q: must be an absolute path", ErrInvalidConfig, c.Dir)
	}
	for _, m := range c.Mounts {
		if !filepath.IsAbs(m.Source) {
			return c, fmt.Errorf("%w: mount source %q: must be an absolute path", ErrInvalidConfig, m.Source)
		}
	}
	if c.Mounts, err = checkMounts(c.Mounts); err != nil {
		return c, err
	}
	for _, f := range c.Files {
		if !filepath.IsAbs(f.Path) {
			return c, fmt.Errorf("%w: file %q: must be an absolute path", ErrInvalidConfig, f.Path)
		}
	}
	if err := checkCapabilities(c.Capabilities); err != nil {
		return c, err
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("%w: negative timeout %s", ErrInvalidConfig, c.Timeout)
	}
	if c.User == nil {
		c.User = job.User
	}
	return c, nil
}

// checkImageDir resolves a sub-container's rootfs: an absolute path to a
// directory that does not hold airlock's state (which rules out the host
// root: steps run there already, with its secrets masked).
func checkImageDir(dir, stateRoot string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%w: rootfs %q: must be the absolute path of an unpacked image directory", ErrInvalidConfig, dir)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(root); err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
	}
	if err != nil {
		return "", fmt.Errorf("%w: rootfs %s: %v (give an unpacked image directory)", ErrInvalidConfig, dir, err)
	}
	state, err := resolvedPath(stateRoot)
	if err != nil {
		return "", fmt.Errorf("state root: %w", err)
	}
	if paths.Within(state, root) {
		return "", fmt.Errorf("%w: rootfs %s contains airlock's state root %s; give an unpacked image directory", ErrInvalidConfig, dir, stateRoot)
	}
	return root, nil
}

// Container is a sub-container running in a job's sandbox. Its methods
// are safe for concurrent use.
type Container struct {
	s   *Sandbox
	cfg ContainerConfig
	dir string // <job>/containers/<name>, owned by this Container

	ready  chan struct{} // closed once StartContainer is done with it
	exited chan struct{} // closed when its init has exited
	done   chan struct{} // closed when res and waitErr are final

	res     StepResult
	waitErr error

	mu      sync.Mutex  // guards ctl and stopped
	ctl     *controller // for signals and destroy; nil until it runs
	stopped string      // why airlock stopped it, see stop

	destroy sync.Once
	destErr error
}

// StartContainer creates and starts a sub-container in the sandbox and
// returns once its process runs. Its output is streamed to the writers
// from then on. On any error everything created so far is removed again.
// The caller must Destroy the container (Sandbox.Destroy does it too).
func (s *Sandbox) StartContainer(ctx context.Context, cc ContainerConfig) (_ *Container, err error) {
	if s.cfg.ExclusiveMounts {
		// Its own mount of the workspace would write behind the cache
		// the job's container keeps of it.
		return nil, fmt.Errorf("start container %q: %w: the sandbox's mounts are exclusive to its job (Config.ExclusiveMounts)", cc.Name, ErrInvalidConfig)
	}
	if cc, err = cc.withDefaults(s.cfg); err != nil {
		return nil, fmt.Errorf("start container %q: %w", cc.Name, err)
	}
	c := &Container{
		s: s, cfg: cc, dir: filepath.Join(s.dir, "containers", cc.Name),
		ready: make(chan struct{}), exited: make(chan struct{}), done: make(chan struct{}),
	}
	if err := s.addContainer(c); err != nil {
		return nil, fmt.Errorf("start container %q: %w", cc.Name, err)
	}
	defer func() {
		close(c.ready)
		if err != nil {
			c.Destroy()
		}
	}()
	if err := c.prepare(); err != nil {
		return nil, fmt.Errorf("start container %q: %w", cc.Name, err)
	}
	if err := c.start(ctx); err != nil {
		return nil, fmt.Errorf("start container %q in sandbox %s: %w", cc.Name, s.cfg.ID, err)
	}
	return c, nil
}

// addContainer registers c under its name, unless the sandbox is dead or
// the name taken. Destroy takes the registered containers under the same
// lock that marks the sandbox dead, so none escapes it.
func (s *Sandbox) addContainer(c *Container) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != "" {
		return fmt.Errorf("sandbox %s is not running (%s)", s.cfg.ID, s.dead)
	}
	if _, ok := s.containers[c.cfg.Name]; ok {
		return fmt.Errorf("%w: a container named %s already exists in sandbox %s", ErrInvalidConfig, c.cfg.Name, s.cfg.ID)
	}
	if s.containers == nil {
		s.containers = map[string]*Container{}
	}
	s.containers[c.cfg.Name] = c
	return nil
}

func (s *Sandbox) removeContainer(c *Container) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.containers[c.cfg.Name] == c {
		delete(s.containers, c.cfg.Name)
	}
}

// takeContainers marks the sandbox dead and returns its containers.
func (s *Sandbox) takeContainers(why string) []*Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead == "" {
		s.dead = why
	}
	var out []*Container
	for _, c := range s.containers {
		out = append(out, c)
	}
	return out
}

// prepare writes the container's rootfs plan, files and bundle.
func (c *Container) prepare() error {
	if err := os.MkdirAll(filepath.Dir(c.dir), 0o700); err != nil {
		return fmt.Errorf("create containers directory: %w", err)
	}
	for _, d := range []string{"", "bundle", "rootfs"} {
		if err := os.Mkdir(filepath.Join(c.dir, d), 0o700); err != nil {
			return fmt.Errorf("create container directory: %w", err)
		}
	}
	plan := rootPlan{Source: c.cfg.RootFS, Target: filepath.Join(c.dir, "rootfs")}
	if c.s.shim != "" {
		plan.Files = append(plan.Files, execShimPath[1:])
	}
	if err := plan.addMountPoints(mountDestinations(c.cfg.Mounts)...); err != nil {
		return err
	}
	fileMounts, err := plan.addFiles(c.cfg.Files, c.dir)
	if err != nil {
		return err
	}
	cc := c.cfg
	if cc.Mounts, err = plan.pinMounts(cc.Mounts, c.dir); err != nil {
		return err
	}
	spec := containerSpec(c.s.cfg, cc, plan.Target)
	spec.Mounts = append(spec.Mounts, fileMounts...)
	if c.s.shim != "" {
		// The container's command starts through the shim, so that it
		// is on record with its digest (execshim.go).
		spec.Process.Args = viaShim(spec.Process.Args)
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: execShimPath, Type: "bind", Source: c.s.shim,
			Options: []string{"bind", "ro", "nosuid", "nodev"},
		})
	}
	return writeBundle(c.dir, plan, spec)
}

// start runs the container and starts supervising it. A `runsc run
// --detach` process creates it (see create.go for why not this one): its
// stdout and stderr are the container's output pipes, its stdin
// /dev/null.
func (c *Container) start(ctx context.Context) error {
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("create stdout pipe: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return fmt.Errorf("create stderr pipe: %w", err)
	}
	cmd := c.s.runsc.command(ctx, "run", "--detach", "--bundle="+filepath.Join(c.dir, "bundle"), c.cfg.Name)
	cmd.Stdout, cmd.Stderr = stdoutW, stderrW
	before := c.s.usage()
	c.res.Start = time.Now().UTC()
	err = cmd.Run()
	// The sandbox holds its own copies of the write ends now.
	stdoutW.Close()
	stderrW.Close()
	var waiter *controller
	if err == nil {
		// Two handles: runsc's container object is not meant for
		// concurrent use, and one of them blocks in Wait.
		if waiter, err = loadController(c.s.runsc, c.s.cfg.ID, c.cfg.Name); err == nil {
			c.mu.Lock()
			c.ctl, err = loadController(c.s.runsc, c.s.cfg.ID, c.cfg.Name)
			c.mu.Unlock()
		}
	}
	if err != nil {
		// runsc (or the gofer, building the skeleton) says why: on what
		// would have been the container's stderr, in the job's log.
		said := goferRootError(c.dir)
		if said == "" {
			said = strings.TrimSpace(readAvailable(stderrR, 4096))
		}
		stdoutR.Close()
		stderrR.Close()
		if said == "" {
			said = c.s.runsc.logTail()
		}
		return fmt.Errorf("runsc run: %v: %s", err, lastLines(said, 5))
	}
	out := newCappedOutput(c.s.cfg.Limits.Output)
	outDone := out.drain(stdoutR, c.cfg.Stdout, 0)
	errDone := out.drain(stderrR, c.cfg.Stderr, 1)
	go c.supervise(waiter, out, outDone, errDone, before)
	return nil
}

// readAvailable returns what r holds now, up to n bytes, without waiting
// for writers that may never close it.
func readAvailable(r *os.File, n int) string {
	r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	b, _ := io.ReadAll(io.LimitReader(r, int64(n)))
	return string(b)
}

// supervise waits for the container to exit, stops it when it passes its
// timeout or output cap, and then settles its result.
func (c *Container) supervise(waiter *controller, out *cappedOutput, outDone, errDone <-chan struct{}, before usage) {
	exited := make(chan exit, 1)
	go func() {
		ws, err := waiter.waitContainer()
		close(c.exited)
		exited <- exit{ws, err}
	}()
	var timeout <-chan time.Time
	if c.cfg.Timeout > 0 {
		t := time.NewTimer(c.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	exceeded := out.exceeded
	var ex exit
	for running := true; running; {
		select {
		case ex = <-exited:
			running = false
		case <-timeout:
			timeout = nil
			c.stop(LimitTimeout)
		case <-exceeded:
			exceeded = nil
			c.stop(LimitOutput)
		}
	}
	res := c.res
	res.End = time.Now().UTC()
	res.Duration = res.End.Sub(res.Start)
	res.ExitCode = exitCode(ex.ws, ex.err)
	// As for steps: output written by processes that outlive the init
	// (which its PID namespace does not allow for long) is not waited for.
	waitDrain(outDone, errDone, 500*time.Millisecond)
	out.summarize(&res)
	timeoutUsed := c.cfg.Timeout
	if timeoutUsed == 0 {
		timeoutUsed = res.Duration.Round(time.Second)
	}
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	c.s.settle(&res, ex.err, stopped, c.s.detectLimit(res.ExitCode, before, nil), timeoutUsed)
	c.res = res
	if ex.err != nil {
		c.waitErr = fmt.Errorf("wait for container %s: %w", c.cfg.Name, ex.err)
	}
	close(c.done)
}

// stop records why airlock stops the container (the first reason wins;
// none once it has exited on its own) and sends SIGKILL to all its
// processes.
func (c *Container) stop(why string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.exited:
		return nil
	default:
	}
	if c.stopped == "" {
		c.stopped = why
	}
	return c.ctl.killContainer()
}

// Name is the container's name in the sandbox.
func (c *Container) Name() string { return c.cfg.Name }

// Wait waits for the container's process to exit and reports how it ended,
// as Exec does for a step: exit code, output sizes and digests, and the
// limit it hit, if any. When ctx ends first the container is killed (a
// deadline counts as a timeout, a cancellation is reported as such). The
// error is set only when airlock lost track of the container (the sandbox
// died or was destroyed); the result then says what is known.
func (c *Container) Wait(ctx context.Context) (StepResult, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		why := stoppedCancelled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = LimitTimeout
		}
		c.stop(why)
		<-c.done
	}
	return c.res, c.waitErr
}

// Exited is closed once the container's first process has exited.
func (c *Container) Exited() <-chan struct{} { return c.exited }

// Kill sends SIGKILL to every process of the container and waits until it
// has exited; Wait then reports it as killed. Killing a container that has
// exited does nothing.
func (c *Container) Kill() error {
	err := c.stop(stoppedKilled)
	select {
	case <-c.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	if err == nil {
		err = errors.New("still running 10s after SIGKILL")
	}
	return fmt.Errorf("kill container %s: %w", c.cfg.Name, err)
}

// Destroy stops the container and removes everything it had on the host:
// its processes in the sandbox, its gofer, its runsc state and directory
// (skeleton, files, bundle). It is idempotent; later calls return the
// first call's error.
func (c *Container) Destroy() error {
	c.destroy.Do(func() {
		<-c.ready
		var errs []error
		c.mu.Lock()
		ctl := c.ctl
		c.mu.Unlock()
		if ctl != nil {
			if err := c.Kill(); err != nil {
				errs = append(errs, err)
			}
		} else {
			// Never ran: runsc may have left state of a partly created
			// container behind.
			ctl, _ = loadController(c.s.runsc, c.s.cfg.ID, c.cfg.Name)
		}
		if ctl != nil {
			if err := ctl.destroy(); err != nil {
				errs = append(errs, fmt.Errorf("destroy container %s: %w", c.cfg.Name, err))
			}
		}
		// A gofer or runsc process that runsc's state did not name (a
		// failed start) names the container directory.
		killProcessesUsing(c.dir)
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove container directory: %w", err))
		}
		c.s.removeContainer(c)
		c.destErr = errors.Join(errs...)
	})
	return c.destErr
}
