package hook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/runnersim"
)

// jobsAtOnce is how many runners TestHookJobsAtOnce runs jobs on at once.
const jobsAtOnce = 8

// Eight runners on one host, sharing airlock's hook directory (its jobs,
// state and attestations), each with a GitHub of its own, run an agent's
// job at the same time through the hook: prepare_job, a step that
// fetches its repository's token-named page from the API, is refused
// another host, writes into its bounded workspace and uploads an
// artifact with the real @actions/artifact client (an honest upload and
// a lying one), then cleanup_job. Every job ends as it would alone; each
// attestation (signed with its runner's key) holds its own job's
// requests, refusal and uploads and nothing of another's; each
// provenance names the blob its own GitHub holds; nothing of any job is
// left on the host.
func TestHookJobsAtOnce(t *testing.T) {
	clients := clientPackages(t)
	token := func(i int) string { return fmt.Sprintf("tok%dx", i) }
	type runner struct {
		h    *runnerHost
		env  map[string]string
		blob func() []byte
		err  []string
	}
	runners := make([]*runner, jobsAtOnce)
	shared := ""
	for i := range runners {
		h := newRunnerHost(t)
		if i == 0 {
			shared = h.hooksRoot()
		} else {
			for k, e := range h.env {
				if strings.HasPrefix(e, JobsRootEnv+"=") {
					h.env[k] = JobsRootEnv + "=" + shared
				}
			}
		}
		os.WriteFile(filepath.Join(h.org, "clients.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: mounts: [{source: %q, destination: \"/opt/clients\"}]\n", clients)), 0o644)
		gh, env := h.fakeGitHubAt(t, fmt.Sprintf("127.0.0.%d", 80+i))
		h.allowBlobStorage()
		os.MkdirAll(filepath.Join(h.repo, "dist"), 0o755)
		os.WriteFile(filepath.Join(h.repo, "dist", token(i)+".txt"), []byte(token(i)+"\n"), 0o644)
		runners[i] = &runner{h: h, env: env, blob: func() []byte { return gh.Blob("honest") }}
	}
	var wg sync.WaitGroup
	for i, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(format string, args ...any) { r.err = append(r.err, fmt.Sprintf(format, args...)) }
			h := r.h
			code, out, resp := h.send(PrepareJob, h.job)
			if code != 0 {
				fail("prepare_job: exit %d: %s", code, out)
				return
			}
			res, err := runnersim.ReadResponse(resp, true, 0)
			if err != nil {
				fail("prepare_job's response: %v", err)
				return
			}
			var state map[string]any
			json.Unmarshal(res.State, &state)
			script := fmt.Sprintf(`curl -sS -o /dev/null -H "Authorization: Bearer $GITHUB_TOKEN" https://api.github.test/repos/acme/app/contents/%[1]s || true
curl -sS https://%[1]s.forbidden.test/ >/dev/null 2>&1 || true
head -c 1048576 /dev/urandom > dist/%[1]s.bin
/__e/node20/bin/node /opt/clients/upload.js /__w/app/app/dist`, token(i))
			if code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", script, r.env); code != 0 || !strings.Contains(out, "honest upload: id") {
				fail("step: exit %d: %s", code, out)
			}
			if code, out := h.cleanup(state); code != 0 {
				fail("cleanup_job: exit %d: %s", code, out)
			}
		}()
	}
	wg.Wait()
	for i, r := range runners {
		for _, e := range r.err {
			t.Errorf("runner %d: %s", i, e)
		}
	}
	if t.Failed() {
		return
	}
	// Each runner's attestation is the one bundle its own key verifies.
	bundles, _ := filepath.Glob(filepath.Join(shared, "attestations", "*.sigstore.json"))
	for i, r := range runners {
		v, err := attest.LoadVerifierFile(r.h.keyPub)
		if err != nil {
			t.Fatal(err)
		}
		var run *attest.Verified
		var prov *attest.VerifiedProvenance
		for _, b := range bundles {
			data, _ := os.ReadFile(b)
			if strings.HasSuffix(b, ".provenance.sigstore.json") {
				if p, err := attest.VerifyProvenance(data, v); err == nil {
					prov = p
				}
			} else if got, err := attest.Verify(data, v, attest.VerifyOptions{Commit: r.h.head}); err == nil {
				if run != nil {
					t.Errorf("runner %d: two run attestations verify with its key", i)
				}
				run = got
			}
		}
		if run == nil || prov == nil {
			t.Errorf("runner %d: attestation %v, provenance %v", i, run != nil, prov != nil)
			continue
		}
		own := token(i)
		for j := range runners {
			if j != i && (bytes.Contains(run.Statement, []byte(token(j))) || bytes.Contains(prov.Statement, []byte(token(j)))) {
				t.Errorf("runner %d's record names runner %d's job (%s)", i, j, token(j))
			}
		}
		allowed, denied := 0, 0
		for _, s := range run.Predicate.Egress.Summary {
			allowed, denied = allowed+s.Allowed, denied+s.Denied
		}
		// Denied: its own host, and the lying FinalizeArtifact.
		if !bytes.Contains(run.Statement, []byte(own+".forbidden.test")) || allowed == 0 || denied < 2 {
			t.Errorf("runner %d: egress %d allowed, %d denied; its own refusal recorded: %v", i, allowed, denied, bytes.Contains(run.Statement, []byte(own+".forbidden.test")))
		}
		sum := sha256.Sum256(r.blob())
		if len(prov.Subjects) != 1 || prov.Subjects[0].Name != "honest.zip" || prov.Subjects[0].Digest["sha256"] != hex.EncodeToString(sum[:]) {
			t.Errorf("runner %d: provenance subjects %+v, want honest.zip as its own GitHub holds it", i, prov.Subjects)
		}
		if fi, err := os.Stat(filepath.Join(r.h.repo, "dist", own+".bin")); err != nil || fi.Size() != 1<<20 {
			t.Errorf("runner %d: what the job wrote in its workspace: %v", i, err)
		}
	}
	// Nothing of any job is left.
	if jobs, _ := filepath.Glob(filepath.Join(shared, "jobs", "*")); len(jobs) != 0 {
		t.Errorf("job directories left: %v", jobs)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(shared)) {
			t.Errorf("a process of a job is left: %s: %q", p, b)
		}
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(shared)) {
		t.Error("a mount of a job is left")
	}
}
