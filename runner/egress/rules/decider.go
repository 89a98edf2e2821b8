package rules

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// Services are the job's Actions service hosts (the credentials vault):
// names the policy may not list, which may still be resolved and reached
// for the credentials policy to decide their requests.
type Services interface {
	// ServiceHost reports whether name is one of them, on port (0: on
	// any of their ports).
	ServiceHost(name string, port int) bool
}

// Decider decides a job's egress. The DNS server, the TCP gateway and
// the explicit proxy all ask it, and only it: it holds the policy's
// rules, the job's Actions service hosts, and the gateway's checks of
// what a connection carries (fronting, HTTP-only rules, web ports) and of
// where it may be dialled (the deny ranges). Every verdict names its rule
// as a RuleID.
type Decider struct {
	policy   *Policy
	services Services
}

// NewDecider returns the decider for a compiled policy. services, when
// not nil, are the job's Actions service hosts; the gateway must be able
// to terminate TLS for them (the job CA covers their domains), since the
// credentials policy decides their requests one by one.
func NewDecider(p *Policy, services Services) *Decider {
	return &Decider{policy: p, services: services}
}

func (d *Decider) service(name string, port int) bool {
	return d.services != nil && d.services.ServiceHost(name, port)
}

// NameAllowed reports whether the DNS server answers name: the rules (or
// audit) let it resolve, or it is one of the job's service hosts.
func (d *Decider) NameAllowed(name string) bool {
	return d.policy.NameAllowed(name) || d.service(name, 0)
}

// NameWouldDeny reports a name answered only because of audit.
func (d *Decider) NameWouldDeny(name string) bool {
	return d.policy.NameWouldDeny(name) && !d.service(name, 0)
}

// Ports are the ports connections may be decided on: the rules' (and
// the default's), and 443 for the service hosts, reached by their URLs.
func (d *Decider) Ports() []int {
	ports := d.policy.Ports()
	if d.services != nil {
		ports = append(ports, 443)
	}
	return ports
}

// Connect decides a connection to name:port before anything is sent:
// egress.allow, or for one of the job's service hosts the credentials
// policy, which then decides each request (the rule it returns names a
// path, so only plain HTTP, which the gateway reads, gets through). The
// returned rule decides what the connection then carries (Splice, and
// Request for HTTP).
func (d *Decider) Connect(name string, port int) (Rule, Verdict) {
	rule, v := d.policy.Connect(name, port)
	if !v.RulesAllow() && d.service(name, port) {
		return Rule{Index: -1, Host: name, Ports: []int{port}, PathPrefixes: []string{"/"}}, Verdict{Allowed: true, Rule: RuleID{Kind: KindService}}
	}
	return rule, v
}

// ServerName decides a TLS connection for name by its ClientHello: the
// server name must be name (else it is fronting); err is a ClientHello
// that could not be read.
func (d *Decider) ServerName(rule Rule, name, sni string, err error) Verdict {
	switch {
	case err != nil:
		return Verdict{Rule: rule.ID(), Reason: err.Error()}
	case sni == "":
		return Verdict{Rule: RuleID{Kind: KindFronting}, Reason: fmt.Sprintf("TLS without a server name (SNI) to %s: the gateway cannot tell where it goes", name)}
	case asciiLower(strings.TrimSuffix(sni, ".")) != name:
		return Verdict{Rule: RuleID{Kind: KindFronting}, Reason: fmt.Sprintf("TLS server name %q does not match %s, the name this connection is for (domain fronting)", sni, name)}
	}
	return Verdict{Allowed: true, Rule: rule.ID()}
}

// HTTPHost decides a plain HTTP request on a connection for name by its
// Host header (host, as sent): it must name name, else it is fronting.
func (d *Decider) HTTPHost(name, host string) Verdict {
	if h := asciiLower(strings.TrimSuffix(hostOnly(host), ".")); h != name {
		return Verdict{Rule: RuleID{Kind: KindFronting}, Reason: fmt.Sprintf("HTTP Host %q does not match %s, the name this connection is for", textsafe.Clip(host, 255, ""), name)}
	}
	return Verdict{Allowed: true}
}

// asciiLower lowers A-Z only: a host name is ASCII, and Unicode case
// folding would take "up.teſt" (long s) or a Kelvin sign for ASCII
// letters of the name the connection is for.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return strings.Trim(h, "[]")
	}
	return hostport
}

