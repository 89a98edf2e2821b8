package gvisor

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
	requireRoot(t)
	mount := unifiedMount()
	if mount == "" {
		t.Skip("no cgroup v2 hierarchy mounted on this host")
	}
	own := "/airlock-test-" + strings.TrimPrefix(newID(), "job-")
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
	cg := cgroups{dirs: []string{filepath.Join(dir, "memory-only"), dir}}
	if n := cg.pidsHits(); n != 0 {
		t.Errorf("no pids.events: %d", n)
	}
	os.WriteFile(filepath.Join(dir, "pids.events"), []byte("max 7\n"), 0o644)
	if n := cg.pidsHits(); n != 7 {
		t.Errorf("pids.events max 7: %d", n)
	}
}
