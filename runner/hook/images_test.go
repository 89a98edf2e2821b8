package hook

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/internal/testimage"
)

// imageRootFS makes an unpacked "image" for tests: bash and a few tools
// with the libraries they load, the usual merged-/usr symlinks, and a
// marker file no host has.
func imageRootFS(t testing.TB, marker string) string {
	t.Helper()
	root := t.TempDir()
	os.Chmod(root, 0o755)
	for _, d := range []string{"usr/bin", "usr/lib", "usr/lib64", "etc", "tmp", "proc", "dev", "sys"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}} {
		os.Symlink(l[0], filepath.Join(root, l[1]))
	}
	for _, bin := range []string{"bash", "cat", "ls", "id", "sleep", "env", "rm", "ln", "mv", "mkdir", "touch", "chown"} {
		p, err := exec.LookPath(bin)
		if err != nil {
			t.Skipf("needs %s", bin)
		}
		testimage.CopyIntoRoot(t, root, p)
		testimage.CopyLibraries(t, root, p)
	}
	os.WriteFile(filepath.Join(root, "etc", "image-release"), []byte(marker+"\n"), 0o644)
	// As `docker export` leaves them: empty files the runtime fills.
	for _, f := range []string{"resolv.conf", "hosts", "hostname"} {
		os.WriteFile(filepath.Join(root, "etc", f), nil, 0o644)
	}
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/bash\n"), 0o644)
	return root
}

// The job container's image, mapped by the organisation policy to an
// unpacked root filesystem, is the job's root: the steps see the image's
// files, not the host's, and the runner's directories at their paths.
// An image that is not mapped runs on the policy's root and says so.
func TestHookJobImage(t *testing.T) {
	for _, tc := range []struct {
		name, image, want string
		bundle            bool
	}{
		{"mapped", "docker.io/library/node:20", "image-node-20", false},
		{"mapped to a bundle", "node:20", "NODE_VERSION=20.1", true},
		{"not mapped", "node:18", "host-root", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunnerHost(t)
			root := imageRootFS(t, "image-node-20")
			if tc.bundle {
				root = writeBundle(t, root, []string{"node"}, []string{"NODE_VERSION=20.1"})
			}
			os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: images: %q: %q\n", "node:20", root)), 0o644)
			h.job.Image = tc.image
			state := h.prepare()
			code, out := h.step(state, `cat /etc/image-release 2>/dev/null || echo host-root; ls /__w/app/app; test -e /__e && echo externals-mounted; id -u; echo "NODE_VERSION=$NODE_VERSION"`)
			if code != 0 || !strings.Contains(out, tc.want) || !strings.Contains(out, "main.go") || !strings.Contains(out, "externals-mounted") {
				t.Fatalf("step: exit %d: %s", code, out)
			}
			if code, out := h.cleanup(state); code != 0 {
				t.Fatalf("cleanup: exit %d: %s", code, out)
			}
			if tc.bundle {
				root = filepath.Join(root, "rootfs")
			}
			if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 0 {
				t.Errorf("the image directory was written: %v", entries)
			}
		})
	}
}

// testServiceEnv makes the test binary a tiny service (for a service
// container's image): it answers each line on a TCP connection.
const testServiceEnv = "AIRLOCK_TEST_SERVICE"

func serveForTest(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("service listening on", addr)
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Fprintf(c, "pong %s", line)
		}()
	}
}

// writeBundle makes an OCI runtime bundle of an image root: config.json
// with the image's command, as `umoci unpack` writes it.
func writeBundle(t testing.TB, root string, args []string, env []string) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	if err := os.Rename(root, filepath.Join(dir, "rootfs")); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
		"process": map[string]any{"args": args, "env": env, "cwd": "/"}})
	os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	return dir
}

