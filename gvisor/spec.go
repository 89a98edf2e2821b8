package gvisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/runsc/specutils"

	"github.com/airlock-ci/airlock/internal/paths"
)

// initPath is where the airlock binary is mounted inside the sandbox to
// serve as the container's init (see Dispatch).
const initPath = "/.airlock/init"

// DefaultPath is PATH inside the sandbox when the caller does not set one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// writableOpts are the options of every writable mount: no set-id
// execution and no device nodes, whatever the workload writes there.
var writableOpts = []string{"nosuid", "nodev"}

// rootSource is the directory the sandbox's root shows: the image
// directory, or the host's root.
func rootSource(c Config) string {
	if c.RootFS != "" {
		return c.RootFS
	}
	return "/"
}

// buildSpec returns the OCI spec of the job's sandbox. skeleton is the
// root directory runsc gets (see buildRootSkeleton); exe is the host path
// of the airlock binary (the sandbox's tools, and its init where reaper,
// the host path of the small init of reaper.go, is empty); emptyFile is
// an empty, mode-0 host file used to mask files.
func buildSpec(c Config, skeleton, exe, reaper, shim, emptyFile string) (*specs.Spec, error) {
	rl := rlimits(c.Limits)
	spec := &specs.Spec{
		Version: specs.Version,
		// Not Readonly: that would make runsc skip the overlay. The host
		// side is read-only anyway (the skeleton's binds, and the gofer
		// remounts an overlaid root read-only); writes land in the overlay.
		Root:     &specs.Root{Path: skeleton},
		Hostname: Hostname,
		Process: &specs.Process{
			Args:            []string{initPath},
			Env:             []string{"PATH=" + DefaultPath},
			Cwd:             "/",
			User:            specs.User{UID: c.User.UID, GID: c.User.GID},
			Capabilities:    capabilities(c.Capabilities),
			NoNewPrivileges: true,
			Rlimits:         rl,
		},
		Mounts: baseMounts(c),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: c.NetNS},
			},
			// CgroupsPath is set by the caller (cgroup.ForJob): below
			// airlock's own cgroup, so that a runner host's limits on
			// airlock also bound its sandboxes.
			Resources: resources(c.Limits),
		},
	}
	spec.Mounts = append(spec.Mounts, bindMounts(c.Mounts, c)...)
	spec.Mounts = append(spec.Mounts, specs.Mount{
		Destination: initPath, Type: "bind", Source: exe,
		Options: []string{"bind", "ro", "nosuid", "nodev"},
	})
	if reaper != "" {
		spec.Process.Args = []string{reaperPath}
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: reaperPath, Type: "bind", Source: reaper,
			Options: []string{"bind", "ro", "nosuid", "nodev"},
		})
	}
	if shim != "" {
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: execShimPath, Type: "bind", Source: shim,
			Options: []string{"bind", "ro", "nosuid", "nodev"},
		})
		// The init too starts through the shim: it is on record with
		// its digest like every other process, and the sentry's first
		// execve (its first digest, its first buffers) is paid while
		// the sandbox starts, not by the job's first step.
		spec.Process.Args = viaShim(spec.Process.Args)
	}
	// Masks inside the workspace must be sandbox mounts on top of the
	// workspace mount; masks in the root are done in the skeleton.
	wsMasks, err := lookupMasks(c.Workspace, inWorkspace(c, allMasks(c)))
	if err != nil {
		return nil, err
	}
	for _, d := range wsMasks.dirs {
		spec.Mounts = append(spec.Mounts, maskDir(path.Join(c.WorkspaceMount, d)))
	}
	for _, f := range wsMasks.files {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: path.Join(c.WorkspaceMount, f), Type: "bind", Source: emptyFile, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	for _, p := range c.ReadOnlyPaths {
		rel := path.Clean(p)
		if slices.ContainsFunc(c.Views, func(v View) bool { return path.Clean(v.Path) == rel }) {
			continue // the view is read-only too, and shown there instead
		}
		if path.IsAbs(rel) || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, fmt.Errorf("%w: read-only path %q must be inside the workspace", ErrInvalidConfig, p)
		}
		fi, err := os.Lstat(filepath.Join(c.Workspace, rel))
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 || !(fi.IsDir() || fi.Mode().IsRegular()) {
			return nil, fmt.Errorf("%w: read-only path %q is not a directory or regular file of the workspace", ErrInvalidConfig, p)
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: path.Join(c.WorkspaceMount, rel), Type: "bind", Source: filepath.Join(c.Workspace, rel), Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	for _, v := range c.Views {
		rel := path.Clean(v.Path)
		if !filepath.IsLocal(rel) {
			return nil, fmt.Errorf("%w: view %q must be inside the workspace", ErrInvalidConfig, v.Path)
		}
		if fi, err := os.Lstat(filepath.Join(c.Workspace, rel)); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: view %q is not a regular file of the workspace", ErrInvalidConfig, v.Path)
		}
		if fi, err := os.Stat(v.Source); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: view source %s is not a regular file", ErrInvalidConfig, v.Source)
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: path.Join(c.WorkspaceMount, rel), Type: "bind", Source: v.Source, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	return spec, nil
}

// containerSpec returns the OCI spec of a sub-container of the job's
// sandbox; skeleton is its root directory (see buildRootSkeleton).
func containerSpec(job Config, c ContainerConfig, skeleton string) *specs.Spec {
	return &specs.Spec{
		Version: specs.Version,
		// Not Readonly, as for the job's root: writes land in the
		// sandbox's overlay (--overlay2 applies to every container).
		Root: &specs.Root{Path: skeleton},
		// These make runsc create the container in the running sandbox
		// named job.ID instead of a new sandbox, as containerd's CRI
		// plugin does for the containers of a Kubernetes pod.
		Annotations: map[string]string{
			specutils.ContainerdContainerTypeAnnotation: specutils.ContainerdContainerTypeContainer,
			specutils.ContainerdSandboxIDAnnotation:     job.ID,
		},
		Process: &specs.Process{
			Args:            c.Args,
			Env:             mergeEnv(baseEnv(DefaultPath), c.Env),
			Cwd:             c.Dir,
			User:            specs.User{UID: c.User.UID, GID: c.User.GID},
			Capabilities:    capabilities(c.Capabilities),
			NoNewPrivileges: true,
			Rlimits:         rlimits(job.Limits),
		},
		Mounts: append(freshMounts(job.Limits), bindMounts(c.Mounts, job)...),
		Linux: &specs.Linux{
			// A PID namespace of its own: the container and the job's
			// steps cannot see or signal each other's processes. The
			// network stack is the sandbox's (gVisor has one per
			// sandbox), and so are the cgroups: no CgroupsPath, no
			// Resources.
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}},
		},
	}
}

