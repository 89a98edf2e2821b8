package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/runner"
)

// hookProcessEnv makes the test binary a hook process (the runner starts
// one per call), so tests drive the hook as the runner does.
const hookProcessEnv = "AIRLOCK_HOOK_TEST_PROCESS"

// testBuild stands for the airlock binary's identity in these tests.
var testBuild = Build{Version: "test", Commit: "test", Runtime: "gVisor runsc (embedded, test)"}

func TestMain(m *testing.M) {
	gvisor.Dispatch()
	Dispatch(testBuild)
	if addr := os.Getenv(testServiceEnv); addr != "" {
		os.Exit(serveForTest(addr))
	}
	if os.Getenv(hookProcessEnv) != "" {
		os.Exit(hookProcess())
	}
	leakcheck.Run(m, testStateBase, "")
}

// hookProcess is what `airlock hook` does with a call: errors are one
// line on stderr and a failing exit status (the CLI's exit codes are
// cmd/airlock's to test).
func hookProcess() int {
	code, err := Handle(context.Background(), ConfigFromEnv(testBuild), os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
		var in runner.InputError
		if errors.As(err, &in) {
			return 64
		}
		return 70
	}
	return code
}

// hookCommand starts the test binary as a hook process.
func hookCommand(t testing.TB) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Args[0] = "airlock"
	cmd.Env = append(os.Environ(), hookProcessEnv+"=1")
	return cmd
}

// testStateBase holds the state directories of these tests' jobs.
const testStateBase = "/run/airlock-test-hook"

func workspace(t testing.TB) string { return testhost.Workspace(t) }
func stateDir(t testing.TB) string  { return testhost.StateDir(t, testStateBase) }

// verified checks a bundle's signature with the public key (and its
// subject against commit, when given), as `airlock verify` does, and
// returns what it says, also as indented JSON (what `verify --json`
// prints).
func verified(t testing.TB, pubFile, bundleFile, commit string) (*attest.Verified, string, error) {
	t.Helper()
	pub, err := os.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := attest.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := files.ReadCapped(bundleFile, attest.MaxBundleSize)
	if err != nil {
		return nil, "", err
	}
	res, err := attest.Verify(bundle, v, attest.VerifyOptions{Commit: commit})
	if err != nil {
		return nil, "", err
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	return res, string(b), nil
}

// finalAttestation is the job's one final bundle in the hook's
// attestation directory, verified (with its subject, when commit is
// given).
func (h *runnerHost) finalAttestation(commit string) (string, *attest.Verified, string) {
	h.t.Helper()
	all, _ := filepath.Glob(filepath.Join(h.hooksRoot(), "attestations", "*.sigstore.json"))
	var bundles []string
	for _, b := range all {
		if !strings.HasSuffix(b, ".provenance.sigstore.json") {
			bundles = append(bundles, b)
		}
	}
	if len(bundles) != 1 {
		h.t.Fatalf("bundles: %v", bundles)
	}
	v, vj, err := verified(h.t, h.keyPub, bundles[0], commit)
	if err != nil {
		h.t.Fatalf("verify %s: %v", bundles[0], err)
	}
	return bundles[0], v, vj
}
