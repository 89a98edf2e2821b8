package rules

import (
	"fmt"
	"net"
	"net/netip"
)

// builtinDeny are ranges no upstream dial may reach unless the policy's
// allowCIDRs names them: this host and its neighbours, cloud metadata
// services, and addresses that are not unicast on the internet.
var builtinDeny = []string{
	"0.0.0.0/8",       // "this network"; 0.0.0.0 reaches the local host
	"10.0.0.0/8",      // RFC 1918
	"100.64.0.0/10",   // CGNAT (also some clouds' metadata, e.g. 100.100.100.200)
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local, incl. 169.254.169.254 metadata
	"172.16.0.0/12",   // RFC 1918
	"192.0.0.0/24",    // IETF protocol assignments
	"192.0.2.0/24",    // documentation
	"192.168.0.0/16",  // RFC 1918
	"198.18.0.0/15",   // benchmarking; airlock's own gateway addresses
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, incl. broadcast
	"::/128",          // unspecified
	"::1/128",         // loopback
	"::ffff:0:0/96",   // IPv4-mapped (checked unmapped, kept for clarity)
	"64:ff9b::/96",    // NAT64: would embed any IPv4 address
	"100::/64",        // discard
	"2001:db8::/32",   // documentation
	"2002::/16",       // 6to4: embeds IPv4
	"fc00::/7",        // ULA, incl. fd00:ec2::254 metadata
	"fe80::/10",       // link-local
	"ff00::/8",        // multicast
}

// Ranges decides which upstream addresses a name may be dialled at.
type Ranges struct {
	allow  []netip.Prefix
	policy []netip.Prefix
	deny   []netip.Prefix
	host   map[netip.Addr]bool
}

// NewRanges compiles the policy's allowCIDRs and denyCIDRs on top of the
// built-in deny ranges and the host's own addresses.
func NewRanges(allowCIDRs, denyCIDRs []string) (Ranges, error) {
	var r Ranges
	var err error
	if r.allow, err = parsePrefixes("egress.allowCIDRs", allowCIDRs); err != nil {
		return r, err
	}
	if r.policy, err = parsePrefixes("egress.denyCIDRs", denyCIDRs); err != nil {
		return r, err
	}
	r.deny, _ = parsePrefixes("built-in", builtinDeny)
	r.host = hostAddrs()
	return r, nil
}

func parsePrefixes(field string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR range: %v", field, s, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// hostAddrs are the addresses of this host's interfaces: a name that
// resolves to one of them would reach the runner itself.
func hostAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

// WithoutExceptions is r without its allowCIDRs: what audit dials a
// destination the rules would deny with, so that a range the
// organisation opened for its allowed names (an internal registry, a
// pinned test upstream) is not opened to every other name.
func (r Ranges) WithoutExceptions() Ranges {
	r.allow = nil
	return r
}

// Check returns a verdict for dialling addr. Policy deny ranges always
// win; allowCIDRs exempt an address from the built-in ranges, from the
// host's own addresses and from the IPv6 default.
func (r Ranges) Check(addr netip.Addr) Verdict {
	addr = addr.Unmap().WithZone("")
	for _, p := range r.policy {
		if p.Contains(addr) {
			return Verdict{Rule: RuleID{Kind: KindDenyCIDR, Detail: p.String()}, Reason: fmt.Sprintf("upstream address %s is in egress.denyCIDRs %s", addr, p)}
		}
	}
	for _, p := range r.allow {
		if p.Contains(addr) {
			return Verdict{Allowed: true, Rule: RuleID{Kind: KindAllowCIDR, Detail: p.String()}}
		}
	}
	suggest := fmt.Sprintf("if this is intended, add %q to egress.allowCIDRs (organisation policy)", netip.PrefixFrom(addr, addr.BitLen()).String())
	for _, p := range r.deny {
		if p.Contains(addr) {
			return Verdict{Rule: RuleID{Kind: KindDenyRange, Detail: p.String()}, Reason: fmt.Sprintf("upstream address %s is in the deny range %s (loopback, private, link-local, metadata or reserved)", addr, p), Suggest: suggest}
		}
	}
	if r.host[addr] {
		return Verdict{Rule: RuleID{Kind: KindDenyRange, Detail: "host-address"}, Reason: fmt.Sprintf("upstream address %s belongs to this host", addr), Suggest: suggest}
	}
	if addr.Is6() {
		return Verdict{Rule: RuleID{Kind: KindDenyRange, Detail: "ipv6"}, Reason: fmt.Sprintf("upstream address %s is IPv6, which egress allows only inside egress.allowCIDRs", addr), Suggest: suggest}
	}
	return Verdict{Allowed: true, Rule: RuleID{Kind: KindPublicAddress}}
}
