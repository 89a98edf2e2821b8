package dns

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// BenchmarkAnswers measures DNS answers per second over UDP on loopback
// from 4 concurrent clients, for the allowlist server (policy check,
// address book, decision record) against a bare miekg/dns server that
// answers a fixed record, alternating in every iteration. See
// BENCHMARKS.md.
func BenchmarkAnswers(b *testing.B) {
	book, err := NewAllowlist(allowing(b, "proxy.golang.org"), netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.15.255"))
	if err != nil {
		b.Fatal(err)
	}
	ours := New(book, time.Minute, rules.NewLog(MaxLog), netip.MustParseAddr("127.0.0.1"), nil)
	oursAddr := serve(b, ours.Serve)
	defer ours.Shutdown()
	bare := func(udp net.PacketConn, _ net.Listener) {
		srv := &mdns.Server{PacketConn: udp, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
			m := new(mdns.Msg)
			m.SetReply(r)
			m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: r.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60}, A: net.IPv4(198, 19, 0, 1)})
			w.WriteMsg(m)
		})}
		go srv.ActivateAndServe()
		b.Cleanup(func() { srv.Shutdown() })
	}
	bareAddr := serve(b, bare)
	const perIter = 2000
	var tOurs, tBare time.Duration
	for i := 0; i < b.N; i++ {
		tBare += flood(b, bareAddr, perIter)
		tOurs += flood(b, oursAddr, perIter)
	}
	qps := func(d time.Duration) float64 { return float64(perIter*b.N) / d.Seconds() }
	b.ReportMetric(qps(tBare), "bare-answers/s")
	b.ReportMetric(qps(tOurs), "airlock-answers/s")
	b.ReportMetric(qps(tOurs)/qps(tBare), "airlock/bare")
}

func serve(b *testing.B, start func(net.PacketConn, net.Listener)) string {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tcp, err := net.Listen("tcp", udp.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	start(udp, tcp)
	return udp.LocalAddr().String()
}

// flood sends n queries from 4 clients, each waiting for its answer.
func flood(b *testing.B, addr string, n int) time.Duration {
	const clients = 4
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := mdns.Dial("udp", addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer conn.Close()
			m := new(mdns.Msg)
			m.SetQuestion("proxy.golang.org.", mdns.TypeA)
			for i := 0; i < n/clients; i++ {
				conn.SetDeadline(time.Now().Add(2 * time.Second))
				if err := conn.WriteMsg(m); err != nil {
					b.Error(err)
					return
				}
				if r, err := conn.ReadMsg(); err != nil || len(r.Answer) != 1 {
					b.Errorf("answer %v %v", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
