package gvisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/runsc/container"

	"github.com/airlock-ci/airlock/gvisor/cgroup"
	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/gvisor/platform"
	"github.com/airlock-ci/airlock/gvisor/quota"
)

// Sandbox is one running job sandbox. Its methods are safe for concurrent
// use, but steps run one at a time (Exec serialises them).
type Sandbox struct {
	cfg      Config
	platform PlatformChoice
	dir      string // job directory, owned by this Sandbox
	runsc    runsc
	lock     *os.File // flock held for the sandbox's lifetime
	record   *monitor.Record
	recv     *monitor.Receiver
	cg       cgroup.Set
	ctl      *controller   // set once the sandbox runs
	shim     string        // the exec shim's host file ("" where there is none)
	volume   *quota.Volume // bounds the workspace (nil: no limit)
	released Workspace     // what Destroy's release of the volume found
	children *childExits   // how the sandbox's and the gofer's processes ended

	execMu  sync.Mutex // one step at a time
	execSeq int

	mu         sync.Mutex
	dead       string                // why the sandbox stopped, once it has
	containers map[string]*Container // sub-containers by name
	destroy    sync.Once
	destErr    error
}

// owner is written to the job directory so that Reap can clean up after an
// airlock that died without destroying its sandbox.
type owner struct {
	ID        string    `json:"id"`
	PID       int       `json:"pid"`
	Created   time.Time `json:"created"`
	Workspace string    `json:"workspace"`
	// UID is the identity the workload ran as, for tidying the workspace.
	UID     uint32   `json:"uid"`
	Cgroups []string `json:"cgroups"`
}

func newID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return "job-" + hex.EncodeToString(b[:])
}

// Create makes and starts the job sandbox. On any error everything created
// so far is removed again.
func Create(ctx context.Context, cfg Config) (_ *Sandbox, err error) {
	if err := checkHost(); err != nil {
		return nil, err
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	judge := hostJudge(c.SharedRoot)
	if c.judge != nil {
		judge = *c.judge
	}
	choice, err := judge.Choose(ctx, c.Platform)
	if errors.Is(err, platform.ErrUnknown) {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err != nil {
		return nil, err
	}
	c.Platform = choice.Platform
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%w: locate own binary: %v", ErrNoSelfExe, err)
	}
	jobs := filepath.Join(c.StateRoot, "jobs")
	if err := os.MkdirAll(jobs, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", jobs, err)
	}
	dir := filepath.Join(jobs, c.ID)
	lock, err := newJobDir(jobs, c.ID)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{cfg: c, platform: choice, dir: dir, runsc: newRunsc(c, dir), record: monitor.NewRecord(), lock: lock}
	defer func() {
		if err != nil && os.Getenv("AIRLOCK_KEEP_FAILED") == "" {
			s.Destroy(context.Background())
		}
	}()
	// The workspace's volume is made while the bundle is: both are ready
	// before the gofer starts (and a failure of either is cleaned up by
	// Destroy, once both are done).
	volume := make(chan error, 1)
	go func() { volume <- s.boundWorkspace() }()
	err = s.prepare(exe)
	if err = errors.Join(<-volume, err); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.start(ctx, judge); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // cancelled while it started: destroyed again
	}
	if s.ctl, err = newController(s.runsc, s.cfg.ID); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStartFailure, err)
	}
	return s, nil
}

// boundWorkspace mounts the workspace's volume when the job has a
// workspace limit (package quota).
func (s *Sandbox) boundWorkspace() error {
	c := s.cfg
	if c.Limits.Workspace <= 0 {
		return nil
	}
	dir := volumeDir(c.StateRoot, c.ID)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("create the workspace volumes' directory: %w", err)
	}
	templates := filepath.Join(filepath.Dir(filepath.Dir(dir)), "volume-templates")
	v, err := quota.Mount(dir, templates, c.Workspace, quota.Limit{Bytes: c.Limits.Workspace, Keep: c.WorkspaceKeep})
	if err != nil {
		return fmt.Errorf("bound the workspace (sandbox.limits.workspace): %w", err)
	}
	s.volume = v
	return nil
}

