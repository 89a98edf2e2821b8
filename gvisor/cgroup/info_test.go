package cgroup

import (
	"errors"
	"slices"
	"testing"
)

// The cgroup layouts of the hosts airlock meets, from their mountinfo
// and /proc/self/cgroup.
func TestCgroupInfo(t *testing.T) {
	const (
		hybridMounts = "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
			"31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
			"34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
			"38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n" +
			"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
		hybridSelf = "8:pids:/\n4:memory:/runner\n1:cpu:/\n0::/\n"
		v2Mounts   = "30 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
		v2Self     = "0::/system.slice/runner.service\n"
	)
	controllers := func(root string) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			switch path {
			case "/sys/fs/cgroup/cgroup.controllers":
				return []byte(root + "\n"), nil
			case "/sys/fs/cgroup/system.slice/runner.service/cgroup.controllers":
				return []byte("memory\n"), nil
			}
			return nil, errors.New("no such file")
		}
	}
	for _, tc := range []struct {
		name              string
		mounts, self      string
		read              func(string) ([]byte, error)
		layout, cgroup    string
		available, missed []string
	}{
		{"hybrid (these machines)", hybridMounts, hybridSelf, controllers(""), "hybrid", "/runner", []string{"memory", "pids", "cpu"}, nil},
		{"v1 without pids", "30 22 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n31 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "4:memory:/\n", controllers(""), "v1", "/", []string{"memory"}, []string{"pids", "cpu"}},
		{"v2, all delegated", v2Mounts, v2Self, controllers("cpuset cpu io memory pids"), "v2", "/system.slice/runner.service", []string{"cpuset", "cpu", "io", "memory", "pids"}, nil},
		{"v2, no io or pids at the root", v2Mounts, v2Self, controllers("cpuset cpu memory"), "v2", "/system.slice/runner.service", []string{"cpuset", "cpu", "memory"}, []string{"io", "pids"}},
		{"none", "22 1 0:20 / /sys rw - sysfs sysfs rw\n", "", controllers(""), "none", "", nil, []string{"memory", "pids", "cpu"}},
	} {
		got := info(tc.mounts, tc.self, tc.read)
		if got.Layout != tc.layout || got.Cgroup != tc.cgroup || !slices.Equal(got.Available, tc.available) || !slices.Equal(got.Missing, tc.missed) {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}
