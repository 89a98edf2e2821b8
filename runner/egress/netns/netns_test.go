package netns

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/podlike"
)

const testStateBase = "/run/airlock-test-netns"

func TestMain(m *testing.M) {
	gvisor.Dispatch()
	if err := podlike.Enter(); err != nil {
		panic(err)
	}
	leakcheck.Run(m, testStateBase, "")
}

// In a container that is not privileged /proc/sys is read-only, so IPv6
// cannot be turned off by sysctl: the pair still comes up, with no IPv6
// address on the veth pair, and a sandbox on it reaches the gateway and
// nothing else, over IPv4 alone (TestSandboxReachesOnlyTheGateway, run
// again with /proc/sys read-only).
func TestReadOnlyProcSys(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, ok := podlike.Active(); ok {
		t.Skip("the run's own")
	}
	out := podlike.Run(t, "^TestSandboxReachesOnlyTheGateway$", podlike.Limits{ReadOnlyProcSys: true}, "TestSandboxReachesOnlyTheGateway")
	if !strings.Contains(out, "IPv6 off by: no address on the veth pair") {
		t.Fatal("the run did not have /proc/sys read-only")
	}
}

// checkNoIPv6 fails unless neither end of the pair has an IPv6 address,
// and says how IPv6 was turned off.
func checkNoIPv6(t *testing.T, p *Pair) {
	t.Helper()
	how := "sysctl"
	if !p.ipv6Sysctl {
		how = "no address on the veth pair"
	}
	l, _ := podlike.Active()
	if ro := l.ReadOnlyProcSys; ro == p.ipv6Sysctl {
		t.Errorf("IPv6 turned off by %s with /proc/sys read-only %t", how, ro)
	}
	t.Logf("IPv6 off by: %s", how)
	for _, side := range []struct {
		ns   netns.NsHandle
		name string
	}{{p.gateway, GatewayIf}, {p.sandbox, SandboxIf}} {
		h, err := netlink.NewHandleAt(side.ns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		link, err := h.LinkByName(side.name)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := h.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 0 {
			t.Errorf("%s has IPv6 addresses %v", side.name, addrs)
		}
	}
}

// A sandbox on the pair reaches the gateway's address and nothing else:
// other addresses, public or private, fail at once; there is no IPv6.
func TestSandboxReachesOnlyTheGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	p, err := New(DefaultSubnet, netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	checkNoIPv6(t, p)

	// A listener in the gateway namespace, as the egress gateway will have.
	var ln net.Listener
	if err := p.InGateway(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(p.GatewayAddr.String(), "8080"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
	}()

	ws := t.TempDir()
	os.Chown(ws, 1000, 1000)
	state := filepath.Join(testStateBase, filepath.Base(ws))
	sb, err := gvisor.Create(context.Background(), gvisor.Config{Workspace: ws, StateRoot: state, Limits: gvisor.DefaultLimits(), NetNS: p.SandboxPath()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())

	script := `
echo hello-gateway > /dev/tcp/` + p.GatewayAddr.String() + `/8080 && echo sent
start=$(date +%s%N)
for dst in 192.0.2.1/443 10.0.0.1/80 169.254.169.254/80 127.0.0.2/22; do
  (exec 3<>/dev/tcp/${dst%/*}/${dst#*/}) 2>/dev/null && echo "reached $dst"
done
echo elapsed-ms $(( ($(date +%s%N) - start) / 1000000 ))
cat /proc/net/if_inet6 2>/dev/null | grep -v '^0000' | head -1
`
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"bash", "-c", script}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "sent") {
		t.Fatalf("could not reach the gateway: %q %+v", text, res)
	}
	select {
	case line := <-got:
		if line != "hello-gateway\n" {
			t.Errorf("gateway got %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gateway listener got nothing")
	}
	if strings.Contains(text, "reached") {
		t.Errorf("the sandbox reached an address other than the gateway: %s", text)
	}
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 && len(f[0]) == 32 {
			t.Errorf("the sandbox has an IPv6 address: %s", l)
		}
	}
	var ms int
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "elapsed-ms" {
			ms = atoi(f[1])
		}
	}
	if ms > 5000 {
		t.Errorf("refused connections took %d ms: they must fail at once, not time out", ms)
	}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return n
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// Creating and closing pairs mounts nothing, names nothing and adds no
// interface to the host's namespace.
func TestCloseLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ifsBefore, mountsBefore := hostInterfaces(t), nsMounts(t)
	for i := 0; i < 5; i++ {
		p, err := New(DefaultSubnet, netip.Prefix{})
		if err != nil {
			t.Fatal(err)
		}
		if got := hostInterfaces(t); got != ifsBefore {
			t.Errorf("host interfaces changed while a pair exists: %q -> %q", ifsBefore, got)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := nsMounts(t); got != mountsBefore {
		t.Errorf("namespace mounts: %d before, %d after", mountsBefore, got)
	}
	if entries, _ := os.ReadDir("/run/netns"); len(entries) > 0 {
		for _, e := range entries {
			if strings.Contains(e.Name(), "airlock") {
				t.Errorf("named namespace %s", e.Name())
			}
		}
	}
}

func hostInterfaces(t *testing.T) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return strings.Join(names, ",")
}

func nsMounts(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), " nsfs ")
}