// newJobDir makes the job directory jobs/id with its lock held, and
// returns the lock. The directory is made and locked in jobs.new/ and
// renamed into jobs/ whole: another airlock's Reap, which takes a job
// directory whose lock it can take for a leftover, never sees it before
// it is locked (it did, between the mkdir and the flock, and removed a
// job that had just begun; TestNewJobDirIsLockedWhenSeen).
func newJobDir(jobs, id string) (*os.File, error) {
	staging := jobs + ".new"
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory %s: %w", staging, err)
	}
	tmp, dir := filepath.Join(staging, id), filepath.Join(jobs, id)
	inUse := func(err error) error {
		return fmt.Errorf("create job directory %s (is job id %q already in use?): %w", dir, id, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, inUse(err)
	}
	lock, err := lockJobDir(tmp)
	if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) {
			// A file system without RENAME_NOREPLACE: a rename does not
			// replace a directory that holds anything (jobs' do).
			if _, err = os.Lstat(dir); err == nil {
				err = fs.ErrExist
			} else if errors.Is(err, fs.ErrNotExist) {
				err = os.Rename(tmp, dir)
			}
		}
		if err != nil {
			lock.Close()
			err = inUse(err)
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return lock, nil
}

// lockJobDir takes the job directory's lock. The kernel drops it when the
// process dies however it dies, which is how Reap tells live jobs from
// leftovers.
func lockJobDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create job lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock job directory %s: %w", dir, err)
	}
	return f, nil
}

// prepare writes the bundle, the pod init config and owner file and starts
// the monitoring receiver.
func (s *Sandbox) prepare(exe string) error {
	for _, d := range []string{"bundle", "runsc", "overlay", "rootfs"} {
		if err := os.Mkdir(filepath.Join(s.dir, d), 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	empty := filepath.Join(s.dir, "empty")
	if err := os.WriteFile(empty, nil, 0); err != nil {
		return fmt.Errorf("create mask file: %w", err)
	}
	masks, err := lookupMasks(rootSource(s.cfg), outsideWorkspace(s.cfg, allMasks(s.cfg)))
	if err != nil {
		return err
	}
	plan := rootPlan{
		Source: rootSource(s.cfg), Target: filepath.Join(s.dir, "rootfs"),
		Files: []string{initPath[1:]}, MaskDirs: masks.dirs, MaskFiles: masks.files, EmptyFile: empty,
	}
	reaper := ""
	if elf := reaperELF(); elf != nil && !s.cfg.helperInit {
		reaper = filepath.Join(s.dir, "reaper")
		if err := os.WriteFile(reaper, elf, 0o555); err != nil {
			return fmt.Errorf("write the init: %w", err)
		}
		plan.Files = append(plan.Files, reaperPath[1:])
	}
	shim := ""
	if elf := execShimELF(); elf != nil && !s.cfg.unrecorded {
		shim = filepath.Join(s.dir, "exec")
		if err := os.WriteFile(shim, elf, 0o555); err != nil {
			return fmt.Errorf("write the exec shim: %w", err)
		}
		s.shim = shim
		plan.Files = append(plan.Files, execShimPath[1:])
	}
	if err := plan.addMountPoints(append([]string{s.cfg.WorkspaceMount}, mountDestinations(s.cfg.Mounts)...)...); err != nil {
		return err
	}
	fileMounts, err := plan.addFiles(s.cfg.Files, s.dir)
	if err != nil {
		return err
	}
	cfg := s.cfg
	if cfg.Mounts, err = plan.pinMounts(cfg.Mounts, s.dir); err != nil {
		return err
	}
	spec, err := buildSpec(cfg, plan.Target, exe, reaper, shim, empty)
	if err != nil {
		return err
	}
	cgPath, cg, err := cgroup.ForJob(s.cfg.ID)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStartFailure, err)
	}
	spec.Linux.CgroupsPath, s.cg = cgPath, cg
	if cg.Enclosed() {
		// runsc would write the spec's limits into cgroups of its own;
		// here the enclosing cgroups bound the job (Sandbox.Enclosing).
		spec.Linux.Resources = nil
		// The pod's OOM killer takes the sandbox first, not airlock,
		// which then reports the limit (raising needs no privilege).
		oomFirst := 1000
		spec.Process.OOMScoreAdj = &oomFirst
		s.runsc = s.newRunsc()
	}
	spec.Mounts = append(spec.Mounts, fileMounts...)
	if err := writeBundle(s.dir, plan, spec); err != nil {
		return err
	}
	own := owner{ID: s.cfg.ID, PID: os.Getpid(), Created: time.Now().UTC(), Workspace: s.cfg.Workspace, UID: s.cfg.User.UID}
	if !s.cg.Enclosed() {
		own.Cgroups = s.cg.Dirs() // a reaper removes them; never the enclosing ones
	}
	if err := writeJSON(filepath.Join(s.dir, "owner.json"), own); err != nil {
		return err
	}
	sock := filepath.Join(s.dir, "monitor.sock")
	if s.recv, err = monitor.Listen(sock, s.record); err != nil {
		return err
	}
	// Refused writes are watched where the job has read-only paths of
	// its workspace (the trust paths): see monitor.PodInitConfig.
	return monitor.WritePodInitConfig(filepath.Join(s.dir, "pod-init.json"), sock, len(s.cfg.ReadOnlyPaths) > 0)
}

