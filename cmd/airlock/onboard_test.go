package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// onboardOrg writes an organisation policy in the given egress mode that
// pins the test's names to the loopback upstream and allows that one
// address (a test-only pin, with its explicit CIDR).
func onboardOrg(t *testing.T, mode string) string {
	t.Helper()
	return orgPolicy(t, `egress: {
	mode: "`+mode+`"
	resolve: {"registry.test": "127.0.0.1", "other.test": "127.0.0.1"}
	allowCIDRs: ["127.0.0.1/32"]
}
`)
}

// Onboarding a repository as docs/onboarding.md tells it: an audit run lets the
// job reach what it needs and records it as would-deny; policy suggest
// reads the signed attestation and writes the repository policy, which
// passes policy vet; the enforced run under that policy passes the fetch
// and still refuses everything else. A pull request detected as agent
// work is enforced even while the organisation audits, and says so; an
// unsigned statement is refused without --allow-unsigned, and a bundle
// signed by another key whatever the flags.
func TestOnboarding(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Curl, gvisor.DefaultPath, "the job fetches through the egress gateway with curl")
	port := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "served %s%s", r.Host, r.URL.Path)
	})

	ws, git := repoWorkspace(t)

	keys := t.TempDir()
	var out, errb bytes.Buffer
	if code := execute([]string{"keys", "generate", "--out", filepath.Join(keys, "k")}, &out, &errb); code != 0 {
		t.Fatalf("keys: %s", errb.String())
	}
	fetch := fmt.Sprintf("curl -fsS http://registry.test:%d/pkg/lib-1.0.tgz; echo; curl -sS -o /dev/null -w 'other %%{http_code}\\n' http://other.test:%d/x", port, port)
	run := func(org string, extra ...string) (string, string, int) {
		t.Helper()
		attestDir := t.TempDir()
		args := append([]string{"run", "-w", ws, "--state-dir", stateDir(t), "--org", org, "--base", "main", "--attest-key", filepath.Join(keys, "k.key"), "--attest-dir", attestDir}, extra...)
		var o, e bytes.Buffer
		code := execute(append(args, "--", "sh", "-c", fetch), &o, &e)
		bundles, _ := filepath.Glob(filepath.Join(attestDir, "*.sigstore.json"))
		if len(bundles) != 1 {
			t.Fatalf("attestations: %v\n%s", bundles, e.String())
		}
		return o.String() + e.String(), bundles[0], code
	}

	// 1. The audit run, of a human's pull request (audit applies only to
	// a pull request known not to be agent work): both fetches get
	// through, recorded as would-deny.
	human := []string{"--head", "main", "--event", "../../testdata/events/pr-opened-by-human.json"}
	auditOut, bundle, code := run(onboardOrg(t, "audit"), human...)
	for _, want := range []string{"served registry.test:", "other 200", "let through by audit during this step", "would-deny (audit: not enforced)"} {
		if !strings.Contains(auditOut, want) {
			t.Errorf("the audit run's output lacks %q:\n%s", want, auditOut)
		}
	}
	if code != 0 {
		t.Fatalf("the audit run failed (%d):\n%s", code, auditOut)
	}

	// Only the registry is wanted: the suggestion comes from a run that
	// fetched it alone.
	fetchOnly := fetch
	fetch = fmt.Sprintf("curl -fsS http://registry.test:%d/pkg/lib-1.0.tgz", port)
	_, registryBundle, _ := run(onboardOrg(t, "audit"), human...)
	fetch = fetchOnly

	// 2. The suggestion, from the signed bundle, vetted.
	var sug, sugErr bytes.Buffer
	if code := execute([]string{"policy", "suggest", "--key", filepath.Join(keys, "k.pub"), "--repo", ws, "--base", "main", "--org", onboardOrg(t, "enforce"), registryBundle}, &sug, &sugErr); code != 0 {
		t.Fatalf("policy suggest: exit %d: %s", code, sugErr.String())
	}
	policy := sug.String()
	for _, want := range []string{fmt.Sprintf(`{host: "registry.test", ports: [%d], methods: ["GET"], pathPrefixes: ["/pkg/"]}`, port), "programs: /usr/bin/curl"} {
		if !strings.Contains(policy, want) {
			t.Errorf("the suggestion lacks %q:\n%s", want, policy)
		}
	}
	if strings.Contains(policy, "other.test") || strings.Contains(policy, "127.0.0.1") {
		t.Errorf("the suggestion holds what the run never needed, or an address:\n%s", policy)
	}
	file := filepath.Join(t.TempDir(), "airlock.cue")
	os.WriteFile(file, sug.Bytes(), 0o644)
	var vetOut, vetErr bytes.Buffer
	if code := execute([]string{"policy", "vet", "--org", onboardOrg(t, "enforce"), file}, &vetOut, &vetErr); code != 0 {
		t.Fatalf("policy vet: %s", vetErr.String())
	}

	// 3. Reviewed and committed: the enforced run passes the fetch and
	// refuses everything else.
	os.MkdirAll(filepath.Join(ws, ".github"), 0o755)
	os.WriteFile(filepath.Join(ws, ".github", "airlock.cue"), sug.Bytes(), 0o644)
	git("add", "-A")
	git("commit", "-q", "-m", "airlock policy")
	exec.Command("chown", "-R", "1000:1000", ws).Run()
	enforcedOut, _, code := run(onboardOrg(t, "enforce"))
	for _, want := range []string{"served registry.test:", "other 403", "network egress refused during this step", "other.test is not in egress.allow"} {
		if !strings.Contains(enforcedOut, want) {
			t.Errorf("the enforced run's output lacks %q:\n%s", want, enforcedOut)
		}
	}
	if code != 0 || strings.Contains(enforcedOut, "would-deny") {
		t.Errorf("the enforced run (%d):\n%s", code, enforcedOut)
	}

	// Agent work under an auditing organisation, or a job with no pull
	// request event: enforced, and said so.
	noEvent, _, _ := run(onboardOrg(t, "audit"))
	if !strings.Contains(noEvent, "other 403") || !strings.Contains(noEvent, "no pull request event") {
		t.Errorf("the run without an event was not enforced:\n%s", noEvent)
	}
	agentOut, _, _ := run(onboardOrg(t, "audit"), "--head", "main", "--event", "../../testdata/events/pr-opened-by-copilot.json")
	for _, want := range []string{"other 403", "never applies to a pull request detected as agent work"} {
		if !strings.Contains(agentOut, want) {
			t.Errorf("the agent run's output lacks %q:\n%s", want, agentOut)
		}
	}

	// Evidence that is not verified is refused unless asked for.
	other := t.TempDir()
	execute([]string{"keys", "generate", "--out", filepath.Join(other, "k")}, &out, &errb)
	unsigned := filepath.Join(t.TempDir(), "job-1.UNSIGNED.intoto.json")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no key, no flag", []string{bundle}, exitUsage, "--key: required to verify the bundles"},
		{"another signer", []string{"--key", filepath.Join(other, "k.pub"), "--allow-unsigned", bundle}, exitDataErr, "NOT VERIFIED"},
		{"not evidence at all", []string{"--key", filepath.Join(keys, "k.pub"), file}, exitDataErr, "neither an airlock bundle nor an airlock statement"},
		{"an unsigned statement", []string{"--key", filepath.Join(keys, "k.pub"), unsigned}, exitDataErr, "--allow-unsigned: not given: an unsigned statement is refused without it"},
		{"an unsigned statement, allowed", []string{"--allow-unsigned", unsigned}, 0, "UNVERIFIED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "unsigned statement") {
				statementOf(t, bundle, unsigned)
			}
			var o, e bytes.Buffer
			code := execute(append([]string{"policy", "suggest"}, tc.args...), &o, &e)
			if code != tc.code || !strings.Contains(e.String(), tc.want) {
				t.Errorf("exit %d, want %d; stderr lacks %q:\n%s", code, tc.code, tc.want, e.String())
			}
		})
	}
}

// statementOf writes the in-toto statement inside a bundle to path, as
// airlock writes one when it has no key.
func statementOf(t *testing.T, bundle, path string) {
	t.Helper()
	b, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	var bun struct {
		DSSEEnvelope struct {
			Payload []byte `json:"payload"`
		} `json:"dsseEnvelope"`
	}
	if err := json.Unmarshal(b, &bun); err != nil || len(bun.DSSEEnvelope.Payload) == 0 {
		t.Fatalf("bundle: %v", err)
	}
	os.WriteFile(path, bun.DSSEEnvelope.Payload, 0o644)
}
