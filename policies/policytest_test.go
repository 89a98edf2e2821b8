package policies

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestShippedPolicyTestsPass(t *testing.T) {
	var out bytes.Buffer
	results, err := RunTests(context.Background(), "examples/tests", &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Failed {
			t.Errorf("%s: %s", r.Name, r.Reason)
		}
	}
	if !strings.Contains(out.String(), "4 passed, 0 failed") {
		t.Errorf("summary: %s", out.String())
	}
}

// A deliberately wrong expectation is found, of each kind.
func TestPolicyTestFindsWrongExpectations(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"wrong-value.txtar":  "-- .github/airlock.cue --\nsandbox: limits: pids: 100\n-- want.json --\n{\"sandbox\": {\"limits\": {\"pids\": 200}}}\n",
		"wrong-error.txtar":  "-- .github/airlock.cue --\nsandbox: limits: pids: 100\n-- want-error --\nconflicting values\n",
		"wrong-agent.txtar":  "-- event.json --\n{\"pull_request\": {\"user\": {\"login\": \"alice\"}, \"head\": {\"ref\": \"x\", \"sha\": \"b\"}, \"base\": {\"sha\": \"a\"}}}\n-- want-agent --\ntrue\n",
		"unknown-part.txtar": "-- repo.cue --\n\n",
		"right-value.txtar":  "-- .github/airlock.cue --\nsandbox: limits: pids: 100\n-- want.json --\n{\"sandbox\": {\"limits\": {\"pids\": 100}}}\n",
	} {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	var out bytes.Buffer
	if _, err := RunTests(context.Background(), dir, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"FAIL wrong-value.txtar: effective policy differs at sandbox.limits.pids",
		"FAIL wrong-error.txtar: loaded, want an error",
		"FAIL wrong-agent.txtar: agent = false",
		"FAIL unknown-part.txtar: unknown section",
		"PASS right-value.txtar",
		"1 passed, 4 failed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
