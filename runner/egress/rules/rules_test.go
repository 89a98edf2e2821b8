package rules

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/policies"
)

func compile(t *testing.T, e policies.Egress) *Policy {
	t.Helper()
	p, err := Compile(e, func(k string) (string, bool) {
		if k == "AIRLOCK_SECRET_NPM_TOKEN" {
			return "s3cret-value", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConnectAndRequest(t *testing.T) {
	p := compile(t, policies.Egress{Default: "deny", Allow: []policies.EgressRule{
		{Host: "proxy.golang.org"},
		{Host: "*.githubusercontent.com", Ports: []int{443, 80}},
		{Host: "registry.example.com", Ports: []int{80}, Methods: []string{"GET", "HEAD"}, PathPrefixes: []string{"/v2/"}},
	}})
	tests := []struct {
		name   string
		port   int
		method string
		path   string
		allow  bool
		reason string
	}{
		{"proxy.golang.org", 443, "", "", true, ""},
		{"proxy.golang.org", 80, "", "", false, "port 80 of proxy.golang.org"},
		{"sub.proxy.golang.org", 443, "", "", false, "not in egress.allow"},
		{"raw.githubusercontent.com", 80, "", "", true, ""},
		{"githubusercontent.com", 443, "", "", false, "not in egress.allow"},
		{"evilgithubusercontent.com", 443, "", "", false, "not in egress.allow"},
		{"registry.example.com", 80, "GET", "/v2/lib/manifests/1", true, ""},
		{"registry.example.com", 80, "POST", "/v2/lib/blobs/", false, "outside the methods"},
		{"registry.example.com", 80, "GET", "/admin", false, "outside the methods"},
		{"registry.example.com", 80, "GET", "/v2", false, "outside the methods"},
		{"registry.example.com", 80, "GET", "/v2/../admin", false, "outside the methods"},
		{"registry.example.com", 80, "GET", "/v2/%2e%2e/admin", false, "outside the methods"},
		{"registry.example.com", 80, "GET", "/v2/..%2fadmin", false, "outside the methods"},
		{"registry.example.com", 80, "GET", "/v2x/lib", false, "outside the methods"},
	}
	for _, tc := range tests {
		t.Run(tc.name+"/"+tc.method+tc.path, func(t *testing.T) {
			var v Verdict
			if tc.method == "" {
				_, v = p.Connect(tc.name, tc.port)
			} else {
				v = p.Request(tc.name, tc.port, tc.method, tc.path, tc.path)
			}
			if v.Allowed != tc.allow || !strings.Contains(v.Reason, tc.reason) {
				t.Fatalf("got %+v, want allowed=%v reason~%q", v, tc.allow, tc.reason)
			}
			if !v.Allowed && v.Suggest == "" {
				t.Errorf("refusal without a suggestion: %+v", v)
			}
		})
	}
	if !p.NameAllowed("a.githubusercontent.com") || p.NameAllowed("evil.test") || p.NameWouldDeny("evil.test") {
		t.Error("NameAllowed disagrees with the rules")
	}
	if got := p.Ports(); len(got) != 2 || got[0] != 80 || got[1] != 443 {
		t.Errorf("Ports = %v", got)
	}

	// The same rules under audit: everything passes, and what the rules
	// deny is marked would-deny with the same rule, reason and
	// suggestion.
	audit := *p
	audit.Audit = true
	for _, tc := range tests {
		var enforced, v Verdict
		if tc.method == "" {
			_, enforced = p.Connect(tc.name, tc.port)
			_, v = audit.Connect(tc.name, tc.port)
		} else {
			enforced = p.Request(tc.name, tc.port, tc.method, tc.path, tc.path)
			v = audit.Request(tc.name, tc.port, tc.method, tc.path, tc.path)
		}
		if !v.Allowed || v.WouldDeny != !tc.allow || v.Rule != enforced.Rule || v.Reason != enforced.Reason || v.Suggest != enforced.Suggest {
			t.Errorf("audit %s:%d %s %s: got %+v, enforced %+v", tc.name, tc.port, tc.method, tc.path, v, enforced)
		}
	}
	if !audit.NameAllowed("evil.test") || !audit.NameWouldDeny("evil.test") || audit.NameWouldDeny("a.githubusercontent.com") {
		t.Error("under audit every name resolves, and those outside the rules would be denied")
	}
	var d Decision
	_, v := audit.Connect("evil.test", 443)
	if d.Apply(v); d.Decision != WouldDeny {
		t.Errorf("decision %q, want would-deny", d.Decision)
	}
}

func TestSuggestionIsAPolicyLine(t *testing.T) {
	_, v := compile(t, policies.Egress{Default: "deny"}).Connect("example.com", 8443)
	want := `add {host: "example.com", ports: [8443]} to egress.allow in .github/airlock.cue`
	if v.Suggest != want {
		t.Fatalf("suggest = %q, want %q", v.Suggest, want)
	}
}

func TestRangesRefuseInternalAddresses(t *testing.T) {
	r, err := NewRanges([]string{"10.20.0.0/16", "fd12::/16"}, []string{"10.20.5.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		addr  string
		allow bool
		rule  string
	}{
		{"93.184.215.14", true, "public address"},
		{"127.0.0.1", false, "127.0.0.0/8"},
		{"0.0.0.0", false, "0.0.0.0/8"},
		{"10.0.0.1", false, "10.0.0.0/8"},
		{"10.20.1.1", true, "egress.allowCIDRs 10.20.0.0/16"},
		{"10.20.5.9", false, "egress.denyCIDRs 10.20.5.0/24"}, // policy deny wins
		{"172.17.0.1", false, "172.16.0.0/12"},
		{"192.168.1.1", false, "192.168.0.0/16"},
		{"100.100.100.200", false, "100.64.0.0/10"},
		{"169.254.169.254", false, "169.254.0.0/16"},
		{"224.0.0.251", false, "224.0.0.0/4"},
		{"255.255.255.255", false, "240.0.0.0/4"},
		{"198.19.0.5", false, "198.18.0.0/15"},
		{"::1", false, "::1/128"},
		{"::ffff:127.0.0.1", false, "127.0.0.0/8"}, // mapped: checked as IPv4
		{"::ffff:169.254.169.254", false, "169.254.0.0/16"},
		{"fd00:ec2::254", false, "fc00::/7"},
		{"fe80::1", false, "fe80::/10"},
		{"64:ff9b::a00:1", false, "64:ff9b::/96"},
		{"2606:4700::1111", false, "ipv6"},
		{"fd12::1", true, "egress.allowCIDRs fd12::/16"},
	}
	for _, tc := range tests {
		v := r.Check(netip.MustParseAddr(tc.addr))
		if v.Allowed != tc.allow || !strings.Contains(v.Rule.String(), tc.rule) {
			t.Errorf("%s: %+v, want allowed=%v rule~%q", tc.addr, v, tc.allow, tc.rule)
		}
	}
	// The host's own addresses are refused too.
	for a := range r.host {
		if v := r.Check(a); v.Allowed {
			t.Errorf("host address %s allowed", a)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		e    policies.Egress
		want string
	}{
		{"missing secret", policies.Egress{Secrets: []policies.Secret{{Host: "a.test", Header: "Authorization", FromEnv: "AIRLOCK_SECRET_MISSING"}}}, "AIRLOCK_SECRET_MISSING is not set in airlock's environment"},
		{"not a secret variable", policies.Egress{Secrets: []policies.Secret{{Host: "a.test", Header: "Authorization", FromEnv: "AIRLOCK_KEY_PASSWORD"}}}, "only AIRLOCK_SECRET_"},
		{"bad cidr", policies.Egress{AllowCIDRs: []string{"10.0.0.0/99"}}, "egress.allowCIDRs"},
		{"bad pin", policies.Egress{Resolve: map[string]string{"a.test": "nope"}}, `egress.resolve["a.test"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.e, func(string) (string, bool) { return "", false })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	p := compile(t, policies.Egress{Secrets: []policies.Secret{{Host: "NPM.example.com", Header: "Authorization", FromEnv: "AIRLOCK_SECRET_NPM_TOKEN"}}})
	if s := p.SecretsFor("npm.example.com"); len(s) != 1 || s[0].Value != "s3cret-value" {
		t.Errorf("SecretsFor = %+v", s)
	}
}

// The log bounds allowed and denied decisions apart (a flood of refusals
// cannot push allowed traffic out), counts what it drops, and reads what
// came after a position.
func TestLogBoundsAndSince(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		max, allowed, denied   int
		wantKept               int
		wantDropped            uint64
		since, wantSinceLength int
	}{
		{"under the bound", 5, 2, 3, 5, 0, 2, 3},
		{"refusals flood", 5, 2, 50, 7, 45, 6, 1},
		{"both full", 2, 9, 9, 4, 14, 0, 4},
		{"position past the end", 5, 1, 1, 2, 0, 9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLog(tc.max)
			for range tc.allowed {
				l.Add(Decision{Decision: Allowed})
			}
			for range tc.denied {
				l.Add(Decision{Decision: Denied})
			}
			kept, dropped := l.Snapshot()
			if len(kept) != tc.wantKept || dropped != tc.wantDropped || l.Len() != tc.wantKept {
				t.Errorf("kept %d, dropped %d; want %d, %d", len(kept), dropped, tc.wantKept, tc.wantDropped)
			}
			if got := l.Since(tc.since); len(got) != tc.wantSinceLength {
				t.Errorf("Since(%d): %d decisions, want %d", tc.since, len(got), tc.wantSinceLength)
			}
		})
	}
	var zero Log
	for range MaxLog + 3 {
		zero.Add(Decision{Decision: Denied})
	}
	if _, dropped := zero.Snapshot(); dropped != 3 {
		t.Errorf("the zero log keeps MaxLog: dropped %d", dropped)
	}
	// Under audit, a flood of cheap refusals cannot push what audit let
	// through (and really went out) out of the record.
	audit := NewLog(5)
	for range 50 {
		audit.Add(Decision{Decision: Denied})
	}
	audit.Add(Decision{Decision: WouldDeny, Name: "exfil.test"})
	if kept, _ := audit.Snapshot(); kept[len(kept)-1].Name != "exfil.test" {
		t.Error("a would-deny decision was dropped behind a flood of denials")
	}
}
