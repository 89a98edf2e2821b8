package suggest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// row is one egress decision as the attestation carries it.
type row struct {
	ms                        int
	pid                       int32
	proto, name, method, path string
	port                      int
	decision, rule            string
	kind                      rules.RuleKind // empty: a row of an older statement
}

// predicate builds a run's predicate from decision rows, with one step
// covering them and curl as pid 7 (a program name with odd bytes as pid
// 9).
func predicate(rows ...row) attest.Predicate {
	p := attest.Predicate{
		Steps: []attest.Step{{Name: "fetch", Start: t0, End: t0.Add(time.Minute)}},
		Processes: attest.Processes{Execs: []attest.Exec{
			{Time: t0, PID: 7, Binary: "/usr/bin/curl"},
			{Time: t0, PID: 9, Binary: "/tmp/x\n}\negress: default: \"allow\"\n//\ufeff\u202e"},
		}},
		Egress: attest.Egress{Start: t0, Columns: attest.DecisionColumns},
	}
	for _, r := range rows {
		p.Egress.Decisions = append(p.Egress.Decisions, attest.EgressDecision{
			Time: t0.Add(time.Duration(r.ms) * time.Millisecond), PID: r.pid, Protocol: r.proto, Name: r.name, Port: r.port,
			Method: r.method, Path: r.path, Decision: r.decision, Rule: r.rule, RuleKind: string(r.kind),
		}.Row(t0))
	}
	return p
}

const deny = "default (deny)"

