// Package cgroup finds and reads the host cgroups a job's sandbox runs
// in: airlock's own cgroup in each hierarchy (Own, from mountinfo and
// /proc/self/cgroup), the job's cgroup below it that runsc makes (ForJob:
// a relative path on v1, a prepared absolute one on pure v2), what its
// controllers report after a step (OOM kills, pids refusals), and its
// removal. Where the cgroup file system is read-only (a container that
// is not privileged, such as a Kubernetes pod's) it makes nothing: the
// job runs in the cgroups enclosing airlock, whose limits it reads
// (EnclosingLimits). Host describes the layout for airlock doctor.
//
// Layer 1: primitives; imports nothing of airlock's.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the host mounts its cgroup hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// Set is the host cgroup directories runsc creates for one sandbox:
// the job's relative cgroupsPath joined to airlock's own cgroup in every
// hierarchy (v1 controllers, and the v2 unified one). Where the cgroup
// file system is read-only (a container that is not privileged, such as
// a Kubernetes pod's), airlock makes none: the directories are then the
// cgroups that enclose airlock (the pod's), read for their limits and
// events, never written or removed, and Enclosed is true.
type Set struct {
	dirs     []string
	enclosed bool
}

// Recorded is the set of a job's cgroup directories as its sandbox's
// record kept them, for a reaper to remove.
func Recorded(dirs []string) Set { return Set{dirs: slices.Clone(dirs)} }

// Dirs are the set's directories, one per hierarchy.
func (c Set) Dirs() []string { return slices.Clone(c.dirs) }

// Enclosed says the set is the cgroups enclosing airlock, not a job's
// own: nothing of it is airlock's to write or remove.
func (c Set) Enclosed() bool { return c.enclosed }

// ReadOnly reports, of airlock's own cgroups (Own), whether the
// cgroup file system is mounted read-only here (the unified hierarchy,
// or a v1 hierarchy of airlock's), as a container runtime mounts it for
// a container that is not privileged.
func (c Set) ReadOnly() bool {
	var st unix.Statfs_t
	if unix.Statfs(cgroupRoot, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return st.Flags&unix.ST_RDONLY != 0
	}
	for _, d := range c.dirs {
		if unix.Statfs(d, &st) == nil {
			return st.Flags&unix.ST_RDONLY != 0
		}
	}
	return false
}

// Child is the cgroup name below each of c's directories.
func (c Set) Child(name string) Set {
	dirs := make([]string, len(c.dirs))
	for i, d := range c.dirs {
		dirs[i] = filepath.Join(d, name)
	}
	return Set{dirs: dirs}
}

// Enclosing is what bounds a job that runs in the cgroups enclosing
// airlock: their memory limit in bytes and CPU quota in cores, 0 where
// they set none (nor does any ancestor that airlock can see).
type Enclosing struct {
	Memory int64   `json:"memory"`
	CPUs   float64 `json:"cpus"`
}