// allMasks is every path to hide: the defaults, airlock's own state root
// (wherever the caller put it), and the caller's.
func allMasks(c Config) []string {
	return outermost(append(append(append([]string{}, DefaultMasks...), c.StateRoot), c.ExtraMasks...))
}

// outermost drops the paths that another one holds (or repeats): a mask
// inside a masked directory has nothing to cover, and no mount point
// inside the empty directory that hides it.
func outermost(masks []string) []string {
	var out []string
	for i, p := range masks {
		p = path.Clean(p)
		covered := false
		for j, q := range masks {
			q = path.Clean(q)
			if j != i && (paths.Below(p, q) || (p == q && j < i)) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// inWorkspace returns the masks below the workspace mount point, relative
// to it.
func inWorkspace(c Config, paths []string) []string {
	var out []string
	for _, p := range paths {
		if rel, ok := strings.CutPrefix(path.Clean(p), c.WorkspaceMount+"/"); ok {
			out = append(out, rel)
		}
	}
	return out
}

// outsideWorkspace returns the masks that are in the root: not below the
// workspace mount point, nor below a directory the sandbox gets fresh
// (/tmp, /run, ...), where nothing of the host shows anyway.
func outsideWorkspace(c Config, dirs []string) []string {
	var out []string
	for _, p := range dirs {
		p = path.Clean(p)
		top, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
		if !paths.Within(p, c.WorkspaceMount) && !freshTopDirs[top] {
			out = append(out, p)
		}
	}
	return out
}

func baseMounts(c Config) []specs.Mount {
	return append(freshMounts(c.Limits), specs.Mount{
		Destination: c.WorkspaceMount, Type: "bind", Source: c.Workspace, Options: append([]string{bindOf(c), "rw"}, writableOpts...),
	})
}

// bindOf is how the gofer binds the job's host directories: recursively
// when a bounded workspace has kept directories (quota.Limit.Keep), which
// are mounts below the workspace and below the runner's directories in
// it, and which the kernel locks in the gofer's namespace (a bind
// without them is refused, EINVAL). The sandbox masks or replaces each
// of them (runner/hook's jobMasks and jobMounts).
func bindOf(c Config) string {
	if len(c.WorkspaceKeep) > 0 && c.Limits.Workspace > 0 {
		return "rbind"
	}
	return "bind"
}

// freshMounts are the filesystems every container of the sandbox gets new
// (see freshTopDirs).
func freshMounts(l Limits) []specs.Mount {
	tmpOpts := append([]string{"mode=1777"}, writableOpts...)
	if l.Tmp > 0 {
		tmpOpts = append(tmpOpts, "size="+strconv.FormatInt(l.Tmp, 10))
	}
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: tmpOpts},
		// A fresh /run hides the host's sockets, secrets and airlock's
		// own state directory in one go.
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: append([]string{"mode=755", "size=16777216"}, writableOpts...)},
	}
}

