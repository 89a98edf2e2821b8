package gvisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Dispatch()
	os.Exit(m.Run())
}

// newTestSandbox starts a sandbox over a fresh workspace owned by uid 1000
// and destroys it when the test ends.
func newTestSandbox(t *testing.T, mutate func(*Config)) *Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("sandbox tests need root")
	}
	ws := t.TempDir()
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Workspace: ws,
		StateRoot: testStateRoot(t),
		Limits:    DefaultLimits(),
	}
	cfg.Limits.StepTimeout = 2 * time.Minute
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		if os.Getenv("AIRLOCK_KEEP") != "" { return }
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

// testStateRoot is a per-test state root, so leftovers are attributable.
func testStateRoot(t *testing.T) string {
	dir := filepath.Join("/run/airlock-test", filepath.Base(t.TempDir()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { if !t.Failed() { os.RemoveAll(dir) } })
	return dir
}

// sh runs a shell script as one step and returns stdout, stderr, result.
func sh(t *testing.T, sb *Sandbox, script string, mutate ...func(*Step)) (string, string, StepResult) {
	t.Helper()
	var out, errb bytes.Buffer
	st := Step{Args: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &errb}
	for _, m := range mutate {
		m(&st)
	}
	res, err := sb.Exec(context.Background(), st)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), errb.String(), res
}

func TestSmoke(t *testing.T) {
	sb := newTestSandbox(t, nil)
	out, errOut, res := sh(t, sb, "echo hello; id; env | sort; ls -la /workspace; cat /proc/self/status | grep -i cap")
	t.Logf("out=%s err=%s res=%+v", out, errOut, res)
	t.Logf("record=%+v", sb.Record())
}
