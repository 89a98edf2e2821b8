// Package netns makes the two network namespaces of one job: the
// sandbox's, holding one end of a veth pair (gVisor's netstack takes it
// over), and the gateway's, holding the other end, where airlock's egress
// gateway listens. There is no forwarding, no NAT and no route beyond the
// gateway's address: anything the sandbox sends elsewhere fails at once.
// IPv6 is disabled in both: by sysctl, or where /proc/sys is read-only
// (a Kubernetes pod's container) by generating no IPv6 address on the
// veth pair, which leaves IPv6 nothing to talk with.
//
// Nothing is mounted and nothing is named: each namespace lives as long as
// an open file descriptor (ours, or the sandbox's after it joined), so a
// crash or SIGKILL of airlock cannot leak one, and the veth pair vanishes
// with its namespaces.
//
// Layer 1: imports nothing of airlock's; it knows namespaces, not policies.
package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// DefaultSubnet is a /30 in 198.18.0.0/15, the range reserved for network
// benchmarks (RFC 2544): it does not collide with office or cloud LANs.
var DefaultSubnet = netip.MustParsePrefix("198.18.0.0/30")

// Interface names inside the namespaces.
const (
	SandboxIf = "eth0"
	GatewayIf = "gw0"
)

// Pair is a job's sandbox and gateway namespaces.
type Pair struct {
	sandbox, gateway netns.NsHandle
	// GatewayAddr and SandboxAddr are the two ends' addresses.
	GatewayAddr, SandboxAddr netip.Addr
	Prefix                   netip.Prefix
	// Pool is routed to the gateway and local there (invalid: none).
	Pool netip.Prefix
	// ipv6Sysctl: IPv6 is off by sysctl in both namespaces; false: /proc/sys
	// is read-only, and the veth pair gets no IPv6 address instead.
	ipv6Sysctl bool
}

// DefaultPool is where the gateway's addresses for allowed names come
// from: the other half of 198.18.0.0/15.
var DefaultPool = netip.MustParsePrefix("198.19.0.0/16")

// New creates the pair on subnet (a /30 or larger; the first two host
// addresses go to the gateway and the sandbox). pool, when valid, is
// routed from the sandbox to the gateway, where every address in it is
// local (so the gateway can hand them out, one per allowed name, and
// accept connections to any of them).
func New(subnet, pool netip.Prefix) (_ *Pair, err error) {
	if !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return nil, fmt.Errorf("netns: subnet %s: want an IPv4 prefix of /30 or larger", subnet)
	}
	subnet = subnet.Masked()
	if pool.IsValid() {
		pool = pool.Masked()
		if !pool.Addr().Is4() || pool.Overlaps(subnet) {
			return nil, fmt.Errorf("netns: pool %s: want an IPv4 prefix apart from the link %s", pool, subnet)
		}
	}
	gw := subnet.Addr().Next()
	sb := gw.Next()
	p := &Pair{sandbox: -1, gateway: -1, GatewayAddr: gw, SandboxAddr: sb, Prefix: subnet, Pool: pool}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if err := inNewNamespaces(p); err != nil {
		return nil, err
	}
	if err := p.wire(); err != nil {
		return nil, err
	}
	return p, nil
}

// inNewNamespaces creates both namespaces on a thread of their own (see
// onThread): creating one moves the thread into it.
func inNewNamespaces(p *Pair) error {
	return onThread(func() error {
		for i, h := range []*netns.NsHandle{&p.sandbox, &p.gateway} {
			ns, err := netns.New()
			if err != nil {
				return fmt.Errorf("netns: create namespace: %w", err)
			}
			*h = ns
			off, err := disableIPv6()
			if err != nil {
				return err
			}
			if i == 0 {
				p.ipv6Sysctl = off
			}
		}
		return nil
	})
}

// onThread runs fn on a locked OS thread and puts the thread back into
// its original namespace afterwards. A thread that cannot go back is left
// locked, so Go retires it when its goroutine ends.
func onThread(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: current namespace: %w", err)
	}
	defer orig.Close()
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("netns: return to the original namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// disableIPv6 turns IPv6 off in the calling thread's namespace. It
// returns false, and no error, where /proc/sys is mounted read-only, as
// in a container that is not privileged: wire then keeps IPv6 addresses
// off the veth pair instead. A kernel without IPv6 needs neither.
func disableIPv6() (bool, error) {
	if _, err := os.Stat("/proc/sys/net/ipv6"); errors.Is(err, os.ErrNotExist) {
		return true, nil // no IPv6 in this kernel: nothing to turn off
	}
	for _, f := range []string{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"} {
		err := os.WriteFile(f, []byte("1"), 0o644)
		switch {
		case errors.Is(err, unix.EROFS):
			return false, nil
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return false, fmt.Errorf("netns: disable IPv6: %w", err)
		}
	}
	return true, nil
}

// in6AddrGenModeNone is the kernel's IN6_ADDR_GEN_MODE_NONE
// (include/uapi/linux/if_link.h), which golang.org/x/sys does not name.
const in6AddrGenModeNone = 1

// noIPv6Addresses sets the named links of ns to generate no IPv6 address
// (IN6_ADDR_GEN_MODE_NONE, through netlink: it needs no /proc/sys), before
// they come up.
func noIPv6Addresses(ns netns.NsHandle, names ...string) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("netns: enter namespace: %w", err)
		}
		for _, name := range names {
			link, err := netlink.LinkByName(name)
			if err != nil {
				return fmt.Errorf("netns: find %s: %w", name, err)
			}
			req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
			msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
			msg.Index = int32(link.Attrs().Index)
			req.AddData(msg)
			spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
			spec.AddRtAttr(unix.AF_INET6, nil).AddRtAttr(unix.IFLA_INET6_ADDR_GEN_MODE, []byte{in6AddrGenModeNone})
			req.AddData(spec)
			if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
				return fmt.Errorf("netns: no IPv6 address on %s: %w", name, err)
			}
		}
		return nil
	})
}

