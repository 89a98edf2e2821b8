package rules

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/policies"
)

// serviceHosts are Actions service hosts, each on its port.
type serviceHosts map[string]int

func (s serviceHosts) ServiceHost(name string, port int) bool {
	p, ok := s[name]
	return ok && (port == 0 || port == p)
}

// decider is a policy of an allow rule, an HTTP-only rule, a pinned name
// in an allowCIDRs range and a policy deny range, with one service host.
func decider(t *testing.T, mode string) *Decider {
	t.Helper()
	p := compile(t, policies.Egress{Default: "deny", Mode: mode, Allow: []policies.EgressRule{
		{Host: "proxy.golang.org"},
		{Host: "registry.example.com", Ports: []int{80}, Methods: []string{"GET"}, PathPrefixes: []string{"/v2/"}},
		{Host: "pinned.test", Ports: []int{443}},
	}, AllowCIDRs: []string{"10.20.0.0/16"}, DenyCIDRs: map[string]bool{"10.20.5.0/24": true}, Resolve: map[string]string{"pinned.test": "10.20.1.1"},
		Secrets: []policies.Secret{{Host: "proxy.golang.org", Header: "Authorization", FromEnv: "AIRLOCK_SECRET_NPM_TOKEN"}}})
	return NewDecider(p, serviceHosts{"results.actions.example": 443})
}

// want is a verdict's outcome and rule.
type want struct {
	allowed, wouldDeny bool
	rule               RuleID
}

func check(t *testing.T, what string, v Verdict, w want) {
	t.Helper()
	if v.Allowed != w.allowed || v.WouldDeny != w.wouldDeny || v.Rule != w.rule {
		t.Errorf("%s: got allowed=%v wouldDeny=%v rule %+v, want allowed=%v wouldDeny=%v rule %+v", what, v.Allowed, v.WouldDeny, v.Rule, w.allowed, w.wouldDeny, w.rule)
	}
}

var (
	allow0   = RuleID{Kind: KindAllow, Index: 0, Detail: "proxy.golang.org"}
	allow1   = RuleID{Kind: KindAllow, Index: 1, Detail: "registry.example.com"}
	denyAll  = RuleID{Kind: KindDefaultDeny}
	service  = RuleID{Kind: KindService}
	fronting = RuleID{Kind: KindFronting}
)

// Which rule decides a connection: an allow rule, the default, or a
// service host where no rule allows it (under audit too).
func TestDeciderConnect(t *testing.T) {
	for _, tc := range []struct {
		mode, name string
		port       int
		want       want
	}{
		{"enforce", "proxy.golang.org", 443, want{true, false, allow0}},
		{"enforce", "proxy.golang.org", 80, want{false, false, denyAll}},
		{"enforce", "evil.test", 443, want{false, false, denyAll}},
		{"enforce", "results.actions.example", 443, want{true, false, service}},
		{"enforce", "results.actions.example", 8443, want{false, false, denyAll}},
		{"audit", "evil.test", 443, want{true, true, denyAll}},
		{"audit", "results.actions.example", 443, want{true, false, service}},
		{"audit", "proxy.golang.org", 443, want{true, false, allow0}},
	} {
		t.Run(tc.mode+"/"+tc.name, func(t *testing.T) {
			rule, v := decider(t, tc.mode).Connect(tc.name, tc.port)
			check(t, "Connect", v, tc.want)
			if tc.want.rule == service && (!rule.HTTPOnly() || rule.ID() != (RuleID{Kind: KindAllow, Index: -1, Detail: tc.name})) {
				t.Errorf("a service host's rule must be HTTP-only: %+v", rule)
			}
		})
	}
}

