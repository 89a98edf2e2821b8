package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// egressOrg writes an organisation policy that allows registry.test on
// port, pinned to 127.0.0.1 (a test-only pin, with its explicit CIDR).
func egressOrg(t testing.TB, port int) string {
	t.Helper()
	return orgPolicy(t, fmt.Sprintf(`egress: {
	allow: [{host: "registry.test", ports: [%d]}]
	resolve: "registry.test": "127.0.0.1"
	allowCIDRs: ["127.0.0.1/32"]
}
`, port))
}

// A policy-mode run has the gateway: an allowed fetch works, a forbidden
// one is refused, the step's stderr says what was refused and how to allow
// it, and --json carries every decision.
func TestRunEgressDecisions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Curl, gvisor.DefaultPath, "the job fetches through the egress gateway with curl")
	port := upstream(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "module-zip") })

	var out, errb bytes.Buffer
	code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--org", egressOrg(t, port), "--json", "--",
		"sh", "-c", fmt.Sprintf("curl -sS http://registry.test:%d/m.zip; curl -sS https://forbidden.test/ 2>/dev/null; true", port)}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	stderr := errb.String()
	for _, want := range []string{
		"module-zip",
		"airlock: network egress refused during this step (1):",
		"forbidden.test:443 (proxy-connect): forbidden.test is not in egress.allow",
		`to allow it: add {host: "forbidden.test"} to egress.allow in .github/airlock.cue`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	var res struct {
		Sandbox struct{ Network string } `json:"sandbox"`
		Egress  struct {
			Allowed, Denied int
			Decisions       []struct {
				Name, Decision, Protocol, Binary string
				BytesIn                          int64
			}
		} `json:"egress"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Sandbox.Network, "egress gateway ") || res.Egress.Allowed != 1 || res.Egress.Denied != 1 {
		t.Fatalf("result: %+v", res)
	}
	for _, d := range res.Egress.Decisions {
		if d.Name == "registry.test" && (d.BytesIn != int64(len("module-zip")) || d.Binary != "/usr/bin/curl") {
			t.Errorf("allowed fetch: %+v", d)
		}
	}
}

// SIGKILL of airlock in the middle of a job: its gateway namespace goes
// with it at once, the sandbox's when the next run reaps the sandbox.
func TestEgressNamespacesGoneAfterSIGKILL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	before := leakcheck.NetNamespaces()
	state := stateDir(t)
	ws := workspace(t)
	cmd := cli(t, "run", "-w", ws, "--state-dir", state, "--org", egressOrg(t, 443), "--", "sh", "-c", "touch started; exec sleep 600")
	startAndWaitFor(t, cmd, filepath.Join(ws, "started"))
	// The job's sandbox and gateway namespaces, and the one runsc gives
	// its gofer.
	during := newNamespaces(before)
	cmd.Process.Kill()
	cmd.Wait()
	if len(during) < 2 {
		t.Fatalf("expected the job's namespaces, got %v", during)
	}
	var out, errb bytes.Buffer
	if code := execute([]string{"run", "-w", workspace(t), "--state-dir", state, "--", "true"}, &out, &errb); code != 0 {
		t.Fatalf("next run: exit %d: %s", code, errb.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(newNamespaces(before)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("namespaces left after the reap: %v", newNamespaces(before))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func newNamespaces(before map[string]bool) []string {
	var out []string
	for ns := range leakcheck.NetNamespaces() {
		if !before[ns] {
			out = append(out, ns)
		}
	}
	return out
}

// upstream serves h on loopback for the test's egress (the gateway
// reaches it through the organisation's resolve pins) and returns its
// port.
func upstream(t testing.TB, h http.HandlerFunc) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}
