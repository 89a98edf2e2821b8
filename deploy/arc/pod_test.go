package arc

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testimage"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// The egress the pod's job may have: an HTTP server inside the pod, on
// its loopback, under a name the organisation policy pins to it.
const orgPolicy = `package airlock
egress: {
	allow: [{host: "registry.test", ports: [8080]}]
	resolve: "registry.test": "127.0.0.1"
	allowCIDRs: ["127.0.0.1/32"]
}
attest: key: "/etc/airlock/signing.key"
// No registry is reachable from the test's pod: the hook's job container
// (node:20) runs on the pod's root, as an unmapped image does then.
images: pull: false
`

// TestRunnerPodOnContainerd runs the runner pod of values.yaml on
// containerd's CRI, driven by crictl as a kubelet drives a node, with
// images built here (nothing is pulled): the container's capabilities,
// seccomp profile (the shipped one, as a Localhost profile), user,
// resources, environment and volumes are the values' own, translated as
// the kubelet translates them (criContainer); only the image (the test's
// build: airlock, busybox, the host's node and git, the hook's index.js)
// and the command (a sleep, for the test to exec into, instead of the
// runner's run.sh) are the test's. In it:
//   - airlock doctor says the pod can run jobs;
//   - a policy-mode job passes, with egress allowed and refused through
//     the gateway, its record saying that the pod's cgroup enforces the
//     memory limit (the values' 8Gi) and that the workspace is bounded
//     in memory, and its attestation signed with the key from the
//     mounted Secret and verified;
//   - a pull request's job through the hook passes, run as the runner
//     in the pod runs it (hookJob): a script step with egress allowed
//     and refused, a JavaScript action, and an attestation signed with
//     the Secret's key;
//   - nothing of either job is left in the pod;
//   - a job through the hook in a runner pod of its own keeps its
//     attestation in a registry in another pod (the Secret's store and
//     credentials), where airlock attestations ls and verify --store
//     find it once the runner pod is gone;
//   - with a 1Gi limit, a memory bomb is reported as the pod's limit;
//   - with the runtime's RuntimeDefault seccomp profile, airlock fails
//     with the message that names the Localhost profile, not a crash.
func TestRunnerPodOnContainerd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: containerd")
	}
	c, v, n := setUp(t)
	pod := c.runPod(t, "airlock-runner")
	t.Cleanup(func() { c.removePod(pod) })
	start := func(t *testing.T, memory string, seccomp map[string]any) string {
		t.Helper()
		id := c.startRunner(t, pod, v, n, t.Name()[strings.LastIndex(t.Name(), "/")+1:], memory, seccomp)
		t.Cleanup(func() {
			c.run("stop", "--timeout", "5", id)
			c.run("rm", "--force", id)
		})
		return id
	}
	// job runs airlock run in the container's workspace and returns the
	// result file's outcome and the command's output.
	job := func(t *testing.T, id string, script string) (outcome, string) {
		t.Helper()
		out, code := c.exec(id, 3*time.Minute, "/bin/sh", "-c", `set -e
mkdir -p /home/runner/_work/repo && chown 1001:1001 /home/runner/_work/repo && cd /home/runner/_work/repo
airlock run --result /tmp/result.json -- sh -c '`+script+`' 2>&1 || echo "airlock exit $?"`)
		if code != 0 {
			t.Fatalf("exec: %d\n%s", code, out)
		}
		raw, _ := c.exec(id, time.Minute, "cat", "/tmp/result.json")
		var o outcome
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			t.Fatalf("the job's result: %v\n%s\n%s", err, raw, out)
		}
		return o, out
	}

	t.Run("as shipped", func(t *testing.T) {
		id := start(t, "", nil)
		out, code := c.exec(id, 3*time.Minute, "airlock", "doctor")
		t.Logf("airlock doctor in the pod:\n%s", out)
		if code != 0 || !strings.Contains(out, "this host can run airlock's jobs") {
			t.Fatalf("airlock doctor: exit %d", code)
		}
		for _, want := range []string{"read-only (a container that is not privileged)", "the pod's memory limit 8.0 GiB", "a tmpfs: no loop devices here", "/usr/local/bin/airlock-runsc, of this build"} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor does not say %q", want)
			}
		}
		serveModule(t, c, id)
		o, out := job(t, id, "wget -qO- http://registry.test:8080/m.zip > fetched; wget -qO- http://forbidden.test/ || true")
		t.Logf("the job:\n%s", out)
		if !o.Passed || o.Egress.Allowed != 1 || o.Egress.Denied != 1 {
			t.Fatalf("outcome %+v", o)
		}
		if !strings.HasPrefix(o.Sandbox.LimitsEnforcedBy, "the enclosing cgroup") || o.Sandbox.Limits.Memory != 8<<30 {
			t.Errorf("limits %+v enforced by %q: want the pod's 8Gi, enforced by the enclosing cgroup", o.Sandbox.Limits, o.Sandbox.LimitsEnforcedBy)
		}
		if o.WorkspaceVolume.Medium != "tmpfs" {
			t.Errorf("workspace medium %q, want tmpfs", o.WorkspaceVolume.Medium)
		}
		if o.Attestation.Bundle == "" {
			t.Fatalf("no signed attestation: %+v", o.Attestation)
		}
		if out, code := c.exec(id, time.Minute, "airlock", "verify", "--key", "/etc/airlock/signing.pub", o.Attestation.Bundle); code != 0 {
			t.Errorf("airlock verify of the pod's attestation: %d\n%s", code, out)
		}
		if got, _ := c.exec(id, time.Minute, "cat", "/home/runner/_work/repo/fetched"); got != "module-zip\n" && got != "module-zip" {
			t.Errorf("the job's fetch in the workspace: %q", got)
		}
		nothingLeft(t, c, id)
	})

	t.Run("a job through the hook", func(t *testing.T) {
		id := start(t, "", nil)
		serveModule(t, c, id)
		setUp := c.hookJob(t, n, id)
		t.Logf("the hook's set-up before the first step (prepare_job through index.js): %v", setUp.Round(time.Millisecond))
		nothingLeft(t, c, id)
	})

	t.Run("the record outlives the pod", func(t *testing.T) {
		storeInPod(t, c, v, n)
	})

	t.Run("a memory bomb", func(t *testing.T) {
		id := start(t, "1Gi", nil)
		o, out := job(t, id, "head -c 2000000000 /dev/zero | tail -c 1900000000 > /dev/null")
		if o.Passed || len(o.Steps) != 1 || o.Steps[0].Limit != "oom" || !strings.Contains(o.Steps[0].Message, "the memory limit of the cgroup enclosing airlock (1 GiB") {
			t.Fatalf("outcome %+v\n%s", o, out)
		}
	})

	t.Run("RuntimeDefault", func(t *testing.T) {
		id := start(t, "", map[string]any{"profile_type": 0})
		out, code := c.exec(id, 3*time.Minute, "/bin/sh", "-c", "mkdir -p /home/runner/_work/repo && chown 1001:1001 /home/runner/_work/repo && cd /home/runner/_work/repo && airlock run -- true")
		t.Logf("airlock run under RuntimeDefault: exit %d\n%s", code, out)
		if code != 69 || !strings.Contains(out, "forbids pivot_root") || !strings.Contains(out, "deploy/arc/seccomp.json") {
			t.Fatalf("want exit 69 naming the profile")
		}
	})
}

