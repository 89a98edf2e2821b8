package gvisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroupRoot is where the host mounts its cgroup hierarchies.
const cgroupRoot = "/sys/fs/cgroup"

// cgroups are the host cgroup directories runsc creates for one sandbox:
// the job's relative cgroupsPath joined to airlock's own cgroup in every
// hierarchy (v1 controllers, and the v2 unified one).
type cgroups struct {
	dirs []string
}

// cgroupsFor lists where runsc will create the cgroup named name, following
// runsc's rule for relative paths: relative to the caller's cgroup in each
// hierarchy.
func cgroupsFor(name string) cgroups {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return cgroups{}
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		var bases []string
		if ctrls == "" {
			bases = []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")}
		} else {
			name := strings.TrimPrefix(ctrls, "name=")
			bases = []string{filepath.Join(cgroupRoot, name)}
			for _, c := range strings.Split(ctrls, ",") {
				bases = append(bases, filepath.Join(cgroupRoot, c))
			}
		}
		for _, b := range bases {
			if _, err := os.Stat(filepath.Join(b, "cgroup.procs")); err != nil {
				continue
			}
			dirs = append(dirs, filepath.Join(b, path, name))
			break
		}
	}
	return cgroups{dirs: dirs}
}

// memoryDir is the directory holding the memory controller's files.
func (c cgroups) memoryDir() string {
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

// oomKills returns how many times the kernel's OOM killer fired in the
// sandbox's cgroup (v1 memory.oom_control or v2 memory.events), and
// whether the limit was ever reached (v1 failcnt, v2 max).
func (c cgroups) oomKills() (kills, hits uint64) {
	d := c.memoryDir()
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

// remove deletes the cgroup directories that are left. runsc normally
// removes them itself; after a crash they may remain with processes that
// are being killed, so retry briefly.
func (c cgroups) remove() error {
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