// bindMounts are the spec mounts of extra host directories.
func bindMounts(mounts []Mount, c Config) []specs.Mount {
	var out []specs.Mount
	for _, m := range mounts {
		opts := []string{bindOf(c), "rw", "nosuid", "nodev"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		out = append(out, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	return out
}

// maskSet is what exists of a list of paths to mask, split by kind,
// relative to the directory they were looked up in.
type maskSet struct {
	dirs, files []string
}

// lookupMasks finds which paths exist under root. They are looked up
// inside root without following symlinks out of it; a path that is itself
// a symlink is skipped (its target, if secret, is in the list itself or
// lies under the fresh /run), and so is one whose parents leave the root.
// A path that exists but cannot be examined is masked as a directory
// rather than risk exposing it.
func lookupMasks(root string, paths []string) (maskSet, error) {
	var m maskSet
	if len(paths) == 0 {
		return m, nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return m, fmt.Errorf("open %s: %w", root, err)
	}
	defer r.Close()
	seen := map[string]bool{}
	for _, p := range paths {
		// Symlinks along the path are followed inside the root (a host
		// whose /home is a symlink to var/home still has the secret at
		// the target): what is masked is where the path leads.
		rel, err := resolveInRoot(r, strings.TrimPrefix(path.Clean("/"+p), "/"))
		if err != nil || seen[rel] || rel == "" {
			continue
		}
		seen[rel] = true
		fi, err := r.Lstat(rel)
		switch {
		case errors.Is(err, fs.ErrNotExist), err != nil && strings.Contains(err.Error(), "path escapes"):
		case err != nil:
			m.dirs = append(m.dirs, rel)
		case fi.Mode()&fs.ModeSymlink != 0:
		case fi.IsDir():
			m.dirs = append(m.dirs, rel)
		default:
			m.files = append(m.files, rel)
		}
	}
	return m, nil
}

// maxLinkHops bounds the symlinks followed resolving one path.
const maxLinkHops = 40

// resolveInRoot follows the symlinks of rel inside r as the sandbox
// would (an absolute target starts again at r's top, ".." stops there)
// and returns the path it leads to; the part that does not exist is kept
// as written.
func resolveInRoot(r *os.Root, rel string) (string, error) {
	hops := 0
	var walk func(done string, rest []string) (string, error)
	walk = func(done string, rest []string) (string, error) {
		for i, c := range rest {
			next := path.Join(done, c)
			fi, err := r.Lstat(next)
			if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				if err != nil {
					return path.Join(append([]string{next}, rest[i+1:]...)...), nil
				}
				done = next
				continue
			}
			if hops++; hops > maxLinkHops {
				return "", fmt.Errorf("%s: too many symlinks", rel)
			}
			target, err := r.Readlink(next)
			if err != nil {
				return "", err
			}
			if !path.IsAbs(target) {
				target = path.Join("/", done, target)
			}
			resolved, err := walk("", strings.Split(strings.TrimPrefix(path.Clean(target), "/"), "/"))
			if err != nil {
				return "", err
			}
			done = resolved
		}
		return done, nil
	}
	if rel == "" {
		return "", nil
	}
	return walk("", strings.Split(rel, "/"))
}

func maskDir(p string) specs.Mount {
	return specs.Mount{Destination: p, Type: "tmpfs", Source: "tmpfs", Options: []string{"mode=000", "size=4096", "ro", "nosuid", "nodev", "noexec"}}
}

func capabilities(caps []string) *specs.LinuxCapabilities {
	c := append([]string{}, caps...)
	return &specs.LinuxCapabilities{Bounding: c, Effective: c, Permitted: c, Inheritable: []string{}, Ambient: c}
}

// rlimits puts the process limit inside the sandbox: gVisor enforces
// RLIMIT_NPROC per uid for tasks without CAP_SYS_ADMIN/CAP_SYS_RESOURCE.
func rlimits(l Limits) []specs.POSIXRlimit {
	rl := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: 65536, Soft: 65536},
		{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
	}
	if l.Pids > 0 {
		rl = append(rl, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Hard: uint64(l.Pids), Soft: uint64(l.Pids)})
	}
	return rl
}

// resources are the host cgroup limits of the whole sandbox.
func resources(l Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if l.Memory > 0 {
		m := l.Memory
		r.Memory = &specs.LinuxMemory{Limit: &m, Swap: &m}
	}
	if l.CPUs > 0 {
		period := uint64(100000)
		quota := int64(l.CPUs * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if l.Pids > 0 {
		// A host-side backstop only: the sentry, gofer and the systrap stub
		// processes (about one per guest process) live in this cgroup. The
		// guest limit is RLIMIT_NPROC, which fails fork with EAGAIN cleanly.
		// Generous: under a fork bomb the sentry's Go runtime needs host
		// threads too (its trace sinks block in writes), and a sentry that
		// cannot make one dies ("newosproc") instead of refusing forks.
		r.Pids = &specs.LinuxPids{Limit: int64(l.Pids)*4 + 2048}
	}
	return r
}
