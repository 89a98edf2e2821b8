package gvisor

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor/cgroup"
	"github.com/airlock-ci/airlock/internal/podlike"
)

// enclosedLimit is the memory of the cgroup TestEnclosedCgroups runs in.
const enclosedLimit = 384 << 20

// A job where the cgroup file system is read-only (a pod's container)
// runs in the cgroup that encloses airlock: runsc makes no cgroup, the
// record holds the enclosing cgroup's memory limit (never the configured
// one, which nothing enforces here), a memory bomb is reported as the
// pod's memory limit, the OOM killer takes the sandbox and not airlock,
// and nothing is left. Run again in a cgroup of 384 MiB that the test
// makes, with the cgroup mounts read-only.
func TestEnclosedCgroups(t *testing.T) {
	requireRoot(t)
	if _, ok := podlike.Active(); !ok {
		l := podlike.Limits{ReadOnlyCgroups: true, Cgroups: podlike.MemoryCgroup(t, enclosedLimit)}
		podlike.Run(t, "^TestEnclosedCgroups$", l, "TestEnclosedCgroups")
		return
	}
	if !cgroup.Own().ReadOnly() {
		t.Fatal("the cgroup file system is writable: the set-up did not make it read-only")
	}
	if info := cgroup.Host(); !info.ReadOnly || info.Enclosing == nil || info.Enclosing.Memory != enclosedLimit {
		t.Fatalf("cgroup.Host() = %+v, want read-only with the enclosing %d bytes", info, enclosedLimit)
	}
	sb := newTestSandbox(t, nil)
	enc, ok := sb.Enclosing()
	if !ok || enc.Memory != enclosedLimit {
		t.Fatalf("Enclosing() = %+v, %t; want the enclosing cgroup's %d bytes", enc, ok, enclosedLimit)
	}
	if sb.cg.Dirs() == nil || !sb.cg.Enclosed() {
		t.Fatalf("cgroups %+v", sb.cg)
	}
	for _, d := range sb.cg.Dirs() {
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
