package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/runner/report"
)

// action.yml is a valid composite action whose inputs never reach the
// scripts through ${{ }}, and its steps run airlock for real: in verify
// mode an artifact is checked against its job's provenance; else the
// script ran in the sandbox, the outputs name a signed attestation.
func TestActionYAML(t *testing.T) {
	b, err := os.ReadFile("../../action.yml")
	if err != nil {
		t.Fatal(err)
	}
	var action struct {
		Name        string
		Description string
		Inputs      map[string]struct {
			Description string
			Required    bool
			Default     string
		}
		Outputs map[string]struct{ Description, Value string }
		Runs    struct {
			Using string
			Steps []struct {
				ID, If, Shell, Run string
				Env                map[string]string
			}
		}
	}
	if err := yaml.UnmarshalStrict(b, &action); err != nil {
		t.Fatalf("action.yml: %v", err)
	}
	steps := action.Runs.Steps
	if action.Runs.Using != "composite" || len(steps) != 2 || steps[0].ID != "run" || steps[0].If != "inputs.verify-artifact == ''" || steps[1].ID != "verify" || steps[1].If != "inputs.verify-artifact != ''" {
		t.Fatalf("action = %+v", action)
	}
	for _, s := range steps {
		if strings.Contains(s.Run, "${{") {
			t.Fatalf("step %s: an input is expanded into the script: script injection", s.ID)
		}
	}
	for _, o := range []string{"attestation", "verdict", "provenance"} {
		if !strings.Contains(action.Outputs[o].Value, "steps.run.outputs."+o) {
			t.Errorf("output %s: %q", o, action.Outputs[o].Value)
		}
	}
	actionVerifies(t, steps[1].Run)
	step := steps[0]
	if os.Geteuid() != 0 {
		t.Skip("running the step needs root")
	}

	exe, _ := os.Executable()
	dir := t.TempDir()
	ws := workspace(t)
	org := orgPolicy(t, "")
	var out, errb bytes.Buffer
	os.Unsetenv(report.PasswordEnv)
	if code := execute([]string{"keys", "generate", "--out", filepath.Join(dir, "k")}, &out, &errb); code != 0 {
		t.Fatal(errb.String())
	}
	outputs := filepath.Join(dir, "outputs")
	cmd := exec.Command("bash", "-c", step.Run)
	cmd.Env = append(os.Environ(), cliEnv+"=1",
		"AIRLOCK_BIN="+exe, "AIRLOCK_ORG="+org, "AIRLOCK_KEY="+filepath.Join(dir, "k.key"),
		"AIRLOCK_ENV=FOO=bar", "AIRLOCK_STEP_SCRIPT=echo \"$FOO\" > from-sandbox.txt; id -u", "AIRLOCK_STEP_DIR=.",
		"RUNNER_TEMP="+dir, "GITHUB_WORKSPACE="+ws, "GITHUB_OUTPUT="+outputs)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("action step: %v\n%s", err, b)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "from-sandbox.txt")); string(got) != "bar\n" {
		t.Errorf("the script did not run in the workspace with the env: %q", got)
	}
	o, _ := os.ReadFile(outputs)
	if !strings.Contains(string(o), "verdict=passed") || !strings.Contains(string(o), ".sigstore.json") || !strings.Contains(string(o), "provenance=\n") {
		t.Errorf("outputs: %s", o)
	}
}

// actionVerifies runs the action's verify step: the artifact of a job
// verifies against the directory of its provenance; a changed one, and
// an agent's job under the compliance policy, fail the step.
func actionVerifies(t *testing.T, script string) {
	t.Helper()
	exe, _ := os.Executable()
	dir, keys := t.TempDir(), t.TempDir()
	if err := attest.WriteKeyPair(filepath.Join(keys, "k"), nil); err != nil {
		t.Fatal(err)
	}
	zip := []byte("PK\x03\x04 an agent's")
	finishedJob(t, dir, filepath.Join(keys, "k.key"), "job-cc", true, zip)
	policy, _ := filepath.Abs("../../testdata/compliance/artifacts.cue")
	for _, tc := range []struct {
		name, policy, repo string
		artifact           []byte
		ok                 bool
	}{
		{"verified", "", "", zip, true},
		{"verified, of its repository", "", "https://github.com/acme/app", zip, true},
		{"another repository's", "", "https://github.com/acme/fork", zip, false},
		{"a changed artifact", "", "", append(zip, '!'), false},
		{"an agent's job refused egress", policy, "", zip, false},
	} {
		art := filepath.Join(t.TempDir(), "dist.zip")
		os.WriteFile(art, tc.artifact, 0o644)
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = append(os.Environ(), cliEnv+"=1", "AIRLOCK_BIN="+exe, "AIRLOCK_VERIFY_ARTIFACT="+art,
			"AIRLOCK_VERIFY_KEY="+filepath.Join(keys, "k.pub"), "AIRLOCK_VERIFY_PROVENANCE="+dir, "AIRLOCK_VERIFY_POLICY="+tc.policy, "AIRLOCK_VERIFY_REPOSITORY="+tc.repo)
		out, err := cmd.CombinedOutput()
		want := "NOT VERIFIED: "
		if tc.ok {
			want = "VERIFIED: " + art
		}
		if (err == nil) != tc.ok || !strings.Contains(string(out), want) {
			t.Errorf("%s: %v\n%s", tc.name, err, out)
		}
	}
}

// The action runs a script or verifies an artifact: neither, or both,
// fails the step with exit 64 and says so, before airlock runs.
func TestActionModes(t *testing.T) {
	b, err := os.ReadFile("../../action.yml")
	if err != nil {
		t.Fatal(err)
	}
	var action struct {
		Runs struct{ Steps []struct{ ID, Run string } }
	}
	if err := yaml.Unmarshal(b, &action); err != nil || len(action.Runs.Steps) != 2 {
		t.Fatalf("action.yml: %v", err)
	}
	for _, tc := range []struct {
		name, script string
		env          []string
		want         string
	}{
		{"neither", action.Runs.Steps[0].Run, []string{"AIRLOCK_STEP_SCRIPT="}, "neither was given"},
		{"both", action.Runs.Steps[1].Run, []string{"AIRLOCK_STEP_SCRIPT=make test", "AIRLOCK_VERIFY_ARTIFACT=dist.zip"}, "not both"},
	} {
		cmd := exec.Command("bash", "-c", tc.script)
		cmd.Env = append(os.Environ(), append(tc.env, "AIRLOCK_BIN=/nonexistent/airlock")...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 64 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v, want exit 64 and %q:\n%s", tc.name, err, tc.want, out)
		}
	}
}
