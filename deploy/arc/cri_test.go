package arc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/buildinfo"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// pauseEnv makes the test binary the pod's pause process: it waits for
// SIGTERM, as Kubernetes' pause does (the binary is static, so it runs
// in an image of its own).
const pauseEnv = "AIRLOCK_TEST_PAUSE"

func TestMain(m *testing.M) {
	if addr := os.Getenv(registryEnv); addr != "" {
		serveRegistry(addr)
	}
	if os.Getenv(pauseEnv) == "1" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// cri is a containerd of the test's own, driven through its CRI by
// crictl, as a kubelet drives a node's: its own root, state, socket, runc
// state and CNI network, all removed at the end.
type cri struct {
	t                 testing.TB
	dir, state, sock  string
	crictl, ctrBinary string
	// podConfigs are the config files of the pods started, by id:
	// crictl create wants a container's pod's config again.
	podConfigs map[string]string
}

// testBase holds the state of every containerd these tests start, so
// that a leftover is easy to tell.
const testBase = "/run/airlock-test-arc"

func startCRI(t testing.TB) *cri {
	t.Helper()
	containerd := testtool.Path(t, testtool.Containerd, "the runner pod runs on containerd's CRI, as on a Kubernetes node")
	runc := testtool.Path(t, testtool.Runc, "containerd runs the pod's containers with runc")
	c := &cri{t: t, dir: t.TempDir(), podConfigs: map[string]string{}}
	c.crictl = testtool.Path(t, testtool.Crictl, "crictl drives the CRI as the kubelet would")
	c.ctrBinary = testtool.Path(t, testtool.Ctr, "ctr imports the images the test builds (nothing is pulled)")
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", plugin)); err != nil {
			testtool.Missing(t, "the CNI plugin "+plugin+" is not in /usr/lib/cni", "the pod has a CNI network, as on a node", "apt-get install containernetworking-plugins", testtool.Containerd.Require)
		}
	}
	if err := os.MkdirAll(testBase, 0o700); err != nil {
		t.Fatal(err)
	}
	state, err := os.MkdirTemp(testBase, "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c.state, c.sock = state, filepath.Join(state, "containerd.sock")
	cniDir := filepath.Join(c.dir, "cni")
	os.MkdirAll(cniDir, 0o755)
	// A bridge of the test's own; no masquerade, no route out of the node.
	bridge := fmt.Sprintf("alk%d", os.Getpid()%100000)
	conflist := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "airlock-arc-test", "plugins": [
 {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
  "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.233.%d.0/24"}]]}},
 {"type": "loopback"}]}`, bridge, filepath.Join(c.dir, "ipam"), os.Getpid()%250)
	os.WriteFile(filepath.Join(cniDir, "10-test.conflist"), []byte(conflist), 0o644)
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "airlock.test/pause:1"
  # A node's kubelet lowers the pause container's oom_score_adj, which
  # takes CAP_SYS_RESOURCE; where the test runs may lack it.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q
`, filepath.Join(c.dir, "root"), state, c.sock, c.sock+".ttrpc", filepath.Join(c.dir, "opt"), cniDir, runc, filepath.Join(state, "runc"))
	cfg := filepath.Join(c.dir, "config.toml")
	os.WriteFile(cfg, []byte(config), 0o600)
	logf, err := os.Create(filepath.Join(c.dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(containerd, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		c.removeLeftovers(bridge)
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("containerd's log (last 4 KiB):\n%s", tail(b, 4096))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if conn, err := net.Dial("unix", c.sock); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not start in 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// removeLeftovers unmounts what containerd left below the test's
// directories (a shim killed with it leaves its rootfs mounted), then
// removes its state and the test's bridge.
func (c *cri) removeLeftovers(bridge string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.HasPrefix(f[4], c.state+"/") || strings.HasPrefix(f[4], c.dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		unix.Unmount(points[i], unix.MNT_DETACH)
	}
	os.RemoveAll(c.state)
	exec.Command("ip", "link", "delete", bridge).Run()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// run runs crictl against the test's containerd and returns its
// standard output, trimmed.
func (c *cri) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.crictl, append([]string{"--runtime-endpoint", "unix://" + c.sock, "--timeout", "2m"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("crictl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), err
}

func (c *cri) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// importImage writes img as an image tarball tagged ref and imports it
// into containerd's k8s.io namespace, as a node's images are.
func (c *cri) importImage(ref string, img v1.Image) {
	c.t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		c.t.Fatal(err)
	}
	file := filepath.Join(c.dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		c.t.Fatal(err)
	}
	out, err := exec.Command(c.ctrBinary, "--address", c.sock, "-n", "k8s.io", "images", "import", file).CombinedOutput()
	if err != nil {
		c.t.Fatalf("ctr images import %s: %v: %s", ref, err, out)
	}
}

// writeJSON writes v as a crictl config file in the test's directory.
func (c *cri) writeJSON(file string, v any) string {
	c.t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		c.t.Fatal(err)
	}
	p := filepath.Join(c.dir, file)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// exec runs a command in the container and returns its combined output
// and exit code (crictl exec passes the command's code through).
func (c *cri) exec(id string, timeout time.Duration, cmd ...string) (string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	x := exec.CommandContext(ctx, c.crictl, append([]string{"--runtime-endpoint", "unix://" + c.sock, "exec", "--timeout", fmt.Sprint(int(timeout.Seconds())), id}, cmd...)...)
	out, err := x.CombinedOutput()
	code := 0
	if err != nil {
		// crictl exits 1 whatever the command's code, which it prints.
		code = -1
		if _, after, ok := strings.Cut(string(out), "command terminated with exit code "); ok {
			fmt.Sscanf(after, "%d", &code)
		}
	}
	// crictl's own log lines are not the command's.
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "time=") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n"), code
}

// static is true when the executable at path runs in an image without a
// C library.
func static(path string) bool {
	ok, err := buildinfo.Static(path)
	return err == nil && ok
}
