package gateway

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// The benchmarks run the gateway on loopback and compare each path with a
// direct loopback connection to the same upstream, alternating in every
// iteration so a noisy machine affects both alike. See BENCHMARKS.md.
// Run: CGO_ENABLED=0 go test -run XXX -bench . ./runner/egress/gateway/

// roundTrip connects, sends a line, reads it back and closes.
func roundTrip(b *testing.B, addr string) time.Duration {
	start := time.Now()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		b.Fatal(err)
	}
	msg := []byte("ping\n")
	if _, err := c.Write(msg); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	c.Close()
	return d
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkConnectionSetup: connect, first round trip and close, through
// the gateway (accept, sniff, policy, host-side dial, splice) against a
// direct loopback connection. Target: under 1 ms added at the median.
func BenchmarkConnectionSetup(b *testing.B) {
	ln := upstream(b, echo)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	h := newHarness(b, port, pinnedUp, nil)
	direct := ln.Addr().String()
	var viaDirect, viaGateway []time.Duration
	for i := 0; i < b.N; i++ {
		viaDirect = append(viaDirect, roundTrip(b, direct))
		viaGateway = append(viaGateway, roundTrip(b, h.direct()))
	}
	md, mg := median(viaDirect), median(viaGateway)
	b.ReportMetric(float64(md.Microseconds()), "direct-median-us")
	b.ReportMetric(float64(mg.Microseconds()), "gateway-median-us")
	b.ReportMetric(float64((mg - md).Microseconds()), "added-median-us")
	b.ReportMetric(float64(mg)/float64(md), "gateway/direct")
}

// sink counts what the connection sends until EOF and answers with the
// count.
func sink(c net.Conn) {
	n, _ := io.Copy(io.Discard, c)
	binary.Write(c, binary.BigEndian, n)
}

// send pushes size bytes to addr and waits for the sink's count.
func send(b *testing.B, addr string, size int64) time.Duration {
	buf := make([]byte, 256<<10)
	buf[0] = 0x01 // neither TLS nor HTTP: spliced as is
	start := time.Now()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for sent := int64(0); sent < size; {
		n, err := c.Write(buf[:min(int64(len(buf)), size-sent)])
		if err != nil {
			b.Fatal(err)
		}
		sent += int64(n)
	}
	c.(*net.TCPConn).CloseWrite()
	var got int64
	if err := binary.Read(c, binary.BigEndian, &got); err != nil || got != size {
		b.Fatalf("sink got %d of %d: %v", got, size, err)
	}
	return time.Since(start)
}

// BenchmarkBulkTransfer: 1 GiB through the gateway against direct
// loopback. Target: at least half the direct throughput.
func BenchmarkBulkTransfer(b *testing.B) {
	ln := upstream(b, sink)
	defer ln.Close()
	h := newHarness(b, ln.Addr().(*net.TCPAddr).Port, pinnedUp, nil)
	const size = 1 << 30
	var direct, gateway time.Duration
	for i := 0; i < b.N; i++ {
		direct += send(b, ln.Addr().String(), size)
		gateway += send(b, h.direct(), size)
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
	b.ReportMetric(mbps(direct), "direct-MiB/s")
	b.ReportMetric(mbps(gateway), "gateway-MiB/s")
	b.ReportMetric(mbps(gateway)/mbps(direct), "gateway/direct")
}
