// Package podlike runs a test binary's tests again under the limits that
// a Kubernetes pod's container that is not privileged puts on airlock, on
// any host: the cgroup file system read-only, /proc/sys read-only, no
// loop devices, and a cgroup of the test's with its own limits. The
// test's process is re-executed in a mount namespace of its own, so
// nothing of it reaches the host's mounts. It proves what airlock does
// in such a pod without a cluster; the pod itself (containerd's CRI) is
// proven apart.
//
// Layer 0: for tests only; imports nothing of airlock's.
package podlike

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are the pod's limits that a run applies.
type Limits struct {
	// ReadOnlyCgroups remounts every cgroup mount read-only.
	ReadOnlyCgroups bool `json:"readOnlyCgroups,omitempty"`
	// ReadOnlyProcSys remounts /proc/sys read-only.
	ReadOnlyProcSys bool `json:"readOnlyProcSys,omitempty"`
	// NoLoopDevices hides /dev/loop-control (an empty file in its place).
	NoLoopDevices bool `json:"noLoopDevices,omitempty"`
	// Cgroups are cgroup directories (one per hierarchy) the process
	// moves into first, as a pod's processes are in the pod's cgroup.
	Cgroups []string `json:"cgroups,omitempty"`
}

// Pod is every limit but the cgroup.
var Pod = Limits{ReadOnlyCgroups: true, ReadOnlyProcSys: true, NoLoopDevices: true}

const env = "AIRLOCK_TEST_PODLIKE"

// Active returns the limits this process runs under, if it is a run's.
func Active() (Limits, bool) {
	v := os.Getenv(env)
	if v == "" {
		return Limits{}, false
	}
	var l Limits
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		panic(fmt.Sprintf("podlike: %s=%q: %v", env, v, err))
	}
	return l, true
}

// Enter applies the limits of a run, from TestMain before m.Run; outside
// a run it does nothing.
func Enter() error {
	l, ok := Active()
	if !ok {
		return nil
	}
	for _, d := range l.Cgroups {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("podlike: enter cgroup %s: %w", d, err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("podlike: make the mounts private: %w", err)
	}
	if l.ReadOnlyCgroups {
		mounts, err := mountsUnder("/sys/fs/cgroup")
		if err != nil {
			return err
		}
		for _, m := range mounts {
			if err := readOnly(m); err != nil {
				return err
			}
		}
	}
	if l.ReadOnlyProcSys {
		if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("podlike: bind /proc/sys: %w", err)
		}
		if err := readOnly("/proc/sys"); err != nil {
			return err
		}
	}
	if l.NoLoopDevices {
		empty, err := os.CreateTemp("", "podlike-no-loop-")
		if err != nil {
			return err
		}
		empty.Close()
		err = unix.Mount(empty.Name(), "/dev/loop-control", "", unix.MS_BIND, "")
		os.Remove(empty.Name()) // the bind mount keeps it
		if err != nil {
			return fmt.Errorf("podlike: hide the loop devices: %w", err)
		}
	}
	return nil
}

func readOnly(path string) error {
	if err := unix.Mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("podlike: remount %s read-only: %w", path, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir, parents first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out, sc.Err()
}

// Run re-executes the test binary with the tests that pattern (a
// -test.run expression) selects, under l, and returns their output. It
// fails t unless every test named in mustPass passed.
func Run(t *testing.T, pattern string, l Limits, mustPass ...string) string {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("under %s:\n%s", b, out)
	for _, name := range mustPass {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass under %s", name, b)
		}
	}
	if err != nil {
		t.Fatalf("the run under %s: %v", b, err)
	}
	return string(out)
}

// MemoryCgroup makes a cgroup limited to limit bytes of memory, for a run
// to enter (Limits.Cgroups) as a pod's processes are in the pod's cgroup,
// and removes it when t ends. It skips t where no memory controller can
// be had (a v2 cgroup that does not delegate it).
func MemoryCgroup(t *testing.T, limit int64) []string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("podlike-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	var dir, file string
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			dir, file = filepath.Join("/sys/fs/cgroup/memory", parts[2], name), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "" && dir == "":
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				// v2: beside our own cgroup, whose parent must give it memory.
				parent := filepath.Dir(filepath.Join("/sys/fs/cgroup", parts[2]))
				os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0)
				dir, file = filepath.Join(parent, name), "memory.max"
			}
		}
	}
	if dir == "" {
		t.Skip("no memory cgroup to make here")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Skipf("no memory controller in %s: %v", dir, err)
	}
	return []string{dir}
}
