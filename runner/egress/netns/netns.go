// Package netns makes the two network namespaces of one job: the
// sandbox's, holding one end of a veth pair (gVisor's netstack takes it
// over), and the gateway's, holding the other end, where airlock's egress
// gateway listens. There is no forwarding, no NAT and no route beyond the
// gateway's address: anything the sandbox sends elsewhere fails at once.
// IPv6 is disabled in both.
//
// Nothing is mounted and nothing is named: each namespace lives as long as
// an open file descriptor (ours, or the sandbox's after it joined), so a
// crash or SIGKILL of airlock cannot leak one, and the veth pair vanishes
// with its namespaces.
package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
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
}

// New creates the pair on subnet (a /30 or larger; the first two host
// addresses go to the gateway and the sandbox).
func New(subnet netip.Prefix) (_ *Pair, err error) {
	if !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return nil, fmt.Errorf("netns: subnet %s: want an IPv4 prefix of /30 or larger", subnet)
	}
	subnet = subnet.Masked()
	gw := subnet.Addr().Next()
	sb := gw.Next()
	p := &Pair{sandbox: -1, gateway: -1, GatewayAddr: gw, SandboxAddr: sb, Prefix: subnet}
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

// inNewNamespaces creates both namespaces on a locked thread, which is
// put back into its original namespace before it is unlocked (a thread
// that cannot go back is left locked, so Go retires it).
func inNewNamespaces(p *Pair) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: current namespace: %w", err)
	}
	defer orig.Close()
	restore := func() error {
		if err := netns.Set(orig); err != nil {
			return err
		}
		runtime.UnlockOSThread()
		return nil
	}
	for _, h := range []*netns.NsHandle{&p.sandbox, &p.gateway} {
		ns, err := netns.New()
		if err != nil {
			restore()
			return fmt.Errorf("netns: create namespace: %w", err)
		}
		*h = ns
		if err := disableIPv6(); err != nil {
			restore()
			return err
		}
	}
	if err := restore(); err != nil {
		return fmt.Errorf("netns: return to the original namespace: %w", err)
	}
	return nil
}

// disableIPv6 turns IPv6 off in the calling thread's namespace.
func disableIPv6() error {
	for _, f := range []string{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"} {
		if err := os.WriteFile(f, []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("netns: disable IPv6: %w", err)
		}
	}
	return nil
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
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(p.gateway); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: enter gateway namespace: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: Go retires it when this goroutine ends.
		return fmt.Errorf("netns: leave gateway namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
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
