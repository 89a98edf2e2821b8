package rules

import (
	"fmt"
	"strings"
)

// RuleKind is what kind of rule or check decided an egress attempt. Its
// value is also how an attestation's decision rows name the kind
// (ruleKind), so the values never change.
type RuleKind string

// The kinds of rule that decide egress. The comment is the rule's text
// (RuleID.String).
const (
	// KindAllow is an egress.allow entry: "egress.allow[Index] (Detail)",
	// Detail the rule's host. A connection let through by the default or
	// by a service host is cited as one with Index -1.
	KindAllow RuleKind = "allow"
	// KindAllowName is a name the DNS server answers (some rule, the
	// default or a service host lets it resolve): "egress.allow".
	KindAllowName RuleKind = "allow-name"
	// KindDefaultAllow is "egress.default (allow)".
	KindDefaultAllow RuleKind = "default-allow"
	// KindDefaultDeny is "egress.default (deny)" (DefaultDeny): no rule
	// allows the attempt.
	KindDefaultDeny RuleKind = "default-deny"
	// KindDenyCIDR is a range of the policy's egress.denyCIDRs:
	// "egress.denyCIDRs Detail".
	KindDenyCIDR RuleKind = "deny-cidr"
	// KindAllowCIDR is a range of the policy's egress.allowCIDRs:
	// "egress.allowCIDRs Detail".
	KindAllowCIDR RuleKind = "allow-cidr"
	// KindDenyRange is a built-in deny range: "deny range Detail", Detail
	// a prefix, "host-address" or "ipv6".
	KindDenyRange RuleKind = "deny-range"
	// KindPublicAddress is an upstream address no range refuses:
	// "public address".
	KindPublicAddress RuleKind = "public-address"
	// KindFronting is a TLS server name or HTTP Host that is not the
	// name the connection is for: "fronting".
	KindFronting RuleKind = "fronting"
	// KindService is one of the job's Actions service hosts, reachable
	// for the credentials policy to decide its requests: "credentials
	// (the job's Actions services)".
	KindService RuleKind = "service"
	// KindCredentials is a rule of the credentials policy, Detail as the
	// vault names it ("credentials", "credentials.cache", ...).
	KindCredentials RuleKind = "credentials"
	// KindCapacity is the gateway's bound on open connections: "gateway
	// capacity".
	KindCapacity RuleKind = "capacity"
	// KindProxy is a request the explicit proxy cannot serve: "proxy".
	KindProxy RuleKind = "proxy"
	// KindResolution is a name the host could not resolve: "upstream
	// resolution".
	KindResolution RuleKind = "upstream-resolution"
	// KindUpstream is an upstream that did not answer: "upstream".
	KindUpstream RuleKind = "upstream"
	// KindNone is a connection that went around the gateway (an airlock
	// bug): "none".
	KindNone RuleKind = "none"
)

// DefaultDeny is the text of the rule for anything no rule allows
// (RuleID{Kind: KindDefaultDeny}).
const DefaultDeny = "egress.default (deny)"

// Kinds lists every kind.
func Kinds() []RuleKind {
	return []RuleKind{KindAllow, KindAllowName, KindDefaultAllow, KindDefaultDeny, KindDenyCIDR, KindAllowCIDR, KindDenyRange,
		KindPublicAddress, KindFronting, KindService, KindCredentials, KindCapacity, KindProxy, KindResolution, KindUpstream, KindNone}
}

// shape is the kind's text without the "egress." that policy fields
// carry (policyField), and whether the rule's Detail follows it. An
// allow rule's text has its index too (RuleID.String).
func (k RuleKind) shape() (text string, policyField, detail bool) {
	switch k {
	case KindAllowName:
		return "allow", true, false
	case KindDefaultAllow:
		return "default (allow)", true, false
	case KindDefaultDeny:
		return "default (deny)", true, false
	case KindDenyCIDR:
		return "denyCIDRs ", true, true
	case KindAllowCIDR:
		return "allowCIDRs ", true, true
	case KindDenyRange:
		return "deny range ", false, true
	case KindPublicAddress:
		return "public address", false, false
	case KindFronting:
		return "fronting", false, false
	case KindService:
		return "credentials (the job's Actions services)", false, false
	case KindCredentials:
		return "", false, true // the vault's own name of its rule
	case KindCapacity:
		return "gateway capacity", false, false
	case KindProxy:
		return "proxy", false, false
	case KindResolution:
		return "upstream resolution", false, false
	case KindUpstream:
		return "upstream", false, false
	case KindNone:
		return "none", false, false
	}
	return "", false, false
}

// RuleID names the rule that decided an attempt: its kind, and for an
// egress.allow rule its position; Detail is the rule's host, range or
// credentials rule (see the kinds).
type RuleID struct {
	Kind   RuleKind
	Index  int
	Detail string
}

// String is how decisions cite the rule ("egress.allow[0]
// (proxy.golang.org)", "deny range 10.0.0.0/8", "fronting"); the zero
// RuleID is "".
func (r RuleID) String() string {
	if r.Kind == KindAllow {
		return fmt.Sprintf("egress.allow[%d] (%s)", r.Index, r.Detail)
	}
	body, policyField := r.body()
	if policyField {
		return "egress." + body
	}
	return body
}

// Short is the rule as an attestation's decision row cites it, without
// what the row says anyway: "egress." and an allow rule's host
// ("allow[0]", "default (deny)", "denyCIDRs 10.1.0.0/16").
func (r RuleID) Short() string {
	if r.Kind == KindAllow {
		return fmt.Sprintf("allow[%d]", r.Index)
	}
	body, _ := r.body()
	return body
}

// body is the rule's text without "egress.", and whether it is a policy
// field (which String prefixes with "egress.").
func (r RuleID) body() (string, bool) {
	text, policyField, detail := r.Kind.shape()
	if detail {
		text += r.Detail
	}
	return text, policyField
}

// ByRules reports a rule that egress.allow decides: the default's deny,
// or an allow rule (whose methods or paths did not match). A policy
// suggestion can change what those refuse, and nothing else.
func (k RuleKind) ByRules() bool { return k == KindAllow || k == KindDefaultDeny }

// KindOfText is the kind of a rule known only by its text, long
// (String) or short (Short): what decision rows of attestations made
// before they carried ruleKind say. Text no kind has gives "". This is
// the one place rule text is read back.
func KindOfText(text string) RuleKind {
	bare, cited := strings.CutPrefix(text, "egress.")
	switch {
	case strings.HasPrefix(bare, "allow["):
		return KindAllow
	case !cited && (bare == "credentials" || strings.HasPrefix(bare, "credentials.")):
		return KindCredentials
	}
	for _, k := range Kinds() {
		t, policyField, detail := k.shape()
		// The short form drops "egress.", so only the long form says
		// whether the text was a policy field's.
		if t == "" || cited && !policyField {
			continue
		}
		if bare == t || detail && strings.HasPrefix(bare, t) {
			return k
		}
	}
	return ""
}
