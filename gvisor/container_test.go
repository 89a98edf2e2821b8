package gvisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor/monitor"
)

// newImage returns an image directory as an admin would unpack it: the
// given files (path: content) and, at initPath, this test binary (static),
// whose in-sandbox tools stand in for an image's programs.
func newImage(t testing.TB, files map[string]string) string {
	t.Helper()
	img := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(img, initPath)
	if err := os.MkdirAll(filepath.Dir(tool), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(exe, tool); err != nil {
		copyFile(t, exe, tool)
	}
	for name, data := range files {
		p := filepath.Join(img, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return img
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
}

// tool is the command line of an in-sandbox tool (see runTool).
func tool(args ...string) []string { return append([]string{initPath}, args...) }

// startContainer starts a sub-container and destroys it when the test ends.
func startContainer(t *testing.T, sb *Sandbox, cc ContainerConfig) *Container {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sb.StartContainer(ctx, cc)
	if err != nil {
		t.Fatalf("start container: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Destroy(); err != nil {
			t.Errorf("destroy container: %v", err)
		}
	})
	return c
}

// runContainer runs a container to its end and returns stdout, stderr and
// the result.
func runContainer(t *testing.T, sb *Sandbox, cc ContainerConfig) (string, string, StepResult) {
	t.Helper()
	var out, errb bytes.Buffer
	cc.Stdout, cc.Stderr = &out, &errb
	c := startContainer(t, sb, cc)
	res, err := c.Wait(context.Background())
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return out.String(), errb.String(), res
}

// syncBuffer is a writer a test can read while a container writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// snapshot describes every entry of a directory tree: mode, size, mtime
// and content digest.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		sum := ""
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(b))
		}
		out[p] = fmt.Sprintf("%v %d %d %s", fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mountsNaming counts the mounts, in the mount namespace of any process on
// the host, whose source or mount point names one of the paths. The
// skeletons live in private namespaces that only runsc's processes hold,
// so /proc/self/mountinfo alone would not see them.
func mountsNaming(paths ...string) int {
	n := 0
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, path := range paths {
				if strings.Contains(line, path+"/") || strings.Contains(line, path+" ") {
					n++
					break
				}
			}
		}
	}
	return n
}

// A sub-container sees its image as its root: not the host's root, not the
// job container's. Files are placed over the image (also where it has no
// such file), writes land in the overlay, and the image directory on the
// host is left exactly as it was.
func TestContainerRootFS(t *testing.T) {
	img := newImage(t, map[string]string{"image-marker": "from-image\n", "etc/hosts": "127.0.0.1 image\n"})
	before := snapshot(t, img)
	sb := newTestSandbox(t, nil)
	files := []File{{Path: "/etc/hosts", Data: []byte("127.0.0.1 services\n")}, {Path: "/etc/resolv.conf", Data: []byte("nameserver 127.0.0.53\n")}}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"own root", tool("ls", "/"), ".airlock\n.airlock-exec\ndev\netc\nimage-marker\nproc\nrun\nsys\ntmp\n"},
		{"image content", tool("cat", "/image-marker"), "from-image\n"},
		{"files over the image", tool("cat", "/etc/hosts", "/etc/resolv.conf"), "127.0.0.1 services\nnameserver 127.0.0.53\n"},
		{"etc keeps the image's entries", tool("ls", "/etc"), "hosts\nresolv.conf\n"},
		{"write to the image's file", tool("write", "/image-marker", "changed"), ""},
		{"write a new file", tool("write", "/etc/new-file", "x"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, res := runContainer(t, sb, ContainerConfig{Name: "rootfs", RootFS: img, Files: files, Args: tc.args, User: &User{}})
			if res.ExitCode != 0 || out != tc.want {
				t.Errorf("%q: got %q (stderr %q, exit %d), want %q", tc.args, out, errOut, res.ExitCode, tc.want)
			}
		})
	}
	// The job container's root is the host's, without the image.
	if out, _, res := sh(t, sb, "test -e /image-marker || echo host-root"); res.ExitCode != 0 || out != "host-root\n" {
		t.Errorf("job container sees the image: %q %+v", out, res)
	}
	if after := snapshot(t, img); !maps.Equal(before, after) {
		t.Errorf("image directory changed:\nbefore %v\nafter  %v", before, after)
	}
}