// start creates and starts the sandbox on the platform chosen. A sandbox
// that auto put on kvm and that does not boot is created again on
// systrap: KVM is an acceleration, and a job never fails for want of it.
// Both attempts are recorded, and the host's KVM verdict turns to
// unusable, so that later jobs go straight to systrap.
func (s *Sandbox) start(ctx context.Context, judge platform.Judge) error {
	err := s.startOnce()
	s.platform.Attempts = append(s.platform.Attempts, attemptOf(s.cfg.Platform, err))
	if err == nil || !s.platform.FallsBack() || ctx.Err() != nil {
		return err
	}
	why := s.platform.Attempts[0].Error
	if err := s.resetAfterFailedStart(); err != nil {
		return fmt.Errorf("%w: on kvm: %s; then, before trying systrap: %v", ErrStartFailure, why, err)
	}
	s.cfg.Platform = PlatformSystrap
	s.runsc = s.newRunsc()
	err = s.startOnce()
	s.platform.Attempts = append(s.platform.Attempts, attemptOf(PlatformSystrap, err))
	if err != nil {
		return err
	}
	// Only now is it KVM's fault: the same sandbox booted on systrap.
	judge.Failed(why)
	s.platform.Platform = PlatformSystrap
	s.platform.Reason = "the sandbox did not boot on kvm (" + why + "), so it was created again on systrap"
	return nil
}

// attemptOf records one start.
func attemptOf(platform string, err error) PlatformAttempt {
	a := PlatformAttempt{Platform: platform}
	if err != nil {
		a.Error = strings.TrimPrefix(err.Error(), ErrStartFailure.Error()+": ")
	}
	return a
}

