package dns

import (
	"net"
	"net/netip"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// allowing is the policy's own name check (egress.allow with hosts).
func allowing(tb testing.TB, hosts ...string) func(string) bool {
	tb.Helper()
	var e policies.Egress
	for _, h := range hosts {
		e.Allow = append(e.Allow, policies.EgressRule{Host: h})
	}
	p, err := rules.Compile(e, func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	return p.NameAllowed
}

// startServer runs the server on loopback with a small pool.
func startServer(t *testing.T, hosts []string, first, last string) (*Server, string, *Allowlist) {
	t.Helper()
	book, err := NewAllowlist(allowing(t, hosts...), netip.MustParseAddr(first), netip.MustParseAddr(last))
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", udp.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := New(book, time.Minute, rules.NewLog(MaxLog), netip.MustParseAddr("127.0.0.1"), nil)
	s.Serve(udp, tcp)
	t.Cleanup(s.Shutdown)
	return s, udp.LocalAddr().String(), book
}

func ask(t *testing.T, addr, network, name string, qtype uint16) *mdns.Msg {
	t.Helper()
	c := &mdns.Client{Net: network, Timeout: 3 * time.Second}
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(name), qtype)
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s %s: %v", name, mdns.TypeToString[qtype], err)
	}
	return resp
}

func TestAnswers(t *testing.T) {
	s, addr, _ := startServer(t, []string{"proxy.golang.org", "*.githubusercontent.com"}, "198.18.1.10", "198.18.1.12")
	type want struct {
		rcode  int
		answer string
	}
	first := ask(t, addr, "udp", "proxy.golang.org", mdns.TypeA)
	for _, tc := range []struct {
		name    string
		network string
		qtype   uint16
		want    want
	}{
		{"PROXY.golang.org", "udp", mdns.TypeA, want{mdns.RcodeSuccess, "198.18.1.10"}},
		{"proxy.golang.org", "tcp", mdns.TypeA, want{mdns.RcodeSuccess, "198.18.1.10"}},
		{"raw.githubusercontent.com", "udp", mdns.TypeA, want{mdns.RcodeSuccess, "198.18.1.11"}},
		{"githubusercontent.com", "udp", mdns.TypeA, want{mdns.RcodeNameError, ""}},
		{"proxy.golang.org", "udp", mdns.TypeAAAA, want{mdns.RcodeSuccess, ""}},
		{"proxy.golang.org", "udp", mdns.TypeTXT, want{mdns.RcodeRefused, ""}},
		{"c2VjcmV0LXRva2Vu.evil.example", "udp", mdns.TypeA, want{mdns.RcodeNameError, ""}},
		{"_dmarc.githubusercontent.com", "udp", mdns.TypeA, want{mdns.RcodeNameError, ""}},
		{"metadata.google.internal", "tcp", mdns.TypeA, want{mdns.RcodeNameError, ""}},
	} {
		t.Run(tc.name+"/"+tc.network+"/"+mdns.TypeToString[tc.qtype], func(t *testing.T) {
			resp := ask(t, addr, tc.network, tc.name, tc.qtype)
			if resp.Rcode != tc.want.rcode {
				t.Fatalf("rcode %s, want %s", mdns.RcodeToString[resp.Rcode], mdns.RcodeToString[tc.want.rcode])
			}
			got := ""
			if len(resp.Answer) == 1 {
				got = resp.Answer[0].(*mdns.A).A.String()
			} else if len(resp.Answer) > 1 {
				t.Fatalf("answers %v", resp.Answer)
			}
			if got != tc.want.answer {
				t.Errorf("answer %q, want %q", got, tc.want.answer)
			}
			if resp.RecursionAvailable {
				t.Error("the server claims to recurse")
			}
		})
	}
	if first.Rcode != mdns.RcodeSuccess {
		t.Fatalf("first query: %v", first)
	}
	log, _ := s.Log().Snapshot()
	var refusedExfil bool
	for _, q := range log {
		if q.Name == "c2VjcmV0LXRva2Vu.evil.example" && q.Decision == rules.Denied && q.Answer == "NXDOMAIN" && q.Rule == rules.DefaultDeny && q.Suggest != "" {
			refusedExfil = true
		}
	}
	if !refusedExfil {
		t.Errorf("the refused (NXDOMAIN) query is not in the log: %+v", log)
	}
}

// A wildcard cannot mint addresses without end: the pool runs out and
// later names are refused.
func TestPoolExhaustion(t *testing.T) {
	_, addr, book := startServer(t, []string{"*.example.com"}, "198.18.1.10", "198.18.1.11")
	for i, name := range []string{"a.example.com", "b.example.com", "c.example.com"} {
		resp := ask(t, addr, "udp", name, mdns.TypeA)
		if want := i < 2; (resp.Rcode == mdns.RcodeSuccess) != want {
			t.Errorf("%s: rcode %s", name, mdns.RcodeToString[resp.Rcode])
		}
	}
	if n, ok := book.Name(netip.MustParseAddr("198.18.1.11")); !ok || n != "b.example.com" {
		t.Errorf("address 198.18.1.11 stands for %q", n)
	}
}

// Malformed packets and several questions get nowhere and do not stop the
// server.
func TestHostileQueries(t *testing.T) {
	_, addr, _ := startServer(t, []string{"ok.example"}, "198.18.1.10", "198.18.1.20")
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, junk := range [][]byte{{0}, []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), make([]byte, 4000)} {
		conn.Write(junk)
	}
	m := new(mdns.Msg)
	m.SetQuestion("ok.example.", mdns.TypeA)
	m.Question = append(m.Question, mdns.Question{Name: "evil.example.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
	c := &mdns.Client{Timeout: 3 * time.Second}
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Rcode != mdns.RcodeFormatError || len(resp.Answer) != 0 {
		t.Errorf("two questions: %s %v", mdns.RcodeToString[resp.Rcode], resp.Answer)
	}
	if r := ask(t, addr, "udp", "ok.example", mdns.TypeA); r.Rcode != mdns.RcodeSuccess {
		t.Errorf("server unusable after junk: %v", r)
	}
}