// The DNS server answers the rules' names and the service hosts; under
// audit every other name, as would-deny.
func TestDeciderNames(t *testing.T) {
	for _, tc := range []struct {
		mode, name         string
		allowed, wouldDeny bool
	}{
		{"enforce", "proxy.golang.org", true, false},
		{"enforce", "results.actions.example", true, false},
		{"enforce", "evil.test", false, false},
		{"audit", "evil.test", true, true},
		{"audit", "results.actions.example", true, false},
	} {
		d := decider(t, tc.mode)
		if a, w := d.NameAllowed(tc.name), d.NameWouldDeny(tc.name); a != tc.allowed || w != tc.wouldDeny {
			t.Errorf("%s %s: allowed=%v wouldDeny=%v, want %v %v", tc.mode, tc.name, a, w, tc.allowed, tc.wouldDeny)
		}
	}
	if got := decider(t, "enforce").Ports(); !slices.Contains(got, 443) || !slices.Contains(got, 80) {
		t.Errorf("Ports = %v", got)
	}
	if got := NewDecider(compile(t, policies.Egress{Allow: []policies.EgressRule{{Host: "a.test", Ports: []int{22}}}}), nil).Ports(); !slices.Equal(got, []int{22}) {
		t.Errorf("Ports without service hosts = %v", got)
	}
}

// What a connection carries: the TLS server name and the HTTP Host must
// be its name (else fronting), an HTTP-only rule never splices, and a
// web port carries only TLS.
func TestDeciderContent(t *testing.T) {
	d := decider(t, "enforce")
	tcp, _ := d.Connect("proxy.golang.org", 443)
	httpOnly, _ := d.Connect("registry.example.com", 80)
	for _, tc := range []struct {
		what string
		v    Verdict
		want want
	}{
		{"SNI matches (case, trailing dot)", d.ServerName(tcp, "proxy.golang.org", "Proxy.Golang.org.", nil), want{true, false, allow0}},
		{"no SNI", d.ServerName(tcp, "proxy.golang.org", "", nil), want{false, false, fronting}},
		{"another SNI", d.ServerName(tcp, "proxy.golang.org", "evil.test", nil), want{false, false, fronting}},
		{"SNI by Unicode case folding", d.ServerName(tcp, "registry.example.com", "regi\u017ftry.example.com", nil), want{false, false, fronting}},
		{"Host by Unicode case folding", d.HTTPHost("registry.example.com", "regi\u017ftry.example.com"), want{false, false, fronting}},
		{"unreadable ClientHello", d.ServerName(tcp, "proxy.golang.org", "", errors.New("bad hello")), want{false, false, allow0}},
		{"Host matches", d.HTTPHost("registry.example.com", "Registry.example.com.:80"), want{true, false, RuleID{}}},
		{"Host by address", d.HTTPHost("registry.example.com", "198.18.0.5:80"), want{false, false, fronting}},
		{"TLS spliced", d.Splice(tcp, "proxy.golang.org", 443, true), want{true, false, allow0}},
		{"other on a web port", d.Splice(tcp, "proxy.golang.org", 443, false), want{false, false, allow0}},
		{"other elsewhere", d.Splice(tcp, "proxy.golang.org", 22, false), want{true, false, allow0}},
		{"HTTP-only rule", d.Splice(httpOnly, "registry.example.com", 80, true), want{false, false, allow1}},
	} {
		check(t, tc.what, tc.v, tc.want)
	}
	if v := d.Splice(httpOnly, "registry.example.com", 80, true); v.Suggest == "" || !strings.Contains(v.Reason, "only plain HTTP") {
		t.Errorf("HTTP-only refusal: %+v", v)
	}

	// What the record says of a connection that passed: the rule, or
	// what audit let through.
	audit := decider(t, "audit")
	rule, cv := audit.Connect("evil.test", 443)
	check(t, "passed under audit", audit.Passed(rule, cv, ""), want{true, true, denyAll})
	rule, cv = audit.Connect("proxy.golang.org", 443)
	check(t, "passed by rule", audit.Passed(rule, cv, "idle"), want{true, false, allow0})
}

