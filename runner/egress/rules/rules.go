// Package rules decides a job's egress. Policy is the compiled egress
// section: which names the sandbox may resolve, which (name, port,
// method, path) it may reach, and which upstream addresses a name may be
// dialled at (never loopback, private, link-local, metadata, multicast or
// the host's own addresses unless the policy allows that range). Decider
// is the one place egress is decided: the DNS server, the TCP gateway and
// the explicit proxy ask it, and it adds to the Policy the job's Actions
// service hosts and the gateway's checks of what a connection carries
// (fronting, HTTP-only rules, web ports).
//
// Every verdict names the rule at work as a RuleID (a RuleKind, and the
// rule's index or range), whose text is what records cite, and every
// refusal the policy line that would allow the attempt, so an agent
// reading a log can fix its policy request instead of retrying blindly.
//
// It also owns the record of decisions (Decision, and Log, the one bounded
// log the DNS server, the gateway and the proxy record into).
//
// Layer 2: imports policies only (and internal helpers); the deciding
// servers (dns, gateway) import it, never the other way, and the
// credentials vault reaches it only as Services, through its caller.
package rules

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/policies"
)

// Rule is one entry of egress.allow.
type Rule struct {
	// Index is the rule's position in egress.allow.
	Index        int
	Host         string
	Ports        []int
	Methods      []string
	PathPrefixes []string
}

// ID is how decisions cite the rule.
func (r Rule) ID() RuleID { return RuleID{Kind: KindAllow, Index: r.Index, Detail: r.Host} }

// HTTPOnly reports whether the rule only allows HTTP requests (it names
// methods or paths, which only an HTTP request has).
func (r Rule) HTTPOnly() bool { return len(r.Methods) > 0 || len(r.PathPrefixes) > 0 }

// matchHost reports whether the rule's host (exact or "*.suffix") covers
// name (lower-case, no trailing dot).
func (r Rule) matchHost(name string) bool {
	if s, ok := strings.CutPrefix(r.Host, "*."); ok {
		return strings.HasSuffix(name, "."+s)
	}
	return name == r.Host
}

// Secret is a header the gateway adds to requests for Host.
type Secret struct {
	Host   string
	Header string
	// Value is read from airlock's environment; it never enters the
	// sandbox.
	Value string
}

// Policy is the compiled egress section.
type Policy struct {
	// AllowAll is egress.default "allow": every name resolves and may be
	// reached on DefaultPorts and the ports of explicit rules. The deny
	// ranges still apply.
	AllowAll bool
	Rules    []Rule
	// Ranges decides which upstream addresses may be dialled.
	Ranges Ranges
	// Pinned maps names to upstream addresses without asking a resolver.
	Pinned  map[string]netip.Addr
	Secrets []Secret
	// Audit is egress.mode "audit": what the rules deny is let through,
	// its verdict Allowed with WouldDeny set. The deny ranges are not
	// rules: they still hold (Ranges).
	Audit bool
}

// DefaultPorts are the ports egress.default "allow" opens.
var DefaultPorts = []int{80, 443}

// Compile checks and compiles a policy's egress section. lookupEnv reads
// airlock's own environment for secrets (os.LookupEnv).
func Compile(e policies.Egress, lookupEnv func(string) (string, bool)) (*Policy, error) {
	p := &Policy{AllowAll: e.Default == "allow", Audit: e.Mode == "audit", Pinned: map[string]netip.Addr{}}
	for i, a := range e.Allow {
		ports := a.Ports
		if len(ports) == 0 {
			ports = []int{443}
		}
		p.Rules = append(p.Rules, Rule{Index: i, Host: strings.ToLower(strings.TrimSuffix(a.Host, ".")), Ports: ports, Methods: a.Methods, PathPrefixes: a.PathPrefixes})
	}
	var err error
	if p.Ranges, err = NewRanges(e.AllowCIDRs, keys(e.DenyCIDRs)); err != nil {
		return nil, err
	}
	for name, a := range e.Resolve {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("egress.resolve[%q]: %q is not an IP address", name, a)
		}
		p.Pinned[strings.ToLower(name)] = addr.Unmap()
	}
	for i, s := range e.Secrets {
		if !strings.HasPrefix(s.FromEnv, "AIRLOCK_SECRET_") {
			return nil, fmt.Errorf("egress.secrets[%d]: fromEnv %q: only AIRLOCK_SECRET_* variables can be injected", i, s.FromEnv)
		}
		v, ok := lookupEnv(s.FromEnv)
		if !ok || v == "" {
			return nil, fmt.Errorf("egress.secrets[%d]: %s is not set in airlock's environment; export it for airlock (it never reaches the sandbox) or remove the secret from the policy", i, s.FromEnv)
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("egress.secrets[%d]: the value of %s contains a line break, which cannot go in an HTTP header", i, s.FromEnv)
		}
		p.Secrets = append(p.Secrets, Secret{Host: strings.ToLower(s.Host), Header: s.Header, Value: v})
	}
	return p, nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Verdict is the outcome of one check.
type Verdict struct {
	Allowed bool
	// WouldDeny marks an attempt the rules deny that audit lets through
	// (Allowed is true); Rule, Reason and Suggest say what would have
	// denied it.
	WouldDeny bool
	// Rule cites what decided: an allow rule, a deny range, the
	// default, or one of the gateway's own checks.
	Rule RuleID
	// Reason says why, in words.
	Reason string
	// Suggest is the policy change that would allow a denied attempt,
	// empty when no policy change can (fronting, a malformed request).
	Suggest string
}

// RulesAllow reports a verdict that allows by a rule, not one that audit
// only lets through.
func (v Verdict) RulesAllow() bool { return v.Allowed && !v.WouldDeny }

