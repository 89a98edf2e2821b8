package hook

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/testhost"
)

// The job's daemon SIGKILLed while a step uploads an artifact through
// the gateway (the real @actions/artifact, its blocks half sent): the
// step fails instead of hanging, the upload is never finalized, and
// cleanup_job says that no attestation exists and why, with the end of
// the daemon's log; nothing of the job is left, and what the job wrote
// in its bounded workspace stays out of the checkout (it never ended).
func TestHookDaemonKilledDuringUpload(t *testing.T) {
	h := newRunnerHost(t)
	clients := clientPackages(t)
	os.WriteFile(filepath.Join(h.org, "clients.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: mounts: [{source: %q, destination: \"/opt/clients\"}]\n", clients)), 0o644)
	gh, env := h.fakeGitHub(t)
	h.allowBlobStorage()
	state, dir, pid := h.prepareDaemon()
	big := make([]byte, 64<<20)
	rand.Read(big)
	os.MkdirAll(filepath.Join(h.repo, "dist"), 0o755)
	os.WriteFile(filepath.Join(h.repo, "dist", "big.bin"), big, 0o644)

	type stepEnd struct {
		code int
		out  string
	}
	ended := make(chan stepEnd, 1)
	go func() {
		code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", "echo half > /__w/app/app/written-by-the-job\n/__e/node20/bin/node /opt/clients/upload.js /__w/app/app/dist", env)
		ended <- stepEnd{code, out}
	}()
	// Kill the daemon once the storage has taken a block of the upload.
	deadline := time.Now().Add(2 * time.Minute)
	for !blockSent(gh.Requests()) {
		if time.Now().After(deadline) {
			t.Fatal("the upload never sent a block")
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(pid, 30*time.Second)
	select {
	case end := <-ended:
		if end.code == 0 {
			t.Errorf("the step passed with its daemon killed: %s", end.out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the step still runs 2 minutes after its daemon was killed")
	}
	code, out := h.cleanup(state)
	if code == 0 || !strings.Contains(out, "no attestation was signed") || !strings.Contains(out, "the end of the job daemon's log") {
		t.Errorf("cleanup_job after the daemon was killed: exit %d: %s", code, out)
	}
	for _, a := range gh.Artifacts() {
		if a.Name == "honest" && a.Finalized {
			t.Errorf("the upload cut short was finalized: %+v", a)
		}
	}
	if bundles, _ := filepath.Glob(filepath.Join(h.hooksRoot(), "attestations", "*")); len(bundles) != 0 {
		t.Errorf("attestation files of a job that has none: %v", bundles)
	}
	if _, err := os.Stat(filepath.Join(h.repo, "written-by-the-job")); err == nil {
		t.Error("what the killed job wrote reached the checkout")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the job directory is still there")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(dir)) {
			t.Errorf("a process of the job is left: %s: %q", p, b)
		}
	}
}

// blockSent reports a block of an upload taken by the fake blob storage.
func blockSent(seen []testhost.Seen) bool {
	for _, s := range seen {
		if s.Method == "PUT" && strings.Contains(s.Query, "comp=block") {
			return true
		}
	}
	return false
}