// A request: the rule's methods and paths, then the credentials policy,
// whose refusal refuses and whose service route stands in for the rules.
func TestDeciderRequest(t *testing.T) {
	cred := func(detail string) RuleID { return RuleID{Kind: KindCredentials, Detail: detail} }
	enforce, audit := decider(t, "enforce"), decider(t, "audit")
	for _, tc := range []struct {
		what string
		d    *Decider
		name string
		cv   *CredentialVerdict
		want want
	}{
		{"rule allows", enforce, "registry.example.com", nil, want{true, false, allow1}},
		{"no rule", enforce, "evil.test", nil, want{false, false, denyAll}},
		{"credentials refuse", enforce, "registry.example.com", &CredentialVerdict{Rule: "credentials.cache", Reason: "off"}, want{false, false, cred("credentials.cache")}},
		{"credentials refuse under audit", audit, "evil.test", &CredentialVerdict{Rule: "credentials.cache", Reason: "off"}, want{false, false, cred("credentials.cache")}},
		{"service route", enforce, "results.actions.example", &CredentialVerdict{Service: true, Allowed: true, Rule: "credentials.artifacts"}, want{true, false, cred("credentials.artifacts")}},
		{"service route under audit", audit, "results.actions.example", &CredentialVerdict{Service: true, Allowed: true, Rule: "credentials.artifacts"}, want{true, false, cred("credentials.artifacts")}},
		{"credential route, rules refuse", enforce, "evil.test", &CredentialVerdict{Allowed: true, Rule: "credentials.api"}, want{false, false, denyAll}},
		{"credential route, rules allow", enforce, "registry.example.com", &CredentialVerdict{Allowed: true, Rule: "credentials.api"}, want{true, false, allow1}},
		{"off the credential routes", audit, "evil.test", &CredentialVerdict{Allowed: true}, want{true, true, denyAll}},
	} {
		port := 80
		if strings.HasPrefix(tc.name, "results.") {
			port = 443
		}
		v := tc.d.Request(tc.name, port, "GET", "/v2/x", "/v2/x")
		if tc.cv != nil {
			v = tc.d.WithCredentials(v, *tc.cv)
		}
		check(t, tc.what, v, tc.want)
	}
	if s := enforce.Secrets("proxy.golang.org", Verdict{Allowed: true}); len(s) != 1 || !enforce.HasSecrets("proxy.golang.org") {
		t.Errorf("secrets of an allowed request: %+v", s)
	}
	if s := audit.Secrets("proxy.golang.org", Verdict{Allowed: true, WouldDeny: true}); s != nil {
		t.Errorf("secrets on what audit only let through: %+v", s)
	}
}

// Where a name may be dialled: the policy's deny ranges win, allowCIDRs
// open built-in ranges (under audit only for a pinned name), public
// addresses pass.
func TestDeciderDial(t *testing.T) {
	d := decider(t, "audit")
	for _, tc := range []struct {
		name, addr string
		wouldDeny  bool
		want       want
	}{
		{"a.test", "93.184.215.14", false, want{true, false, RuleID{Kind: KindPublicAddress}}},
		{"a.test", "10.20.5.9", false, want{false, false, RuleID{Kind: KindDenyCIDR, Detail: "10.20.5.0/24"}}},
		{"a.test", "10.20.1.1", false, want{true, false, RuleID{Kind: KindAllowCIDR, Detail: "10.20.0.0/16"}}},
		{"a.test", "10.20.1.1", true, want{false, false, RuleID{Kind: KindDenyRange, Detail: "10.0.0.0/8"}}},
		{"pinned.test", "10.20.1.1", true, want{true, false, RuleID{Kind: KindAllowCIDR, Detail: "10.20.0.0/16"}}},
		{"a.test", "169.254.169.254", false, want{false, false, RuleID{Kind: KindDenyRange, Detail: "169.254.0.0/16"}}},
		{"a.test", "2606:4700::1111", false, want{false, false, RuleID{Kind: KindDenyRange, Detail: "ipv6"}}},
	} {
		check(t, tc.name+" at "+tc.addr, d.Dial(tc.name, netip.MustParseAddr(tc.addr), tc.wouldDeny), tc.want)
	}
	if a, ok := d.Pinned("pinned.test"); !ok || a != netip.MustParseAddr("10.20.1.1") {
		t.Errorf("Pinned = %v %v", a, ok)
	}
	if _, ok := d.Pinned("a.test"); ok {
		t.Error("a.test is not pinned")
	}
}

// Addresses are no names: the default refuses them, with a reason.
func TestDeciderAddresses(t *testing.T) {
	d := decider(t, "audit")
	for _, v := range []Verdict{
		d.UnknownAddress(netip.MustParseAddr("198.18.3.3")),
		d.OwnAddress(53, 3128),
		d.AddressLiteral("10.0.0.1"),
	} {
		check(t, v.Reason, v, want{false, false, denyAll})
		if v.Reason == "" {
			t.Errorf("refusal without a reason: %+v", v)
		}
	}
}
