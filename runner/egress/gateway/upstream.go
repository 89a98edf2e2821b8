package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// Resolver resolves names on the host side (net.DefaultResolver, or a
// test's own).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// deniedError is an upstream dial refused by the deny ranges.
type deniedError struct{ v rules.Verdict }

func (e *deniedError) Error() string { return e.v.Reason }

// dialUpstream resolves name on the host (or takes its pinned address),
// checks every address against the deny ranges and dials the first
// permitted one, by address, so nothing is resolved twice (no rebinding
// window). A name with no permitted address is refused before any dial.
// For an attempt audit lets through (wouldDeny), allowCIDRs count only
// for a name the policy pins (egress.resolve): they were opened for the
// organisation's own names, not for whatever name resolves into them.
func (g *Gateway) dialUpstream(ctx context.Context, name string, port int, wouldDeny bool) (net.Conn, rules.Verdict, error) {
	var addrs []netip.Addr
	ranges := g.cfg.Policy.Ranges
	if a, ok := g.cfg.Policy.Pinned[name]; ok {
		addrs = []netip.Addr{a}
	} else {
		if wouldDeny {
			ranges = ranges.WithoutExceptions()
		}
		rctx, cancel := context.WithTimeout(ctx, g.cfg.ResolveTimeout)
		// Absolute: the host's search domains are not appended.
		res, err := g.cfg.Resolver.LookupNetIP(rctx, "ip", name+".")
		cancel()
		if err != nil {
			v := rules.Verdict{Rule: "upstream resolution", Reason: fmt.Sprintf("the host could not resolve %s: %v", name, err)}
			return nil, v, &deniedError{v}
		}
		addrs = res
	}
	var permitted []netip.Addr
	var refused []string
	var first rules.Verdict
	for _, a := range addrs {
		v := ranges.Check(a)
		if v.Allowed {
			permitted = append(permitted, a.Unmap())
			continue
		}
		if len(refused) == 0 {
			first = v
		}
		refused = append(refused, a.String())
	}
	if len(permitted) == 0 {
		if len(addrs) == 0 {
			first = rules.Verdict{Rule: "upstream resolution", Reason: fmt.Sprintf("the host resolved %s to no address", name)}
		} else if len(refused) > 1 {
			first.Reason = fmt.Sprintf("%s resolves only to refused addresses (%s): %s", name, strings.Join(refused, ", "), first.Reason)
		}
		return nil, first, &deniedError{first}
	}
	var errs []error
	for _, a := range permitted {
		c, err := g.cfg.Dialer.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(port)))
		if err == nil {
			return c, ranges.Check(a), nil
		}
		errs = append(errs, err)
	}
	v := rules.Verdict{Rule: "upstream", Reason: fmt.Sprintf("upstream %s:%d did not answer: %v", name, port, errors.Join(errs...))}
	return nil, v, fmt.Errorf("dial %s:%d: %w", name, port, errors.Join(errs...))
}
