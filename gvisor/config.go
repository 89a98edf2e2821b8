package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-ci/airlock/gvisor/platform"
	"github.com/airlock-ci/airlock/gvisor/quota"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/paths"
)

// DefaultStateRoot is where job directories live unless the caller says
// otherwise. It is under /run so a reboot clears it and so that the
// sandbox's own /run (a fresh tmpfs) hides it.
const DefaultStateRoot = "/run/airlock"

// Hostname is the sandbox's host name (the job's /etc/hosts names it, as
// Docker's does a container's).
const Hostname = "airlock"

// DefaultWorkspaceMount is where the workspace appears inside the sandbox.
const DefaultWorkspaceMount = "/workspace"

// DefaultMasks are host paths that hold secrets. Inside the sandbox each is
// replaced by an empty, unreadable directory or file.
var DefaultMasks = []string{
	"/root", "/home",
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d",
	"/etc/ssh", "/etc/airlock",
	"/var/run/docker.sock", "/run/docker.sock", "/var/lib/docker",
	"/run/secrets", "/var/run/secrets",
	"/var/lib/airlock",
}

// Limits bound what a job may use. Zero means "no limit" for that item.
type Limits struct {
	// JobTimeout and StepTimeout are wall-clock limits.
	JobTimeout  time.Duration `json:"jobTimeoutNs"`
	StepTimeout time.Duration `json:"stepTimeoutNs"`
	// Memory is the sandbox's memory limit in bytes (host cgroup).
	Memory int64 `json:"memory"`
	// Pids is the most processes and threads the workload may have.
	Pids int `json:"pids"`
	// CPUs is the CPU quota in cores (1.5 = one and a half cores).
	CPUs float64 `json:"cpus"`
	// Overlay is the size limit of the writable layer over the rootfs.
	Overlay int64 `json:"overlay"`
	// Tmp is the size limit of the scratch /tmp.
	Tmp int64 `json:"tmp"`
	// Output caps the bytes of stdout plus stderr captured per step.
	Output int64 `json:"output"`
	// Workspace is the most the job may write into its workspace (the
	// workspace gets one file per quota.BytesPerInode of it): see
	// package quota.
	Workspace int64 `json:"workspace"`
}

// DefaultLimits are modest limits that suit a typical CI job on a shared
// runner and keep a hostile one from hurting the host.
func DefaultLimits() Limits {
	return Limits{
		JobTimeout:  60 * time.Minute,
		StepTimeout: 30 * time.Minute,
		Memory:      4 << 30,
		Pids:        1024,
		CPUs:        0,
		Overlay:     2 << 30,
		Tmp:         2 << 30,
		Output:      64 << 20,
		Workspace:   16 << 30,
	}
}

// Mount is an extra host directory in the sandbox.
type Mount struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	ReadOnly    bool   `json:"readOnly"`
	// Beneath, when set, is a host directory that Source lies below and
	// that the job can write into: Source is then resolved from it without
	// following any symlink (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
	// right before the sandbox binds it, so that a directory the job
	// replaced with a symlink to the host's root is refused, not mounted.
	Beneath string `json:"beneath,omitempty"`
}

// File is a read-only file the sandbox sees at Path instead of the
// root's own.
type File struct {
	Path string
	Data []byte
}

// View is a host file the sandbox sees in place of a workspace file.
type View struct {
	// Path is the workspace file, relative to the workspace.
	Path string
	// Source is the host file shown there.
	Source string
}

