package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/internal/testregistry"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// airlock run keeps a job's signed attestation in a real registry
// (distribution 2.8, htpasswd) before it ends, without the credentials
// ever reaching the job; a job whose registry is down fails with exit
// 73 and leaves its bundle pending, and the next job stores it; a
// reviewer lists, fetches and verifies them, and cosign verifies a
// bundle pulled from the registry with crane.
func TestRunKeepsAttestationInStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const password = "s3cret-push-pass"
	port := testregistry.FreePort(t)
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := execute([]string{"keys", "generate", "--out", filepath.Join(dir, "k")}, &out, &errb); code != 0 {
		t.Fatalf("keys generate: %s", errb.String())
	}
	authDir := filepath.Join(dir, "docker")
	os.MkdirAll(authDir, 0o755)
	auth := filepath.Join(authDir, "config.json")
	os.WriteFile(auth, []byte(`{"auths":{"127.0.0.1:`+strconv.Itoa(port)+`":{"username":"airlock","password":"`+password+`"}}}`), 0o644)
	storeURI := "oci://127.0.0.1:" + strconv.Itoa(port) + "/airlock/attestations"
	ws, git := repoWorkspace(t)
	head := git("rev-parse", "HEAD")
	state := stateDir(t)
	run := func(script string) (int, string) {
		var out, errb bytes.Buffer
		code := execute([]string{"run", "-w", ws, "--state-dir", state, "--head", head, "--attest-key", filepath.Join(dir, "k.key"),
			"--attest-store", storeURI, "--attest-store-auth", auth, "--", "sh", "-c", script}, &out, &errb)
		all := out.String() + errb.String()
		if strings.Contains(all, password) {
			t.Fatalf("the registry's password reached the job's output or airlock's log:\n%s", all)
		}
		return code, all
	}

	// The registry is down: the job fails, its bundle stays, pending.
	code, log := run("echo first")
	if code != exitCantCreate || !strings.Contains(log, "ATTESTATION NOT STORED in "+storeURI) || !strings.Contains(log, "connection refused") {
		t.Fatalf("a job whose store is down: exit %d, want %d\n%s", code, exitCantCreate, log)
	}
	if p := store.PendingJobs(filepath.Join(state, "attestations")); len(p) != 1 {
		t.Fatalf("pending after the failed push: %v", p)
	}

	// The registry is back: the next job stores its own and the first.
	srv := testregistry.Distribution(t, testregistry.Options{Port: port, User: "airlock", Password: password})
	// While it runs, the commit's subject manifest goes up before the
	// job has a bundle (report.PrepareStores), so that the push after
	// the job is only the job's own.
	prepared := make(chan bool, 1)
	stop := make(chan struct{})
	go func() {
		defer close(prepared)
		for {
			bundles, _ := filepath.Glob(filepath.Join(state, "attestations", "job-*.sigstore.json"))
			if len(bundles) > 1 {
				return // the job has its bundle: too late
			}
			if strings.Contains(srv.Tags("airlock/attestations"), ".commit."+head+".") {
				prepared <- true
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	code, log = run("cat " + auth + " || echo the credentials are hidden; sleep 1")
	close(stop)
	if !<-prepared {
		t.Errorf("the commit's subject manifest was not in the store while the job ran")
	}
	if code != 0 || !strings.Contains(log, "attestation stored: 127.0.0.1:") || !strings.Contains(log, ") now stored: 127.0.0.1:") {
		t.Fatalf("the second job: exit %d\n%s", code, log)
	}
	if !strings.Contains(log, "the credentials are hidden") {
		t.Fatalf("the job read the credentials file:\n%s", log)
	}
	if p := store.PendingJobs(filepath.Join(state, "attestations")); len(p) != 0 {
		t.Fatalf("still pending: %v", p)
	}

	// A reviewer: ls, get, verify --store.
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := execute(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, lsOut, lsErr := cli("attestations", "ls", "--store", storeURI, "--store-auth", auth, "--commit", head[:10], "--json")
	var entries []store.Entry
	if code != 0 || json.Unmarshal([]byte(lsOut), &entries) != nil || len(entries) != 2 {
		t.Fatalf("attestations ls: exit %d, %d entries\n%s%s", code, len(entries), lsOut, lsErr)
	}
	for _, e := range entries {
		if e.Commit != head || e.Verdict != store.VerdictPassed || e.Kind != store.KindAttestation || !strings.HasPrefix(e.Ref, "127.0.0.1:") {
			t.Fatalf("entry %+v", e)
		}
	}
	getDir := filepath.Join(dir, "got")
	if code, gotOut, gotErr := cli("attestations", "get", "--store", storeURI, "--store-auth", auth, "--commit", head, "-o", getDir); code != 0 || strings.Count(gotOut, ".sigstore.json") != 2 {
		t.Fatalf("attestations get: exit %d\n%s%s", code, gotOut, gotErr)
	}
	got, _ := filepath.Glob(filepath.Join(getDir, "*.sigstore.json"))
	if code, vOut, vErr := cli("verify", "--key", filepath.Join(dir, "k.pub"), got[0]); code != 0 || !strings.Contains(vOut, "VERIFIED") {
		t.Fatalf("verify a fetched bundle: exit %d\n%s%s", code, vOut, vErr)
	}
	if code, vOut, vErr := cli("verify", "--key", filepath.Join(dir, "k.pub"), "--store", storeURI, "--store-auth", auth, "--commit", head); code != 0 || !strings.Contains(vOut, "2 of 2 bundle(s) verified") {
		t.Fatalf("verify --store: exit %d\n%s%s", code, vOut, vErr)
	}
	// Another key: every job NOT VERIFIED, exit 1.
	execute([]string{"keys", "generate", "--out", filepath.Join(dir, "other")}, &out, &errb)
	if code, vOut, _ := cli("verify", "--key", filepath.Join(dir, "other.pub"), "--store", storeURI, "--store-auth", auth, "--commit", head); code != 1 || strings.Count(vOut, "NOT VERIFIED") != 2 {
		t.Fatalf("verify --store with another key: exit %d\n%s", code, vOut)
	}
	// Bad input: no selection, a malformed store, a bad commit.
	for _, args := range [][]string{
		{"verify", "--key", filepath.Join(dir, "k.pub"), "--store", storeURI},
		{"attestations", "ls", "--store", "ghcr.io/no-scheme"},
		{"attestations", "ls", "--store", storeURI, "--commit", "HEAD"},
		{"attestations", "get", "--store", storeURI, "--commit", head},
	} {
		if code, _, e := cli(args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, e)
		}
	}

	// cosign reads the layout: crane pulls the bundle's layer by its
	// digest, cosign verifies it offline against the commit.
	crane := testtool.Path(t, testtool.Crane, "the stored bundle is pulled with crane, a standard OCI client")
	cosign := testtool.Path(t, testtool.Cosign, "the stored bundle is verified by cosign, independently of airlock")
	pulled := filepath.Join(dir, "pulled.sigstore.json")
	cmd := exec.Command(crane, "blob", entries[0].Ref[:strings.Index(entries[0].Ref, "@")]+"@"+entries[0].Digest)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+authDir)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("crane blob: %v", err)
	}
	os.WriteFile(pulled, b, 0o644)
	sum := sha256.Sum256(attest.SubjectFile(head))
	cmd = exec.Command(cosign, "verify-blob-attestation", "--bundle", pulled, "--key", filepath.Join(dir, "k.pub"), "--type", attest.PredicateType,
		"--insecure-ignore-tlog", "--digest", hex.EncodeToString(sum[:]), "--digestAlg", "sha256")
	cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+dir)
	if o, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(o), "Verified OK") {
		t.Fatalf("cosign verify-blob-attestation of the stored bundle: %v\n%s", err, o)
	}
}
