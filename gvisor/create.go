package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/specutils"
)

// Containers are created and started in airlock's own process, with
// runsc's container package, the way `runsc run --detach` (and `runsc
// do`) does it: one exec of a large binary and its start-up fewer per
// sandbox than running runsc as a process. Two things make that work:
//
//   - The root skeleton (rootfs.go) is built by the container's gofer, in
//     the mount namespace runsc gives it, before runsc's own gofer code
//     runs (see prepareGoferRoot): runsc starts the gofer as a new process
//     of this same binary, named runsc-gofer, with --bundle naming the
//     bundle whose plan sits next to it.
//   - runsc hands the creating process's os.Stdin, os.Stdout and
//     os.Stderr to the container's init as its stdio (and chowns them to
//     the sandbox's user). withStdio points them at the container's own
//     files while runsc runs, so the sandbox never holds airlock's own
//     output (the runner's pipe, the user's terminal).
//
// The gofer and sandbox are then children of this process. runsc waits
// for its children only through the container object that created them,
// which is dropped here; reapChildren collects them when they exit, as
// init did for the children of the exited `runsc run`, so that runsc's
// later checks (kill(pid, 0)) never mistake a zombie for a live sandbox.

// stdioMu serialises withStdio: the variables it swaps are the process's.
var stdioMu sync.Mutex

// withStdio runs fn with os.Stdin, os.Stdout and os.Stderr set to the
// given files, and puts the process's own back afterwards. airlock's own
// output goes through writers taken before (cmd/airlock's, the hook
// daemon's log), so nothing of it is lost meanwhile; a write to
// os.Stdout or os.Stderr by name from another goroutine during these few
// hundred milliseconds would land in the container's files.
func withStdio(stdin, stdout, stderr *os.File, fn func() error) error {
	stdioMu.Lock()
	defer stdioMu.Unlock()
	in, out, errf := os.Stdin, os.Stdout, os.Stderr
	os.Stdin, os.Stdout, os.Stderr = stdin, stdout, stderr
	defer func() { os.Stdin, os.Stdout, os.Stderr = in, out, errf }()
	return fn()
}

// createContainer creates and starts container id from the bundle in
// dir/bundle, with the given files as its init's stdin, stdout and
// stderr. newSandbox says whether it is the root container (a new sandbox
// process) or a sub-container of a running sandbox (only a new gofer).
func createContainer(r runsc, dir, id string, newSandbox bool, stdin, stdout, stderr *os.File) error {
	conf, err := r.config()
	if err != nil {
		return err
	}
	bundle := filepath.Join(dir, "bundle")
	spec, err := specutils.ReadSpec(bundle, conf)
	if err != nil {
		return fmt.Errorf("read bundle: %w", err)
	}
	if err := specutils.FixConfig(conf, spec); err != nil {
		return fmt.Errorf("runsc config from the bundle: %w", err)
	}
	os.Remove(filepath.Join(dir, rootErrFile))
	var c *container.Container
	err = withStdio(stdin, stdout, stderr, func() error {
		var err error
		if c, err = container.New(conf, container.Args{ID: id, Spec: spec, BundleDir: bundle}); err != nil {
			return err
		}
		if err := c.Start(conf); err != nil {
			// This object knows its children and waits for them.
			c.Destroy()
			return err
		}
		return nil
	})
	if err != nil {
		if why := goferRootError(dir); why != "" {
			return fmt.Errorf("%s (%w)", why, err)
		}
		return err
	}
	pids := []int{c.GoferPid.Load()}
	if newSandbox {
		pids = append(pids, c.Sandbox.Pid.Load())
	}
	reapChildren(pids...)
	return nil
}

// reapChildren waits for each of pids (children of this process) in a
// goroutine of its own, so that they do not linger as zombies.
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

// rootErrFile is where the gofer says why it could not build the root
// skeleton (next to the bundle): the gofer's own stderr goes nowhere.
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
// runsc-gofer, args its command line): when the bundle named by --bundle
// has a root plan next to it (written by writeBundle), it builds that
// skeleton and binds the pinned mount sources in the gofer's mount
// namespace, which runsc created for it and which ends with it. A gofer
// without a plan (runsc's own `do`, say), or with one that airlock did
// not write, is left alone.
func prepareGoferRoot(args []string) error {
	bundle := flagValue(args, "bundle")
	if bundle == "" {
		return nil
	}
	dir := filepath.Dir(filepath.Clean(bundle))
	planPath := filepath.Join(dir, "rootfs.json")
	if !writtenByUs(dir) || !writtenByUs(planPath) {
		return nil
	}
	plan, err := readPlan(planPath)
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
		os.WriteFile(filepath.Join(dir, rootErrFile), []byte(err.Error()), 0o600)
	}
	return err
}

// writtenByUs reports whether path could only have been written by this
// user (root, as airlock runs): no symlink, owned by us, writable by
// nobody else. A plan that anyone else could have placed (next to a
// bundle in /tmp, say) is not airlock's.
func writtenByUs(path string) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Uid == uint32(os.Geteuid()) && st.Mode&0o022 == 0
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