// A job with a service and a Docker action, both on images the
// organisation maps: the service runs in the job's sandbox and the job
// reaches it at its name; the action runs on its image with the
// workspace at /github/workspace, and what it writes there the job sees.
// Unmapped images, Dockerfile actions and services the policy does not
// allow fail with messages that name them.
func TestHookServicesAndDockerActions(t *testing.T) {
	h := newRunnerHost(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svcRoot := imageRootFS(t, "image-db")
	copyFile(t, self, filepath.Join(svcRoot, "usr/bin/db-server"))
	svc := writeBundle(t, svcRoot, []string{"/usr/bin/db-server"}, []string{testServiceEnv + "=127.0.0.1:6379"})
	action := writeBundle(t, imageRootFS(t, "image-action"), []string{"/usr/bin/bash", "-c", `echo "action $INPUT_WHO on $(cat /etc/image-release)"; echo from-action > /github/workspace/action-out; echo "act=$INPUT_WHO" >> "$GITHUB_OUTPUT"; exec 3<>/dev/tcp/db/6379 && echo hi >&3 && read -r l <&3 && echo "action got: $l"; (echo '{}' > /github/runner_temp/_runner_hook_responses/r.json) 2>/dev/null && echo responses-WRITTEN || echo responses-refused; ls /var/run/docker.sock 2>&1; exit 4`}, nil)
	org := fmt.Sprintf("package airlock\nsandbox: images: {%q: %q, %q: %q, %q: %q}\n", "acme/db:1", svc, "ghcr.io/acme/action:2", action, "node:20", imageRootFS(t, "image-job"))
	// Root in the sandbox (the image's user), as Docker runs a container
	// job: what a job can do to the runner's directories then. The
	// policy masks a directory of the checkout. The workspace is not
	// bounded (an organisation may say so): in a bounded one the job
	// cannot rename the masked directory's parent at all (overlayfs
	// refuses to rename a directory the job did not make, and a copy
	// cannot read the masked one), and the check that the masks are in
	// place would not be reached.
	os.MkdirAll(filepath.Join(h.repo, "sub", "private"), 0o755)
	os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(org+"sandbox: services: true\nsandbox: user: \"image\"\nsandbox: masks: \"/__w/app/app/sub/private\": true\nsandbox: limits: workspace: \"0\"\n"), 0o644)

	// A service, as the runner sends it: no name (airlock names it
	// after its image: "db").
	h.job.Services = []servicePayload{{Image: "acme/db:1", Args: []string{}, Env: map[string]string{}, Ports: []string{"6379:6379"}}}
	state := h.prepare()
	code, out := h.step(state, `exec 3<>/dev/tcp/db/6379; echo ping >&3; read -r line <&3; echo "got: $line"; echo "no_proxy=$no_proxy"`)
	if code != 0 || !strings.Contains(out, "got: pong ping") || !strings.Contains(out, "no_proxy=localhost,127.0.0.1,db") {
		t.Fatalf("the job did not reach its service: exit %d: %s", code, out)
	}
	stateJSON, _ := json.Marshal(state)
	containerStep := func(image string, dockerfile *string) (int, string) {
		os.WriteFile(filepath.Join(h.temp, fileCommandsDir, "set_output_act"), nil, 0o644)
		code, out, _ := h.send(RunContainerStep, payload{Image: image, Dockerfile: dockerfile, Args: []string{},
			Env: map[string]string{"INPUT_WHO": "ci", "GITHUB_OUTPUT": fileCommandsInAction + "/set_output_act"}, State: stateJSON})
		return code, out
	}
	code, out = containerStep("ghcr.io/acme/action:2", nil)
	if code != 4 || !strings.Contains(out, "action ci on image-action") || !strings.Contains(out, "action got: pong hi") || !strings.Contains(out, "responses-refused") || !strings.Contains(out, "No such file") {
		t.Fatalf("docker action: exit %d: %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(h.repo, "action-out")); string(b) != "from-action\n" {
		t.Errorf("the action's write to the workspace: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(h.temp, fileCommandsDir, "set_output_act")); string(b) != "act=ci\n" {
		t.Errorf("the action's output, as the runner reads it: %q", b)
	}
	dockerfile := "Dockerfile"
	for _, tc := range []struct {
		image      string
		dockerfile *string
		want       string
	}{
		{"alpine:3", nil, `image "alpine:3" is not mapped`},
		{"", &dockerfile, "no image builder"},
	} {
		if code, out := containerStep(tc.image, tc.dockerfile); code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("run_container_step %q: exit %d: %s", tc.image, code, out)
		}
	}
	if code, out := h.step(state, `cat action-out`); code != 0 || !strings.Contains(out, "from-action") {
		t.Errorf("the job after the action: exit %d: %s", code, out)
	}
	// The job swaps a directory the next action mounts for a symlink to
	// the host's /etc: the action is refused, the host's /etc is not
	// mounted.
	if code, out := h.step(state, `rm -rf /github/home/* /__w/_temp/_github_home && ln -s /etc /__w/_temp/_github_home`); code != 0 {
		t.Fatalf("swap: exit %d: %s", code, out)
	}
	if code, out := containerStep("ghcr.io/acme/action:2", nil); code == 0 || !strings.Contains(out, "without following symlinks") || strings.Contains(out, "action ci on") {
		t.Errorf("an action with a swapped volume: exit %d: %s", code, out)
	}
	// The runner's temp directory (and the hook responses masked in it)
	// cannot be moved: it is a mount of its own.
	if code, out := h.step(state, `mv /__w/_temp /__w/app/app/t 2>&1 && echo MOVED; true`); code != 0 || strings.Contains(out, "MOVED") {
		t.Fatalf("the job moved the runner's temp directory: exit %d: %s", code, out)
	}
	// The job carries a masked directory of the checkout into a volume by
	// renaming its parent: no Docker action runs any more.
	if code, out := h.step(state, `mv /__w/app/app/sub /__w/app/app/sub2 && ls /__w/app/app/sub2`); code != 0 {
		t.Fatalf("rename: exit %d: %s", code, out)
	}
	if code, out := containerStep("ghcr.io/acme/action:2", nil); code == 0 || !strings.Contains(out, "was moved or replaced by the job") {
		t.Errorf("an action after the masks moved: exit %d: %s", code, out)
	}
	if _, out := h.cleanup(state); !strings.Contains(out, "[service-db] service listening on 127.0.0.1:6379") {
		t.Errorf("cleanup does not show the service's output: %s", out)
	}

	// Services the policy does not allow: prepare_job names them.
	os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(org), 0o644)
	if code, out, _ := h.send(PrepareJob, h.job); code == 0 || !strings.Contains(out, "db (acme/db:1): the policy does not allow services") {
		t.Errorf("refused services: exit %d: %s", code, out)
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// A service whose image lacks its command fails prepare_job, with the
// line airlock's exec shim said, as Docker's start of it would: the job
// is not left to run without its service.
func TestHookServiceWithoutItsCommand(t *testing.T) {
	h := newRunnerHost(t)
	svc := writeBundle(t, imageRootFS(t, "image-db"), []string{"/usr/bin/no-such-server"}, nil)
	os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: services: true\nsandbox: images: {%q: %q, %q: %q}\n",
		"acme/db:1", svc, "node:20", imageRootFS(t, "image-job"))), 0o644)
	h.job.Services = []servicePayload{{Image: "acme/db:1", Args: []string{}, Env: map[string]string{}, Ports: []string{}}}
	code, out, _ := h.send(PrepareJob, h.job)
	if code == 0 || !strings.Contains(out, "service db: its command did not start (exit 127): airlock: /usr/bin/no-such-server: command not found in the sandbox") {
		t.Errorf("prepare_job: exit %d: %s", code, out)
	}
	if code, out := h.cleanup(map[string]any{}); code != 0 {
		t.Errorf("cleanup after the failed prepare: exit %d: %s", code, out)
	}
}
