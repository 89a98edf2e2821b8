package images

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlock-ci/airlock/policies"
)

// authority is a certificate authority of the test's own standing in
// for Fulcio, so that keyless signatures are made offline: it issues
// certificates with Fulcio's extensions (the OIDC issuer, in both of its
// OIDs) to a subject, whose key the real cosign CLI then signs with.
type authority struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	// chain is its certificate's PEM file, in the cosign tool's directory.
	chain string
}

// Fulcio's certificate extensions for the OIDC issuer: the deprecated
// raw string, and the DER UTF8String that replaced it.
var (
	oidIssuerV1 = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 1}
	oidIssuerV2 = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 1, 8}
)

func newAuthority(t *testing.T, c *cosignTool, prefix string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: prefix + " test authority"},
		// cosign sign checks the chain at the leaf's start: the
		// authority's starts before any leaf's.
		NotBefore: time.Now().Add(-24 * time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	a := &authority{key: key, cert: cert, chain: filepath.Join(c.dir, prefix+"-ca.pem")}
	writePEM(t, a.chain, "CERTIFICATE", der)
	return a
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// trustedRoot is a Sigstore trusted root of the authorities, made by
// the real cosign CLI (cosign trusted-root create), with the services
// that extra names (--rekor=..., --ctfe=...).
func trustedRoot(t *testing.T, c *cosignTool, file string, authorities []*authority, extra ...string) string {
	t.Helper()
	args := []string{"trusted-root", "create", "--no-default-fulcio", "--no-default-rekor", "--no-default-ctfe", "--no-default-tsa", "--out", file}
	for i, a := range authorities {
		args = append(args, fmt.Sprintf("--fulcio=url=https://ca%d.test,certificate-chain=%s", i, a.chain))
	}
	if out, err := c.run(t, append(args, extra...)...); err != nil {
		t.Fatalf("cosign trusted-root create: %v\n%s", err, out)
	}
	return filepath.Join(c.dir, file)
}

// issue gives prefix a key, imported into cosign as prefix.key, and a
// certificate for it at prefix.crt, issued to subject (a URI, as
// GitHub Actions' workflow identity, or an email) by issuer, valid
// from notBefore to notAfter.
func (a *authority) issue(t *testing.T, c *cosignTool, prefix, subject, issuer string, notBefore, notAfter time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	issuerDER, err := asn1.MarshalWithParams(issuer, "utf8")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		NotBefore:    notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		ExtraExtensions: []pkix.Extension{
			{Id: oidIssuerV1, Value: []byte(issuer)},
			{Id: oidIssuerV2, Value: issuerDER},
		},
	}
	if u, err := url.Parse(subject); err == nil && u.Scheme != "" {
		tmpl.URIs = []*url.URL{u}
	} else {
		tmpl.EmailAddresses = []string{subject}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(c.dir, prefix+".crt"), "CERTIFICATE", der)
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(c.dir, prefix+".plain.key"), "PRIVATE KEY", pk)
	if out, err := c.run(t, "import-key-pair", "--key", prefix+".plain.key", "--output-key-prefix", prefix); err != nil {
		t.Fatalf("cosign import-key-pair: %v\n%s", err, out)
	}
}

// signKeyless signs repo@digest with prefix's key and certificate (and
// a's chain), as cosign signs with a Fulcio certificate, offline.
func (c *cosignTool) signKeyless(t *testing.T, prefix string, a *authority, repo name.Repository, digest v1.Hash, bundle bool) {
	t.Helper()
	out, err := c.run(t, "sign", "--key", prefix+".key", "--certificate", prefix+".crt", "--certificate-chain", a.chain,
		"--tlog-upload=false", "--use-signing-config=false",
		fmt.Sprintf("--new-bundle-format=%t", bundle),
		"--allow-http-registry", "--allow-insecure-registry", "-y",
		repo.Digest(digest.String()).String())
	if err != nil {
		t.Fatalf("cosign sign: %v\n%s", err, out)
	}
}

// verifyKeyless is cosign's verdict on repo@digest for an identity,
// offline, as VerifySignature's must agree with.
// withLog: the root names a log, and cosign checks the signature's entry
// in it (offline, by its signed entry timestamp).
func (c *cosignTool) verifyKeyless(t *testing.T, root, subject, issuer string, repo name.Repository, digest v1.Hash, bundle, withLog bool) (string, error) {
	t.Helper()
	return c.run(t, "verify", "--trusted-root", root,
		"--certificate-identity", subject, "--certificate-oidc-issuer", issuer,
		fmt.Sprintf("--insecure-ignore-tlog=%t", !withLog), "--insecure-ignore-sct=true",
		fmt.Sprintf("--new-bundle-format=%t", bundle),
		"--allow-http-registry", "--allow-insecure-registry",
		repo.Digest(digest.String()).String())
}

