package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/podlike"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// podMemory is the memory of the cgroup TestRunInAPodLikeContainer runs in.
const podMemory = 1 << 30

// airlock run where a pod's container would run it (the cgroup file
// system and /proc/sys read-only, no loop devices, in a cgroup of 1 GiB):
// a policy-mode job with the egress gateway passes; its allowed fetch
// works and its refused one is refused; the bounded workspace is kept in
// memory and merged; the record says that the pod's cgroup enforces the
// memory limit (1 GiB, not the policy's) and where the workspace's writes
// were kept; the summary says it; nothing is left behind (the run's own
// leak check). Run again under those limits (internal/podlike).
func TestRunInAPodLikeContainer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, ok := podlike.Active(); !ok {
		l := podlike.Pod
		l.Cgroups = podlike.MemoryCgroup(t, podMemory)
		podlike.Run(t, "^TestRunInAPodLikeContainer$", l, "TestRunInAPodLikeContainer")
		return
	}
	testtool.InSandbox(t, testtool.Curl, gvisor.DefaultPath, "the job fetches through the egress gateway with curl")
	port := upstream(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "module-zip") })
	ws := workspace(t)
	var out, errb bytes.Buffer
	code := execute([]string{"run", "-w", ws, "--state-dir", stateDir(t), "--org", egressOrg(t, port), "--workspace-size", "64M", "--json", "--",
		"sh", "-c", fmt.Sprintf("curl -sS http://registry.test:%d/m.zip > fetched; curl -sS https://forbidden.test/ 2>/dev/null; grep -vc '^0000' /proc/net/if_inet6 || true", port)}, &out, &errb)
	t.Logf("stderr:\n%s", errb.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var res struct {
		Passed  bool
		Sandbox struct {
			Network          string
			LimitsEnforcedBy string
			Limits           struct{ Memory int64 }
		}
		WorkspaceVolume struct{ Medium string }
		Egress          struct{ Allowed, Denied int }
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Passed || !strings.HasPrefix(res.Sandbox.Network, "egress gateway ") || res.Egress.Allowed != 1 || res.Egress.Denied != 1 {
		t.Fatalf("result %+v", res)
	}
	if !strings.HasPrefix(res.Sandbox.LimitsEnforcedBy, "the enclosing cgroup") || res.Sandbox.Limits.Memory != podMemory {
		t.Errorf("limits enforced by %q, memory %d; want the enclosing cgroup's %d", res.Sandbox.LimitsEnforcedBy, res.Sandbox.Limits.Memory, podMemory)
	}
	if res.WorkspaceVolume.Medium != "tmpfs" {
		t.Errorf("workspace volume medium %q, want tmpfs (no loop devices)", res.WorkspaceVolume.Medium)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "fetched")); err != nil || string(b) != "module-zip" {
		t.Errorf("the job's write was not merged into the workspace: %q %v", b, err)
	}
	for _, want := range []string{"limits: enforced by the enclosing cgroup", "memory 1.0 GiB", "kept in memory until the merge"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("the summary does not say %q", want)
		}
	}
}
