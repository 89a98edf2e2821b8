package attest

import (
	"bytes"
	"compress/gzip"
	"context"
	"testing"
	"time"
)

// BenchmarkSignVerify signs and verifies a realistic attestation (1,000
// processes, 10,000 egress decisions, 50 trust findings) with an ECDSA
// P-256 key, and reports the bundle's size, raw and gzipped. Target:
// sign + verify under 50 ms, bundle under 2 MiB. See BENCHMARKS.md.
func BenchmarkSignVerify(b *testing.B) {
	k := keyFiles(b)["ecdsa"]
	s, err := LoadSigner(context.Background(), k.ref, nil)
	if err != nil {
		b.Fatal(err)
	}
	v, _ := LoadVerifier(k.pub)
	p := predicate(1000, 10000, 50)
	var build, sign, verify time.Duration
	var size, gz int
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		st := statement(b, commitA, p)
		t1 := time.Now()
		signed, err := Sign(s, st)
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := Verify(signed.Bundle, v, VerifyOptions{Commit: commitA}); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		build, sign, verify = build+t1.Sub(t0), sign+t2.Sub(t1), verify+t3.Sub(t2)
		size = len(signed.Bundle)
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(signed.Bundle)
		w.Close()
		gz = buf.Len()
	}
	n := float64(b.N)
	b.ReportMetric(float64(build.Microseconds())/n/1000, "statement-ms")
	b.ReportMetric(float64(sign.Microseconds())/n/1000, "sign-ms")
	b.ReportMetric(float64(verify.Microseconds())/n/1000, "verify-ms")
	b.ReportMetric(float64((sign+verify).Microseconds())/n/1000, "sign+verify-ms")
	b.ReportMetric(float64(size)/(1<<20), "bundle-MiB")
	b.ReportMetric(float64(gz)/(1<<20), "gzip-MiB")
}