// serveModule starts the pod's HTTP server that the organisation policy
// lets jobs reach as registry.test:8080 (orgPolicy), with one file,
// m.zip ("module-zip"), in the runner container id.
func serveModule(t *testing.T, c *cri, id string) {
	t.Helper()
	if out, code := c.exec(id, time.Minute, "/bin/sh", "-c", "mkdir -p /www && echo module-zip > /www/m.zip && httpd -p 127.0.0.1:8080 -h /www"); code != 0 {
		t.Fatalf("the pod's HTTP server: %d %s", code, out)
	}
}

// nothingLeft checks that no job is left in the runner container id: no
// mount below airlock's volumes or the work volume (the jobs' state, the
// bounded workspace, the sandbox's), no job directory, and no process
// but the test's own (the container's first, a sleep; the pod's httpd;
// this shell) and the exited: the job's daemon outlives the hook call
// that started it, and the sleep it is left to does not reap it (the
// runner image's run.sh, a bash, would), so once it has ended it is a
// zombie, holding nothing.
func nothingLeft(t *testing.T, c *cri, id string) {
	t.Helper()
	left, _ := c.exec(id, time.Minute, "/bin/sh", "-c", `awk '$5 ~ "^(/run/airlock|/var/lib/airlock|/home/runner/_work)/" {print "mount " $5}' /proc/self/mountinfo
ls -d /run/airlock/jobs/* /run/airlock/hooks/hook-* 2>/dev/null
for f in /proc/[0-9]*/stat; do read -r l < "$f" && set -- $l && [ "$1" != 1 ] && [ "$1" != $$ ] && [ "$2" != "(httpd)" ] && [ "$3" != Z ] && echo "process $l"; done; true`)
	if strings.TrimSpace(left) != "" {
		t.Errorf("left in the pod after the job (mounts, job directories, processes):\n%s", left)
	}
}