// EnclosingLimits reads the limits of the cgroups enclosing airlock:
// v2 memory.max and cpu.max, v1 memory.limit_in_bytes and the CFS quota.
func (c Set) EnclosingLimits() Enclosing {
	var e Enclosing
	for _, d := range c.dirs {
		if b, err := os.ReadFile(filepath.Join(d, "memory.max")); err == nil {
			e.Memory = parseLimit(string(b))
		}
		if b, err := os.ReadFile(filepath.Join(d, "memory.limit_in_bytes")); err == nil {
			// v1 writes "no limit" as the largest page-aligned int64.
			if v := parseLimit(string(b)); v < 1<<62 {
				e.Memory = v
			}
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil {
			if f := strings.Fields(string(b)); len(f) == 2 {
				e.CPUs = cores(parseLimit(f[0]), parseLimit(f[1]))
			}
		}
		quota, qerr := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us"))
		period, perr := os.ReadFile(filepath.Join(d, "cpu.cfs_period_us"))
		if qerr == nil && perr == nil {
			e.CPUs = cores(parseLimit(string(quota)), parseLimit(string(period)))
		}
	}
	return e
}

// parseLimit reads a cgroup limit: a number, or 0 for "max" and
// anything that is not a positive number (v1's -1 quota).
func parseLimit(s string) int64 {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

func cores(quota, period int64) float64 {
	if quota <= 0 || period <= 0 {
		return 0
	}
	return float64(quota) / float64(period)
}

// Own lists airlock's own cgroup in each hierarchy: runsc makes a job's
// cgroup with a relative path below them (Set.Child).
func Own() Set {
	return In(readSelf())
}

// readSelf is the text of this process's /proc/self/mountinfo and
// /proc/self/cgroup, what In and the v2 path read.
func readSelf() (mountinfo, self string) {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	cg, _ := os.ReadFile("/proc/self/cgroup")
	return string(mi), string(cg)
}

// In is Own from the text of /proc/self/mountinfo and
// /proc/self/cgroup. A hierarchy's directory for a cgroup path is its
// mount point joined to the path below the mount's root: a container's
// hierarchies are mounted from its own cgroup (a v1 container sees
// /k8s.io/<id> in /proc/self/cgroup, mounted as /sys/fs/cgroup/memory).
func In(mountinfo, self string) Set {
	mounts := cgroupMounts(mountinfo)
	var dirs []string
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		for _, m := range mounts {
			if !m.holds(ctrls) {
				continue
			}
			rel, ok := below(path, m.root)
			if !ok {
				continue
			}
			dirs = append(dirs, filepath.Join(m.point, rel))
			break
		}
	}
	return Set{dirs: dirs}
}

// cgroupMount is a cgroup hierarchy's mount: where, from which cgroup of
// the hierarchy (its root), and its controllers (v1 super options, with
// "name=systemd" for a named one; none for v2).
type cgroupMount struct {
	point, root string
	options     []string
	v2          bool
}

// cgroupMounts lists the cgroup and cgroup2 mounts under cgroupRoot.
func cgroupMounts(mountinfo string) []cgroupMount {
	var out []cgroupMount
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || !strings.HasPrefix(f[4], cgroupRoot) {
			continue
		}
		switch g[0] {
		case "cgroup":
			out = append(out, cgroupMount{point: f[4], root: f[3], options: strings.Split(g[2], ",")})
		case "cgroup2":
			out = append(out, cgroupMount{point: f[4], root: f[3], v2: true})
		}
	}
	return out
}

// holds says whether the mount is the hierarchy of a /proc/self/cgroup
// line's controllers ("" for v2).
func (m cgroupMount) holds(ctrls string) bool {
	if ctrls == "" || m.v2 {
		return ctrls == "" && m.v2
	}
	for _, c := range strings.Split(ctrls, ",") {
		if !slices.Contains(m.options, c) {
			return false
		}
	}
	return true
}

// below is path relative to root, if it is root or below it.
func below(path, root string) (string, bool) {
	if root == "/" {
		return path, true
	}
	if path == root {
		return "/", true
	}
	rel, ok := strings.CutPrefix(path, root+"/")
	return "/" + rel, ok
}

// MemoryDir is the directory holding the memory controller's files.
func (c Set) MemoryDir() string {
	for _, d := range c.dirs {
		if _, err := os.Stat(filepath.Join(d, "memory.oom_control")); err == nil {
			return d
		}
		if _, err := os.Stat(filepath.Join(d, "memory.events")); err == nil {
			return d
		}
	}
	return ""
}

