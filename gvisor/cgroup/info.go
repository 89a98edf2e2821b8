package cgroup

import (
	"os"
	"path/filepath"
	"strings"
)

// Info is the host's cgroup layout as a job's sandbox meets it:
// for `airlock doctor`.
type Info struct {
	// Layout is v1 (controller hierarchies only), hybrid (v1 controllers
	// and a unified v2 mount without them), v2 (the unified hierarchy
	// alone) or none (no cgroup file system at /sys/fs/cgroup).
	Layout string `json:"layout"`
	// Cgroup is airlock's own cgroup: the unified one's on v2, the
	// memory hierarchy's on v1.
	Cgroup string `json:"cgroup"`
	// Available and Missing split the controllers a job's cgroup needs
	// (memory, pids, cpu; on v2 also cpuset and io, see v2Controllers) by
	// whether jobs can have them: on v1 a hierarchy mounted for each; on
	// v2 each in the hierarchy's root cgroup.controllers, which airlock
	// enables down to its own cgroup.
	Available []string `json:"available"`
	Missing   []string `json:"missing"`
	// Delegated (v2) are the controllers enabled for airlock's cgroup
	// now (its cgroup.controllers).
	Delegated []string `json:"delegated,omitempty"`
	// ReadOnly: the cgroup file system is mounted read-only (a container
	// that is not privileged); jobs then run in the enclosing cgroup,
	// whose limits Enclosing holds.
	ReadOnly  bool       `json:"readOnly,omitempty"`
	Enclosing *Enclosing `json:"enclosing,omitempty"`
}

// limitControllers are the controllers behind the sandbox's limits:
// memory (--memory), pids (--pids) and cpu (--cpus).
var limitControllers = []string{"memory", "pids", "cpu"}

// Host inspects this host's cgroups from this process's view.
func Host() Info {
	mountinfo, self := readSelf()
	info := info(mountinfo, self, os.ReadFile)
	if own := In(mountinfo, self); info.Layout != "none" && own.ReadOnly() {
		e := own.EnclosingLimits()
		info.ReadOnly, info.Enclosing = true, &e
	}
	return info
}

// info reads the layout from mountinfo and /proc/self/cgroup's
// text; read reads a file of the unified hierarchy.
func info(mountinfo, self string, read func(string) ([]byte, error)) Info {
	var rootType string
	var v1, unified bool
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		switch mp, fstype := f[4], g[0]; {
		case mp == cgroupRoot:
			rootType = fstype
		case fstype == "cgroup" && filepath.Dir(mp) == cgroupRoot:
			v1 = true
		case fstype == "cgroup2" && mp == filepath.Join(cgroupRoot, "unified"):
			unified = true
		}
	}
	info := Info{Layout: "none"}
	switch {
	case rootType == "cgroup2":
		info.Layout = "v2"
	case v1 && unified:
		info.Layout = "hybrid"
	case v1:
		info.Layout = "v1"
	}
	have := map[string]bool{}
	if info.Layout == "v2" {
		info.Cgroup = v2CgroupIn(self)
		b, _ := read(filepath.Join(cgroupRoot, "cgroup.controllers"))
		for _, c := range strings.Fields(string(b)) {
			have[c] = true
		}
		b, _ = read(filepath.Join(cgroupRoot, info.Cgroup, "cgroup.controllers"))
		info.Delegated = strings.Fields(string(b))
	} else if info.Layout == "v1" || info.Layout == "hybrid" {
		for _, line := range strings.Split(self, "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			for _, c := range strings.Split(parts[1], ",") {
				have[c] = true
				if c == "memory" {
					info.Cgroup = parts[2]
				}
			}
		}
	}
	need := limitControllers
	if info.Layout == "v2" {
		need = v2Controllers
	}
	for _, c := range need {
		if have[c] {
			info.Available = append(info.Available, c)
		} else {
			info.Missing = append(info.Missing, c)
		}
	}
	return info
}