// Output streams to the writers while the container runs; Wait returns the
// exit code; environment, user and working directory are as configured;
// the job's output cap and the container's timeout apply.
func TestContainerOutputAndExit(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_HOST_SECRET", "leaked")
	img := newImage(t, map[string]string{"marker": "from-image\n", "big": strings.Repeat("x", 1<<20), "work/here": ""})
	sb := newTestSandbox(t, func(c *Config) { c.Limits.Output = 64 << 10 })
	for _, tc := range []struct {
		name     string
		cc       ContainerConfig
		stdout   string // wanted exactly, unless empty
		contains string // wanted in stdout
		stderr   string // wanted in stderr
		code     int
		limit    string
	}{
		{name: "stdout, stderr, exit code", cc: ContainerConfig{Args: tool("cat", "/marker", "/missing")}, stdout: "from-image\n", stderr: "open /missing", code: 1},
		{name: "exit code", cc: ContainerConfig{Args: tool("exit", "3")}, code: 3},
		{name: "default user is the job's", cc: ContainerConfig{Args: tool("id")}, stdout: "uid=1000 gid=1000\n"},
		{name: "explicit user", cc: ContainerConfig{Args: tool("id"), User: &User{UID: 0, GID: 0}}, stdout: "uid=0 gid=0\n"},
		{name: "working directory", cc: ContainerConfig{Args: tool("ls", "."), Dir: "/work"}, stdout: "here\n"},
		{name: "environment", cc: ContainerConfig{Args: tool("env"), Env: []string{"INPUT_WHO=action", "HOME=/github/home"}}, contains: "INPUT_WHO=action\n"},
		{name: "output cap", cc: ContainerConfig{Args: tool("cat", "/big")}, code: 137, limit: LimitOutput},
		{name: "timeout", cc: ContainerConfig{Args: tool(), Timeout: time.Second}, code: 137, limit: LimitTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := tc.cc
			cc.Name, cc.RootFS = "out", img
			start := time.Now()
			out, errOut, res := runContainer(t, sb, cc)
			if res.ExitCode != tc.code || res.Limit != tc.limit {
				t.Fatalf("exit %d limit %q, want %d %q (%+v, stderr %q)", res.ExitCode, res.Limit, tc.code, tc.limit, res, errOut)
			}
			if tc.stdout != "" && out != tc.stdout || !strings.Contains(out, tc.contains) || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stdout %q stderr %q; want stdout %q containing %q, stderr containing %q", truncateForLog(out), errOut, tc.stdout, tc.contains, tc.stderr)
			}
			if strings.Contains(out, "leaked") {
				t.Errorf("host environment reached the container: %q", out)
			}
			if tc.limit != "" && res.Message == "" {
				t.Errorf("a container that hit a limit must say so: %+v", res)
			}
			if int64(len(out)) > sb.cfg.Limits.Output || res.StdoutBytes < int64(len(out)) {
				t.Errorf("captured %d bytes (reported %d), cap %d", len(out), res.StdoutBytes, sb.cfg.Limits.Output)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
	// Streamed: a service's first line arrives while it still runs.
	var out syncBuffer
	c := startContainer(t, sb, ContainerConfig{Name: "stream", RootFS: img, Args: tool("serve", "127.0.0.1:18080", "x"), Stdout: &out})
	waitFor(t, 30*time.Second, func() bool { return out.String() == "listening\n" })
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Wait(context.Background()); err != nil || res.ExitCode != 137 || res.Message != "killed" {
		t.Errorf("after Kill: %+v %v", res, err)
	}
}

// The job container and its sub-containers share one network stack:
// either side reaches a listener of the other on 127.0.0.1.
func TestContainerSharedLoopback(t *testing.T) {
	img := newImage(t, nil)
	sb := newTestSandbox(t, nil)
	for _, tc := range []struct {
		name     string
		listener string // "job" or "container"
	}{
		{"container reaches the job", "job"},
		{"job reaches a service container", "container"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := "127.0.0.1:18081"
			if tc.listener == "job" {
				_, errOut, res := sh(t, sb, initPath+" serve "+addr+" from-job >/dev/null 2>&1 &")
				if res.ExitCode != 0 {
					t.Fatalf("start listener: %+v %s", res, errOut)
				}
				t.Cleanup(func() { sb.Kill() })
				out, errOut, res := runContainer(t, sb, ContainerConfig{Name: "client", RootFS: img, Args: tool("fetch", addr)})
				if res.ExitCode != 0 || out != "from-job" {
					t.Fatalf("container fetched %q (stderr %q, %+v)", out, errOut, res)
				}
				// The sandbox's monitoring sees the container's connects
				// (its events arrive on their own socket: wait for them).
				seen := func() bool {
					return slices.ContainsFunc(sb.Record().Connects, func(c monitor.Connect) bool {
						return c.Address == "127.0.0.1" && c.Port == 18081
					})
				}
				for end := time.Now().Add(10 * time.Second); !seen() && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				}
				if !seen() {
					t.Errorf("the container's connect is not in the record: %+v", sb.Record().Connects)
				}
				return
			}
			var out syncBuffer
			svc := startContainer(t, sb, ContainerConfig{Name: "db", RootFS: img, Args: tool("serve", addr, "from-service"), Stdout: &out})
			waitFor(t, 30*time.Second, func() bool { return strings.Contains(out.String(), "listening") })
			// Killing the job's processes between steps spares services.
			if err := sb.Kill(); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			res, err := sb.Exec(context.Background(), Step{Args: tool("fetch", addr), Stdout: &got})
			if err != nil || res.ExitCode != 0 || got.String() != "from-service" {
				t.Fatalf("job fetched %q: %+v %v", got.String(), res, err)
			}
			if err := svc.Kill(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A host directory bind-mounted into a sub-container (the job's workspace,
// as for a Docker action) is shared: what the container writes the job
// container reads, and a read-only mount cannot be written.
func TestContainerWorkspaceMount(t *testing.T) {
	img := newImage(t, nil)
	sb := newTestSandbox(t, nil)
	ws := sb.Config().Workspace
	for _, tc := range []struct {
		name     string
		readOnly bool
		code     int
	}{
		{"read-write", false, 0},
		{"read-only", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := "from-container-" + strings.ReplaceAll(tc.name, "-", "")
			_, errOut, res := runContainer(t, sb, ContainerConfig{
				Name: "action", RootFS: img, Dir: "/github/workspace",
				Mounts: []Mount{{Source: ws, Destination: "/github/workspace", ReadOnly: tc.readOnly}},
				Args:   tool("write", file, "hello"),
			})
			if res.ExitCode != tc.code {
				t.Fatalf("write: exit %d, want %d (%s)", res.ExitCode, tc.code, errOut)
			}
			out, _, _ := sh(t, sb, "cat /workspace/"+file+" 2>/dev/null")
			if want := map[bool]string{false: "hello", true: ""}[tc.readOnly]; out != want {
				t.Errorf("job container reads %q, want %q", out, want)
			}
			_, err := os.Stat(filepath.Join(ws, file))
			if tc.readOnly != errors.Is(err, fs.ErrNotExist) {
				t.Errorf("host file: %v", err)
			}
		})
	}
}

// Killing a long-running container and destroying it, or destroying the
// sandbox while it runs, leaves no process, mount or file of it behind,
// in any mount namespace on the host.
func TestContainerCleanup(t *testing.T) {
	img := newImage(t, nil)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, sb *Sandbox, c *Container)
	}{
		{"kill then destroy", func(t *testing.T, sb *Sandbox, c *Container) {
			if err := c.Kill(); err != nil {
				t.Fatal(err)
			}
			res, err := c.Wait(context.Background())
			if err != nil || res.ExitCode != 137 || res.Message != "killed" {
				t.Errorf("after Kill: %+v %v", res, err)
			}
			if err := c.Destroy(); err != nil {
				t.Fatal(err)
			}
		}},
		{"destroy the sandbox", func(t *testing.T, sb *Sandbox, c *Container) {
			if err := sb.Destroy(context.Background()); err != nil {
				t.Fatal(err)
			}
			if res, _ := c.Wait(context.Background()); res.ExitCode != 137 {
				t.Errorf("after the sandbox's Destroy: %+v", res)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newTestSandbox(t, nil)
			c, err := sb.StartContainer(context.Background(), ContainerConfig{
				Name: "svc", RootFS: img, Args: tool(), // the helper's init: runs until killed
				Files: []File{{Path: "/etc/hosts", Data: []byte("127.0.0.1 svc\n")}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := countProcesses(c.dir); n == 0 {
				t.Fatal("no gofer of the container found: the checks below would prove nothing")
			}
			if n := mountsNaming(c.dir, img); n == 0 {
				t.Fatal("no mount of the container found: the checks below would prove nothing")
			}
			tc.end(t, sb, c)
			if err := c.Destroy(); err != nil {
				t.Errorf("second Destroy: %v", err)
			}
			if n := countProcesses(c.dir); n != 0 {
				t.Errorf("%d processes of the container left", n)
			}
			if n := mountsNaming(c.dir, img); n != 0 {
				t.Errorf("%d mounts of the container left", n)
			}
			if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("container directory left: %v", err)
			}
			if sb.Dead() == "" {
				// The sandbox serves on, and the name is free again.
				if _, _, res := sh(t, sb, "true"); res.ExitCode != 0 {
					t.Errorf("sandbox broken after the container's end: %+v", res)
				}
				runContainer(t, sb, ContainerConfig{Name: "svc", RootFS: img, Args: tool("exit", "0")})
				return
			}
			if n := countProcesses(sb.Dir()); n != 0 {
				t.Errorf("%d processes of the job left", n)
			}
			if n := mountsNaming(sb.Dir()); n != 0 {
				t.Errorf("%d mounts of the job left", n)
			}
			if _, err := sb.StartContainer(context.Background(), ContainerConfig{Name: "late", RootFS: img, Args: tool()}); err == nil {
				t.Error("a container started in a destroyed sandbox")
			}
		})
	}
}

// Bad configurations are refused before anything runs, with an error that
// names the problem; a command the image lacks fails the start cleanly.
// Nothing is left behind and the sandbox keeps working.
func TestContainerBadInput(t *testing.T) {
	img := newImage(t, nil)
	notDir := filepath.Join(img, initPath)
	sb := newTestSandbox(t, nil)
	ok := ContainerConfig{Name: "c", RootFS: img, Args: tool("exit", "0")}
	for _, tc := range []struct {
		name    string
		mutate  func(*ContainerConfig)
		invalid bool   // errors.Is ErrInvalidConfig
		want    string // in the message
	}{
		{"missing rootfs", func(c *ContainerConfig) { c.RootFS = filepath.Join(img, "missing") }, true, "no such file"},
		{"relative rootfs", func(c *ContainerConfig) { c.RootFS = "images/alpine" }, true, "absolute path"},
		{"rootfs is a file", func(c *ContainerConfig) { c.RootFS = notDir }, true, "not a directory"},
		{"host root", func(c *ContainerConfig) { c.RootFS = "/" }, true, "state root"},
		{"no args", func(c *ContainerConfig) { c.Args = nil }, true, "no command"},
		{"no name", func(c *ContainerConfig) { c.Name = "" }, true, "container name"},
		{"name with a slash", func(c *ContainerConfig) { c.Name = "../x" }, true, "container name"},
		{"the job's id", func(c *ContainerConfig) { c.Name = sb.ID() }, true, "job id"},
		{"relative mount source", func(c *ContainerConfig) { c.Mounts = []Mount{{Source: "ws", Destination: "/ws"}} }, true, "absolute path"},
		{"missing mount source", func(c *ContainerConfig) { c.Mounts = []Mount{{Source: "/nonexistent-airlock", Destination: "/ws"}} }, true, "not a directory"},
		{"relative mount destination", func(c *ContainerConfig) { c.Mounts = []Mount{{Source: img, Destination: "ws"}} }, true, "absolute path"},
		{"mount over a file", func(c *ContainerConfig) { c.Mounts = []Mount{{Source: img, Destination: initPath}} }, true, "not a directory"},
		{"relative file", func(c *ContainerConfig) { c.Files = []File{{Path: "etc/hosts"}} }, true, "absolute path"},
		{"relative dir", func(c *ContainerConfig) { c.Dir = "work" }, true, "absolute path"},
		{"bad capability", func(c *ContainerConfig) { c.Capabilities = []string{"SETUID"} }, true, "CAP_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := ok
			tc.mutate(&cc)
			c, err := sb.StartContainer(context.Background(), cc)
			if err == nil {
				c.Destroy()
				t.Fatal("started")
			}
			t.Log(err)
			if errors.Is(err, ErrInvalidConfig) != tc.invalid || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want ErrInvalidConfig %v, containing %q", err, tc.invalid, tc.want)
			}
		})
	}
	// A command the image lacks: the container starts through airlock's
	// exec shim, which says so and exits as a shell would.
	missing := ok
	missing.Name, missing.Args = "missing", []string{"/bin/sh", "-c", "true"}
	var errs bytes.Buffer
	missing.Stderr = &errs
	mc := startContainer(t, sb, missing)
	if res, err := mc.Wait(context.Background()); err != nil || res.ExitCode != 127 || errs.String() != "airlock: /bin/sh: command not found in the sandbox\n" {
		t.Errorf("command not in the image: exit %d (%v), stderr %q", res.ExitCode, err, errs.String())
	}
	if err := mc.Destroy(); err != nil {
		t.Fatal(err)
	}
	// Two containers of one name at a time are refused.
	startContainer(t, sb, ContainerConfig{Name: "twice", RootFS: img, Args: tool()})
	if _, err := sb.StartContainer(context.Background(), ContainerConfig{Name: "twice", RootFS: img, Args: tool()}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second container of one name: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(sb.Dir(), "containers"))
	if len(ents) != 1 {
		t.Errorf("container directories left by failed starts: %v", ents)
	}
	if _, _, res := sh(t, sb, "true"); res.ExitCode != 0 {
		t.Errorf("sandbox broken by failed starts: %+v", res)
	}
}

// A Beneath mount is bound as its path resolves without symlinks: a
// directory below the workspace reaches the container; one the job
// swapped for a symlink to a host directory is refused, for a container
// and for a job sandbox alike, and the host directory is not mounted.
func TestMountBeneath(t *testing.T) {
	img := newImage(t, nil)
	sb := newTestSandbox(t, nil)
	ws := sb.Config().Workspace
	os.MkdirAll(filepath.Join(ws, "sub", "dir"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "dir", "marker"), []byte("inside"), 0o644)
	secret := t.TempDir()
	os.WriteFile(filepath.Join(secret, "marker"), []byte("host secret"), 0o644)
	os.Symlink(secret, filepath.Join(ws, "sub", "link"))
	os.Symlink(filepath.Join(ws, "sub"), filepath.Join(ws, "linked-parent"))
	for _, tc := range []struct {
		name, source string
		want         string // output, or the error
	}{
		{"plain", filepath.Join(ws, "sub", "dir"), "inside"},
		{"the workspace itself", ws, ""},
		{"a symlink to a host directory", filepath.Join(ws, "sub", "link"), "without following symlinks"},
		{"a symlink on the way", filepath.Join(ws, "linked-parent", "dir"), "without following symlinks"},
		{"outside", secret, "not below"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c, err := sb.StartContainer(context.Background(), ContainerConfig{
				Name: "beneath", RootFS: img, Stdout: &out,
				Mounts: []Mount{{Source: tc.source, Destination: "/mnt", Beneath: ws}},
				Args:   tool("cat", "/mnt/marker"),
			})
			if err != nil {
				if !strings.Contains(err.Error(), tc.want) || tc.want == "inside" || tc.want == "" {
					t.Fatalf("start: %v", err)
				}
				return
			}
			c.Wait(context.Background())
			c.Destroy()
			if !strings.Contains(out.String(), tc.want) || strings.Contains(out.String(), "host secret") {
				t.Errorf("container read %q, want %q", out.String(), tc.want)
			}
		})
	}
	cfg := testConfig(t)
	os.Symlink(secret, filepath.Join(cfg.Workspace, "link"))
	cfg.Mounts = []Mount{{Source: filepath.Join(cfg.Workspace, "link"), Destination: "/mnt", Beneath: cfg.Workspace}}
	if _, err := Create(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "without following symlinks") {
		t.Errorf("job sandbox with a swapped mount: %v", err)
	}
}

// A mask is applied where its path leads inside the root: on a host
// whose /home is a symlink (to var/home, absolute or not), the secret
// under it is still masked.
func TestLookupMasksThroughSymlinks(t *testing.T) {
	for _, tc := range []struct {
		name, link string
	}{{"absolute", "/var/home"}, {"relative", "var/home"}, {"via dotdot", "etc/../var/home"}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "var/home/runner/.creds"), 0o755)
			os.WriteFile(filepath.Join(root, "var/home/runner/token"), []byte("x"), 0o600)
			os.MkdirAll(filepath.Join(root, "etc"), 0o755)
			os.Symlink(tc.link, filepath.Join(root, "home"))
			m, err := lookupMasks(root, []string{"/home/runner/.creds", "/home/runner/token", "/home/nobody/x"})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.dirs, []string{"var/home/runner/.creds"}) || !slices.Equal(m.files, []string{"var/home/runner/token"}) {
				t.Errorf("dirs %v files %v", m.dirs, m.files)
			}
		})
	}
	root := t.TempDir()
	os.Symlink("loop", filepath.Join(root, "loop"))
	if m, err := lookupMasks(root, []string{"/loop/x"}); err != nil || len(m.dirs)+len(m.files) != 0 {
		t.Errorf("a symlink loop: %v %+v", err, m)
	}
}

