package arc

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/airlock-ci/airlock/attest/store"
)

// registryEnv makes the test binary an OCI registry (go-containerregistry's,
// with the referrers API) on ADDR behind basic auth, user airlock and the
// password in registryPasswordEnv: the attestation store a runner pod
// pushes to, in a pod of its own.
const (
	registryEnv         = "AIRLOCK_TEST_REGISTRY"
	registryPasswordEnv = "AIRLOCK_TEST_REGISTRY_PASSWORD"
	registryBinary      = "/usr/local/bin/airlock-test-registry"
)

func serveRegistry(addr string) {
	password := os.Getenv(registryPasswordEnv)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true))
	log.Fatal(http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "airlock" || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="attestations"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	})))
}

// storeInPod is the subtest "the record outlives the pod": a registry in
// a pod of its own, on the test's pod network; the Secret names it
// (attest-store) with its credentials (attest-store-auth.json), as
// values.yaml reads them; a job through the hook in a runner pod of its
// own; then, with that pod removed, airlock attestations ls and verify
// --store, run in the registry's pod, find the job's record and verify
// it with the Secret's public key.
func storeInPod(t *testing.T, c *cri, v values, n node) {
	const password = "arc-store-pass"
	regPod := c.runPod(t, "attestation-registry")
	t.Cleanup(func() { c.removePod(regPod) })
	reg := c.must("create", regPod, c.writeJSON("ctr-registry.json", map[string]any{
		"metadata": map[string]any{"name": "registry"},
		"image":    map[string]any{"image": "airlock.test/runner:1"},
		"command":  []string{registryBinary},
		"envs":     []map[string]string{{"key": registryEnv, "value": "0.0.0.0:5000"}, {"key": registryPasswordEnv, "value": password}},
		"log_path": "registry.log",
		"linux":    map[string]any{},
	}), c.podConfigs[regPod])
	c.must("start", reg)
	var inspect struct {
		Status struct {
			Network struct{ IP string } `json:"network"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(c.must("inspectp", "-o", "json", regPod)), &inspect); err != nil || inspect.Status.Network.IP == "" {
		t.Fatalf("the registry pod's address: %v", err)
	}
	host := inspect.Status.Network.IP + ":5000"
	// The Secret's keys, as an administrator adds them (kubectl create
	// secret generic airlock-config --from-file=...).
	secret := n.volumes["airlock-config"]
	auth := fmt.Sprintf(`{"auths":{%q:{"username":"airlock","password":%q}}}`, host, password)
	os.WriteFile(filepath.Join(secret, "attest-store"), []byte("oci://"+host+"/airlock/attestations?insecure=true"), 0o400)
	os.WriteFile(filepath.Join(secret, "attest-store-auth.json"), []byte(auth), 0o400)
	t.Cleanup(func() {
		os.Remove(filepath.Join(secret, "attest-store"))
		os.Remove(filepath.Join(secret, "attest-store-auth.json"))
	})

	runnerPod := c.runPod(t, "airlock-runner-store")
	id := c.startRunner(t, runnerPod, v, n, "store", "", nil)
	serveModule(t, c, id)
	c.hookJob(t, n, id)
	c.run("stop", "--timeout", "5", id)
	c.run("rm", "--force", id)
	c.removePod(runnerPod)

	// The runner pod is gone, and its emptyDir with it: the registry
	// holds the record.
	pub, err := os.ReadFile(filepath.Join(secret, "signing.pub"))
	if err != nil {
		t.Fatal(err)
	}
	// The reviewer, in the registry's pod, reaches it on its loopback.
	reviewerAuth := fmt.Sprintf(`{"auths":{"127.0.0.1:5000":{"username":"airlock","password":%q}}}`, password)
	if out, code := c.exec(reg, time.Minute, "/bin/sh", "-c", fmt.Sprintf("echo '%s' > /tmp/auth.json && cat > /tmp/signing.pub <<'EOF'\n%sEOF", reviewerAuth, pub)); code != 0 {
		t.Fatalf("the reviewer's files: %d %s", code, out)
	}
	storeURI := "oci://127.0.0.1:5000/airlock/attestations"
	out, code := c.exec(reg, time.Minute, "airlock", "attestations", "ls", "--store", storeURI, "--store-auth", "/tmp/auth.json", "--json")
	var entries []store.Entry
	if err := json.Unmarshal([]byte(out), &entries); code != 0 || err != nil || len(entries) != 1 || entries[0].Kind != store.KindAttestation || entries[0].PullRequest != 7 {
		t.Fatalf("airlock attestations ls after the runner pod is gone: exit %d, %v\n%s", code, err, out)
	}
	t.Logf("the job's record, after its pod: %s (tag %s)", entries[0].Ref, entries[0].Tag)
	out, code = c.exec(reg, time.Minute, "airlock", "verify", "--key", "/tmp/signing.pub", "--store", storeURI, "--store-auth", "/tmp/auth.json", "--pr", "7")
	if code != 0 || !strings.Contains(out, "1 of 1 bundle(s) verified") {
		t.Fatalf("airlock verify --store after the runner pod is gone: exit %d\n%s", code, out)
	}
}
