package egress

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testtool"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// benchGitHubAddr is where the benchmark's fake GitHub listens (443).
const benchGitHubAddr = "127.0.0.79"

// benchGitHub starts the fake GitHub on addr (443) and compiles an
// egress policy that reaches it (its names pinned to addr) and its blob
// storage; it returns the fake, its CA (PEM and pool) and the policy.
func benchGitHub(b *testing.B, addr string) (*testhost.GitHub, []byte, *x509.CertPool, *rules.Policy) {
	origin, git := testhost.NewRepo(b)
	os.WriteFile(filepath.Join(origin, "f"), []byte("x"), 0o644)
	git("init", "-q")
	git("add", "-A")
	git("commit", "-q", "-m", "x")
	gh := testhost.NewGitHub(b, addr, origin)
	caPEM, err := os.ReadFile(gh.CAFile)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	resolve := map[string]string{}
	for _, h := range testhost.GitHubHosts {
		resolve[h] = addr
	}
	pol, err := rules.Compile(policies.Egress{
		Allow:      []policies.EgressRule{{Host: "blob.github.test", Ports: []int{443}}},
		Resolve:    resolve,
		AllowCIDRs: []string{addr + "/32"},
	}, os.LookupEnv)
	if err != nil {
		b.Fatal(err)
	}
	return gh, caPEM, roots, pol
}

// BenchmarkCredentialInjection: what a step's client sees per request
// when the gateway puts a credential back. curl in a real sandbox, a new
// process and connection per request (DNS, CONNECT, TLS, the request),
// three kinds interleaved in one run against a fake GitHub on loopback:
//
//	injected     a cache restore carrying the runtime token's placeholder:
//	             TLS ended at the gateway, the real token put back
//	intercepted  the same request without a credential: TLS ended at the
//	             gateway, nothing put back
//	tunnel       a host the gateway does not intercept: TLS end to end
//
// It reports the medians, and the medians of the per-round differences
// injected - intercepted (what putting the credential back costs; target
// under 1 ms) and injected - tunnel (what the credentials feature costs a
// request, TLS interception included). The tunnel request is a GET: Go's
// HTTP/2 server resets a stream whose body the handler left unread, which
// curl reports as an error (the tunnel only carries the bytes).
// BenchmarkVaultRequest (runner/credentials) times the put-back itself.
// See BENCHMARKS.md.
func BenchmarkCredentialInjection(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	testtool.InSandbox(b, testtool.Curl, sandboxPath, "the benchmark times curl's requests from the sandbox")
	gh, caPEM, roots, pol := benchGitHub(b, benchGitHubAddr)
	vault := credentials.NewVault(credentials.PolicyFor(policies.Credentials{Artifacts: true}, true), testhost.GitHubServerURL, testhost.GitHubAPIURL)
	env := vault.Withhold(map[string]string{"ACTIONS_RUNTIME_TOKEN": gh.Runtime, "ACTIONS_RESULTS_URL": testhost.GitHubResults})
	eg, err := Start(Config{Policy: pol, Credentials: vault, UpstreamRoots: roots})
	if err != nil {
		b.Fatal(err)
	}
	defer eg.Close()
	sb := sandboxBehind(b, eg, caPEM)
	rounds := b.N
	script := fmt.Sprintf(`
cat "$CURL_CA_BUNDLE" upstream-ca.pem > both.pem
restore="${ACTIONS_RESULTS_URL}twirp/github.actions.results.api.v1.CacheService/GetCacheEntryDownloadURL"
req() { curl -sS -o /dev/null --cacert both.pem -w "$1 %%{http_code} %%{time_total}\n" "${@:2}"; }
for i in $(seq %d); do
  req injected -X POST -d '{}' -H "Authorization: Bearer $ACTIONS_RUNTIME_TOKEN" "$restore"
  req intercepted -X POST -d '{}' "$restore"
  req tunnel https://blob.github.test/f
done
`, rounds)
	var out bytes.Buffer
	b.ResetTimer()
	res, err := sb.Exec(context.Background(), gvisor.Step{
		Args: []string{"/bin/bash", "-c", script}, Dir: "/workspace",
		Env:    append(eg.Env(), "PATH="+sandboxPath, "ACTIONS_RUNTIME_TOKEN="+env["ACTIONS_RUNTIME_TOKEN"], "ACTIONS_RESULTS_URL="+env["ACTIONS_RESULTS_URL"]),
		Stdout: &out, Stderr: &out,
	})
	b.StopTimer()
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("exit %v %v: %s", res.ExitCode, err, out.String())
	}
	times := map[string][]time.Duration{}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		want := map[string]string{"injected": "200", "intercepted": "401", "tunnel": "200"}
		if len(f) != 3 || want[f[0]] != f[1] {
			b.Fatalf("unexpected: %q (line %d of %d, after %q)", line, i, len(lines), lines[max(i-1, 0)])
		}
		s, _ := strconv.ParseFloat(f[2], 64)
		times[f[0]] = append(times[f[0]], time.Duration(s*float64(time.Second)))
	}
	// Medians, and the median of the per-round differences (rounds are
	// interleaved, so a difference cancels what drifts between rounds).
	median := func(ts []time.Duration) time.Duration {
		ts = slices.Clone(ts)
		slices.Sort(ts)
		return ts[len(ts)/2]
	}
	var paired, pairedTunnel []time.Duration
	for i := range times["injected"] {
		paired = append(paired, times["injected"][i]-times["intercepted"][i])
		pairedTunnel = append(pairedTunnel, times["injected"][i]-times["tunnel"][i])
	}
	med := map[string]time.Duration{}
	for k, ts := range times {
		med[k] = median(ts)
	}
	injected := 0
	for _, u := range vault.Record().Uses {
		injected += u.Injected
	}
	if injected != rounds {
		b.Fatalf("the token was put back on %d requests of %d: %+v", injected, rounds, vault.Record().Uses)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(med["injected"]), "injected-ms")
	b.ReportMetric(ms(med["intercepted"]), "intercepted-ms")
	b.ReportMetric(ms(med["tunnel"]), "tunnel-ms")
	b.ReportMetric(ms(median(paired)), "inject-added-ms")
	b.ReportMetric(ms(median(pairedTunnel)), "vs-tunnel-added-ms")
	b.ReportMetric(float64(med["injected"])/float64(med["tunnel"]), "injected/tunnel")
}
