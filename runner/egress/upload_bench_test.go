package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testtool"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/credentials"
)

// benchUploadAddr is where this benchmark's fake GitHub listens (443).
const benchUploadAddr = "127.0.0.80"

// BenchmarkArtifactUploadInSandbox: what a job waits for when it uploads
// a 100 MiB artifact with the real @actions/artifact (node, in a real
// sandbox, through the gateway, to the fake GitHub's artifact service and
// blob storage on loopback), with the upload recorded (the gateway reads
// the blob's TLS, spools and digests every block) and without (the same
// gateway with no recorder: the blob's TLS passes through unread),
// interleaved in every iteration. Issue 27's figure: recording adds
// under 5%. See BENCHMARKS.md.
//
//	CGO_ENABLED=0 go test -run XXX -bench ArtifactUploadInSandbox -benchtime 5x ./runner/egress/
func BenchmarkArtifactUploadInSandbox(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	clients := testtool.Clients(b, "the upload is the real @actions/artifact client's")
	testtool.InSandbox(b, testtool.Node, sandboxPath, "the upload in the sandbox runs the artifact client on node")
	gh, caPEM, roots, pol := benchGitHub(b, benchUploadAddr)
	type way struct {
		name string
		sb   *gvisor.Sandbox
		eg   *Egress
		env  []string
		took []time.Duration
	}
	var ways []*way
	for _, w := range []struct {
		name  string
		spool string
	}{{"recorded", filepath.Join(b.TempDir(), "uploads")}, {"unrecorded", ""}} {
		vault := credentials.NewVault(credentials.PolicyFor(policies.Credentials{Artifacts: true}, false), testhost.GitHubServerURL, testhost.GitHubAPIURL)
		env := vault.Withhold(map[string]string{"ACTIONS_RUNTIME_TOKEN": gh.Runtime, "ACTIONS_RESULTS_URL": testhost.GitHubResults})
		eg, err := Start(Config{Policy: pol, Credentials: vault, UpstreamRoots: roots, UploadSpool: w.spool})
		if err != nil {
			b.Fatal(err)
		}
		defer eg.Close()
		sb := sandboxBehind(b, eg, caPEM, gvisor.Mount{Source: clients, Destination: "/opt/clients", ReadOnly: true})
		ways = append(ways, &way{name: w.name, sb: sb, eg: eg,
			env: append(eg.Env(), "PATH="+sandboxPath, "HOME=/tmp", "ACTIONS_RUNTIME_TOKEN="+env["ACTIONS_RUNTIME_TOKEN"], "ACTIONS_RESULTS_URL="+env["ACTIONS_RESULTS_URL"])})
	}
	data := make([]byte, 100<<20)
	rand.Read(data)
	for _, w := range ways {
		if err := os.WriteFile(filepath.Join(w.sb.Config().Workspace, "artifact.bin"), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	took := regexp.MustCompile(`uploaded \S+ ([0-9a-f]{64}) \d+ in (\d+) ms`)
	b.ResetTimer()
	for i := range b.N {
		// Each goes first every other time: no way always gets a warm
		// or a cold machine.
		order := []*way{ways[i%2], ways[(i+1)%2]}
		for _, w := range order {
			// The job trusts the fake's CA as it trusts Azure's public one
			// (the unrecorded upload's TLS is the storage's own).
			script := fmt.Sprintf(`cat "$NODE_EXTRA_CA_CERTS" upstream-ca.pem > /tmp/roots.pem
NODE_EXTRA_CA_CERTS=/tmp/roots.pem node /opt/clients/upload-bench.js %s-%d /workspace/artifact.bin`, w.name, i)
			var out bytes.Buffer
			res, err := w.sb.Exec(context.Background(), gvisor.Step{Args: []string{"/bin/bash", "-c", script}, Dir: "/workspace", Env: w.env, Stdout: &out, Stderr: &out})
			m := took.FindStringSubmatch(out.String())
			if err != nil || res.ExitCode != 0 || m == nil {
				b.Fatalf("%s: exit %v %v: %s", w.name, res.ExitCode, err, out.String())
			}
			ms, _ := strconv.Atoi(m[2])
			w.took = append(w.took, time.Duration(ms)*time.Millisecond)
			// The storage holds what the client uploaded; then it is
			// let go, so that any number of iterations fit the fake.
			name := fmt.Sprintf("%s-%d", w.name, i)
			if blob := gh.Blob(name); fmt.Sprintf("%x", sha256.Sum256(blob)) != m[1] {
				b.Fatalf("%s: the storage holds %d bytes that are not the client's %s", name, len(blob), m[1])
			}
			gh.ForgetBlob(name)
		}
	}
	b.StopTimer()
	recorded := ways[0].eg.uploads.Uploads()
	if len(recorded) != b.N || recorded[b.N-1].Status != "finalized" || len(ways[1].eg.uploads.Uploads()) != 0 {
		b.Fatalf("the recorder's uploads: %+v", recorded)
	}
	median := func(ts []time.Duration) time.Duration {
		ts = slices.Clone(ts)
		slices.Sort(ts)
		return ts[len(ts)/2]
	}
	for _, w := range ways {
		b.ReportMetric(float64(median(w.took).Milliseconds()), w.name+"-ms")
	}
	b.ReportMetric(float64(median(ways[0].took))/float64(median(ways[1].took)), "recorded/unrecorded")
	// The median of each iteration's own ratio: drift between
	// iterations cancels out.
	var paired []time.Duration
	for i := range ways[0].took {
		paired = append(paired, time.Duration(float64(time.Second)*float64(ways[0].took[i])/float64(ways[1].took[i])))
	}
	b.ReportMetric(median(paired).Seconds(), "paired-ratio-median")
}
