package gvisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor/cgroup"
	"golang.org/x/sys/unix"
)

var asRoot = func(c *Config) { c.User = &User{UID: 0, GID: 0} }

// Secret-bearing host paths must show nothing, even to uid 0 inside (which
// would pass the owner permission bits of root's files).
func TestSecretsAreMasked(t *testing.T) {
	// Not under /tmp: the sandbox's /tmp is fresh, so only a path in the
	// visible host root proves the mask works.
	secretDir, err := os.MkdirTemp("/var/tmp", "airlock-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secretDir) })
	secret := filepath.Join(secretDir, "token")
	if err := os.WriteFile(secret, []byte("s3cr3t-extra-mask"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	asRoot(&cfg)
	os.Chown(cfg.Workspace, 0, 0)
	// A secret the runner keeps in the workspace, masked by the caller.
	if err := os.WriteFile(filepath.Join(cfg.Workspace, "runner.env"), []byte("s3cr3t-in-workspace"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.ExtraMasks = []string{secretDir, "/workspace/runner.env"}
	// A state root outside /run is visible in the host root unless masked.
	cfg.StateRoot = "/var/lib/airlock-test-state"
	t.Cleanup(func() { os.RemoveAll(cfg.StateRoot) })
	sb := startSandbox(t, cfg)
	for _, tc := range []struct{ name, script string }{
		{"shadow", "cat /etc/shadow"},
		{"gshadow", "cat /etc/gshadow"},
		{"sudoers", "cat /etc/sudoers"},
		{"root home", "ls -A /root; cat /root/.bash_history /root/.ssh/* /root/.config/*/* 2>/dev/null"},
		{"home", "ls -AR /home"},
		{"extra mask", "cat " + secret + "; ls -A " + secretDir},
		{"mask in workspace", "cat /workspace/runner.env"},
		{"airlock state", "ls -AR /run"},
		{"airlock state root", "ls -A " + cfg.StateRoot + "; ls -A /var/lib/airlock-test-state"},
		{"docker socket", "ls -l /var/run/docker.sock /run/docker.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, _ := sh(t, sb, tc.script)
			if strings.TrimSpace(out) != "" && !strings.HasPrefix(out, "/run:") {
				t.Errorf("%q printed %q; want nothing", tc.script, out)
			}
			if strings.Contains(out, "s3cr3t") || strings.Contains(out, "root:") {
				t.Errorf("secret leaked: %q", out)
			}
		})
	}
}

// The host environment never reaches the sandbox; only the base variables
// and what the caller passes do.
func TestHostEnvironmentDoesNotLeak(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_RUNNER_TOKEN", "ghs_leaked")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "leaked")
	sb := newTestSandbox(t, nil)
	out, _, res := sh(t, sb, "env", func(s *Step) { s.Env = []string{"EXPLICIT=yes"} })
	if res.ExitCode != 0 {
		t.Fatalf("env failed: %+v", res)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "CI": true, "EXPLICIT": true, "PWD": true, "SHLVL": true, "_": true}
	for k := range got {
		if !allowed[k] {
			t.Errorf("unexpected variable %s=%s in the sandbox", k, got[k])
		}
	}
	if got["CI"] != "true" || got["EXPLICIT"] != "yes" || got["HOME"] == "" {
		t.Errorf("missing base or explicit variables: %v", got)
	}
	if strings.Contains(out, "leaked") {
		t.Errorf("host secret leaked: %s", out)
	}
}

// The workload runs as a non-root uid with no capabilities and no new
// privileges by default.
func TestUnprivilegedByDefault(t *testing.T) {
	sb := newTestSandbox(t, nil)
	out, _, _ := sh(t, sb, "id -u; id -g; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")
	want := []string{"1000", "1000"}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || lines[0] != want[0] || lines[1] != want[1] {
		t.Fatalf("id: got %q, want uid and gid 1000", out)
	}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "NoNewPrivs:":
			if f[1] != "1" {
				t.Errorf("NoNewPrivs = %s, want 1", f[1])
			}
		default:
			if strings.Trim(f[1], "0") != "" {
				t.Errorf("%s %s: want no capabilities", f[0], f[1])
			}
		}
	}
}

// Writes outside the workspace land in the throw-away overlay, never on
// the host, whoever writes them.
func TestWritesOutsideWorkspaceStayInSandbox(t *testing.T) {
	marker := "airlock-test-" + strings.ReplaceAll(filepath.Base(t.TempDir()), "/", "")
	sb := newTestSandbox(t, asRoot)
	targets := []string{"/etc/" + marker, "/var/tmp/" + marker, "/usr/local/bin/" + marker, "/tmp/" + marker, "/" + marker}
	script := ""
	for _, p := range targets {
		script += "echo pwned > " + p + " && cat " + p + "\n"
	}
	out, errOut, res := sh(t, sb, "set -e\n"+script)
	if res.ExitCode != 0 || strings.Count(out, "pwned") != len(targets) {
		t.Fatalf("writes inside the sandbox should succeed in the overlay: exit %d, out %q, err %q", res.ExitCode, out, errOut)
	}
	for _, p := range targets {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("%s reached the host", p)
		}
	}
}

// A symlink in the workspace (planted before the job, or made by it) that
// points at a host directory resolves inside the sandbox, so writing
// through it cannot touch the host.
func TestWorkspaceSymlinksCannotReachHost(t *testing.T) {
	cfg := testConfig(t)
	asRoot(&cfg)
	ws := cfg.Workspace
	if err := os.Chown(ws, 0, 0); err != nil {
		t.Fatal(err)
	}
	marker := "airlock-symlink-" + filepath.Base(t.TempDir())
	// Planted by the "agent" in its pull request.
	for name, target := range map[string]string{"etc-abs": "/etc", "etc-rel": "../../../../../../../etc", "tmp-abs": "/tmp"} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	sb := startSandbox(t, cfg)
	script := strings.Join([]string{
		"echo x > /workspace/etc-abs/" + marker,
		"echo x > /workspace/etc-rel/" + marker,
		"echo x > /workspace/tmp-abs/" + marker,
		"ln -s /etc /workspace/made-link && echo x > /workspace/made-link/" + marker + "-made",
		"ln -s /etc/passwd /workspace/passwd-link && echo pwned >> /workspace/passwd-link",
		"true",
	}, "\n")
	sh(t, sb, script)
	for _, p := range []string{"/etc/" + marker, "/tmp/" + marker, "/etc/" + marker + "-made"} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("write through a workspace symlink reached host %s", p)
		}
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	if strings.Contains(string(passwd), "pwned") {
		t.Errorf("host /etc/passwd was modified through a symlink")
	}
	// The link itself exists on the host, pointing where it pointed: that is
	// the workspace content, harmless until something on the host follows it.
	if target, err := os.Readlink(filepath.Join(ws, "made-link")); err != nil || target != "/etc" {
		t.Errorf("made-link: %q %v", target, err)
	}
}