// addLogEntry puts into the legacy signature of repo@digest the entry
// that a Rekor log with logKey would give it, integrated at when: what
// cosign v1 and v2 keep in the layer's dev.sigstore.cosign/bundle
// annotation. No Rekor is reachable offline, so the test is the log: the
// body is Rekor's hashedrekord v0.0.1 of the signature and certificate,
// and the signed entry timestamp is over its canonical JSON with the
// time, index and log ID, as Rekor signs it.
func addLogEntry(t *testing.T, repo name.Repository, digest v1.Hash, logKey *ecdsa.PrivateKey, when time.Time) {
	t.Helper()
	tag := legacyTagOf(digest)
	m := getJSON(t, repo.Tag(tag))
	layer := layerOf(m)
	ann := layer["annotations"].(map[string]any)
	payload := getBlob(t, repo, layer["digest"].(string))
	sum := sha256.Sum256(payload)
	body, err := json.Marshal(map[string]any{
		"apiVersion": "0.0.1", "kind": "hashedrekord",
		"spec": map[string]any{
			"data": map[string]any{"hash": map[string]any{"algorithm": "sha256", "value": hex.EncodeToString(sum[:])}},
			"signature": map[string]any{
				"content":   ann[signatureAnnotation],
				"publicKey": map[string]any{"content": base64.StdEncoding.EncodeToString([]byte(ann[certificateAnnotation].(string)))},
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&logKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	logID := sha256.Sum256(der)
	// encoding/json writes a map's keys sorted, without spaces: RFC 8785
	// canonical JSON for strings and integers.
	entry := map[string]any{"body": base64.StdEncoding.EncodeToString(body), "integratedTime": when.Unix(), "logIndex": 42, "logID": hex.EncodeToString(logID[:])}
	canonical, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(canonical)
	set, err := ecdsa.SignASN1(rand.Reader, logKey, h[:])
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(map[string]any{"SignedEntryTimestamp": set, "Payload": entry})
	if err != nil {
		t.Fatal(err)
	}
	ann[logEntryAnnotation] = string(raw)
	putManifest(t, repo, tag, m)
}

// rewriteBundle replaces the one bundle referrer of repo@digest by one
// whose bundle edit changed.
func rewriteBundle(t *testing.T, repo name.Repository, digest v1.Hash, edit func(b map[string]any)) {
	t.Helper()
	orig, m := bundleReferrer(t, repo, digest)
	layer := layerOf(m)
	var b map[string]any
	if err := json.Unmarshal(getBlob(t, repo, layer["digest"].(string)), &b); err != nil {
		t.Fatal(err)
	}
	edit(b)
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	d := pushBlob(t, repo, raw, types.MediaType(layer["mediaType"].(string)))
	layer["digest"], layer["size"] = d.Digest.String(), d.Size
	putManifest(t, repo, "", m)
	if err := remote.Delete(repo.Digest(orig.String())); err != nil {
		t.Fatal(err)
	}
}

// certificateMaterial turns cosign's bundle, signed with a certificate
// given on its command line, into the bundle that keyless signing
// writes: cosign v3.1.3 puts such a certificate in an
// x509CertificateChain, which a v0.3 bundle may not hold (sigstore-go
// and cosign verify refuse it); Fulcio's goes in certificate, the leaf
// alone. The signature covers the envelope, not this.
func certificateMaterial(b map[string]any) {
	vm := b["verificationMaterial"].(map[string]any)
	chain := vm["x509CertificateChain"].(map[string]any)["certificates"].([]any)
	delete(vm, "x509CertificateChain")
	vm["certificate"] = chain[0]
}

// TestVerifySignatureIdentity signs images keyless with the real cosign
// CLI, offline: a certificate from the test's own authority (as Fulcio
// issues them, with the OIDC issuer's extensions), in a trusted root that
// cosign made, in both formats; and checks that VerifySignature accepts
// exactly what cosign verify --certificate-identity accepts, and says why
// it refuses the rest.
func TestVerifySignatureIdentity(t *testing.T) {
	c := newCosign(t)
	ca, rogue := newAuthority(t, c, "ca"), newAuthority(t, c, "rogue")
	root := trustedRoot(t, c, "root.json", []*authority{ca})
	// A root that also names a transparency log: its entry is required.
	logKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	logDER, err := x509.MarshalPKIXPublicKey(&logKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(c.dir, "log.pub"), "PUBLIC KEY", logDER)
	rootWithLog := trustedRoot(t, c, "root-log.json", []*authority{ca},
		"--rekor=url=https://log.test,public-key="+filepath.Join(c.dir, "log.pub")+",start-time=2020-01-01T00:00:00Z")

	const (
		issuer   = "https://token.actions.githubusercontent.com"
		workflow = "https://github.com/acme/app/.github/workflows/release.yml@refs/heads/main"
	)
	now := time.Now()
	ca.issue(t, c, "release", workflow, issuer, now.Add(-time.Minute), now.Add(time.Hour))
	ca.issue(t, c, "fork", "https://github.com/mallory/app/.github/workflows/release.yml@refs/heads/main", issuer, now.Add(-time.Minute), now.Add(time.Hour))
	ca.issue(t, c, "otherissuer", workflow, "https://accounts.example.com", now.Add(-time.Minute), now.Add(time.Hour))
	ca.issue(t, c, "expired", workflow, issuer, now.Add(-2*time.Hour), now.Add(-time.Hour))
	rogue.issue(t, c, "rogue", workflow, issuer, now.Add(-time.Minute), now.Add(time.Hour))
	key := c.key(t, "key")

	load := func(t *testing.T, id policies.SigstoreIdentity) SignatureRule {
		t.Helper()
		r, err := LoadIdentity(id)
		if err != nil {
			t.Fatalf("LoadIdentity: %v", err)
		}
		return SignatureRule{Identity: &r}
	}
	exact := policies.SigstoreIdentity{Issuer: issuer, Subject: workflow, TrustedRoot: root}
	withLog := func(t *testing.T) SignatureRule {
		id := exact
		id.TrustedRoot = rootWithLog
		return load(t, id)
	}
	otherLog, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	reg := newSigRegistry(t, true)

	cases := []struct {
		name  string
		setup func(t *testing.T, f fixture)
		rules func(t *testing.T) []SignatureRule
		// cosignAccepts: cosign verify, for the exact identity, accepts;
		// under rootWithLog, checking the log entry, where withLog.
		cosignAccepts bool
		withLog       bool
		bundle        bool
		want          *Identity
		wantErr       []string
	}{
		{
			name:          "legacy, the identity",
			setup:         func(t *testing.T, f fixture) { c.signKeyless(t, "release", ca, f.repo, f.digest, false) },
			rules:         func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			cosignAccepts: true,
			want:          &Identity{Subject: workflow, Issuer: issuer},
		},
		{
			name: "bundle, the identity",
			setup: func(t *testing.T, f fixture) {
				c.signKeyless(t, "release", ca, f.repo, f.digest, true)
				rewriteBundle(t, f.repo, f.digest, certificateMaterial)
			},
			rules:         func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			bundle:        true,
			cosignAccepts: true,
			want:          &Identity{Subject: workflow, Issuer: issuer},
		},
		{
			name:    "bundle as cosign writes a given certificate (a chain in a v0.3 bundle)",
			setup:   func(t *testing.T, f fixture) { c.signKeyless(t, "release", ca, f.repo, f.digest, true) },
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			bundle:  true,
			wantErr: []string{"sigstore-bundle", "not a valid Sigstore bundle", "X.509 certificate chain"},
		},
		{
			name:  "legacy, a regular expression over the whole subject",
			setup: func(t *testing.T, f fixture) { c.signKeyless(t, "release", ca, f.repo, f.digest, false) },
			rules: func(t *testing.T) []SignatureRule {
				id := exact
				id.Subject, id.SubjectRegexp = "", `https://github\.com/acme/[^/]+/\.github/workflows/release\.yml@refs/heads/main`
				return []SignatureRule{load(t, id)}
			},
			cosignAccepts: true,
			want:          &Identity{Subject: workflow, Issuer: issuer},
		},
		{
			// sigstore-go's expressions match anywhere; the policy's are
			// anchored, or "acme/app" would admit any fork's workflow.
			name:  "legacy, a regular expression that matches only part of the subject",
			setup: func(t *testing.T, f fixture) { c.signKeyless(t, "fork", ca, f.repo, f.digest, false) },
			rules: func(t *testing.T) []SignatureRule {
				id := exact
				id.Subject, id.SubjectRegexp = "", `github\.com/.*/app/`
				return []SignatureRule{load(t, id)}
			},
			wantErr: []string{"cosign-legacy", "it names https://github.com/mallory/app/", "refused"},
		},
		{
			name:    "legacy, another subject",
			setup:   func(t *testing.T, f fixture) { c.signKeyless(t, "fork", ca, f.repo, f.digest, false) },
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			wantErr: []string{"cosign-legacy", "it names https://github.com/mallory/app/", "under " + workflow, "expected SAN value"},
		},
		{
			name: "bundle, another issuer",
			setup: func(t *testing.T, f fixture) {
				c.signKeyless(t, "otherissuer", ca, f.repo, f.digest, true)
				rewriteBundle(t, f.repo, f.digest, certificateMaterial)
			},
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			bundle:  true,
			wantErr: []string{"sigstore-bundle", "issuer https://accounts.example.com", "refused"},
		},
		{
			name:    "legacy, a certificate from an authority the root does not name",
			setup:   func(t *testing.T, f fixture) { c.signKeyless(t, "rogue", rogue, f.repo, f.digest, false) },
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			wantErr: []string{"cosign-legacy", "its certificate was not issued by a certificate authority of the trusted root " + root},
		},
		{
			name:    "legacy, an expired certificate and no log to date the signature",
			setup:   func(t *testing.T, f fixture) { c.signKeyless(t, "expired", ca, f.repo, f.digest, false) },
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			wantErr: []string{"cosign-legacy", "its certificate expired at", "names no log or timestamp authority"},
		},
		{
			name:          "legacy, a root that names a log, and no log entry",
			setup:         func(t *testing.T, f fixture) { c.signKeyless(t, "release", ca, f.repo, f.digest, false) },
			rules:         func(t *testing.T) []SignatureRule { return []SignatureRule{withLog(t)} },
			cosignAccepts: true, // with --insecure-ignore-tlog, as VerifySignature does not
			wantErr:       []string{"cosign-legacy", "not enough verified log entries from transparency log"},
		},
		{
			// Fulcio's certificates live ten minutes: the log's time, not
			// the pull's, is when the certificate must have been valid.
			name: "legacy, an expired certificate, and the log's entry from when it was valid",
			setup: func(t *testing.T, f fixture) {
				c.signKeyless(t, "expired", ca, f.repo, f.digest, false)
				addLogEntry(t, f.repo, f.digest, logKey, now.Add(-90*time.Minute))
			},
			rules:         func(t *testing.T) []SignatureRule { return []SignatureRule{withLog(t)} },
			withLog:       true,
			cosignAccepts: true,
			want:          &Identity{Subject: workflow, Issuer: issuer},
		},
		{
			name: "legacy, an expired certificate, and a log entry from after it expired",
			setup: func(t *testing.T, f fixture) {
				c.signKeyless(t, "expired", ca, f.repo, f.digest, false)
				addLogEntry(t, f.repo, f.digest, logKey, now.Add(-30*time.Minute))
			},
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{withLog(t)} },
			withLog: true,
			wantErr: []string{"cosign-legacy", "integrated time outside certificate validity"},
		},
		{
			name: "legacy, a log entry from a log the root does not name",
			setup: func(t *testing.T, f fixture) {
				c.signKeyless(t, "release", ca, f.repo, f.digest, false)
				addLogEntry(t, f.repo, f.digest, otherLog, now)
			},
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{withLog(t)} },
			withLog: true,
			wantErr: []string{"cosign-legacy", "not enough verified log entries from transparency log: 0 < 1"},
		},
		{
			name: "legacy, the log entry of another signature",
			setup: func(t *testing.T, f fixture) {
				// Another image's signature and its entry, the entry then
				// put beside this image's signature.
				other := pushImage(t, f.repo)
				c.signKeyless(t, "release", ca, f.repo, other, false)
				addLogEntry(t, f.repo, other, logKey, now)
				entry := layerOf(getJSON(t, f.repo.Tag(legacyTagOf(other))))["annotations"].(map[string]any)[logEntryAnnotation]
				c.signKeyless(t, "release", ca, f.repo, f.digest, false)
				m := getJSON(t, f.repo.Tag(legacyTagOf(f.digest)))
				layerOf(m)["annotations"].(map[string]any)[logEntryAnnotation] = entry
				putManifest(t, f.repo, legacyTagOf(f.digest), m)
			},
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{withLog(t)} },
			withLog: true,
			wantErr: []string{"cosign-legacy", "transparency log signature does not match"},
		},
		{
			name:          "legacy keyless, and the policy accepts keys only",
			setup:         func(t *testing.T, f fixture) { c.signKeyless(t, "release", ca, f.repo, f.digest, false) },
			rules:         func(t *testing.T) []SignatureRule { return []SignatureRule{key} },
			cosignAccepts: true,
			wantErr:       []string{"signed with a certificate (keyless), and the policy accepts keys only", "it names " + workflow},
		},
		{
			name:    "bundle signed with a key, and the policy accepts identities only",
			setup:   func(t *testing.T, f fixture) { c.sign(t, "key", f.repo, f.digest, true) },
			rules:   func(t *testing.T) []SignatureRule { return []SignatureRule{load(t, exact)} },
			bundle:  true,
			wantErr: []string{"sigstore-bundle", "signed with a key, and the policy accepts Sigstore identities only"},
		},
		{
			name:  "a key and an identity accepted, the identity signed",
			setup: func(t *testing.T, f fixture) { c.signKeyless(t, "release", ca, f.repo, f.digest, false) },
			rules: func(t *testing.T) []SignatureRule {
				return []SignatureRule{key, load(t, exact)}
			},
			cosignAccepts: true,
			want:          &Identity{Subject: workflow, Issuer: issuer},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			repo := reg.repo(t, "keyless/"+repoName(tc.name))
			f := fixture{reg: reg, repo: repo, digest: pushImage(t, repo)}
			tc.setup(t, f)
			cosignRoot := root
			if tc.withLog {
				cosignRoot = rootWithLog
			}
			out, cosignErr := c.verifyKeyless(t, cosignRoot, workflow, issuer, f.repo, f.digest, tc.bundle, tc.withLog)
			if tc.cosignAccepts != (cosignErr == nil) {
				t.Fatalf("cosign verify for %s: %v, want accepted %t\n%s", workflow, cosignErr, tc.cosignAccepts, out)
			}
			got, err := VerifySignature(context.Background(), f.repo, f.digest, tc.rules(t))
			if tc.want != nil {
				if err != nil {
					t.Fatalf("VerifySignature: %v", err)
				}
				if got.Identity == nil || *got.Identity != *tc.want || got.KeyID != "" {
					t.Fatalf("verified %+v (identity %+v), want identity %+v", got, got.Identity, tc.want)
				}
				t.Logf("verified: %+v", got)
				return
			}
			refusedSaying(t, got, err, tc.wantErr)
		})
	}
}