// A container's first process is in the exec record (it is started, not
// exec'd: through airlock's exec shim, whose execve is the record), with
// its command, the digest of what ran, and as airlock's.
func TestContainerStartRecorded(t *testing.T) {
	img := newImage(t, nil)
	sb := newTestSandbox(t, nil)
	_, _, res := runContainer(t, sb, ContainerConfig{Name: "recorded", RootFS: img, Args: tool("exit", "7")})
	if res.ExitCode != 7 {
		t.Fatalf("exit %d", res.ExitCode)
	}
	want := strings.Join(tool("exit", "7"), " ")
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, e := range sb.Record().Execs {
			if strings.Join(e.Argv, " ") == want {
				exe, _ := os.Executable()
				if e.PID == 0 || e.SHA256 != fileDigest(t, exe) || e.Source != monitor.SourceAirlock {
					t.Errorf("record %+v: want a pid, the digest of %s, source %q", e, exe, monitor.SourceAirlock)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container's start is not in the record: %+v", sb.Record().Execs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A sandbox whose mounts are exclusive to its job has the sentry keep
// the workspace's files as its own (the mount's cache is fscache), and
// refuses a second container, whose own mount of the workspace would
// write behind that cache.
func TestExclusiveMounts(t *testing.T) {
	img := newImage(t, nil)
	for _, exclusive := range []bool{false, true} {
		t.Run(map[bool]string{false: "shared", true: "exclusive"}[exclusive], func(t *testing.T) {
			sb := newTestSandbox(t, func(c *Config) { c.ExclusiveMounts = exclusive })
			out, _, _ := sh(t, sb, "grep ' /workspace ' /proc/self/mounts")
			if want := map[bool]string{false: "cache=remote_revalidating", true: "cache=fscache"}[exclusive]; !strings.Contains(out, want) {
				t.Errorf("the workspace's mount: %q, want %s", out, want)
			}
			c, err := sb.StartContainer(context.Background(), ContainerConfig{Name: "c", RootFS: img, Args: tool("exit", "0")})
			if err == nil {
				c.Destroy()
			}
			refused := errors.Is(err, ErrInvalidConfig) && strings.Contains(err.Error(), "exclusive to its job")
			if refused != exclusive {
				t.Errorf("start a container: %v, want refused %v", err, exclusive)
			}
		})
	}
}