// setUp starts a containerd, imports the pause and runner images, and
// makes the node: the seccomp profile where the kubelet looks, and a
// directory per volume of the values; the Secret holds the organisation
// policy and a signing key.
func setUp(t testing.TB) (*cri, values, node) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: containerd")
	}
	busybox := testtool.Path(t, testtool.Busybox, "the runner image's shell and tools")
	if !static(busybox) {
		testtool.Missing(t, busybox+" is not statically linked", "it runs in an image without a C library", testtool.Busybox.Install, testtool.Busybox.Require)
	}
	self, err := os.Executable()
	if err != nil || !static(self) {
		t.Fatalf("the test binary %s is the pod's pause process and must be static: build the tests with CGO_ENABLED=0 (%v)", self, err)
	}
	made := testhost.MadeBinaries(t)
	c := startCRI(t)
	v := readValues(t)

	// The images.
	pauseRoot := t.TempDir()
	copyFile(t, self, filepath.Join(pauseRoot, "pause"), 0o755)
	c.importImage("airlock.test/pause:1", testimage.Image(t, runtime.GOARCH, []string{pauseEnv + "=1"}, []string{"/pause"}, "", testimage.LayerOfDir(t, pauseRoot)))
	c.importImage("airlock.test/runner:1", testimage.Image(t, runtime.GOARCH, []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, nil, "/", testimage.LayerOfDir(t, runnerRoot(t, busybox, made))))

	// The node: the seccomp profile where the kubelet looks, and a
	// directory per volume; the Secret holds the policy and the key.
	n := node{seccompRoot: filepath.Join(c.dir, "seccomp"), volumes: map[string]string{}}
	copyFile(t, "seccomp.json", filepath.Join(n.seccompRoot, "airlock", "seccomp.json"), 0o644)
	for _, vol := range v.Template.Spec.Volumes {
		dir := filepath.Join(c.dir, "volumes", vol.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n.volumes[vol.Name] = dir
	}
	secret := n.volumes["airlock-config"]
	if secret == "" {
		t.Fatal("values.yaml has no airlock-config volume")
	}
	if err := os.WriteFile(filepath.Join(secret, "org.cue"), []byte(orgPolicy), 0o400); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(made, "airlock"), "keys", "generate", "--out", filepath.Join(secret, "signing")).CombinedOutput(); err != nil {
		t.Fatalf("airlock keys generate: %v: %s", err, out)
	}

	return c, v, n
}

// runPod starts a pod sandbox named name and returns its id.
func (c *cri) runPod(t testing.TB, name string) string {
	t.Helper()
	config := c.writeJSON("pod-"+name+".json", c.podConfig(name))
	id := c.must("runp", config)
	c.podConfigs[id] = config
	return id
}