// wire creates the veth pair across the namespaces, addresses it and
// brings everything up. No default route is added on either side.
func (p *Pair) wire() error {
	gwh, err := netlink.NewHandleAt(p.gateway)
	if err != nil {
		return fmt.Errorf("netns: netlink in gateway namespace: %w", err)
	}
	defer gwh.Close()
	sbh, err := netlink.NewHandleAt(p.sandbox)
	if err != nil {
		return fmt.Errorf("netns: netlink in sandbox namespace: %w", err)
	}
	defer sbh.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: GatewayIf, MTU: 1500}, PeerName: SandboxIf, PeerNamespace: netlink.NsFd(p.sandbox)}
	if err := gwh.LinkAdd(veth); err != nil {
		return fmt.Errorf("netns: create veth pair: %w", err)
	}
	if !p.ipv6Sysctl {
		if err := noIPv6Addresses(p.gateway, GatewayIf); err != nil {
			return err
		}
		if err := noIPv6Addresses(p.sandbox, SandboxIf); err != nil {
			return err
		}
	}
	for _, side := range []struct {
		h    *netlink.Handle
		name string
		addr netip.Addr
	}{{gwh, GatewayIf, p.GatewayAddr}, {sbh, SandboxIf, p.SandboxAddr}} {
		link, err := side.h.LinkByName(side.name)
		if err != nil {
			return fmt.Errorf("netns: find %s: %w", side.name, err)
		}
		a, err := netlink.ParseAddr(netip.PrefixFrom(side.addr, p.Prefix.Bits()).String())
		if err != nil {
			return err
		}
		if err := side.h.AddrAdd(link, a); err != nil {
			return fmt.Errorf("netns: address %s: %w", side.name, err)
		}
		if err := side.h.LinkSetUp(link); err != nil {
			return fmt.Errorf("netns: bring up %s: %w", side.name, err)
		}
		lo, err := side.h.LinkByName("lo")
		if err == nil {
			side.h.LinkSetUp(lo)
		}
	}
	if !p.Pool.IsValid() {
		return nil
	}
	pool := &net.IPNet{IP: p.Pool.Addr().AsSlice(), Mask: net.CIDRMask(p.Pool.Bits(), 32)}
	sbLink, err := sbh.LinkByName(SandboxIf)
	if err != nil {
		return fmt.Errorf("netns: find %s: %w", SandboxIf, err)
	}
	if err := sbh.RouteAdd(&netlink.Route{LinkIndex: sbLink.Attrs().Index, Dst: pool, Gw: p.GatewayAddr.AsSlice()}); err != nil {
		return fmt.Errorf("netns: route %s via the gateway: %w", p.Pool, err)
	}
	// "AnyIP": the whole pool is local in the gateway namespace, so a
	// listener on 0.0.0.0 accepts connections to any address in it.
	lo, err := gwh.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("netns: find gateway lo: %w", err)
	}
	if err := gwh.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: pool, Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST}); err != nil {
		return fmt.Errorf("netns: local route %s in the gateway: %w", p.Pool, err)
	}
	return nil
}

// SandboxPath is a path runsc can open to join the sandbox namespace. It
// names our own descriptor, so it is valid while the Pair is open.
func (p *Pair) SandboxPath() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(p.sandbox))
}

// InGateway runs fn on a thread inside the gateway namespace (to open
// listening sockets there); the thread returns to its namespace after.
func (p *Pair) InGateway(fn func() error) error {
	return onThread(func() error {
		if err := netns.Set(p.gateway); err != nil {
			return fmt.Errorf("netns: enter gateway namespace: %w", err)
		}
		return fn()
	})
}

// Close releases our references; the namespaces and the veth pair go away
// once the sandbox has let go of its own.
func (p *Pair) Close() error {
	var errs []error
	for _, h := range []*netns.NsHandle{&p.sandbox, &p.gateway} {
		if *h >= 0 {
			errs = append(errs, h.Close())
			*h = -1
		}
	}
	return errors.Join(errs...)
}
