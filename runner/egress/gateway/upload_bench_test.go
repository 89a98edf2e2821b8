package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// BenchmarkArtifactUpload: a 100 MiB artifact blob uploaded as
// @actions/artifact does (8 MiB blocks, staged several at once, then the
// block list) through the explicit proxy, three ways, interleaved in
// every iteration: spliced (the gateway as it was: TLS passes through
// unread), intercepted (TLS terminated and re-made, as for any host the
// gateway reads, but nothing recorded) and recorded (intercepted, every
// block spooled and the blob digested at the block list). Issue 27's
// figure is recorded against intercepted: under 5% more.
//
//	CGO_ENABLED=0 go test -run XXX -bench ArtifactUpload -benchtime 5x ./runner/egress/gateway/
func BenchmarkArtifactUpload(b *testing.B) {
	// The upstream's certificate, from a CA of its own.
	upCA, err := NewCA([]string{"up.test"}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := upCA.leaf("up.test")
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(upCA.PEM())
	// One upstream per way: each harness listens on the upstream's port.
	newUpstream := func() int {
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
		}))
		up.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		up.StartTLS()
		b.Cleanup(up.Close)
		return portOf(up)
	}
	ca, err := NewCA([]string{"up.test"}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	jobRoots := x509.NewCertPool()
	jobRoots.AppendCertsFromPEM(ca.PEM())

	const size, blockSize, concurrency = 100 << 20, 8 << 20, 4
	data := make([]byte, size)
	rand.Read(data)
	// A new artifact each time, as each upload-artifact step makes one.
	blobURL := func(port, i int) string {
		return "https://up.test:" + strconv.Itoa(port) + "/artifacts/run/job/a-" + strconv.Itoa(i) + ".zip?sig=x&sp=cw"
	}

	ways := []struct {
		name string
		opts func(*Config, int)
	}{
		{"spliced", func(c *Config, _ int) {}},
		{"intercepted", func(c *Config, _ int) { c.CA, c.UpstreamRoots = ca, roots }},
		{"recorded", func(c *Config, port int) {
			c.CA, c.UpstreamRoots = ca, roots
			c.Uploads = uploads.New(filepath.Join(b.TempDir(), "spool"), 0)
		}},
	}
	clients := make([]*http.Client, len(ways))
	recorder := make([]*uploads.Recorder, len(ways))
	ports := make([]int, len(ways))
	for i, w := range ways {
		port := newUpstream()
		ports[i] = port
		egress := pinnedUp
		if w.name == "intercepted" {
			// A secret for the host is what makes the gateway read it.
			egress = func(port int) policies.Egress {
				e := pinnedUp(port)
				e.Secrets = []policies.Secret{{Host: "up.test", Header: "X-Bench", FromEnv: "AIRLOCK_SECRET_BENCH"}}
				return e
			}
		}
		h := newHarness(b, port, egress, map[string]string{"AIRLOCK_SECRET_BENCH": "x"}, func(c *Config) { w.opts(c, port); recorder[i] = c.Uploads })
		pu, _ := url.Parse("http://" + h.proxy)
		rootsFor := jobRoots
		if w.name == "spliced" {
			rootsFor = roots
		}
		clients[i] = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: rootsFor}, MaxConnsPerHost: concurrency}}
	}
	totals := make([]time.Duration, len(ways))
	b.ResetTimer()
	for n := range b.N {
		for i := range ways {
			if recorder[i] != nil {
				learnUpload(b, recorder[i], blobURL(ports[i], n))
			}
			totals[i] += uploadBlob(b, clients[i], blobURL(ports[i], n), data, blockSize, concurrency)
		}
	}
	for _, r := range recorder {
		if ups := r.Uploads(); r != nil && (len(ups) != b.N || ups[0].SHA256 != fmt.Sprintf("%x", sha256.Sum256(data))) {
			b.Fatalf("the recorder's uploads: %+v", ups)
		}
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
	for i, w := range ways {
		b.ReportMetric(mbps(totals[i]), w.name+"-MiB/s")
	}
	b.ReportMetric(float64(totals[2])/float64(totals[1]), "recorded/intercepted")
	b.ReportMetric(float64(totals[2])/float64(totals[0]), "recorded/spliced")
}

// learnUpload shows the recorder a CreateArtifact and its answer, as the
// gateway would on the artifact service's route.
func learnUpload(b testing.TB, rec *uploads.Recorder, blobURL string) {
	req := httptest.NewRequest("POST", "https://results.test/twirp/github.actions.results.api.v1.ArtifactService/CreateArtifact",
		strings.NewReader(`{"workflow_run_backend_id":"run","workflow_job_run_backend_id":"job","name":"a","version":4}`))
	req.Header.Set("Content-Type", "application/json")
	ex, err := rec.Begin("artifacts", "results.test", req)
	if err != nil {
		b.Fatal(err)
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(fmt.Sprintf(`{"ok":true,"signed_upload_url":%q}`, blobURL)))}
	if err := ex.Respond(resp); err != nil {
		b.Fatal(err)
	}
	ex.Done()
}

// uploadBlob stages data in blocks, concurrency at a time, and commits
// their list; it returns how long that took.
func uploadBlob(b *testing.B, c *http.Client, blobURL string, data []byte, blockSize, concurrency int) time.Duration {
	start := time.Now()
	var ids []string
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i := 0; i*blockSize < len(data); i++ {
		id := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "bench-%06d", i))
		ids = append(ids, id)
		part := data[i*blockSize : min(len(data), (i+1)*blockSize)]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			put(b, c, blobURL+"&comp=block&blockid="+url.QueryEscape(id), part)
		}()
	}
	wg.Wait()
	var list bytes.Buffer
	list.WriteString("<BlockList>")
	for _, id := range ids {
		list.WriteString("<Latest>" + id + "</Latest>")
	}
	list.WriteString("</BlockList>")
	put(b, c, blobURL+"&comp=blocklist", list.Bytes())
	return time.Since(start)
}

func put(b *testing.B, c *http.Client, u string, body []byte) {
	req, _ := http.NewRequest("PUT", u, bytes.NewReader(body))
	req.Header.Set("X-Ms-Blob-Type", "BlockBlob")
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Errorf("PUT %s: %s", u, resp.Status)
	}
}
