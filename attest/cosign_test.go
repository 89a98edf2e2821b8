package attest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/internal/testtool"
)

// cosignBinary finds cosign: $AIRLOCK_COSIGN, or cosign on PATH. CI
// installs it and sets AIRLOCK_REQUIRE_COSIGN, so there the test never
// skips.
func cosignBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AIRLOCK_COSIGN"); p != "" {
		return p
	}
	return testtool.Path(t, testtool.Cosign, "the attestation bundle is verified by cosign, independently of airlock (or set AIRLOCK_COSIGN to its path)")
}

// The bundle verifies offline with cosign, airlock not involved: against
// the subject's sha256 digest and against the canonical subject file;
// the wrong key and the wrong subject fail.
func TestCosignVerifiesBundle(t *testing.T) {
	cosign := cosignBinary(t)
	keys := keyFiles(t)
	k := keys["ecdsa"]
	s, err := LoadSigner(context.Background(), k.ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := Sign(s, statement(t, commitA, predicate(20, 50, 3)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "run.sigstore.json")
	pub := filepath.Join(dir, "key.pub")
	wrongPub := filepath.Join(dir, "wrong.pub")
	subject := filepath.Join(dir, "subject.txt")
	os.WriteFile(bundle, signed.Bundle, 0o644)
	os.WriteFile(pub, k.pub, 0o644)
	os.WriteFile(wrongPub, keys["ed25519"].pub, 0o644)
	os.WriteFile(subject, SubjectFile(commitA), 0o644)
	sum := sha256.Sum256(SubjectFile(commitA))
	digest := hex.EncodeToString(sum[:])

	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"digest", []string{"--key", pub, "--digest", digest, "--digestAlg", "sha256"}, true},
		{"subject file", []string{"--key", pub, subject}, true},
		{"wrong key", []string{"--key", wrongPub, "--digest", digest, "--digestAlg", "sha256"}, false},
		{"wrong subject", []string{"--key", pub, "--digest", strings.Repeat("0", 64), "--digestAlg", "sha256"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"verify-blob-attestation", "--bundle", bundle, "--type", PredicateType, "--insecure-ignore-tlog"}, tc.args...)
			cmd := exec.Command(cosign, args...)
			cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+dir)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok {
				t.Fatalf("cosign %v: %v\n%s", args, err, out)
			}
		})
	}
}

// The provenance verifies offline with cosign as SLSA provenance v1
// (--type slsaprovenance1) against the artifact file itself, as a
// consumer who downloaded it would run it; a changed artifact, the
// wrong key and the run attestation's type fail.
func TestCosignVerifiesProvenance(t *testing.T) {
	cosign := cosignBinary(t)
	keys := keyFiles(t)
	job := signJob(t, keys["ecdsa"], predicate(3, 20, 1))
	dir := t.TempDir()
	files := map[string][]byte{
		"job-1.provenance.sigstore.json": job.prov, "key.pub": keys["ecdsa"].pub, "wrong.pub": keys["ed25519"].pub,
		"dist.zip": artifactBytes, "changed.zip": append([]byte("x"), artifactBytes...),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, key, typ, artifact string
		ok                       bool
		want                     string // in cosign's output
	}{
		{"the artifact", "key.pub", "slsaprovenance1", "dist.zip", true, "Verified OK"},
		{"by its type's URI", "key.pub", ProvenanceType, "dist.zip", true, "Verified OK"},
		{"a changed artifact", "key.pub", "slsaprovenance1", "changed.zip", false, "digests do not match"},
		{"the wrong key", "wrong.pub", "slsaprovenance1", "dist.zip", false, "signatures do not match"},
		{"the run attestation's type", "key.pub", PredicateType, "dist.zip", false, "invalid predicate type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"verify-blob-attestation", "--bundle", filepath.Join(dir, "job-1.provenance.sigstore.json"), "--type", tc.typ,
				"--insecure-ignore-tlog", "--key", filepath.Join(dir, tc.key), filepath.Join(dir, tc.artifact)}
			cmd := exec.Command(cosign, args...)
			cmd.Env = append(os.Environ(), "HOME="+dir, "TUF_ROOT="+dir)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok || !strings.Contains(string(out), tc.want) {
				t.Fatalf("cosign %v: %v, want %q\n%s", args, err, tc.want, out)
			}
		})
	}
}