func (c *cri) podConfig(name string) map[string]any {
	return map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "arc-runners", "uid": fmt.Sprintf("arc-test-%d-%s", os.Getpid(), name)},
		"log_directory": filepath.Join(c.dir, "logs"),
		"linux":         map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": 0, "pid": 1}}},
	}
}

func (c *cri) removePod(pod string) {
	c.run("stopp", pod)
	c.run("rmp", "--force", pod)
}

// startRunner creates and starts the runner container of the values in
// pod, named name, with memory instead of the values' limit where given,
// and seccomp instead of the values' profile where given; it returns the
// container's id.
func (c *cri) startRunner(t testing.TB, pod string, v values, n node, name, memory string, seccomp map[string]any) string {
	t.Helper()
	name = strings.ToLower(strings.NewReplacer(" ", "-", ",", "", "'", "").Replace(name))
	cc := criContainer(t, v.Template.Spec, n, "airlock.test/runner:1", []string{"/bin/sleep", "100000"}, memory)
	cc["metadata"] = map[string]any{"name": "runner-" + name}
	if seccomp != nil {
		cc["linux"].(map[string]any)["security_context"].(map[string]any)["seccomp"] = seccomp
	}
	id := c.must("create", pod, c.writeJSON("ctr-"+name+".json", cc), c.podConfigs[pod])
	c.must("start", id)
	return id
}

// outcome is what the test reads of airlock run's result file.
type outcome struct {
	Passed  bool `json:"passed"`
	Sandbox struct {
		LimitsEnforcedBy string                 `json:"limitsEnforcedBy"`
		Limits           struct{ Memory int64 } `json:"limits"`
	} `json:"sandbox"`
	Steps []struct {
		Limit   string `json:"limit"`
		Message string `json:"message"`
	} `json:"steps"`
	WorkspaceVolume struct {
		Medium string `json:"medium"`
	} `json:"workspaceVolume"`
	Egress struct {
		Allowed int `json:"allowed"`
		Denied  int `json:"denied"`
	} `json:"egress"`
	Attestation struct {
		Bundle string `json:"bundle"`
	} `json:"attestation"`
}

// runnerRoot is the runner image's root: airlock and its runsc sidecar
// (from the directory made), busybox and its applets, the runner's user,
// and the directories the values mount.
func runnerRoot(t testing.TB, busybox, made string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "usr/local/bin", "etc", "tmp", "run", "var/lib", "proc", "sys", "dev", "home/runner/_work", "opt/airlock"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	copyFile(t, busybox, filepath.Join(root, "bin", "busybox"), 0o755)
	for _, applet := range []string{"sh", "sleep", "cat", "ls", "mkdir", "chown", "echo", "true", "grep", "pidof", "awk", "wc", "head", "tail", "wget", "httpd", "id"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bin := range []string{"airlock", gvisor.RunscSidecar} {
		copyFile(t, filepath.Join(made, bin), filepath.Join(root, "usr/local/bin", bin), 0o755)
	}
	// The test binary, static, serves the attestation store's registry
	// in a pod of its own (storeInPod).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, self, filepath.Join(root, registryBinary), 0o755)
	// What the actions-runner image has and the hook uses: the runner's
	// node in its externals (it runs index.js and JavaScript actions) and
	// git (airlock reads the pull request's commits with it), each with
	// the host's libraries; and the hook, where the Dockerfile puts it.
	node := testtool.Path(t, testtool.Node, "the runner's node runs the hook's index.js and the job's JavaScript action")
	copyFile(t, node, filepath.Join(root, podNode), 0o755)
	testimage.CopyLibraries(t, root, node)
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git: ", err)
	}
	testimage.CopyIntoRoot(t, root, git)
	testimage.CopyLibraries(t, root, git)
	copyFile(t, "../../runner/hook/index.js", filepath.Join(root, podHook), 0o644)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nrunner:x:1001:1001:runner:/home/runner:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nrunner:x:1001:\n"), 0o644)
	return root
}

func copyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}
