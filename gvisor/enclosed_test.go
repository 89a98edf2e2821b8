package gvisor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// enclosedEnv asks a re-executed test binary to move itself into the
// cgroup it names and to see the cgroup file system read-only, as a
// container that is not privileged does (a Kubernetes pod's).
const enclosedEnv = "AIRLOCK_TEST_ENCLOSED_CGROUP"

// enterEnclosed is the child's set-up, before its tests run: into the
// cgroup (every hierarchy of it that exists), then, in the mount
// namespace TestEnclosedCgroups gave it, every cgroup mount read-only.
func enterEnclosed(dirs string) error {
	for _, d := range strings.Split(dirs, ",") {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return fmt.Errorf("enter %s: %w", d, err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, fs := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(fs) < 1 || !strings.HasPrefix(fields[4], cgroupRoot) {
			continue
		}
		if err := unix.Mount("", fields[4], "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("remount %s read-only: %w", fields[4], err)
		}
	}
	return sc.Err()
}

// A job where the cgroup file system is read-only (a pod's container)
// runs in the cgroup that encloses airlock: runsc makes no cgroup, the
// record holds the enclosing cgroup's memory limit (never the configured
// one, which nothing enforces here), a memory bomb is reported as the
// memory limit, the OOM killer takes the sandbox and not airlock, and
// nothing is left. Run in a child process in a cgroup of 384 MiB that the
// test makes, with the cgroup mounts read-only in its mount namespace.
func TestEnclosedCgroups(t *testing.T) {
	requireRoot(t)
	if os.Getenv(enclosedEnv) != "" {
		testEnclosedChild(t)
		return
	}
	const limit = 384 << 20
	name := fmt.Sprintf("airlock-test-enclosed-%d", os.Getpid())
	var dirs []string
	if unifiedOnly() {
		parent, err := prepareV2(cgroupRoot, ownV2Cgroup(), []string{"memory"})
		if err != nil {
			t.Skipf("no memory controller to delegate here: %v", err)
		}
		d := filepath.Join(cgroupRoot, parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
		if err := os.WriteFile(filepath.Join(d, "memory.max"), []byte(strconv.Itoa(limit)), 0); err != nil {
			t.Fatal(err)
		}
	} else {
		mem := cgroupsFor(name).memoryDir()
		base := ""
		for _, d := range cgroupsFor(name).dirs {
			if strings.HasPrefix(d, filepath.Join(cgroupRoot, "memory")+"/") {
				base = d
			}
		}
		if base == "" && mem == "" {
			t.Skip("no v1 memory hierarchy")
		}
		if base == "" {
			base = mem
		}
		if err := os.Mkdir(base, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, base)
		if err := os.WriteFile(filepath.Join(base, "memory.limit_in_bytes"), []byte(strconv.Itoa(limit)), 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			for i := 0; i < 50 && os.Remove(d) != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnclosedCgroups$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), enclosedEnv+"="+strings.Join(dirs, ","), fmt.Sprintf("AIRLOCK_TEST_ENCLOSED_LIMIT=%d", limit))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in the enclosing cgroup, cgroup file system read-only:\n%s", out)
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestEnclosedCgroups")) {
		t.Fatalf("child: %v", err)
	}
}

func testEnclosedChild(t *testing.T) {
	limit, _ := strconv.ParseInt(os.Getenv("AIRLOCK_TEST_ENCLOSED_LIMIT"), 10, 64)
	if !cgroupsReadOnly() {
		t.Fatal("the cgroup file system is writable: the set-up did not make it read-only")
	}
	if info := HostCgroups(); !info.ReadOnly || info.Enclosing == nil || info.Enclosing.Memory != limit {
		t.Fatalf("HostCgroups() = %+v, want read-only with the enclosing %d bytes", info, limit)
	}
	sb := newTestSandbox(t, nil)
	enc, ok := sb.Enclosing()
	if !ok || enc.Memory != limit {
		t.Fatalf("Enclosing() = %+v, %t; want the enclosing cgroup's %d bytes", enc, ok, limit)
	}
	if sb.cg.dirs == nil || !sb.cg.enclosed {
		t.Fatalf("cgroups %+v", sb.cg)
	}
	for _, d := range sb.cg.dirs {
		if strings.Contains(d, "airlock-"+sb.ID()) {
			t.Errorf("a cgroup of the job's own: %s", d)
		}
	}
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), Step{Args: []string{"/bin/sh", "-c", "echo inside"}, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), "inside") {
		t.Fatalf("a step: %+v %v %q", res, err, out.String())
	}
	out.Reset()
	res, err = sb.Exec(context.Background(), Step{Args: []string{"/bin/sh", "-c", "head -c 2000000000 /dev/zero | tail -c 1900000000 > /dev/null"}, Stdout: &out, Stderr: &out, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	if res.Limit != LimitOOM {
		t.Fatalf("memory bomb: limit %q, want %q (exit %d, %q)", res.Limit, LimitOOM, res.ExitCode, res.Message)
	}
	if want := "the memory limit of the cgroup enclosing airlock (384 MiB"; !strings.Contains(res.Message, want) {
		t.Errorf("memory bomb: %q does not say %q", res.Message, want)
	}
	t.Logf("memory bomb: %s", res.Message)
}