// resetAfterFailedStart removes what a failed start left (runsc's state,
// processes, cgroups, the overlay's file store) and keeps the rest of the
// job directory (the bundle, the monitoring socket) for the next start.
func (s *Sandbox) resetAfterFailedStart() error {
	if err := destroyJob(s.runsc, s.cfg.ID, s.dir, s.cg); err != nil {
		return err
	}
	for _, d := range []string{"runsc", "overlay"} {
		p := filepath.Join(s.dir, d)
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove %s: %w", d, err)
		}
		if err := os.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

// startOnce creates and starts the sandbox (see create.go). The
// container's init is airlock's reaper (or this binary in helper mode);
// its output, which there should be none of, goes to a file: a pipe
// nobody reads could block it. A failure is said in one line; runsc's
// logs (a panic's goroutine dump among them) are kept in the state
// directory, never printed.
func (s *Sandbox) startOnce() error {
	errFile, err := os.Create(filepath.Join(s.dir, "create.err"))
	if err != nil {
		return fmt.Errorf("create log file: %w", err)
	}
	defer errFile.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devNull.Close()
	if s.children, err = createRoot(s.runsc, s.dir, s.cfg.ID, devNull, errFile, errFile); err != nil {
		why := bootFailure(err, s.dir)
		if kept := keepStartLog(s.cfg.SharedRoot, s.cfg.ID, s.cfg.Platform, s.dir); kept != "" {
			why += " (runsc's log: " + kept + ")"
		}
		return fmt.Errorf("%w: %s", ErrStartFailure, why)
	}
	return nil
}

// newRunsc is the runsc of the sandbox's config, and of its cgroups:
// where it runs in the enclosing ones, runsc makes none.
func (s *Sandbox) newRunsc() runsc {
	r := newRunsc(s.cfg, s.dir)
	if s.cg.Enclosed() {
		r.global = append(r.global, "--ignore-cgroups")
	}
	return r
}

// Enclosing says, for a sandbox that runs in the cgroups enclosing
// airlock (the cgroup file system is read-only here, as in a pod), what
// bounds it; ok is false where airlock made the sandbox's own cgroup and
// the configured limits hold.
func (s *Sandbox) Enclosing() (e cgroup.Enclosing, ok bool) {
	if !s.cg.Enclosed() {
		return cgroup.Enclosing{}, false
	}
	return s.cg.EnclosingLimits(), true
}

// ID is the job id.
func (s *Sandbox) ID() string { return s.cfg.ID }

// Dir is the job's private state directory on the host.
func (s *Sandbox) Dir() string { return s.dir }

// Config is the effective configuration (defaults filled in).
func (s *Sandbox) Config() Config { return s.cfg }

// Platform is the platform the sandbox runs on, why, and its starts.
func (s *Sandbox) Platform() PlatformChoice { return s.platform }

// Record returns the process record so far.
func (s *Sandbox) Record() monitor.Snapshot { return s.record.Snapshot() }

// ExecCount is how many execs the record holds so far (cheap, no copy).
func (s *Sandbox) ExecCount() int { return s.record.ExecCount() }

// ConnectCount is how many connect events the record holds so far, and
// ConnectsFrom the events after the first n of them (a step's, say).
func (s *Sandbox) ConnectCount() int                    { return s.record.ConnectCount() }
func (s *Sandbox) ConnectsFrom(n int) []monitor.Connect { return s.record.ConnectsFrom(n) }

// Dead returns why the sandbox stopped running, or "" while it runs.
func (s *Sandbox) Dead() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

func (s *Sandbox) markDead(why string) {
	s.mu.Lock()
	if s.dead == "" {
		s.dead = why
	}
	s.mu.Unlock()
}

// Kill sends SIGKILL to every process of the job's container: running
// steps and their background processes. The sandbox itself stays up for
// later steps, and so do its sub-containers (see Container.Kill).
func (s *Sandbox) Kill() error {
	if err := s.ctl.killAll(); err != nil {
		return fmt.Errorf("kill processes in sandbox %s: %w", s.cfg.ID, err)
	}
	return nil
}

// Destroy stops the sandbox and removes everything the job created on the
// host. It is idempotent; later calls return the first call's error.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.destroy.Do(func() {
		var errs []error
		for _, c := range s.takeContainers("destroyed") {
			errs = append(errs, c.Destroy())
		}
		s.destErr = errors.Join(append(errs, destroyJob(s.runsc, s.cfg.ID, s.dir, s.cg))...)
		if s.recv != nil {
			s.recv.Close()
		}
		// Every process of the job is gone: nothing writes the workspace
		// any more, so what the job wrote can be merged into it.
		if s.volume != nil {
			s.released.Limit, s.released.Medium = s.volume.Limit().Bytes, s.volume.Medium()
			s.released.Usage, _ = s.volume.Usage()
			var err error
			if s.released.Merged, err = s.volume.Release(); err != nil {
				s.destErr = errors.Join(s.destErr, err)
			}
		}
		if err := os.RemoveAll(s.dir); err != nil && s.destErr == nil {
			s.destErr = fmt.Errorf("remove job directory: %w", err)
		}
		if s.lock != nil {
			s.lock.Close()
		}
	})
	return s.destErr
}