// OOMKills returns how many times the kernel's OOM killer fired in the
// sandbox's cgroup (v1 memory.oom_control or v2 memory.events), and
// whether the limit was ever reached (v1 failcnt, v2 max).
func (c Set) OOMKills() (kills, hits uint64) {
	d := c.MemoryDir()
	if d == "" {
		return 0, 0
	}
	if v, ok := readKey(filepath.Join(d, "memory.oom_control"), "oom_kill"); ok {
		kills = v
		if b, err := os.ReadFile(filepath.Join(d, "memory.failcnt")); err == nil {
			hits, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		}
		return kills, hits
	}
	kills, _ = readKey(filepath.Join(d, "memory.events"), "oom_kill")
	hits, _ = readKey(filepath.Join(d, "memory.events"), "max")
	return kills, hits
}

// PidsHits is how many forks the host's pids limit (the backstop under
// the sandbox's own RLIMIT_NPROC) refused in the sandbox's cgroup:
// pids.events "max", on v1 and v2 alike.
func (c Set) PidsHits() uint64 {
	for _, d := range c.dirs {
		if v, ok := readKey(filepath.Join(d, "pids.events"), "max"); ok {
			return v
		}
	}
	return 0
}

func readKey(file, key string) (uint64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// Remove deletes the cgroup directories that are left. runsc normally
// removes them itself; after a crash they may remain with processes that
// are being killed, so retry briefly.
func (c Set) Remove() error {
	if c.enclosed {
		return nil // not airlock's
	}
	var errs []error
	for _, d := range c.dirs {
		var err error
		for i := 0; i < 50; i++ {
			err = os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// On a pure cgroup v2 host (the unified hierarchy alone at
// /sys/fs/cgroup) runsc is given an absolute cgroupsPath, prepared by
// airlock first, because runsc's own handling of a relative one puts the
// cgroup beside airlock's (not below it) and enables no controller on
// the way. Three rules of cgroup v2 shape what airlock does:
//
//   - A controller is usable in a cgroup only if every ancestor enables it
//     in cgroup.subtree_control. airlock enables those a job needs
//     (v2Controllers) down its own path, and says in one line which one it
//     cannot enable and how to delegate it.
//   - A cgroup other than the root that holds processes cannot enable
//     controllers for its children ("no internal processes"). When
//     airlock's own cgroup holds processes (a service's cgroup, the root
//     of a container's cgroup namespace), airlock first moves them all
//     into a leaf, airlockLeaf, as nesting container runtimes do.
//   - The job's cgroup is below airlock's own (the service's, not the
//     leaf's), so that limits on the runner's service bound its jobs too.
//
// runsc then creates the job's cgroup itself, writes its limits, and
// removes it; airlock removes it too on every path (Set.Remove).

// airlockLeaf is the leaf cgroup that a v2 cgroup's processes are moved
// into so that its children may have controllers.
const airlockLeaf = "airlock-leaf"

// v2Controllers are the controllers a job's cgroup needs on v2: memory
// (--memory), pids (--pids) and cpu (--cpus) for the limits, and cpuset
// and io because runsc's cgroup v2 code refuses a cgroup without them
// ("mandatory cgroup controller", runsc/cgroup/cgroup_v2.go: Update).
var v2Controllers = []string{"cpuset", "cpu", "io", "memory", "pids"}

// unifiedOnly reports whether /sys/fs/cgroup is the cgroup v2 hierarchy
// alone.
func unifiedOnly() bool {
	var st unix.Statfs_t
	return unix.Statfs(cgroupRoot, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// ForJob returns the cgroupsPath to give runsc for the job's sandbox
// and the host directories it will make, preparing the hierarchy on v2;
// where the cgroup file system is read-only, no path and the enclosing
// cgroups (Enclosed).
func ForJob(id string) (string, Set, error) {
	name := "airlock-" + id
	mountinfo, self := readSelf()
	own := In(mountinfo, self)
	if own.ReadOnly() {
		own.enclosed = true
		return "", own, nil
	}
	if !unifiedOnly() {
		// v1 and hybrid: relative, which runsc nests under airlock's own
		// cgroup in every hierarchy.
		return name, own.Child(name), nil
	}
	parent, err := prepareV2(cgroupRoot, v2CgroupIn(self), v2Controllers)
	if err != nil {
		return "", Set{}, err
	}
	path := filepath.Join(parent, name)
	return path, Set{dirs: []string{filepath.Join(cgroupRoot, path)}}, nil
}

// v2CgroupIn is the unified hierarchy's path in the text of a
// /proc/PID/cgroup file ("/" when it has none).
func v2CgroupIn(self string) string {
	for _, line := range strings.Split(self, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok && strings.HasPrefix(p, "/") {
			return filepath.Clean(p)
		}
	}
	return "/"
}

// prepareV2 makes the cgroup own (a path in the hierarchy mounted at
// mount) ready to hold job cgroups with the given controllers, and
// returns the path they go below: own, or own's parent when own is
// airlock's leaf already.
func prepareV2(mount, own string, controllers []string) (string, error) {
	parent := own
	if filepath.Base(own) == airlockLeaf {
		parent = filepath.Dir(own)
	}
	dir := filepath.Join(mount, parent)
	// The hierarchy's real root may hold processes and still enable
	// controllers; it has no cgroup.type. Any other cgroup, the root of a
	// cgroup namespace included, may not.
	if _, err := os.Stat(filepath.Join(dir, "cgroup.type")); err == nil {
		if err := moveIntoLeaf(dir); err != nil {
			return "", err
		}
	}
	if err := enableDown(mount, parent, controllers); err != nil {
		return "", err
	}
	return parent, nil
}

// moveIntoLeaf moves every process of the cgroup dir into its leaf
// child, until none is left (a process may fork meanwhile).
func moveIntoLeaf(dir string) error {
	procs := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		return strings.Fields(string(b))
	}
	if len(procs()) == 0 {
		return nil
	}
	leaf := filepath.Join(dir, airlockLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroup v2: create the leaf %s for the processes of airlock's cgroup (a cgroup with processes cannot give its children controllers): %w", leaf, err)
	}
	for round := 0; round < 50; round++ {
		pids := procs()
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(pid), 0)
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("cgroup v2: move process %s of %s into %s: %w (is the cgroup file system read-only? a container needs it writable)", pid, dir, leaf, err)
			}
		}
	}
	return fmt.Errorf("cgroup v2: %s keeps gaining processes; cannot empty it into %s", dir, leaf)
}

// enableDown enables each controller in the cgroup.subtree_control of
// every cgroup from the hierarchy's root down to path, where it is not
// enabled yet.
func enableDown(mount, path string, controllers []string) error {
	dirs := []string{mount}
	cur := mount
	for _, e := range strings.Split(strings.Trim(path, "/"), "/") {
		if e != "" {
			cur = filepath.Join(cur, e)
			dirs = append(dirs, cur)
		}
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
		if err != nil {
			return fmt.Errorf("cgroup v2: %w", err)
		}
		on := strings.Fields(string(b))
		for _, c := range controllers {
			if slices.Contains(on, c) {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
				return delegationError(mount, d, c, err)
			}
		}
	}
	return nil
}

// delegationError says in one line which controller airlock cannot
// enable where, and how to delegate it.
func delegationError(mount, dir, controller string, err error) error {
	at := strings.TrimPrefix(dir, mount)
	if at == "" {
		at = "/"
	}
	why := err.Error()
	switch {
	case errors.Is(err, unix.ENOENT):
		why = "its parent does not delegate it"
	case errors.Is(err, unix.EBUSY):
		why = "that cgroup holds processes"
	case errors.Is(err, unix.EROFS), errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		why = "the cgroup file system is not writable here"
	}
	return fmt.Errorf("cgroup v2: cannot enable the %s controller for the cgroups below %s (%s), which a job's cgroup needs: delegate it to the runner (systemd: Delegate=yes in the runner's service; a container: a writable cgroup namespace with the controller enabled)", controller, at, why)
}
