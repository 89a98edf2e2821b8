package main

import (
	"bytes"
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every output of a job says which platform ran and why, the same in
// each: the summary, the JSON result, the attestation, `airlock verify`
// and the HTML report. (Which platform that is depends on the host:
// systrap without a /dev/kvm that boots gVisor, kvm with one.)
func TestPlatformInEveryOutput(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	os.Unsetenv("AIRLOCK_KEY_PASSWORD")
	if code := execute([]string{"keys", "generate", "--out", filepath.Join(dir, "k")}, &out, &errb); code != 0 {
		t.Fatalf("keys generate: %s", errb.String())
	}
	out.Reset()
	errb.Reset()
	att := filepath.Join(dir, "att")
	code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--attest-dir", att, "--attest-key", filepath.Join(dir, "k.key"), "--json", "--", "true"}, &out, &errb)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errb.String())
	}
	var res struct {
		Sandbox struct {
			Platform, PlatformReason string
			PlatformAttempts         []struct{ Platform, Error string }
		}
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	s := res.Sandbox
	if (s.Platform != "systrap" && s.Platform != "kvm") || s.PlatformReason == "" || len(s.PlatformAttempts) == 0 || s.PlatformAttempts[len(s.PlatformAttempts)-1].Platform != s.Platform {
		t.Fatalf("result's platform: %+v", s)
	}
	line := "platform: " + s.Platform + " (" + s.PlatformReason + ")"
	if !strings.Contains(errb.String(), line+"\n") {
		t.Errorf("the summary lacks %q:\n%s", line, errb.String())
	}
	bundles, _ := filepath.Glob(filepath.Join(att, "*.sigstore.json"))
	if len(bundles) != 1 {
		t.Fatalf("bundles: %v", bundles)
	}
	page := filepath.Join(dir, "report.html")
	out.Reset()
	errb.Reset()
	if code := execute([]string{"verify", "--key", filepath.Join(dir, "k.pub"), "--html", page, "--json", bundles[0]}, &out, &errb); code != 0 {
		t.Fatalf("verify --json: %d %s", code, errb.String())
	}
	var v struct {
		Predicate struct {
			Runner struct {
				Platform, PlatformReason string
				PlatformAttempts         []struct{ Platform, Error string }
			}
		}
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out.String())
	}
	if r := v.Predicate.Runner; r.Platform != s.Platform || r.PlatformReason != s.PlatformReason || len(r.PlatformAttempts) != len(s.PlatformAttempts) {
		t.Errorf("the attestation says %+v, the result %+v", r, s)
	}
	out.Reset()
	if code := execute([]string{"verify", "--key", filepath.Join(dir, "k.pub"), bundles[0]}, &out, &errb); code != 0 || !strings.Contains(out.String(), line+"\n") {
		t.Errorf("verify (exit %d) lacks %q:\n%s", code, line, out.String())
	}
	if b, _ := os.ReadFile(page); !bytes.Contains(b, []byte(html.EscapeString(s.Platform+" ("+s.PlatformReason+")"))) {
		t.Errorf("the HTML report lacks the platform and its reason")
	}
}

// The organisation pins kvm: where a probe sandbox boots on it the job
// runs there; elsewhere the job is refused before it starts, in one line
// that says what to do, exit 69, and nothing of it is left.
func TestOrganisationPinsKVM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	state := stateDir(t)
	var out, errb bytes.Buffer
	code := execute([]string{"run", "-w", workspace(t), "--state-dir", state, "--org", orgPolicy(t, `sandbox: platform: "kvm"`+"\n"), "--json", "--", "true"}, &out, &errb)
	if code == 0 {
		if !strings.Contains(out.String(), `"platform": "kvm"`) {
			t.Errorf("passed, but not on kvm: %s", out.String())
		}
		t.Logf("kvm boots gVisor on this host: the job ran on it")
		return
	}
	msg := strings.TrimSpace(errb.String())
	if code != exitUnavailable || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "platform kvm: ") || !strings.Contains(msg, "sandbox.platform") || strings.Contains(msg, "goroutine") {
		t.Fatalf("exit %d, stderr:\n%s", code, msg)
	}
	if strings.Contains(out.String(), "STEP") {
		t.Errorf("a step ran: %s", out.String())
	}
	if jobs, _ := filepath.Glob(filepath.Join(state, "jobs", "*")); len(jobs) > 0 {
		t.Errorf("left behind: %v", jobs)
	}
	t.Logf("refused: %s", msg)
}