// volumeDir is where the job's workspace volume lives: outside its job
// directory, whose mounts a failed start's reset and destroyJob unmount,
// and on a disk: a state directory in memory (the default, /run/airlock)
// would hold the job's files in the host's memory, so its volumes go to
// DefaultVolumeRoot (hidden from every job, as DefaultMasks says).
func volumeDir(stateRoot, id string) string {
	return filepath.Join(DiskDir(stateRoot, "volumes"), id)
}

// DiskDir is the directory name below the state root on a disk: the
// state root's own where it is on one, else below diskRoot (hidden from
// every job, as DefaultMasks says). For what a job may make large:
// workspace volumes, the artifact blocks the gateway spools.
func DiskDir(stateRoot, name string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(stateRoot, &st); err == nil && (st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC) {
		return filepath.Join(diskRoot, name)
	}
	return filepath.Join(stateRoot, name)
}

// diskRoot holds what a state directory in memory must not.
const diskRoot = "/var/lib/airlock"

// DefaultVolumeRoot holds the workspace volumes of jobs whose state
// directory is in memory.
const DefaultVolumeRoot = diskRoot + "/volumes"

// Workspace is what a bounded workspace held at the end of the job.
type Workspace struct {
	// Limit is the job's limit in bytes (0: none).
	Limit int64 `json:"limit"`
	// Medium is where what the job wrote was kept until the merge:
	// quota.MediumExt4 (on the disk) or quota.MediumTmpfs (in memory, where
	// there are no loop devices, as in a pod: the pod's memory counts it).
	Medium string `json:"medium,omitempty"`
	// Usage is the volume's use when the job ended.
	Usage quota.Usage `json:"usage"`
	// Merged is what the job wrote, as merged into the workspace.
	Merged quota.Merged `json:"merged"`
}

// Released says what the workspace's volume held and what was merged
// into the workspace; after Destroy.
func (s *Sandbox) Released() Workspace { return s.released }

// destroyJob kills the sandbox and its sub-containers, deletes their runsc
// state, kills any process still naming the job directory and removes its
// cgroups. Shared by Destroy and Reap, so a crashed airlock's leftovers
// get exactly the same cleanup.
func destroyJob(r runsc, id, dir string, cg cgroup.Set) error {
	var errs []error
	// runsc's own destroy, in-process, when its state is there: it kills
	// the containers' processes and gofers, the sandbox, and removes their
	// cgroup and state files. Sub-containers first: each has a gofer that
	// only its own destroy stops for sure. (Destroy has removed those it
	// knew; Reap finds them in the state.)
	for _, cid := range subContainerIDs(r, id) {
		if ctl, err := loadController(r, id, cid); err == nil {
			if err := ctl.destroy(); err != nil {
				errs = append(errs, fmt.Errorf("destroy container %s of sandbox %s: %w", cid, id, err))
			}
		}
	}
	if ctl, err := newController(r, id); err == nil {
		if err := ctl.destroy(); err != nil {
			errs = append(errs, fmt.Errorf("destroy sandbox %s: %w", id, err))
		}
	}
	// No runsc state (airlock died while a container was being created) or
	// a failed destroy: find the processes by their command line, which
	// names the job directory.
	killProcessesUsing(dir)
	if err := cg.Remove(); err != nil {
		errs = append(errs, err)
	}
	unmountUnder(dir)
	return errors.Join(errs...)
}

// subContainerIDs lists the sub-containers in the runsc state of sandbox id.
func subContainerIDs(r runsc, id string) []string {
	conf, err := r.config()
	if err != nil {
		return nil
	}
	all, err := container.List(conf.RootDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range all {
		if f.SandboxID == id && f.ContainerID != id {
			out = append(out, f.ContainerID)
		}
	}
	return out
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
