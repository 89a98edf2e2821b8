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
// has the Decider check every address (the deny ranges; wouldDeny: an
// attempt audit lets through) and dials the first permitted one, by
// address, so nothing is resolved twice (no rebinding window). A name
// with no permitted address is refused before any dial.
func (g *Gateway) dialUpstream(ctx context.Context, name string, port int, wouldDeny bool) (net.Conn, rules.Verdict, error) {
	var addrs []netip.Addr
	dec := g.cfg.Decider
	if a, ok := dec.Pinned(name); ok {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, g.cfg.ResolveTimeout)
		// Absolute: the host's search domains are not appended.
		res, err := g.cfg.Resolver.LookupNetIP(rctx, "ip", name+".")
		cancel()
		if err != nil {
			v := rules.Verdict{Rule: rules.RuleID{Kind: rules.KindResolution}, Reason: fmt.Sprintf("the host could not resolve %s: %v", name, err)}
			return nil, v, &deniedError{v}
		}
		addrs = res
	}
	var permitted []netip.Addr
	var refused []string
	var first rules.Verdict
	for _, a := range addrs {
		v := dec.Dial(name, a, wouldDeny)
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
			first = rules.Verdict{Rule: rules.RuleID{Kind: rules.KindResolution}, Reason: fmt.Sprintf("the host resolved %s to no address", name)}
		} else if len(refused) > 1 {
			first.Reason = fmt.Sprintf("%s resolves only to refused addresses (%s): %s", name, strings.Join(refused, ", "), first.Reason)
		}
		return nil, first, &deniedError{first}
	}
	var errs []error
	for _, a := range permitted {
		c, err := g.cfg.Dialer.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(port)))
		if err == nil {
			return c, dec.Dial(name, a, wouldDeny), nil
		}
		errs = append(errs, err)
	}
	v := rules.Verdict{Rule: rules.RuleID{Kind: rules.KindUpstream}, Reason: fmt.Sprintf("upstream %s:%d did not answer: %v", name, port, errors.Join(errs...))}
	return nil, v, fmt.Errorf("dial %s:%d: %w", name, port, errors.Join(errs...))
}
