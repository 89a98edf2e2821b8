package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/airlock-ci/airlock/runner/report"
)

// action.yml is a valid composite action whose inputs never reach the
// script through ${{ }}, and its step runs airlock run for real: the
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
				ID, Shell, Run string
				Env            map[string]string
			}
		}
	}
	if err := yaml.UnmarshalStrict(b, &action); err != nil {
		t.Fatalf("action.yml: %v", err)
	}
	if action.Runs.Using != "composite" || len(action.Runs.Steps) != 1 || !action.Inputs["run"].Required {
		t.Fatalf("action = %+v", action)
	}
	step := action.Runs.Steps[0]
	if strings.Contains(step.Run, "${{") {
		t.Fatal("an input is expanded into the script: script injection")
	}
	for _, o := range []string{"attestation", "verdict"} {
		if !strings.Contains(action.Outputs[o].Value, "steps.run.outputs."+o) {
			t.Errorf("output %s: %q", o, action.Outputs[o].Value)
		}
	}
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
	if !strings.Contains(string(o), "verdict=passed") || !strings.Contains(string(o), ".sigstore.json") {
		t.Errorf("outputs: %s", o)
	}
}