// State persists across steps of one job: files in the workspace, /tmp and
// the overlay, and background processes.
func TestStatePersistsAcrossSteps(t *testing.T) {
	sb := newTestSandbox(t, nil)
	_, errOut, res := sh(t, sb, "echo one > /workspace/a; echo two > /tmp/b; echo three > /var/tmp/c; (sleep 300 >/dev/null 2>&1 &) ; sleep 300 >/dev/null 2>&1 & echo $! > /tmp/bg.pid")
	if res.ExitCode != 0 {
		t.Fatalf("step 1: %+v %s", res, errOut)
	}
	out, errOut, res := sh(t, sb, "cat /workspace/a /tmp/b /var/tmp/c; kill -0 $(cat /tmp/bg.pid) && echo alive")
	if res.ExitCode != 0 || out != "one\ntwo\nthree\nalive\n" {
		t.Fatalf("step 2: got %q (stderr %q, %+v)", out, errOut, res)
	}
}

// The process record names each exec'd binary with its real sha256.
func TestProcessRecordHasBinaryDigest(t *testing.T) {
	cfg := testConfig(t)
	src, err := os.ReadFile("/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cfg.Workspace, "known-binary")
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	want := hex.EncodeToString(sum[:])
	sb := startSandbox(t, cfg)
	_, _, res := sh(t, sb, "/workspace/known-binary hello-record >/dev/null")
	if res.ExitCode != 0 {
		t.Fatalf("step failed: %+v", res)
	}
	rec := sb.Record()
	for _, e := range rec.Execs {
		if e.Binary == "/workspace/known-binary" {
			if e.SHA256 != want {
				t.Fatalf("sha256 = %s, want %s", e.SHA256, want)
			}
			if len(e.Argv) != 2 || e.Argv[1] != "hello-record" || e.UID != 1000 || e.PID == 0 {
				t.Errorf("exec entry incomplete: %+v", e)
			}
			if e.Exit == nil || e.Exit.Code != 0 {
				t.Errorf("exit not recorded: %+v", e.Exit)
			}
			return
		}
	}
	t.Fatalf("exec of /workspace/known-binary not in record: %+v", rec.Execs)
}

// Connect attempts are recorded with address, port and result, including
// direct IPs that can never work here.
func TestProcessRecordHasConnects(t *testing.T) {
	sb := newTestSandbox(t, nil)
	sh(t, sb, "exec 3<>/dev/tcp/192.0.2.1/443 2>/dev/null; true", func(s *Step) { s.Args = []string{"bash", "-c", "exec 3<>/dev/tcp/192.0.2.1/443; true"} })
	for _, c := range sb.Record().Connects {
		if c.Address == "192.0.2.1" && c.Port == 443 && c.Family == "inet" {
			if c.Result == "ok" {
				t.Errorf("connect to 192.0.2.1 succeeded without a network")
			}
			return
		}
	}
	t.Fatalf("connect to 192.0.2.1:443 not recorded: %+v", sb.Record().Connects)
}

// Killing the airlock that owns a sandbox with SIGKILL leaves the sandbox
// (and its sub-containers) running; the next Reap finds the orphan by its
// free lock and removes the processes, mounts, cgroups and state, and
// keeps what the job wrote out of its workspace.
func TestReapAfterSIGKILL(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name      string
		container bool
	}{
		{"job", false},
		{"job with a sub-container", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := testStateRoot(t)
			id := testJobID()
			cmd := exec.Command("/proc/self/exe")
			cmd.Args[0] = "gvisor.test" // not /proc/self/exe: Dispatch would take it for runsc
			ws := newWorkspace(t)
			cmd.Env = append(os.Environ(), helperEnv+"=1", "AIRLOCK_TEST_JOB_ID="+id,
				"AIRLOCK_TEST_WORKSPACE="+ws, "AIRLOCK_TEST_STATE_ROOT="+state)
			jobDir := filepath.Join(state, "jobs", id)
			// Sandbox and gofer, and one gofer per sub-container.
			wantProcs, mounted := 2, []string{jobDir}
			if tc.container {
				img := newImage(t, nil)
				cmd.Env = append(cmd.Env, "AIRLOCK_TEST_CONTAINER_ROOTFS="+img)
				wantProcs, mounted = 3, append(mounted, img)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 6)
			if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper did not start a sandbox: %q %v", buf, err)
			}
			// Wait until the sandbox and gofers run, then kill their owner.
			waitFor(t, 30*time.Second, func() bool { return countProcesses(jobDir) >= wantProcs })
			// The job's write is on the bounded workspace's volume.
			waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(filepath.Join(ws, "written")); return err == nil })
			volume := volumeDir(state, id)
			if _, err := os.Stat(filepath.Join(volume, "image")); err != nil {
				t.Fatalf("no workspace volume: %v", err)
			}
			if mountsNaming(ws) == 0 {
				t.Fatal("no overlay on the workspace: the checks below would prove nothing")
			}
			cmd.Process.Kill()
			cmd.Wait()
			if n := countProcesses(jobDir); n < wantProcs {
				t.Fatalf("expected the orphaned sandbox to outlive its owner: %d processes", n)
			}
			if mountsNaming(mounted...) == 0 {
				t.Fatal("no mount of the job found: the check below would prove nothing")
			}
			reaped, err := Reap(context.Background(), state)
			if err != nil {
				t.Fatalf("reap: %v", err)
			}
			if len(reaped) != 1 || reaped[0].ID != id {
				t.Fatalf("reaped %+v, want job %s", reaped, id)
			}
			if n := countProcesses(jobDir); n != 0 {
				t.Errorf("%d processes of the job survive reaping", n)
			}
			if n := mountsNaming(mounted...); n != 0 {
				t.Errorf("%d mounts of the job survive reaping", n)
			}
			if _, err := os.Stat(jobDir); err == nil {
				t.Errorf("job directory %s survives reaping", jobDir)
			}
			// The workspace's volume is released: unmounted and gone, what
			// the job wrote kept out of the workspace (it never ended),
			// and the reap says so.
			if _, err := os.Stat(volume); err == nil {
				t.Errorf("workspace volume %s survives reaping", volume)
			}
			if n := mountsNaming(ws); n != 0 {
				t.Errorf("%d mounts on the workspace survive reaping", n)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "written")); err == nil {
				t.Errorf("what the killed job wrote reached the workspace: %q", b)
			}
			if !strings.HasPrefix(reaped[0].Writes, "discarded: the job never ended") {
				t.Errorf("reaped %+v: want its writes said discarded", reaped[0])
			}
			for _, d := range cgroup.Own().Child("airlock-" + id).Dirs() {
				if _, err := os.Stat(d); err == nil {
					t.Errorf("cgroup %s survives reaping", d)
				}
			}
		})
	}
}