// Splice decides carrying a connection for name:port upstream as it is,
// unread (TLS the gateway does not terminate, or another protocol):
// never through a rule that allows only HTTP requests, and on a web port
// only TLS (anything else there would get around the SNI and Host
// checks).
func (d *Decider) Splice(rule Rule, name string, port int, isTLS bool) Verdict {
	switch {
	case rule.HTTPOnly():
		return Verdict{Rule: rule.ID(), Reason: fmt.Sprintf("%s allows only plain HTTP requests (it lists methods or paths), and this connection is not one", rule.ID()), Suggest: SuggestHost(name, port)}
	case !isTLS && webPort(port):
		return Verdict{Rule: rule.ID(), Reason: fmt.Sprintf("port %d carries only TLS or HTTP through the gateway, and this connection is neither", port)}
	}
	return Verdict{Allowed: true, Rule: rule.ID()}
}

// webPort reports a port that carries only TLS or HTTP.
func webPort(port int) bool {
	switch port {
	case 80, 443, 8080, 8443:
		return true
	}
	return false
}

// Passed is what the record says of a connection through rule that
// passed the gateway's checks: allowed by the rule, or, when audit let
// it through (cv, its Connect verdict), would-deny.
func (d *Decider) Passed(rule Rule, cv Verdict, reason string) Verdict {
	if cv.WouldDeny {
		return cv
	}
	return Verdict{Allowed: true, Rule: rule.ID(), Reason: reason}
}

// Request decides one HTTP request to name:port (see Policy.Request).
func (d *Decider) Request(name string, port int, method, path, rawPath string) Verdict {
	return d.policy.Request(name, port, method, path, rawPath)
}

// CredentialVerdict is the credentials policy's answer on a request
// (credentials.Vault.Request).
type CredentialVerdict struct {
	// Service: the request is on an Actions service route, which needs
	// no egress.allow.
	Service bool
	Allowed bool
	// Rule is the credentials policy's rule ("credentials.cache").
	Rule, Reason, Suggest string
}

// WithCredentials is a request's verdict v once the credentials policy
// answered c: its refusal refuses (audit or not), and an Actions service
// route it allows stands in for egress.allow.
func (d *Decider) WithCredentials(v Verdict, c CredentialVerdict) Verdict {
	rule := RuleID{Kind: KindCredentials, Detail: c.Rule}
	switch {
	case !c.Allowed:
		return Verdict{Rule: rule, Reason: c.Reason, Suggest: c.Suggest}
	case !v.RulesAllow() && c.Service:
		return Verdict{Allowed: true, Rule: rule}
	}
	return v
}

// Secrets are the headers to add to a request for name with verdict v:
// the policy's, never on what audit only let through.
func (d *Decider) Secrets(name string, v Verdict) []Secret {
	if v.WouldDeny {
		return nil
	}
	return d.policy.SecretsFor(name)
}

// HasSecrets reports a name the policy has secrets for.
func (d *Decider) HasSecrets(name string) bool { return len(d.policy.SecretsFor(name)) > 0 }

// Pinned is the address the policy pins name to (egress.resolve).
func (d *Decider) Pinned(name string) (netip.Addr, bool) {
	a, ok := d.policy.Pinned[name]
	return a, ok
}

// Dial decides dialling addr for name: the deny ranges. For an attempt
// audit lets through (wouldDeny), allowCIDRs count only for a name the
// policy pins: they were opened for the organisation's own names, not
// for whatever name resolves into them.
func (d *Decider) Dial(name string, addr netip.Addr, wouldDeny bool) Verdict {
	ranges := d.policy.Ranges
	if _, pinned := d.policy.Pinned[name]; wouldDeny && !pinned {
		ranges = ranges.WithoutExceptions()
	}
	return ranges.Check(addr)
}

// UnknownAddress refuses a connection to a gateway address the DNS
// server never handed out.
func (d *Decider) UnknownAddress(addr netip.Addr) Verdict {
	return Verdict{Rule: RuleID{Kind: KindDefaultDeny}, Reason: fmt.Sprintf("%s is not an address the gateway's DNS handed out; connect by a name the policy allows", addr)}
}

// OwnAddress refuses a connection to the gateway's own address on a port
// other than the DNS server's and the proxy's.
func (d *Decider) OwnAddress(dnsPort, proxyPort uint16) Verdict {
	return Verdict{Rule: RuleID{Kind: KindDefaultDeny}, Reason: fmt.Sprintf("the gateway's own address serves only DNS (port %d) and the proxy (port %d)", dnsPort, proxyPort)}
}

// AddressLiteral refuses a proxy request for an address (host) that is
// not the gateway's: egress is by name.
func (d *Decider) AddressLiteral(host string) Verdict {
	return Verdict{Rule: RuleID{Kind: KindDefaultDeny}, Reason: fmt.Sprintf("%s is an IP address; egress is allowed by name only", host), Suggest: "connect by a host name and add it to egress.allow"}
}