// vet loads the suggested file under an organisation policy, as
// `airlock policy vet --org` does, and compiles its egress section.
func vet(t *testing.T, org string, file []byte) *rules.Policy {
	t.Helper()
	p, err := rules.Compile(effective(t, org, file).Egress, func(string) (string, bool) { return "x", true })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func effective(t *testing.T, org string, file []byte) policies.Policy {
	t.Helper()
	eff, err := policies.Load(context.Background(), []policies.Source{
		{Kind: policies.KindOrg, Path: "org.cue", Data: []byte("package airlock\n" + org)},
		{Kind: policies.KindRepo, Path: policies.RepoPolicyPath, Data: file},
	})
	if err != nil {
		t.Fatalf("the suggestion does not pass policy vet: %v\n%s", err, file)
	}
	return eff.Policy
}

func TestSuggest(t *testing.T) {
	audit := predicate(
		row{ms: 1, pid: 7, proto: rules.ProtoProxyHTTP, name: "files.example.org", port: 80, method: "GET", path: "/pkg/a/1.tgz", decision: rules.WouldDeny, rule: deny},
		row{ms: 2, pid: 7, proto: rules.ProtoProxyHTTP, name: "files.example.org", port: 80, method: "HEAD", path: "/pkg/b/2.tgz", decision: rules.WouldDeny, rule: deny},
		row{ms: 3, pid: 9, proto: rules.ProtoProxyConnect, name: "API.example.com.", port: 443, decision: rules.WouldDeny, rule: deny},
		row{ms: 4, proto: rules.ProtoDNS, name: "only-dns.example.dev", decision: rules.Denied, rule: deny},
		row{ms: 5, proto: rules.ProtoProxyHTTP, name: "meta.test", port: 80, method: "GET", path: "/", decision: rules.Denied, rule: "deny range 169.254.0.0/16"},
		row{ms: 6, proto: rules.ProtoProxyHTTP, name: "10.0.0.1", port: 80, method: "GET", path: "/", decision: rules.Denied, rule: deny},
		row{ms: 7, proto: rules.ProtoDirect, name: "", port: 443, decision: rules.Denied, rule: deny},
		row{ms: 8, proto: rules.ProtoProxyConnect, name: "proxy.golang.org", port: 443, decision: rules.Allowed, rule: "allow[0]"},
		row{ms: 9, proto: rules.ProtoTLS, name: "a.cdn.example.net", port: 443, decision: rules.WouldDeny, rule: deny},
		row{ms: 10, proto: rules.ProtoTLS, name: "b.cdn.example.net", port: 443, decision: rules.WouldDeny, rule: deny},
		row{ms: 11, proto: rules.ProtoTLS, name: "c.cdn.example.net", port: 8443, decision: rules.WouldDeny, rule: deny},
		row{ms: 12, proto: rules.ProtoTLS, name: "a.co.uk", port: 443, decision: rules.WouldDeny, rule: deny},
		row{ms: 13, proto: rules.ProtoTLS, name: "b.co.uk", port: 443, decision: rules.WouldDeny, rule: deny},
		row{ms: 14, proto: rules.ProtoTLS, name: "c.co.uk", port: 443, decision: rules.WouldDeny, rule: deny},
		row{ms: 15, proto: rules.ProtoProxyConnect, name: "evil\n.com", port: 443, decision: rules.Denied, rule: deny},
		row{ms: 16, proto: rules.ProtoProxyHTTP, name: "files.example.org", port: 80, method: "GET", path: "/pkg/../etc/x", decision: rules.Denied, rule: "fronting"},
	)
	enforced := predicate(
		row{ms: 1, pid: 7, proto: rules.ProtoProxyConnect, name: "proxy.golang.org", port: 443, decision: rules.Denied, rule: deny},
		row{ms: 2, pid: 7, proto: rules.ProtoHTTP, name: "files.example.org", port: 80, method: "GET", path: "/pkg/c/3.tgz", decision: rules.Denied, rule: "allow[1]"},
	)
	existing := []byte(`// Our CI: the Go module proxy.
package airlock

egress: allow: [
	{host: "proxy.golang.org"}, // the module proxy
]

steps: ci: [{name: "test", run: "go test ./..."}]
`)
	for _, tc := range []struct {
		name      string
		runs      []attest.Predicate
		existing  []byte
		current   string // the repository policy at the base commit, compiled
		want      []string
		wantNot   []string
		allows    []string // host:port (HTTP: host:port METHOD path) the result allows
		refuses   []string
		wantNotes []string
		wantErr   string
	}{
		{
			name: "a new policy from one audit run",
			runs: []attest.Predicate{audit},
			want: []string{
				"package airlock", `host: "files.example.org"`, `ports: [80]`, `methods: ["GET", "HEAD"]`, `pathPrefixes: ["/pkg/a/", "/pkg/b/"]`,
				`host: "api.example.com"`, `host: "only-dns.example.dev"`, "only DNS queries were seen: port 443 is assumed",
				`host: "*.cdn.example.net"`, "ports: [443, 8443]", "stands for 3 sibling names seen", `host: "a.co.uk"`,
				"2 attempt(s) (2 would-deny) in 1 run(s); steps: fetch; programs: /usr/bin/curl",
			},
			wantNot: []string{"10.0.0.1", "meta.test", "169.254", `"*.co.uk"`, "evil", "egress: default: \"allow\"\n"},
			allows:  []string{"files.example.org:80 GET /pkg/a/9.tgz", "api.example.com:443", "only-dns.example.dev:443", "x.cdn.example.net:8443"},
			refuses: []string{"files.example.org:80 POST /pkg/a/9.tgz", "files.example.org:80 GET /admin", "api.example.com:80", "example.com:443", "meta.test:80", "10.0.0.1:80"},
			wantNotes: []string{
				"*.cdn.example.net stands for 3 sibling names seen", "an IP address", "a deny range", "the fronting check", "not a host name", "no host name",
			},
		},
		{
			name: "merged into the repository's policy, what it allows already left out",
			runs: []attest.Predicate{enforced, enforced}, existing: existing, current: string(existing),
			want:      []string{"// Our CI: the Go module proxy.", `{host: "proxy.golang.org"}, // the module proxy`, `steps: ci:`, `host: "files.example.org"`, `pathPrefixes: ["/pkg/c/"]`, "in 2 run(s)"},
			wantNot:   []string{`host: "proxy.golang.org"}` + "\n\t// "},
			allows:    []string{"proxy.golang.org:443", "files.example.org:80 GET /pkg/c/1"},
			refuses:   []string{"files.example.org:443"},
			wantNotes: []string{"2 attempt(s) not suggested: allowed by the policy at the base commit already"},
		},
		{
			name: "what the review found: tenants, DNS-only siblings, odd methods, address spellings, tunnelled HTTP, a byte order mark",
			runs: []attest.Predicate{predicate(
				row{ms: 1, proto: rules.ProtoTLS, name: "a.amazonaws.com", port: 443, decision: rules.WouldDeny, rule: deny},
				row{ms: 2, proto: rules.ProtoTLS, name: "b.amazonaws.com", port: 443, decision: rules.WouldDeny, rule: deny},
				row{ms: 3, proto: rules.ProtoTLS, name: "c.amazonaws.com", port: 443, decision: rules.WouldDeny, rule: deny},
				row{ms: 4, proto: rules.ProtoDNS, name: "x.svc.example.org", decision: rules.Denied, rule: deny},
				row{ms: 5, proto: rules.ProtoDNS, name: "y.svc.example.org", decision: rules.Denied, rule: deny},
				row{ms: 6, proto: rules.ProtoDNS, name: "z.svc.example.org", decision: rules.Denied, rule: deny},
				row{ms: 7, pid: 9, proto: rules.ProtoProxyHTTP, name: "brew.example.com", port: 80, method: "BREW", path: "/pot", decision: rules.Denied, rule: deny},
				row{ms: 8, proto: rules.ProtoProxyHTTP, name: "0177.0.0.1", port: 80, method: "GET", path: "/", decision: rules.Denied, rule: deny},
				row{ms: 9, proto: rules.ProtoProxyConnect, name: "tunnel.example.com", port: 8080, method: "GET", path: "/v2/x", decision: rules.WouldDeny, rule: deny},
			)},
			want:      []string{`{host: "a.amazonaws.com"}`, `{host: "c.amazonaws.com"}`, `{host: "x.svc.example.org"}`, `{host: "tunnel.example.com", ports: [8080], methods: ["GET"], pathPrefixes: ["/v2/"]}`},
			wantNot:   []string{"*.amazonaws.com", "*.svc.example.org", "brew.example.com", "0177"},
			wantNotes: []string{"a request method no rule can name (BREW)", "an IP address"},
		},
		{
			name: "an allow list that is not a literal", runs: []attest.Predicate{enforced},
			existing: []byte("package airlock\n_mine: [{host: \"a.example.com\"}]\negress: allow: _mine\n"),
			wantErr:  "egress.allow is not a plain list",
		},
		{
			name: "nothing refused: the file as it was", runs: []attest.Predicate{predicate(row{proto: rules.ProtoTLS, name: "x.example.com", port: 443, decision: rules.Allowed, rule: "allow[0]"})},
			existing: existing, want: []string{`{host: "proxy.golang.org"}, // the module proxy`}, wantNot: []string{"x.example.com"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs []Run
			for i, p := range tc.runs {
				runs = append(runs, Run{Name: "run" + string(rune('a'+i)), Predicate: p})
			}
			var current *policies.Egress
			if tc.current != "" {
				e := effective(t, "", []byte(tc.current)).Egress
				current = &e
			}
			res, err := Suggest(runs, Options{Existing: tc.existing, Path: policies.RepoPolicyPath, Current: current})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			file := string(res.File)
			for _, w := range tc.want {
				if !strings.Contains(file, w) {
					t.Errorf("the suggestion lacks %q:\n%s", w, file)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(file, w) {
					t.Errorf("the suggestion has %q:\n%s", w, file)
				}
			}
			notes := strings.Join(res.Notes, "\n")
			for _, w := range tc.wantNotes {
				if !strings.Contains(notes, w) {
					t.Errorf("the notes lack %q:\n%s", w, notes)
				}
			}
			p := vet(t, "egress: default: \"deny\"\n", res.File)
			check := func(dest string) bool {
				hp, req, _ := strings.Cut(dest, " ")
				host, port, _ := strings.Cut(hp, ":")
				n, _ := strconv.Atoi(port)
				if method, path, ok := strings.Cut(req, " "); ok {
					return p.Request(host, n, method, path, path).Allowed
				}
				_, v := p.Connect(host, n)
				return v.Allowed
			}
			for _, d := range tc.allows {
				if !check(d) {
					t.Errorf("the suggestion does not allow %s:\n%s", d, file)
				}
			}
			for _, d := range tc.refuses {
				if check(d) {
					t.Errorf("the suggestion allows %s:\n%s", d, file)
				}
			}
			if os.Getenv("SUGGEST_SHOW") != "" {
				t.Logf("%s\nnotes:\n%s", file, notes)
			}
		})
	}
}

// What an agent tried to reach is no evidence of what the repository
// needs: its runs are left out unless asked for, and the notes say so.
func TestSuggestLeavesAgentRunsOut(t *testing.T) {
	p := predicate(row{ms: 1, proto: rules.ProtoProxyConnect, name: "exfil.example.net", port: 443, decision: rules.Denied, rule: deny})
	p.Policy.Agent = &attest.AgentDecision{Agent: true, Reason: "author Copilot is a bot"}
	runs := []Run{{Name: "job-1.sigstore.json", Predicate: p}}
	res, err := Suggest(runs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rules) != 0 || !strings.Contains(strings.Join(res.Notes, "\n"), "job-1.sigstore.json left out: a pull request detected as agent work") {
		t.Errorf("rules %+v, notes %q", res.Rules, res.Notes)
	}
	if res, _ := Suggest(runs, Options{AgentRuns: true}); len(res.Rules) != 1 {
		t.Errorf("with AgentRuns: rules %+v", res.Rules)
	}
}

// Whether a refusal is one a rule could change is read from the row's
// rule kind, or, in a row of an older statement, from its rule's text.
func TestRefusalsByRuleKind(t *testing.T) {
	for _, tc := range []struct {
		kind     rules.RuleKind
		rule     string
		wantNote string // empty: suggested
	}{
		{rules.KindDefaultDeny, deny, ""},
		{rules.KindAllow, "allow[1]", ""},
		{rules.KindDenyRange, "deny range 10.0.0.0/8", "refused by a deny range (the organisation's allowCIDRs opens one)"},
		{rules.KindDenyCIDR, "denyCIDRs 10.1.0.0/16", "refused by a deny range (the organisation's allowCIDRs opens one)"},
		{rules.KindFronting, "fronting", "refused by the fronting check"},
		{rules.KindCredentials, "credentials.cache", "refused by the credentials policy"},
		{rules.KindCapacity, "gateway capacity", "refused by gateway capacity,"},
		{rules.KindResolution, "upstream resolution", "refused by upstream resolution,"},
		{"", "", "refused by an unnamed check"},
	} {
		for _, kind := range []rules.RuleKind{tc.kind, ""} {
			t.Run(fmt.Sprintf("%s/%q", tc.rule, kind), func(t *testing.T) {
				p := predicate(row{proto: rules.ProtoProxyConnect, name: "files.example.org", port: 443, decision: rules.Denied, rule: tc.rule, kind: kind})
				skipped := map[string]int{}
				got := attempts(0, p, skipped)
				var notes []string
				for why := range skipped {
					notes = append(notes, why)
				}
				switch {
				case tc.wantNote == "" && (len(got) != 1 || len(notes) != 0):
					t.Errorf("not suggested: %v", notes)
				case tc.wantNote != "" && (len(got) != 0 || len(notes) != 1 || !strings.Contains(notes[0], tc.wantNote)):
					t.Errorf("attempts %+v, notes %q; want the note %q", got, notes, tc.wantNote)
				}
			})
		}
	}
	// The kind is what counts: a row whose kind says fronting is no
	// refusal by the rules, whatever its text.
	p := predicate(row{proto: rules.ProtoTLS, name: "files.example.org", port: 443, decision: rules.Denied, rule: deny, kind: rules.KindFronting})
	if got := attempts(0, p, map[string]int{}); len(got) != 0 {
		t.Errorf("a fronting refusal was taken for the default's: %+v", got)
	}
}