// TestLoadIdentity checks what an identity rule refuses before any
// image is asked about.
func TestLoadIdentity(t *testing.T) {
	c := newCosign(t)
	root := trustedRoot(t, c, "root.json", []*authority{newAuthority(t, c, "ca")})
	notRoot := filepath.Join(t.TempDir(), "key.pub")
	if err := os.WriteFile(notRoot, []byte("-----BEGIN PUBLIC KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		id      policies.SigstoreIdentity
		wantErr string
	}{
		{"subject", policies.SigstoreIdentity{Issuer: "https://i.test", Subject: "me@example.com", TrustedRoot: root}, ""},
		{"regexp", policies.SigstoreIdentity{Issuer: "https://i.test", SubjectRegexp: ".*@example\\.com", TrustedRoot: root}, ""},
		{"neither", policies.SigstoreIdentity{Issuer: "https://i.test", TrustedRoot: root}, "give subject or subjectRegexp"},
		{"both", policies.SigstoreIdentity{Issuer: "https://i.test", Subject: "a", SubjectRegexp: "a", TrustedRoot: root}, "give subject or subjectRegexp"},
		{"bad regexp", policies.SigstoreIdentity{Issuer: "https://i.test", SubjectRegexp: "(", TrustedRoot: root}, "subjectRegexp: error parsing regexp"},
		{"no issuer", policies.SigstoreIdentity{Subject: "a", TrustedRoot: root}, "no issuer"},
		{"absent root", policies.SigstoreIdentity{Issuer: "https://i.test", Subject: "a", TrustedRoot: root + ".absent"}, "no such file"},
		{"not a root", policies.SigstoreIdentity{Issuer: "https://i.test", Subject: "a", TrustedRoot: notRoot}, "is not a Sigstore trusted root (cosign trusted-root create writes one)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadIdentity(tc.id)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("LoadIdentity: %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}
