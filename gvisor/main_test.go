package gvisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/podlike"
)

// testStateBase holds the state roots of all sandboxes these tests create,
// so the leftover check at the end can attribute what it finds.
const testStateBase = "/run/airlock-test"

func TestMain(m *testing.M) {
	Dispatch()
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelper())
	}
	if err := podlike.Enter(); err != nil {
		panic(err)
	}
	leakcheck.Run(m, testStateBase, testJobIDPrefix)
}

// requireRoot skips tests that need real sandboxes when not root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("sandbox tests need root (runsc needs root)")
	}
}

// newWorkspace returns a fresh directory owned by uid/gid 1000.
func newWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	return ws
}

// testConfig is a config over a fresh workspace and a per-test state root.
func testConfig(t *testing.T) Config {
	t.Helper()
	requireRoot(t)
	cfg := Config{ID: testJobID(), Workspace: newWorkspace(t), StateRoot: testStateRoot(t), Limits: DefaultLimits()}
	cfg.Limits.StepTimeout = 2 * time.Minute
	cfg.Limits.Memory = 1 << 30
	return cfg
}

// newTestSandbox starts a sandbox and destroys it when the test ends.
func newTestSandbox(t *testing.T, mutate func(*Config)) *Sandbox {
	t.Helper()
	cfg := testConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	return startSandbox(t, cfg)
}

func startSandbox(t *testing.T, cfg Config) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := Create(ctx, cfg)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

func testStateRoot(t *testing.T) string {
	dir := filepath.Join(testStateBase, strings.NewReplacer("/", "_").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
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

// testJobIDPrefix marks the jobs of these tests, so the leftover check
// does not blame sandboxes of other packages' tests running in parallel.
const testJobIDPrefix = "gvt-"

func testJobID() string { return testJobIDPrefix + newID() }
