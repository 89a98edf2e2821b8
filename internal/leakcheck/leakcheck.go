// Package leakcheck finds what tests that start sandboxes left behind on
// the host: processes, mounts, cgroups, job directories, bounded
// workspaces (their overlays, images and loop devices) and the egress
// gateway's upload spools. Test binaries
// end TestMain with Run, which fails them when anything is left.
//
// Layer 0: the bottom, for tests only; imports nothing of airlock's.
package leakcheck

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Report lists leftovers of the sandboxes whose state lives under base:
// processes whose command line names it, mounts below it, job directories
// and upload spools in it, and cgroups named airlock-<cgroupPrefix>... (only when the prefix
// is not empty: job ids are random unless the tests choose them). It
// returns "" when nothing is left.
func Report(base, cgroupPrefix string) string {
	var b strings.Builder
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(base+"/")) {
			fmt.Fprintf(&b, "- process %s: %s\n", e.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			if strings.Contains(line, base+"/") {
				fmt.Fprintf(&b, "- mount: %s\n", line)
			}
		}
	}
	for _, j := range append(inStates(base, "jobs", "*"), inStates(base, "jobs.new", "*")...) {
		fmt.Fprintf(&b, "- job directory: %s\n", j)
	}
	for _, d := range inStates(base, "uploads", "p*") {
		fmt.Fprintf(&b, "- upload spool: %s\n", d)
	}
	writeVolumes(&b, base, cgroupPrefix)
	if cgroupPrefix != "" {
		filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.HasPrefix(d.Name(), "airlock-"+cgroupPrefix) {
				fmt.Fprintf(&b, "- cgroup: %s\n", path)
				return fs.SkipDir
			}
			if strings.Count(path, "/") > 7 {
				return fs.SkipDir
			}
			return nil
		})
	}
	return b.String()
}

// inStates matches pattern in the directory dir of base when base is a
// state directory, and of each state directory in base.
func inStates(base, dir, pattern string) []string {
	nested, _ := filepath.Glob(filepath.Join(base, "*", dir, pattern))
	own, _ := filepath.Glob(filepath.Join(base, dir, pattern))
	return append(nested, own...)
}

// volumeRoot is gvisor.DefaultVolumeRoot, where jobs whose state is in
// memory keep their workspace volumes (gvisor/quota).
const volumeRoot = "/var/lib/airlock/volumes"

// writeVolumes lists the bounded workspaces left: volume directories under
// base (and, for jobs of the prefix, under volumeRoot), the overlays they
// mount on workspaces, and the loop devices their images back.
func writeVolumes(b *strings.Builder, base, prefix string) {
	dirs := inStates(base, "volumes", "*")
	roots := []string{base + "/"}
	if prefix != "" {
		shared, _ := filepath.Glob(filepath.Join(volumeRoot, prefix+"*"))
		dirs = append(dirs, shared...)
		roots = append(roots, filepath.Join(volumeRoot, prefix))
	}
	for _, d := range dirs {
		fmt.Fprintf(b, "- workspace volume: %s\n", d)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		for _, r := range roots {
			if strings.Contains(line, "airlock-workspace:"+r) {
				fmt.Fprintf(b, "- workspace overlay: %s\n", line)
			}
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range loops {
		backing, _ := os.ReadFile(f)
		for _, r := range roots {
			if strings.HasPrefix(string(backing), r) {
				fmt.Fprintf(b, "- loop device %s: %s", f, backing)
			}
		}
	}
}

// spoolRoot is where the gateway spools artifact blocks for jobs whose
// state is in memory (gvisor.DiskDir(state, "uploads")): shared by every
// airlock of the host, each spool named p<pid>-... by its process.
const spoolRoot = "/var/lib/airlock/uploads"

// sharedSpools lists the spools in spoolRoot made or changed since the
// tests began whose process is this one or has exited: a spool nobody
// will remove until the host's next job.
func sharedSpools(since time.Time) string {
	var b strings.Builder
	dirs, _ := filepath.Glob(filepath.Join(spoolRoot, "p*-*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "p"), "-")
		fi, err := os.Stat(d)
		if err != nil || fi.ModTime().Before(since) {
			continue
		}
		_, alive := os.Stat(filepath.Join("/proc", pid))
		if pid == strconv.Itoa(os.Getpid()) || alive != nil {
			fmt.Fprintf(&b, "- upload spool: %s\n", d)
		}
	}
	return b.String()
}

// Run is the end of TestMain for packages whose tests start sandboxes:
// it runs the tests, fails the binary if they left anything behind under
// base (see Report) or in the host's shared upload spools, removes base
// and exits.
func Run(m interface{ Run() int }, base, cgroupPrefix string) {
	start := time.Now()
	code := m.Run()
	if os.Geteuid() == 0 {
		if left := Report(base, cgroupPrefix) + sharedSpools(start); left != "" {
			fmt.Fprintf(os.Stderr, "FAIL: the tests left resources behind:\n%s", left)
			code = 1
		}
	}
	os.RemoveAll(base)
	os.Exit(code)
}

// NetNamespaces returns the network namespaces (by inode) that some
// process on the host is in or holds a descriptor to. A test compares the
// set before and after a job: a namespace the job made and nobody holds
// any more is gone.
func NetNamespaces() map[string]bool {
	out := map[string]bool{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		dir := filepath.Join("/proc", p.Name())
		if l, err := os.Readlink(filepath.Join(dir, "ns", "net")); err == nil {
			out[l] = true
		}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && strings.HasPrefix(l, "net:[") {
				out[l] = true
			}
		}
	}
	return out
}
