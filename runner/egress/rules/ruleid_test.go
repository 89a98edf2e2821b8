package rules

import (
	"slices"
	"strings"
	"testing"
)

// legacyShort is how decision rows cited rules before rules had a kind
// (runner's shortRule): Short must say the same.
func legacyShort(r string) string {
	r = strings.TrimPrefix(r, "egress.")
	if strings.HasPrefix(r, "allow[") {
		r, _, _ = strings.Cut(r, " (")
	}
	return r
}

// Every kind's text is what decisions cited before rules had a kind,
// its short form what decision rows cited, and both read back to the
// kind.
func TestRuleIDText(t *testing.T) {
	tests := []struct {
		id          RuleID
		text, short string
	}{
		{RuleID{Kind: KindAllow, Index: 0, Detail: "proxy.golang.org"}, "egress.allow[0] (proxy.golang.org)", "allow[0]"},
		{RuleID{Kind: KindAllow, Index: -1, Detail: "example.com"}, "egress.allow[-1] (example.com)", "allow[-1]"},
		{RuleID{Kind: KindAllowName}, "egress.allow", "allow"},
		{RuleID{Kind: KindDefaultAllow}, "egress.default (allow)", "default (allow)"},
		{RuleID{Kind: KindDefaultDeny}, DefaultDeny, "default (deny)"},
		{RuleID{Kind: KindDenyCIDR, Detail: "10.20.5.0/24"}, "egress.denyCIDRs 10.20.5.0/24", "denyCIDRs 10.20.5.0/24"},
		{RuleID{Kind: KindAllowCIDR, Detail: "fd12::/16"}, "egress.allowCIDRs fd12::/16", "allowCIDRs fd12::/16"},
		{RuleID{Kind: KindDenyRange, Detail: "169.254.0.0/16"}, "deny range 169.254.0.0/16", "deny range 169.254.0.0/16"},
		{RuleID{Kind: KindDenyRange, Detail: "host-address"}, "deny range host-address", "deny range host-address"},
		{RuleID{Kind: KindDenyRange, Detail: "ipv6"}, "deny range ipv6", "deny range ipv6"},
		{RuleID{Kind: KindPublicAddress}, "public address", "public address"},
		{RuleID{Kind: KindFronting}, "fronting", "fronting"},
		{RuleID{Kind: KindService}, "credentials (the job's Actions services)", "credentials (the job's Actions services)"},
		{RuleID{Kind: KindCredentials, Detail: "credentials"}, "credentials", "credentials"},
		{RuleID{Kind: KindCredentials, Detail: "credentials.oidc.audiences"}, "credentials.oidc.audiences", "credentials.oidc.audiences"},
		{RuleID{Kind: KindCapacity}, "gateway capacity", "gateway capacity"},
		{RuleID{Kind: KindProxy}, "proxy", "proxy"},
		{RuleID{Kind: KindResolution}, "upstream resolution", "upstream resolution"},
		{RuleID{Kind: KindUpstream}, "upstream", "upstream"},
		{RuleID{Kind: KindNone}, "none", "none"},
	}
	seen := map[RuleKind]bool{}
	for _, tc := range tests {
		seen[tc.id.Kind] = true
		t.Run(tc.text, func(t *testing.T) {
			if got := tc.id.String(); got != tc.text {
				t.Errorf("String() = %q, want %q", got, tc.text)
			}
			if got := tc.id.Short(); got != tc.short || got != legacyShort(tc.text) {
				t.Errorf("Short() = %q, want %q (and the old rows' %q)", got, tc.short, legacyShort(tc.text))
			}
			for _, text := range []string{tc.text, tc.short} {
				if got := KindOfText(text); got != tc.id.Kind {
					t.Errorf("KindOfText(%q) = %q, want %q", text, got, tc.id.Kind)
				}
			}
		})
	}
	for _, k := range Kinds() {
		if !seen[k] {
			t.Errorf("kind %q has no case here", k)
		}
	}
	if got := (RuleID{}).String(); got != "" {
		t.Errorf("the zero RuleID is %q", got)
	}
	for _, text := range []string{"", "egress.fronting", "egress.credentials.cache", "something else", "deny rangeX"} {
		if got := KindOfText(text); got != "" {
			t.Errorf("KindOfText(%q) = %q, want no kind", text, got)
		}
	}
}

// Only the default's deny and an allow rule are what a policy
// suggestion changes.
func TestByRules(t *testing.T) {
	var by []RuleKind
	for _, k := range Kinds() {
		if k.ByRules() {
			by = append(by, k)
		}
	}
	if want := []RuleKind{KindAllow, KindDefaultDeny}; !slices.Equal(by, want) {
		t.Errorf("ByRules kinds = %v, want %v", by, want)
	}
}

// A decision's rule text is its RuleID's, however it was set.
func TestDecisionRule(t *testing.T) {
	id := RuleID{Kind: KindDenyCIDR, Detail: "10.0.0.0/8"}
	var a, b Decision
	a.Apply(Verdict{Rule: id, Reason: "r"})
	b.SetRule(id)
	for _, d := range []Decision{a, b} {
		if d.RuleID != id || d.Rule != "egress.denyCIDRs 10.0.0.0/8" {
			t.Errorf("decision cites %+v as %q", d.RuleID, d.Rule)
		}
	}
	if a.Decision != Denied || a.Reason != "r" {
		t.Errorf("Apply: %+v", a)
	}
}