// A live job is never reaped.
func TestReapLeavesLiveJobs(t *testing.T) {
	cfg := testConfig(t)
	sb := startSandbox(t, cfg)
	reaped, err := Reap(context.Background(), cfg.StateRoot)
	if err != nil || len(reaped) != 0 {
		t.Fatalf("reaped a live job: %+v %v", reaped, err)
	}
	if _, _, res := sh(t, sb, "true"); res.ExitCode != 0 {
		t.Fatalf("sandbox broken after reap: %+v", res)
	}
}

// The gofer and the sandbox are children of the process that created
// them (createContainer). When they exit, destroyed or crashed, they are
// collected at once: a zombie lingers in the process table and looks
// alive to runsc's checks (kill(pid, 0)), so a crashed sandbox would not
// be noticed.
func TestSandboxChildrenAreReaped(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name  string
		crash bool
	}{
		{"destroyed", false},
		{"crashed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newTestSandbox(t, nil)
			kids := childrenNaming(sb.Dir())
			if len(kids) < 2 {
				t.Fatalf("gofer and sandbox are not children of this process (%v): the checks below would prove nothing", kids)
			}
			killed := 0
			if tc.crash {
				for _, pid := range kids {
					if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmd), "runsc-sandbox") {
						unix.Kill(pid, unix.SIGKILL)
						killed = pid
					}
				}
				if killed == 0 {
					t.Fatal("no sandbox process to kill")
				}
			} else if err := sb.Destroy(context.Background()); err != nil {
				t.Fatal(err)
			}
			zombies := func() []int {
				var z []int
				for _, pid := range kids {
					if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && procState(string(b)) == "Z" {
						z = append(z, pid)
					}
				}
				return z
			}
			// SIGKILL takes a moment: the killed process must be gone (so
			// reaped), not merely not yet a zombie.
			gone := func(pid int) bool {
				_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
				return err != nil
			}
			deadline := time.Now().Add(10 * time.Second)
			for (len(zombies()) > 0 || killed != 0 && !gone(killed)) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if z := zombies(); len(z) > 0 {
				t.Fatalf("zombie children left: %v", z)
			}
			if killed != 0 && !gone(killed) {
				t.Fatalf("the killed sandbox process %d is still there", killed)
			}
			if !tc.crash {
				return
			}
			if _, err := sb.Exec(context.Background(), Step{Args: []string{"true"}}); err == nil || sb.Dead() == "" {
				t.Errorf("a step after the sandbox crashed: err %v, dead %q; want an error and the sandbox marked dead", err, sb.Dead())
			}
		})
	}
}

