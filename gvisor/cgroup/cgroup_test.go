package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// unifiedMount is where this host mounts the cgroup v2 hierarchy (all of
// /sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid
// one), or "".
func unifiedMount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if f := strings.Fields(pre); ok && len(f) > 4 && strings.HasPrefix(post, "cgroup2 ") {
			return f[4]
		}
	}
	return ""
}

// On the kernel's own cgroup v2 hierarchy: a cgroup that holds
// processes is emptied into airlock's leaf (a process that is already
// there stays), job cgroups then go below it, not below the leaf; a
// controller the hierarchy does not delegate is refused in one line that
// names it and says how to delegate it.
func TestPrepareV2(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it makes cgroups")
	}
	mount := unifiedMount()
	if mount == "" {
		t.Skip("no cgroup v2 hierarchy mounted on this host")
	}
	own := fmt.Sprintf("/airlock-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	dir := filepath.Join(mount, own)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup in %s (%v): the v2 preparation is tested where one can", mount, err)
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sleeper.Process.Kill()
		sleeper.Wait()
		os.Remove(filepath.Join(dir, airlockLeaf))
		os.Remove(dir)
	})
	pid := strconv.Itoa(sleeper.Process.Pid)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
		t.Fatal(err)
	}
	parent, err := prepareV2(mount, own, nil)
	if err != nil || parent != own {
		t.Fatalf("prepare %s: %q, %v", own, parent, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(strings.TrimSpace(string(b))) != 0 {
		t.Errorf("processes left in %s: %s", dir, b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, airlockLeaf, "cgroup.procs")); !strings.Contains(string(b), pid) {
		t.Errorf("the process is not in the leaf: %q", b)
	}
	// airlock itself in the leaf (a later job): the jobs still go below
	// the cgroup, not the leaf.
	if parent, err := prepareV2(mount, own+"/"+airlockLeaf, nil); err != nil || parent != own {
		t.Errorf("from the leaf: %q, %v", parent, err)
	}
	// A controller the hierarchy does not have at all (on a hybrid
	// host's unified hierarchy, none of these), so nothing is changed.
	avail, _ := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	missing := ""
	for _, c := range []string{"memory", "pids", "cpu", "misc", "rdma"} {
		if !strings.Contains(" "+strings.TrimSpace(string(avail))+" ", " "+c+" ") {
			missing = c
			break
		}
	}
	if missing == "" {
		t.Logf("the hierarchy at %s has every controller: the refusal is not tested here", mount)
		return
	}
	err = enableDown(mount, own+"/x", []string{missing})
	if err == nil || !strings.Contains(err.Error(), "the "+missing+" controller") || !strings.Contains(err.Error(), "Delegate=yes") || strings.Contains(err.Error(), "\n") {
		t.Errorf("enabling %s: %v", missing, err)
	}
}

// The host's pids limit is read where v1 and v2 keep it: pids.events.
func TestPidsHits(t *testing.T) {
	dir := t.TempDir()
	cg := Set{dirs: []string{filepath.Join(dir, "memory-only"), dir}}
	if n := cg.PidsHits(); n != 0 {
		t.Errorf("no pids.events: %d", n)
	}
	os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 7\n"), 0o644)
	if n := cg.PidsHits(); n != 7 {
		t.Errorf("pids.events max 7: %d", n)
	}
}

// A hierarchy's directory for airlock's cgroup is its mount point joined
// to the path below the mount's root: on a host the roots are "/", in a
// v1 container each hierarchy is mounted from the container's own cgroup.
func TestCgroupsIn(t *testing.T) {
	const (
		hybrid = "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
			"31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
			"34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
			"36 30 0:33 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n" +
			"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
		// containerd's v1 container (seen in a pod on these machines).
		container = "103 102 0:55 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755\n" +
			"104 103 0:28 /k8s.io/abc /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu\n" +
			"107 103 0:31 /k8s.io/abc /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory\n"
		v2 = "30 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	)
	for _, tc := range []struct {
		name, mounts, self, job string
		want                    []string
	}{
		{"hybrid host", hybrid, "9:name=systemd:/runner\n4:memory:/runner\n1:cpu:/runner\n0::/runner\n", "airlock-1",
			[]string{"/sys/fs/cgroup/systemd/runner/airlock-1", "/sys/fs/cgroup/memory/runner/airlock-1", "/sys/fs/cgroup/cpu/runner/airlock-1", "/sys/fs/cgroup/unified/runner/airlock-1"}},
		{"v1 container, own", container, "4:memory:/k8s.io/abc\n1:cpu:/k8s.io/abc\n", "",
			[]string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu"}},
		{"v1 container, a job's", container, "4:memory:/k8s.io/abc\n", "airlock-1", []string{"/sys/fs/cgroup/memory/airlock-1"}},
		{"v1 container, a cgroup outside its mount", container, "4:memory:/elsewhere\n", "", nil},
		{"v2 with a namespace", v2, "0::/\n", "", []string{"/sys/fs/cgroup"}},
		{"v2 host", v2, "0::/system.slice/runner.service\n", "airlock-1", []string{"/sys/fs/cgroup/system.slice/runner.service/airlock-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := In(tc.mounts, tc.self).Child(tc.job).dirs
			if !slices.Equal(got, tc.want) {
				t.Errorf("dirs %q, want %q", got, tc.want)
			}
		})
	}
}
