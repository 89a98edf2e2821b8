package hook

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/runner/report"
)

// The artifacts a job uploads are recorded from the bytes that pass the
// gateway. The job runs the real @actions/artifact (what
// actions/upload-artifact v4 runs) as a node20 JavaScript action
// against the fake GitHub's artifact service and blob storage
// (testdata/clients/upload.js): an honest upload of a directory with a
// 20 MiB file (several 8 MiB blocks, staged at once) is recorded with
// the digest of the blob the storage holds; a dishonest one that claims
// another blob's hash in FinalizeArtifact is refused in twirp's words
// and never finalized; an artifact uploaded meanwhile from outside the
// sandbox (with the same runtime token, straight to GitHub) is not
// recorded at all.
func TestHookArtifactUploadsAreRecorded(t *testing.T) {
	h := newRunnerHost(t)
	clients := clientPackages(t)
	os.WriteFile(filepath.Join(h.org, "clients.cue"), []byte(fmt.Sprintf(`package airlock
sandbox: mounts: [{source: %q, destination: "/opt/clients"}]
`, clients)), 0o644)
	gh, env := h.fakeGitHub(t)
	h.allowBlobStorage()
	state := h.prepare()
	big := make([]byte, 20<<20)
	rand.Read(big)
	os.MkdirAll(filepath.Join(h.repo, "dist"), 0o755)
	os.WriteFile(filepath.Join(h.repo, "dist", "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(h.repo, "dist", "notes.txt"), []byte("built\n"), 0o644)

	uploadOutside(t, gh)
	code, out := h.script(state, "bash", "--noprofile --norc -e -o pipefail {0}", "/__e/node20/bin/node /opt/clients/upload.js /__w/app/app/dist", env)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	m := regexp.MustCompile(`honest upload: id (\d+) digest ([0-9a-f]{64}) size`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the honest upload did not finish:\n%s", out)
	}
	digest := m[2]
	if want := "Failed request: (403) Forbidden: airlock: denied POST results.github.test:443/twirp/github.actions.results.api.v1.ArtifactService/FinalizeArtifact"; !strings.Contains(out, want) {
		t.Errorf("the step's log lacks %q:\n%s", want, out)
	}
	if !strings.Contains(out, "but the blob the job committed through the gateway is sha256:") {
		t.Errorf("the refusal does not say why:\n%s", out)
	}
	byName := map[string]testhost.FakeArtifact{}
	for _, a := range gh.Artifacts() {
		byName[a.Name] = a
	}
	if a := byName["honest"]; !a.Finalized || a.SHA256 != digest || a.Claimed != "sha256:"+digest {
		t.Errorf("GitHub holds the honest artifact as %+v, want finalized with sha256 %s", a, digest)
	}
	if a := byName["lying"]; a.Finalized {
		t.Errorf("the lying artifact was finalized: %+v", a)
	}
	if a := byName["outside"]; !a.Finalized {
		t.Errorf("the artifact uploaded from outside: %+v", a)
	}
	if code, out := h.cleanup(state); code != 0 {
		t.Fatalf("cleanup: exit %d: %s", code, out)
	}
	// The provenance names the honest artifact, as the storage holds it,
	// and only it; the lying one is on record as refused; the one from
	// outside is nowhere.
	prov := h.provenance()
	if len(prov.Subjects) != 1 || prov.Subjects[0].Name != "honest.zip" || prov.Subjects[0].Digest["sha256"] != digest {
		t.Errorf("provenance subjects %+v, want honest.zip with sha256 %s", prov.Subjects, digest)
	}
	if sum := sha256.Sum256(gh.Blob("honest")); hex.EncodeToString(sum[:]) != digest {
		t.Errorf("the storage's blob is not the digest the client reported")
	}
	refused := prov.Run().Annotations.RefusedUploads
	lie := sha256.Sum256([]byte("the bytes the job really uploads\n"))
	if len(refused) != 1 || refused[0].Name != "lying" || refused[0].Status != "refused" || refused[0].SHA256 != hex.EncodeToString(lie[:]) || !strings.Contains(refused[0].Reason, "FinalizeArtifact claimed sha256:") {
		t.Errorf("refused uploads %+v, want the lying one with the digest of what it committed", refused)
	}
	if raw := string(prov.Statement); strings.Contains(raw, "outside") {
		t.Errorf("the provenance names the artifact uploaded from outside the sandbox")
	}
	verifyDownloaded(t, h, gh.Blob("honest"))
}

// verifyDownloaded checks the artifact as a workflow_run consumer does
// (airlock verify --artifact FILE DIR): the zip as the storage holds it
// is named by the job's provenance, with the job's run attestation
// beside it; a tampered copy is not; and the example compliance policy
// refuses it, since the agent's job was refused egress (the lying
// FinalizeArtifact).
func verifyDownloaded(t *testing.T, h *runnerHost, zip []byte) {
	dir := filepath.Join(h.hooksRoot(), "attestations")
	v, err := attest.LoadVerifierFile(h.keyPub)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "honest.zip")
	os.WriteFile(file, zip, 0o644)
	rep, err := report.VerifyArtifact(report.ArtifactQuery{Artifact: file, Provenance: dir}, v)
	if err != nil {
		t.Fatalf("the downloaded artifact does not verify: %v", err)
	}
	if len(rep.Jobs) != 1 || rep.Jobs[0].Run == nil || !rep.Jobs[0].Provenance.Run().Annotations.Agent.Agent {
		t.Errorf("verified %+v, want one agent job with its run attestation", rep.Jobs)
	}
	tampered := bytes.Clone(zip)
	tampered[len(tampered)/2] ^= 1
	os.WriteFile(file, tampered, 0o644)
	if _, err := report.VerifyArtifact(report.ArtifactQuery{Artifact: file, Provenance: dir}, v); !errors.Is(err, attest.ErrNotVerified) {
		t.Errorf("a tampered artifact: %v, want not verified", err)
	}
	os.WriteFile(file, zip, 0o644)
	policy, err := os.ReadFile("../../testdata/compliance/artifacts.cue")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := report.VerifyArtifact(report.ArtifactQuery{Artifact: file, Provenance: dir, Compliance: policy, ComplianceName: "artifacts.cue"}, v); !errors.Is(err, attest.ErrNotVerified) {
		t.Errorf("the compliance policy passed an agent's job that was refused egress: %v", err)
	}
}

// provenance is the job's verified provenance, next to its attestation.
func (h *runnerHost) provenance() *attest.VerifiedProvenance {
	h.t.Helper()
	bundles, _ := filepath.Glob(filepath.Join(h.hooksRoot(), "attestations", "*.provenance.sigstore.json"))
	if len(bundles) != 1 {
		h.t.Fatalf("provenance bundles: %v", bundles)
	}
	b, err := os.ReadFile(bundles[0])
	if err != nil {
		h.t.Fatal(err)
	}
	v, err := attest.LoadVerifierFile(h.keyPub)
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := attest.VerifyProvenance(b, v)
	if err != nil {
		h.t.Fatalf("verify %s: %v", bundles[0], err)
	}
	return p
}

// uploadOutside uploads an artifact as a step outside the sandbox
// could: with the job's runtime token, from the host, straight to the
// fake GitHub (loopback), past the gateway.
func uploadOutside(t *testing.T, gh *testhost.GitHub) {
	t.Helper()
	pem, err := os.ReadFile(gh.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort(gh.Addr, port))
		},
	}}
	do := func(method, url, contentType string, body []byte) []byte {
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("X-Ms-Blob-Type", "BlockBlob")
		if strings.Contains(url, "/twirp/") {
			req.Header.Set("Authorization", "Bearer "+gh.Runtime)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %s %s", method, url, resp.Status, b)
		}
		return b
	}
	twirp := testhost.GitHubResults + "twirp/github.actions.results.api.v1.ArtifactService/"
	ids := `"workflow_run_backend_id":"run-1","workflow_job_run_backend_id":"job-1","name":"outside"`
	var created struct {
		SignedUploadURL string `json:"signed_upload_url"`
	}
	json.Unmarshal(do("POST", twirp+"CreateArtifact", "application/json", []byte(`{`+ids+`,"version":4}`)), &created)
	blob := []byte("uploaded past the sandbox\n")
	do("PUT", created.SignedUploadURL, "application/octet-stream", blob)
	sum := sha256.Sum256(blob)
	do("POST", twirp+"FinalizeArtifact", "application/json", []byte(fmt.Sprintf(`{%s,"size":"%d","hash":"sha256:%x"}`, ids, len(blob), sum)))
}

// allowBlobStorage lets the job reach the fake's blob storage, as an
// organisation allows *.blob.core.windows.net for github.com's (after
// fakeGitHub).
func (h *runnerHost) allowBlobStorage() {
	cue := filepath.Join(h.org, "github.cue")
	b, err := os.ReadFile(cue)
	if err != nil {
		h.t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`{host: "api.github.test", ports: [443]}]`), []byte(`{host: "api.github.test", ports: [443]}, {host: "blob.github.test", ports: [443]}]`), 1)
	if err := os.WriteFile(cue, b, 0o644); err != nil {
		h.t.Fatal(err)
	}
}