// The gofer and the sandbox are started by runsc in this process, which
// would hand them its environment (airlock's holds tokens and keys): they
// get PATH alone, and this process has its own back afterwards.
func TestRunscProcessesGetNoEnvironment(t *testing.T) {
	requireRoot(t)
	t.Setenv("AIRLOCK_TEST_SECRET", "canary-4242")
	stdout := os.Stdout
	sb := newTestSandbox(t, nil)
	if os.Getenv("AIRLOCK_TEST_SECRET") != "canary-4242" || os.Stdout != stdout {
		t.Fatal("the process's environment or stdout was not put back")
	}
	kids := childrenNaming(sb.Dir())
	if len(kids) < 2 {
		t.Fatalf("gofer and sandbox not found (%v): the check below would prove nothing", kids)
	}
	for _, pid := range kids {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(env), "canary-4242") {
			t.Errorf("process %d has airlock's environment: %q", pid, env)
		}
	}
}

// childrenNaming returns the pids of this process's children whose
// command line names a path below dir.
func childrenNaming(dir string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if strings.Contains(string(cmd), dir+"/") && procPPID(string(st)) == os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procState and procPPID read fields 3 and 4 of /proc/PID/stat, after
// the command name (which may hold spaces and parentheses).
func procState(stat string) string {
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 2 {
		return ""
	}
	return f[0]
}

func procPPID(stat string) int {
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

func countProcesses(dir string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir+"/") {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A directory rootfs (an unpacked image) replaces the host root entirely:
// the step sees the image's files and none of the host's.
func TestDirectoryRootFS(t *testing.T) {
	cfg := testConfig(t)
	rootfs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(rootfs, "image-marker"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.RootFS = rootfs
	sb := startSandbox(t, cfg)
	var out bytes.Buffer
	// The image has no shell: run airlock's own in-sandbox helper.
	res, err := sb.Exec(context.Background(), Step{Args: []string{initPath, "statfs", "/image-marker", "/usr/bin", "/etc"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	got := out.String()
	if !strings.Contains(got, `"/image-marker"`) || strings.Contains(got, "/usr/bin") || strings.Contains(got, `"/etc"`) {
		t.Errorf("step did not see the image root: %s", got)
	}
	if entries, _ := os.ReadDir(rootfs); len(entries) != 1 {
		t.Errorf("the image directory was modified: %v", entries)
	}
}

// The CPU quota reaches the host cgroup of the sandbox.
func TestCPUQuota(t *testing.T) {
	sb := newTestSandbox(t, func(c *Config) { c.Limits.CPUs = 0.5 })
	for _, d := range sb.cg.Dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us"))
		if err != nil {
			continue
		}
		if got := strings.TrimSpace(string(b)); got != "50000" {
			t.Fatalf("cpu.cfs_quota_us = %s, want 50000", got)
		}
		return
	}
	t.Skip("no cgroup v1 cpu controller on this host")
}

// Kill stops every process of the sandbox, background ones included, and
// the sandbox keeps serving steps.
func TestKill(t *testing.T) {
	sb := newTestSandbox(t, nil)
	sh(t, sb, "sleep 300 >/dev/null 2>&1 & echo $! > /tmp/bg.pid")
	if err := sb.Kill(); err != nil {
		t.Fatal(err)
	}
	out, _, res := sh(t, sb, "kill -0 $(cat /tmp/bg.pid) 2>/dev/null && echo alive || echo gone")
	if res.ExitCode != 0 || strings.TrimSpace(out) != "gone" {
		t.Fatalf("background process after Kill: %q %+v", out, res)
	}
}

// Extra mounts: a read-only one cannot be written, a read-write one can,
// and both show the host directory's content.
func TestExtraMounts(t *testing.T) {
	cfg := testConfig(t)
	ro, rw := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ro, "tool.txt"), []byte("cached"), 0o644)
	os.Chown(rw, 1000, 1000)
	cfg.Mounts = []Mount{{Source: ro, Destination: "/tools/ro", ReadOnly: true}, {Source: rw, Destination: "/cache"}}
	sb := startSandbox(t, cfg)
	out, _, _ := sh(t, sb, "cat /tools/ro/tool.txt; echo; touch /tools/ro/x 2>/dev/null && echo wrote-ro; echo data > /cache/out && echo wrote-rw")
	if out != "cached\nwrote-rw\n" {
		t.Errorf("output %q", out)
	}
	if _, err := os.Stat(filepath.Join(ro, "x")); err == nil {
		t.Error("write through a read-only mount reached the host")
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "out")); string(b) != "data\n" {
		t.Errorf("read-write mount: host sees %q", b)
	}
	if _, err := os.Stat("/tools"); err == nil {
		t.Error("a mount point was created in the host's root")
	}
}

// A file or mount point missing from the root, below directories that
// exist (/etc, /var), is created in the skeleton: the sandbox sees it, the
// directory keeps its other entries and masks, and the host's root is not
// touched. Below a mask it is refused.
func TestMissingPathsInRoot(t *testing.T) {
	name := "airlock-missing-" + filepath.Base(t.TempDir())
	cache := t.TempDir()
	os.Chmod(cache, 0o777)
	cfg := testConfig(t)
	asRoot(&cfg)
	cfg.Files = []File{{Path: "/etc/" + name + ".conf", Data: []byte("placed\n")}}
	cfg.Mounts = []Mount{{Source: cache, Destination: "/var/" + name + "/cache"}}
	sb := startSandbox(t, cfg)
	out, errOut, res := sh(t, sb, "cat /etc/"+name+".conf && echo data > /var/"+name+"/cache/out && grep -c ^root: /etc/passwd && (cat /etc/shadow 2>/dev/null | grep -c ^root:)")
	if res.ExitCode != 1 || out != "placed\n1\n0\n" {
		t.Errorf("got %q (stderr %q, %+v)", out, errOut, res)
	}
	if b, _ := os.ReadFile(filepath.Join(cache, "out")); string(b) != "data\n" {
		t.Errorf("mount below /var: host sees %q", b)
	}
	for _, p := range []string{"/etc/" + name + ".conf", "/var/" + name} {
		if _, err := os.Lstat(p); err == nil {
			os.RemoveAll(p)
			t.Errorf("%s was created in the host's root", p)
		}
	}

	masked := testConfig(t)
	masked.Mounts = []Mount{{Source: cache, Destination: "/root/" + name}}
	if sb, err := Create(context.Background(), masked); err == nil {
		sb.Destroy(context.Background())
		t.Error("a mount point below masked /root was accepted")
	} else if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "masked") {
		t.Errorf("mount below a mask: %v", err)
	}
}

// The sentry filters its events (monitor.SinkName): a step that opens a
// file 2000 times, with opens traced (the job has read-only paths),
// costs airlock a handful of packets, and the one write refused on a
// read-only path is still recorded.
func TestSentrySendsOnlyTheOpensKept(t *testing.T) {
	sb := newTestSandbox(t, func(c *Config) {
		for _, d := range []string{".git", ".git/hooks"} {
			if err := os.Mkdir(filepath.Join(c.Workspace, d), 0o755); err != nil {
				t.Fatal(err)
			}
			os.Chown(filepath.Join(c.Workspace, d), 1000, 1000)
		}
		c.ReadOnlyPaths = []string{".git/hooks"}
	})
	before := sb.record.Received()
	// Relative to the working directory, then to a directory's fd: the
	// sink in the sentry makes each path absolute.
	_, stderr, res := sh(t, sb, `i=0; while [ $i -lt 2000 ]; do : < /etc/hostname; i=$((i+1)); done
echo x > .git/hooks/pre-commit
python3 -c 'import os; os.open("hooks/post-checkout", os.O_WRONLY|os.O_CREAT, dir_fd=os.open(".git", os.O_RDONLY))'`)
	if res.ExitCode == 0 || strings.Count(stderr, "Read-only file system") != 2 {
		t.Fatalf("the writes to a read-only path: exit %d, %s", res.ExitCode, stderr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sb.Record().WritesRefused) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	w := sb.Record().WritesRefused
	if len(w) != 2 || w[0].Path != "/workspace/.git/hooks/pre-commit" || w[1].Path != "/workspace/.git/hooks/post-checkout" {
		t.Errorf("writes refused: %+v", w)
	}
	if got := sb.record.Received() - before; got > 200 {
		t.Errorf("airlock received %d events for a step of 2000 opens: the sentry sends every open", got)
	}
}