// User is the identity the workload runs as inside the sandbox.
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ParseUser reads a numeric "UID" or "UID:GID" (the GID is the UID's when
// not given): the one parser of the identities a job may ask for.
func ParseUser(s string) (User, error) {
	us, gs, hasGID := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(us, 10, 32)
	gid := uid
	if err == nil && hasGID {
		gid, err = strconv.ParseUint(gs, 10, 32)
	}
	if err != nil {
		return User{}, fmt.Errorf("%q: want a numeric UID or UID:GID", s)
	}
	return User{UID: uint32(uid), GID: uint32(gid)}, nil
}

// Config describes a job sandbox.
type Config struct {
	// ID names the job. Empty: a random one is chosen. Letters, digits,
	// '-', '_' and '.', at most 64.
	ID string
	// StateRoot holds the job directory. Empty: DefaultStateRoot.
	StateRoot string
	// RootFS is a directory to use as the root filesystem (an unpacked
	// image). Empty: the host's root, read-only.
	RootFS string
	// Workspace is the host directory mounted read-write in the sandbox.
	Workspace string
	// WorkspaceMount is where it appears. Empty: DefaultWorkspaceMount.
	WorkspaceMount string
	// ExtraMasks are masked in addition to DefaultMasks.
	ExtraMasks []string
	// Mounts are extra host directories in the sandbox.
	Mounts []Mount
	// User runs the workload. Nil: the workspace owner, see DefaultUser.
	User *User
	// Capabilities the workload keeps (e.g. "CAP_NET_BIND_SERVICE").
	// Empty: none.
	Capabilities []string
	// Limits bound the job.
	Limits Limits
	// WorkspaceKeep are workspace-relative directories that stay on the
	// host's disk when the workspace is bounded (quota.Limit.Keep): the
	// runner's own, which the job does not see.
	WorkspaceKeep []string
	// ReadOnlyPaths are workspace-relative paths (existing directories or
	// files, not symlinks) mounted read-only over themselves: writes to
	// them fail inside the sandbox with EROFS.
	ReadOnlyPaths []string
	// Files are small read-only files placed over paths of the root
	// (such as /etc/resolv.conf), without touching the host's copy.
	Files []File
	// Views are host files (the caller's, outside the workspace) bound
	// read-only over regular files of the workspace: the sandbox sees the
	// view, the host file is left as it is.
	Views []View
	// NetNS is the path of a network namespace to hand to the sandbox
	// (its interfaces are taken over by gVisor's netstack). Empty: the
	// sandbox has loopback only.
	NetNS string
	// Platform is the gVisor platform asked for: auto (empty), systrap or
	// kvm (platform.go); Config() tells the one used, Sandbox.Platform why.
	Platform string
	// ExclusiveMounts says that nothing but the job itself changes what
	// its mounts show while it runs: no host process writes them between
	// its steps (the runner hook's runner does), and no second container
	// of the job mounts them (StartContainer refuses on such a sandbox).
	// The sentry then keeps their files' dentries and attributes as it
	// keeps its root's (runsc --file-access-mounts=exclusive) instead of
	// asking the host again at each lookup; what the job writes still
	// reaches the host as it writes it (gVisor writes through the host
	// file's descriptor; TestExclusiveMountsKeepEveryWrite).
	ExclusiveMounts bool
	// RunscFlags are extra global runsc flags (benchmarks and experiments).
	RunscFlags []string
	// RunscExe is the binary that the job's gofer and sandbox (and the
	// runsc processes of its service containers) run from: the runsc
	// sidecar (FindRunsc), whose processes start sooner. Empty: the
	// airlock binary itself.
	RunscExe string

	// SharedRoot keeps what outlives one job: the logs of failed starts
	// (logs/), and the host's KVM verdict (platform/) where
	// platform.HostDir cannot be had. Empty: StateRoot.
	SharedRoot string

	// judge decides about KVM; nil: this host's (hostJudge). Tests set it.
	judge *platform.Judge
	// helperInit makes the airlock binary the container's init, as on
	// architectures without the small reaper (reaper.go). Tests set it.
	helperInit bool
	// unrecorded starts the init and the steps as the control API makes
	// them, without the exec shim, so that no trace point sees them: as
	// before every process was on the record. Only BenchmarkExecShim
	// sets it, to measure what the record costs.
	unrecorded bool
}

// Errors that callers map to distinct exit codes and messages.
var (
	ErrNotRoot      = errors.New("airlock must run as root: gVisor's runsc needs root to create sandboxes (try sudo)")
	ErrNoSelfExe    = errors.New("/proc/self/exe is not available: mount /proc (airlock re-executes itself to run gVisor)")
	ErrNoWorkspace  = errors.New("workspace not found")
	ErrStartFailure = errors.New("sandbox failed to start")
	// ErrNoExecutable is a step whose command is not in the sandbox.
	ErrNoExecutable = errors.New("command not found in the sandbox")
	// ErrHostUnsupported: the kernel lacks what gVisor needs.
	ErrHostUnsupported = errors.New("this kernel cannot run gVisor sandboxes")
	// ErrInvalidConfig wraps every error about the caller's configuration.
	ErrInvalidConfig = errors.New("invalid sandbox configuration")
)

// maxSocketPath is the longest path a Unix socket binds at (sun_path:
// 108 bytes with its NUL).
const maxSocketPath = 107

// checkSocketRoom says whether a job's monitoring socket, the longest
// path in its directory that must bind, fits under stateRoot.
func checkSocketRoom(stateRoot, id string) error {
	abs, err := filepath.Abs(stateRoot)
	if err != nil {
		return fmt.Errorf("state root %s: %w", stateRoot, err)
	}
	if sock := filepath.Join(abs, "jobs", id, "monitor.sock"); len(sock) > maxSocketPath {
		return fmt.Errorf("%w: the state directory %s is too long: a job's runtime-monitoring socket there (%s) would take %d bytes, and a Unix socket's path has at most %d; give a state directory of at most %d bytes", ErrInvalidConfig, stateRoot, sock, len(sock), maxSocketPath, maxSocketPath-len(sock)+len(abs))
	}
	return nil
}

// CheckStateRoot says why jobs cannot keep their state under root, or
// nil: its path leaves no room for a job's socket, or it lies inside one
// of workspaces, where a job could change it. For airlock doctor.
func CheckStateRoot(root string, workspaces ...string) error {
	if err := checkSocketRoom(root, newID()); err != nil {
		return err
	}
	state, err := resolvedPath(root)
	if err != nil {
		return fmt.Errorf("state root: %w", err)
	}
	for _, ws := range workspaces {
		if w, err := resolvedPath(ws); err == nil && paths.Within(state, w) {
			return fmt.Errorf("%w: the state directory %s is inside the workspace %s: a job could change its own state", ErrInvalidConfig, root, ws)
		}
	}
	return nil
}

// validID reports whether id is safe as a path element and runsc container id.
func validID(id string) bool {
	if id == "" || len(id) > 64 || id == "." || id == ".." {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// withDefaults fills empty fields and checks the config. It returns a copy.
func (c Config) withDefaults() (Config, error) {
	if c.ID == "" {
		c.ID = newID()
	}
	if !validID(c.ID) {
		return c, fmt.Errorf("%w: job id %q: use 1-64 letters, digits, '-', '_' or '.'", ErrInvalidConfig, c.ID)
	}
	if c.StateRoot == "" {
		c.StateRoot = DefaultStateRoot
	}
	if err := checkSocketRoom(c.StateRoot, c.ID); err != nil {
		return c, err
	}
	if c.SharedRoot == "" {
		c.SharedRoot = c.StateRoot
	}
	if c.WorkspaceMount == "" {
		c.WorkspaceMount = DefaultWorkspaceMount
	}
	if !filepath.IsAbs(c.WorkspaceMount) || filepath.Clean(c.WorkspaceMount) == "/" {
		return c, fmt.Errorf("%w: workspace mount point %q: must be an absolute path other than /", ErrInvalidConfig, c.WorkspaceMount)
	}
	c.WorkspaceMount = filepath.Clean(c.WorkspaceMount)
	if c.RunscExe != "" && !filepath.IsAbs(c.RunscExe) {
		return c, fmt.Errorf("%w: runsc binary %q: must be an absolute path (gvisor.FindRunsc gives one)", ErrInvalidConfig, c.RunscExe)
	}
	if c.Workspace == "" {
		return c, fmt.Errorf("%w: no workspace directory given", ErrNoWorkspace)
	}
	ws, err := filepath.Abs(c.Workspace)
	if err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrNoWorkspace, c.Workspace, err)
	}
	// Resolve symlinks once, here, so the mount source is a real directory
	// and a later swap of the link cannot redirect the mount.
	if ws, err = filepath.EvalSymlinks(ws); err != nil {
		return c, fmt.Errorf("%w: %s does not exist; create it or give another workspace", ErrNoWorkspace, c.Workspace)
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return c, fmt.Errorf("%w: %s is not a directory", ErrNoWorkspace, c.Workspace)
	}
	c.Workspace = ws
	if c.RootFS != "" {
		fi, err := os.Stat(c.RootFS)
		if err != nil || !fi.IsDir() {
			return c, fmt.Errorf("%w: rootfs %s: not a directory (give an unpacked image directory, or leave empty for the host root)", ErrInvalidConfig, c.RootFS)
		}
		if c.RootFS, err = filepath.Abs(c.RootFS); err != nil {
			return c, fmt.Errorf("rootfs %s: %w", c.RootFS, err)
		}
	}
	if c.User == nil {
		u, err := DefaultUser(c.Workspace)
		if err != nil {
			return c, err
		}
		c.User = &u
	}
	if w := c.Limits.Workspace; w > 0 && w < quota.MinBytes {
		return c, fmt.Errorf("%w: workspace limit %s: at least %s", ErrInvalidConfig, humanBytes(w), humanBytes(quota.MinBytes))
	}
	if c.Mounts, err = checkMounts(c.Mounts); err != nil {
		return c, err
	}
	// The job would see (and could change) its own state: runsc's files,
	// the bundles, the overlay, the attestations. (The mount fails too.)
	state, err := resolvedPath(c.StateRoot)
	if err != nil {
		return c, fmt.Errorf("state root: %w", err)
	}
	if paths.Within(state, ws) {
		return c, fmt.Errorf("%w: the state directory %s is inside the workspace %s: give a state directory outside it", ErrInvalidConfig, c.StateRoot, ws)
	}
	if shared, err := resolvedPath(c.SharedRoot); err != nil || paths.Within(shared, ws) {
		return c, fmt.Errorf("%w: the shared state directory %s is inside the workspace %s (or cannot be resolved): keep it outside", ErrInvalidConfig, c.SharedRoot, ws)
	}
	for _, m := range c.Mounts {
		if m.ReadOnly {
			continue
		}
		if src, err := resolvedPath(m.Source); err == nil && paths.Within(state, src) {
			return c, fmt.Errorf("%w: the state directory %s is inside %s, which the job can write (mounted at %s): give a state directory outside it", ErrInvalidConfig, c.StateRoot, m.Source, m.Destination)
		}
	}
	for _, m := range c.ExtraMasks {
		if !filepath.IsAbs(m) {
			return c, fmt.Errorf("%w: mask %q: must be an absolute path", ErrInvalidConfig, m)
		}
	}
	if err := checkCapabilities(c.Capabilities); err != nil {
		return c, err
	}
	return c, nil
}

// resolvedPath is path made absolute with the symlinks of its longest
// existing prefix resolved (the rest may not exist yet): where a state
// root is, for the checks that it lies outside what a job reaches.
func resolvedPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest), nil
		}
		if dir == "/" {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// checkMounts checks that every source is a host directory and every
// destination an absolute path other than "/". It returns the mounts with
// both paths cleaned, in a new slice.
func checkMounts(mounts []Mount) ([]Mount, error) {
	var out []Mount
	for _, m := range mounts {
		if m.Beneath != "" {
			f, err := files.OpenDirBeneath(m.Beneath, m.Source)
			if err != nil {
				return nil, fmt.Errorf("%w: mount source: %v", ErrInvalidConfig, err)
			}
			f.Close()
		} else if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("%w: mount source %s: not a directory on the host", ErrInvalidConfig, m.Source)
		}
		if !filepath.IsAbs(m.Destination) || filepath.Clean(m.Destination) == "/" {
			return nil, fmt.Errorf("%w: mount destination %q: must be an absolute path other than /", ErrInvalidConfig, m.Destination)
		}
		out = append(out, Mount{Source: filepath.Clean(m.Source), Destination: filepath.Clean(m.Destination), ReadOnly: m.ReadOnly, Beneath: m.Beneath})
	}
	return out, nil
}

// mountDestinations lists where the mounts appear.
func mountDestinations(mounts []Mount) []string {
	var out []string
	for _, m := range mounts {
		out = append(out, m.Destination)
	}
	return out
}

func checkCapabilities(caps []string) error {
	for _, cp := range caps {
		if !strings.HasPrefix(cp, "CAP_") {
			return fmt.Errorf("%w: capability %q: use the CAP_ form, e.g. CAP_NET_BIND_SERVICE", ErrInvalidConfig, cp)
		}
	}
	return nil
}

// NonRootFallback is the identity used when the workspace is owned by root:
// the conventional first non-system user.
var nonRootFallback = User{UID: 1000, GID: 1000}

// DefaultUser is the workspace owner, so that what the job writes belongs to
// the same user on the host. A root-owned workspace would make the job
// root: use uid/gid 1000 instead; such a workspace must then be writable by
// that user (the caller may chown it, or pass an explicit user).
func DefaultUser(workspace string) (User, error) {
	fi, err := os.Stat(workspace)
	if err != nil {
		return User{}, fmt.Errorf("%w: %v", ErrNoWorkspace, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nonRootFallback, nil
	}
	return User{UID: st.Uid, GID: st.Gid}, nil
}
