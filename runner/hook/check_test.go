package hook

import (
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// The check run says what egress did: refusals with their rule, and
// under audit what enforcement would have refused, or why a job ran
// enforced although the organisation audits.
func TestCheckReportEgress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		egress  egress.Report
		want    []string
		wantNot []string
	}{
		{
			name: "enforced",
			egress: egress.Report{Gateway: "198.18.0.1", Mode: "enforce", Allowed: 3, Denied: 1, Decisions: []rules.Decision{
				{Name: "evil.test", Port: 443, Protocol: rules.ProtoProxyConnect, Decision: rules.Denied, Rule: rules.DefaultDeny},
			}},
			want:    []string{"3 allowed, 1 denied", "denied evil.test:443 (proxy-connect) egress.default (deny)"},
			wantNot: []string{"would-deny", "audit"},
		},
		{
			name: "audit",
			egress: egress.Report{Gateway: "198.18.0.1", Mode: "audit", Allowed: 1, WouldDeny: 1, Decisions: []rules.Decision{
				{Name: "pypi.org", Port: 443, Protocol: rules.ProtoProxyConnect, Decision: rules.WouldDeny, Rule: rules.DefaultDeny},
			}},
			want: []string{"1 would-deny (audit: not enforced)", "would-deny pypi.org:443 (proxy-connect)", "Egress ran in audit", "airlock policy suggest"},
		},
		{
			name:   "agent work under an auditing organisation",
			egress: egress.Report{Gateway: "198.18.0.1", Mode: "enforce", ModeNote: "egress enforced: the organisation policy asks for audit (egress.mode), which never applies to a pull request detected as agent work"},
			want:   []string{"never applies to a pull request detected as agent work"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.egress
			r := checkReport(runner.Result{Passed: true, Egress: &e}, nil, nil)
			for _, w := range tc.want {
				if !strings.Contains(r.Text, w) {
					t.Errorf("the check run's text lacks %q:\n%s", w, r.Text)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(r.Text, w) {
					t.Errorf("the check run's text has %q:\n%s", w, r.Text)
				}
			}
		})
	}
}
