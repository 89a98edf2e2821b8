package report

import (
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/trust"
)

// What a job writes into its own record is bounded: a hostile step can
// make its messages, argv and diffs huge, never the statement.
func TestPredicateBoundsWhatTheJobWrote(t *testing.T) {
	huge := strings.Repeat("é", 100_000) // 2 bytes a rune: a cut can fall inside one
	many := make([]string, 5000)
	for i := range many {
		many[i] = "arg"
	}
	res := runner.Result{
		Job:       "job",
		Steps:     []runner.StepOutcome{{Name: "s", Status: runner.StatusFailed, StepResult: gvisor.StepResult{Message: huge}}},
		Processes: monitor.Snapshot{Execs: []monitor.Exec{{Binary: huge, Argv: many}}},
		Trust:     &trust.Report{Findings: []trust.Finding{{Path: huge, Reason: huge, Diff: huge}}, Notes: many},
	}
	p := Predicate(res, attest.Meta{ContainerImage: huge})
	for _, tc := range []struct {
		name string
		got  string
		max  int
		mark string
	}{
		{"step message", p.Steps[0].Message, 512, "..."},
		{"binary", p.Processes.Execs[0].Binary, 512, "..."},
		{"finding path", p.Trust.Findings[0].Path, 512, "..."},
		{"finding reason", p.Trust.Findings[0].Reason, 1024, "..."},
		{"finding diff", p.Trust.Findings[0].Diff, attest.MaxDiffBytes, "\n... (cut)"},
		{"container image", p.Job.ContainerImage, 512, "..."},
	} {
		if len(tc.got) > tc.max+len(tc.mark) || !strings.HasSuffix(tc.got, tc.mark) || !strings.HasPrefix(tc.got, "éé") || strings.ContainsRune(tc.got, '\uFFFD') {
			t.Errorf("%s: %d bytes, ends %q", tc.name, len(tc.got), tc.got[max(0, len(tc.got)-12):])
		}
	}
	argv := p.Processes.Execs[0].Argv
	if n := len(strings.Join(argv, "")); n > attest.MaxArgvBytes+64 || !strings.Contains(argv[len(argv)-1], "more arguments") {
		t.Errorf("argv: %d bytes, last %q", n, argv[len(argv)-1])
	}
	if len(p.Trust.Notes) != 51 || !strings.Contains(p.Trust.Notes[50], "4950 more notes") {
		t.Errorf("notes: %d, last %q", len(p.Trust.Notes), p.Trust.Notes[len(p.Trust.Notes)-1])
	}
	if len(p.Verdict.Reasons) == 0 || !strings.Contains(p.Verdict.Reasons[0], `step "s" failed`) {
		t.Errorf("reasons: %q", p.Verdict.Reasons)
	}
}