// NameAllowed reports whether name resolves: a rule (or the default)
// allows it, or audit lets it through (NameWouldDeny).
func (p *Policy) NameAllowed(name string) bool {
	return p.Audit || p.nameInRules(name)
}

// NameWouldDeny reports a name that resolves only because of audit.
func (p *Policy) NameWouldDeny(name string) bool {
	return p.Audit && !p.nameInRules(name)
}

func (p *Policy) nameInRules(name string) bool {
	if p.AllowAll {
		return true
	}
	for _, r := range p.Rules {
		if r.matchHost(name) {
			return true
		}
	}
	return false
}

// Connect decides a connection to name:port before anything is sent.
// The returned rule is the first that allows it; requests through it
// must still pass Request when the rule is HTTP-only.
func (p *Policy) Connect(name string, port int) (Rule, Verdict) {
	var nameSeen bool
	for _, r := range p.Rules {
		if !r.matchHost(name) {
			continue
		}
		nameSeen = true
		if slices.Contains(r.Ports, port) {
			return r, Verdict{Allowed: true, Rule: r.ID()}
		}
	}
	if p.AllowAll && slices.Contains(DefaultPorts, port) {
		return Rule{Index: -1, Host: name, Ports: DefaultPorts}, Verdict{Allowed: true, Rule: RuleID{Kind: KindDefaultAllow}}
	}
	v := Verdict{Rule: RuleID{Kind: KindDefaultDeny}, Suggest: SuggestHost(name, port)}
	if nameSeen {
		v.Reason = fmt.Sprintf("port %d of %s is not in the ports of its egress.allow rules", port, name)
	} else {
		v.Reason = fmt.Sprintf("%s is not in egress.allow", name)
	}
	if p.Audit {
		// Any request through the connection is decided again by
		// Request, and recorded as would-deny there too.
		return Rule{Index: -1, Host: name, Ports: []int{port}}, p.audit(v)
	}
	return Rule{}, v
}

// audit turns a denial into what audit does with it: let it through,
// recorded as would-deny.
func (p *Policy) audit(v Verdict) Verdict {
	if p.Audit && !v.Allowed {
		v.Allowed, v.WouldDeny = true, true
	}
	return v
}

// Request decides one HTTP request to name:port. path is the decoded
// path, rawPath the path as sent (escaped). Rules with methods or path
// prefixes must match them; a rule without allows any request. A path
// that could mean something else upstream ("..", encoded slashes or
// dots) never matches a path prefix.
func (p *Policy) Request(name string, port int, method, path, rawPath string) Verdict {
	var near *Rule
	for i, r := range p.Rules {
		if !r.matchHost(name) || !slices.Contains(r.Ports, port) {
			continue
		}
		if (len(r.Methods) == 0 || slices.Contains(r.Methods, method)) && matchPath(r.PathPrefixes, path, rawPath) {
			return Verdict{Allowed: true, Rule: r.ID()}
		}
		if near == nil {
			near = &p.Rules[i]
		}
	}
	if p.AllowAll && slices.Contains(DefaultPorts, port) {
		return Verdict{Allowed: true, Rule: RuleID{Kind: KindDefaultAllow}}
	}
	if near == nil {
		_, v := p.Connect(name, port)
		return v
	}
	return p.audit(Verdict{
		Rule:    near.ID(),
		Reason:  fmt.Sprintf("%s %s is outside the methods %v and path prefixes %v of %s", method, path, near.Methods, near.PathPrefixes, near.ID()),
		Suggest: fmt.Sprintf("add {host: %q, ports: [%d], methods: [%q], pathPrefixes: [%q]} to egress.allow in %s", name, port, method, pathDir(path), policies.RepoPolicyPath),
	})
}

// matchPath matches prefixes on segment boundaries ("/api" covers "/api"
// and "/api/x", not "/apix").
func matchPath(prefixes []string, path, rawPath string) bool {
	if len(prefixes) == 0 {
		return true
	}
	if !paths.PlainURLPath(path, rawPath) {
		return false
	}
	for _, pre := range prefixes {
		if path == pre || strings.HasPrefix(path, pre) && (strings.HasSuffix(pre, "/") || path[len(pre)] == '/') {
			return true
		}
	}
	return false
}

// pathDir is the directory part of a request path, as a prefix to suggest.
func pathDir(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i+1]
	}
	return "/"
}

// SuggestHost is the policy line that allows name:port. A single-label
// name is no host on the network (a service's, or the sandbox's own, is in
// the job's /etc/hosts): no policy line would be right for it.
func SuggestHost(name string, port int) string {
	if !strings.Contains(strings.Trim(name, "."), ".") {
		return fmt.Sprintf("nothing in egress.allow: %q is a single-label name, not a host on the network; the job's services and the sandbox's own name are in its /etc/hosts", name)
	}
	ports := ""
	if port != 443 {
		ports = ", ports: [" + strconv.Itoa(port) + "]"
	}
	return fmt.Sprintf("add {host: %q%s} to egress.allow in %s", name, ports, policies.RepoPolicyPath)
}

// SecretsFor returns the headers to add to requests for name.
func (p *Policy) SecretsFor(name string) []Secret {
	var out []Secret
	for _, s := range p.Secrets {
		if s.Host == name {
			out = append(out, s)
		}
	}
	return out
}

// Ports returns every port some rule (or the default) allows, sorted.
func (p *Policy) Ports() []int {
	var out []int
	if p.AllowAll || p.Audit {
		// Under audit a direct connection may go anywhere the rules do
		// not name: the gateway listens on the usual ports (any other
		// port is reached through the proxy).
		out = append(out, DefaultPorts...)
	}
	for _, r := range p.Rules {
		out = append(out, r.Ports...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
