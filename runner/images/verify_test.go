package images

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/testtool"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// sigRegistry is go-containerregistry's registry on loopback, counting
// the blobs it is asked for (a hostile signature must be refused before
// they are read).
type sigRegistry struct {
	host     string
	blobGets atomic.Int64
}

func newSigRegistry(t *testing.T, referrersAPI bool) *sigRegistry {
	t.Helper()
	r := &sigRegistry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(referrersAPI))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobGets.Add(1)
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// repo is a repository of the registry; loopback speaks plain HTTP.
func (r *sigRegistry) repo(t *testing.T, path string) name.Repository {
	t.Helper()
	repo, err := name.NewRepository(r.host+"/"+path, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// pushImage pushes a new random image to repo and returns its digest.
func pushImage(t *testing.T, repo name.Repository) v1.Hash {
	t.Helper()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(repo.Tag("latest"), img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// cosignTool runs the real cosign CLI, with keys it generated.
type cosignTool struct {
	bin, dir, home string
}

const cosignPassword = "test-password"

func newCosign(t *testing.T) *cosignTool {
	t.Helper()
	bin := testtool.Path(t, testtool.Cosign, "image signatures are made by the real cosign CLI, in both of its formats")
	c := &cosignTool{bin: bin, dir: t.TempDir(), home: t.TempDir()}
	return c
}

// run runs cosign in its own HOME. Every proxy points at a closed
// loopback port and only loopback is exempt: cosign reaches nothing but
// the test's registry (no TUF, no Rekor, no Fulcio).
func (c *cosignTool) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.dir
	cmd.Env = []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + c.home,
		"COSIGN_PASSWORD=" + cosignPassword,
		"HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9",
		"http_proxy=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// key generates a key pair named prefix and returns the rule of its
// public key (the path of the private key is c.dir/prefix.key).
func (c *cosignTool) key(t *testing.T, prefix string) SignatureRule {
	t.Helper()
	if out, err := c.run(t, "generate-key-pair", "--output-key-prefix", prefix); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(c.dir, prefix+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	rule, err := ParsePublicKey(raw)
	if err != nil {
		t.Fatalf("ParsePublicKey(%s.pub): %v", prefix, err)
	}
	return rule
}

// sign signs repo@digest with the key prefix, in the bundle format or
// the legacy one, offline: no transparency log, no signing config.
func (c *cosignTool) sign(t *testing.T, prefix string, repo name.Repository, digest v1.Hash, bundle bool) {
	t.Helper()
	c.signRef(t, prefix, repo.Digest(digest.String()).String(), bundle)
}

// signRef is sign of a reference as written: of a tag, cosign signs the
// digest the tag resolves to (an index's, for a multi-platform image).
func (c *cosignTool) signRef(t *testing.T, prefix, ref string, bundle bool) {
	t.Helper()
	out, err := c.run(t, "sign", "--key", prefix+".key",
		"--tlog-upload=false", "--use-signing-config=false",
		fmt.Sprintf("--new-bundle-format=%t", bundle),
		"--allow-http-registry", "--allow-insecure-registry", "-y",
		ref)
	if err != nil {
		t.Fatalf("cosign sign: %v\n%s", err, out)
	}
}

// verify is cosign's own verdict, offline with a key, as the report of
// VerifySignature must agree with.
func (c *cosignTool) verify(t *testing.T, prefix string, repo name.Repository, digest v1.Hash) (string, error) {
	t.Helper()
	return c.run(t, "verify", "--key", prefix+".pub", "--insecure-ignore-tlog=true",
		"--allow-http-registry", "--allow-insecure-registry",
		repo.Digest(digest.String()).String())
}

// agrees checks that cosign verifies the image with the key prefix
// accepts, and, where refuses is given, not with that one: what
// VerifySignature decides must be cosign's verdict too.
func (c *cosignTool) agrees(t *testing.T, repo name.Repository, digest v1.Hash, accepts, refuses string) {
	t.Helper()
	if out, err := c.verify(t, accepts, repo, digest); err != nil {
		t.Fatalf("cosign verify refused what VerifySignature must accept: %v\n%s", err, out)
	}
	if refuses == "" {
		return
	}
	if out, err := c.verify(t, refuses, repo, digest); err == nil {
		t.Fatalf("cosign verify accepted the wrong key:\n%s", out)
	}
}

// rawManifest is a manifest pushed as written.
type rawManifest struct {
	b  []byte
	mt types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.b, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

// putManifest pushes a manifest (any JSON) by digest or under tag, and
// returns its digest.
func putManifest(t *testing.T, repo name.Repository, tag string, m any) v1.Hash {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var ref name.Reference = repo.Digest(d.String())
	if tag != "" {
		ref = repo.Tag(tag)
	}
	if err := remote.Put(ref, rawManifest{b, types.OCIManifestSchema1}); err != nil {
		t.Fatal(err)
	}
	return d
}

// pushBlob pushes b as a layer of repo and returns its descriptor.
func pushBlob(t *testing.T, repo name.Repository, b []byte, mt types.MediaType) v1.Descriptor {
	t.Helper()
	l := static.NewLayer(b, mt)
	if err := remote.WriteLayer(repo, l); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Digest()
	return v1.Descriptor{MediaType: mt, Size: int64(len(b)), Digest: d}
}

// getJSON fetches a manifest as a generic JSON object, to edit.
func getJSON(t *testing.T, ref name.Reference) map[string]any {
	t.Helper()
	desc, err := remote.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func getBlob(t *testing.T, repo name.Repository, digest string) []byte {
	t.Helper()
	l, err := remote.Layer(repo.Digest(digest))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bundleReferrer returns the digest of the one bundle referrer of
// repo@digest and its manifest.
func bundleReferrer(t *testing.T, repo name.Repository, digest v1.Hash) (v1.Hash, map[string]any) {
	t.Helper()
	idx, err := remote.Referrers(repo.Digest(digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d referrers of %s, want the one bundle", len(im.Manifests), digest)
	}
	d := im.Manifests[0].Digest
	return d, getJSON(t, repo.Digest(d.String()))
}

// layerOf is the descriptor of a manifest's first layer, as JSON.
func layerOf(m map[string]any) map[string]any {
	return m["layers"].([]any)[0].(map[string]any)
}

func subjectOf(repo name.Repository, t *testing.T, digest v1.Hash) map[string]any {
	t.Helper()
	desc, err := remote.Head(repo.Digest(digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{"mediaType": string(desc.MediaType), "size": desc.Size, "digest": desc.Digest.String()}
}

// repoName makes a repository name of a test case's.
func repoName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// fixture is one case's image, in a repository of its own.
type fixture struct {
	reg    *sigRegistry
	repo   name.Repository
	digest v1.Hash
}

func legacyTagOf(d v1.Hash) string { return "sha256-" + d.Hex + ".sig" }

// TestVerifySignature signs images with the real cosign CLI, in both of
// its formats, on a real registry on loopback (with the referrers API
// and without it: cosign then writes the referrers tag), forges and
// breaks signatures the way an attacker with push rights could, and
// checks what VerifySignature says of each.
func TestVerifySignature(t *testing.T) {
	c := newCosign(t)
	keyA, keyB := c.key(t, "a"), c.key(t, "b")
	withAPI, withoutAPI := newSigRegistry(t, true), newSigRegistry(t, false)

	cases := []struct {
		name string
		// noAPI puts the image on the registry without the referrers API.
		noAPI bool
		setup func(t *testing.T, f fixture)
		rules []SignatureRule
		// want is the verified signature (Ref checked by wantRef), or
		// when empty, wantErr are substrings of the ErrNotSigned error.
		want    Signature
		wantRef string
		wantErr []string
		// noBlobs: the refusal read no blob at all.
		noBlobs bool
	}{
		{
			name:    "unsigned",
			rules:   []SignatureRule{keyA},
			wantErr: []string{"no signature found", "no Sigstore bundle referrer", ".sig tag", keyA.KeyID},
		},
		{
			name: "legacy, right key",
			setup: func(t *testing.T, f fixture) {
				c.sign(t, "a", f.repo, f.digest, false)
				c.agrees(t, f.repo, f.digest, "a", "")
			},
			// A rule without its KeyID gets it computed.
			rules:   []SignatureRule{{Key: keyA.Key}},
			want:    Signature{Format: FormatCosignLegacy, KeyID: keyA.KeyID},
			wantRef: ".sig",
		},
		{
			name: "bundle, right key, referrers API",
			setup: func(t *testing.T, f fixture) {
				c.sign(t, "a", f.repo, f.digest, true)
				// cosign used the API: no referrers tag, so the API is
				// what VerifySignature reads.
				if _, err := remote.Head(f.repo.Tag("sha256-" + f.digest.Hex)); err == nil {
					t.Fatal("cosign wrote the referrers tag on a registry with the referrers API")
				}
				c.agrees(t, f.repo, f.digest, "a", "b")
			},
			rules:   []SignatureRule{keyA},
			want:    Signature{Format: FormatSigstoreBundle, KeyID: keyA.KeyID},
			wantRef: "@sha256:",
		},
		{
			name:  "bundle, right key, referrers tag fallback",
			noAPI: true,
			setup: func(t *testing.T, f fixture) {
				c.sign(t, "a", f.repo, f.digest, true)
				desc, err := remote.Get(f.repo.Tag("sha256-" + f.digest.Hex))
				if err != nil {
					t.Fatalf("cosign wrote no referrers tag on a registry without the API: %v", err)
				}
				if desc.MediaType != types.OCIImageIndex {
					t.Fatalf("the referrers tag is a %s", desc.MediaType)
				}
				c.agrees(t, f.repo, f.digest, "a", "b")
			},
			rules: []SignatureRule{keyA},
			want:  Signature{Format: FormatSigstoreBundle, KeyID: keyA.KeyID},
		},
		{
			name:    "legacy, wrong key",
			setup:   func(t *testing.T, f fixture) { c.sign(t, "b", f.repo, f.digest, false) },
			rules:   []SignatureRule{keyA},
			wantErr: []string{"1 signature found", "cosign-legacy", "signature does not verify with an accepted key", keyA.KeyID},
		},
		{
			name:    "bundle, wrong key",
			setup:   func(t *testing.T, f fixture) { c.sign(t, "b", f.repo, f.digest, true) },
			rules:   []SignatureRule{keyA},
			wantErr: []string{"1 signature found", "sigstore-bundle", "by " + keyB.KeyID + " (not an accepted key)"},
		},
		{
			name: "both formats, wrong key",
			setup: func(t *testing.T, f fixture) {
				c.sign(t, "b", f.repo, f.digest, false)
				c.sign(t, "b", f.repo, f.digest, true)
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"2 signatures found", "cosign-legacy", "sigstore-bundle", keyB.KeyID + " (not an accepted key)"},
		},
		{
			name:  "two keys accepted, the second signed (legacy)",
			setup: func(t *testing.T, f fixture) { c.sign(t, "b", f.repo, f.digest, false) },
			rules: []SignatureRule{keyA, keyB},
			want:  Signature{Format: FormatCosignLegacy, KeyID: keyB.KeyID},
		},
		{
			name:  "two keys accepted, the second signed (bundle)",
			setup: func(t *testing.T, f fixture) { c.sign(t, "b", f.repo, f.digest, true) },
			rules: []SignatureRule{keyA, keyB},
			want:  Signature{Format: FormatSigstoreBundle, KeyID: keyB.KeyID},
		},
		{
			name: "a wrong key's bundle beside a right key's legacy signature",
			setup: func(t *testing.T, f fixture) {
				c.sign(t, "b", f.repo, f.digest, true)
				c.sign(t, "a", f.repo, f.digest, false)
			},
			rules: []SignatureRule{keyA},
			want:  Signature{Format: FormatCosignLegacy, KeyID: keyA.KeyID},
		},
		{
			name: "legacy signature of another image under this image's tag",
			setup: func(t *testing.T, f fixture) {
				other := pushImage(t, f.repo)
				c.sign(t, "a", f.repo, other, false)
				desc, err := remote.Get(f.repo.Tag(legacyTagOf(other)))
				if err != nil {
					t.Fatal(err)
				}
				if err := remote.Put(f.repo.Tag(legacyTagOf(f.digest)), desc); err != nil {
					t.Fatal(err)
				}
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"cosign-legacy", "by " + keyA.KeyID, "it signs image sha256:", "not this one"},
		},
		{
			name: "bundle of another image as a referrer of this one",
			setup: func(t *testing.T, f fixture) {
				other := pushImage(t, f.repo)
				c.sign(t, "a", f.repo, other, true)
				_, m := bundleReferrer(t, f.repo, other)
				m["subject"] = subjectOf(f.repo, t, f.digest)
				putManifest(t, f.repo, "", m)
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"sigstore-bundle", "by " + keyA.KeyID, "it signs sha256:", "not this image"},
		},
		{
			name: "legacy payload changed after signing",
			setup: func(t *testing.T, f fixture) {
				c.sign(t, "a", f.repo, f.digest, false)
				tag := legacyTagOf(f.digest)
				m := getJSON(t, f.repo.Tag(tag))
				layer := layerOf(m)
				payload := getBlob(t, f.repo, layer["digest"].(string))
				changed := bytes.Replace(payload, []byte(`"docker-reference":"`), []byte(`"docker-reference":"evil.example/`), 1)
				if bytes.Equal(changed, payload) {
					t.Fatalf("no docker-reference in the payload: %s", payload)
				}
				d := pushBlob(t, f.repo, changed, simpleSigningMediaType)
				layer["digest"], layer["size"] = d.Digest.String(), d.Size
				putManifest(t, f.repo, tag, m)
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"cosign-legacy", "signature does not verify with an accepted key"},
		},
		{
			name: "bundle statement changed after signing",
			setup: func(t *testing.T, f fixture) {
				c.sign(t, "a", f.repo, f.digest, true)
				rewriteBundle(t, f.repo, f.digest, func(b map[string]any) {
					env := b["dsseEnvelope"].(map[string]any)
					st, err := base64.StdEncoding.DecodeString(env["payload"].(string))
					if err != nil {
						t.Fatal(err)
					}
					changed := bytes.Replace(st, []byte(`"predicate":{}`), []byte(`"predicate":{"approved":true}`), 1)
					if bytes.Equal(changed, st) {
						t.Fatalf("no empty predicate in the statement: %s", st)
					}
					env["payload"] = base64.StdEncoding.EncodeToString(changed)
				})
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"sigstore-bundle", "by " + keyA.KeyID + ": signature does not verify (the bundle was changed after signing)"},
		},
		{
			name: "an attestation is not a signature",
			setup: func(t *testing.T, f fixture) {
				if err := os.WriteFile(filepath.Join(c.dir, "predicate.json"), []byte(`{"scan":"clean"}`), 0o600); err != nil {
					t.Fatal(err)
				}
				out, err := c.run(t, "attest", "--key", "a.key", "--predicate", "predicate.json", "--type", "https://example.com/scan/v1",
					"--tlog-upload=false", "--use-signing-config=false", "--allow-http-registry", "--allow-insecure-registry", "-y",
					f.repo.Digest(f.digest.String()).String())
				if err != nil {
					t.Fatalf("cosign attest: %v\n%s", err, out)
				}
				// cosign v3.1.3's verify accepts any bundle about the
				// image; airlock asks for a signature. Said, not asserted.
				_, err = c.verify(t, "a", f.repo, f.digest)
				t.Logf("cosign verify of an image with only an attestation: error %v", err)
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"sigstore-bundle", "by " + keyA.KeyID, `an attestation of type "https://example.com/scan/v1", not a signature`},
		},
		{
			name:    "legacy signature manifest of 10000 layers",
			setup:   func(t *testing.T, f fixture) { putLayers(t, f, 10000) },
			rules:   []SignatureRule{keyA},
			wantErr: []string{"cosign-legacy", "refused: its manifest is 2", "bytes, more than the 1048576 read"},
			noBlobs: true,
		},
		{
			name:    "legacy signature manifest of 1000 layers",
			setup:   func(t *testing.T, f fixture) { putLayers(t, f, 1000) },
			rules:   []SignatureRule{keyA},
			wantErr: []string{"cosign-legacy", "refused: 1000 layers, more than the 64"},
			noBlobs: true,
		},
		{
			name: "legacy signature layer of 1 GB",
			setup: func(t *testing.T, f fixture) {
				sum := sha256.Sum256([]byte("huge"))
				putManifest(t, f.repo, legacyTagOf(f.digest), v1.Manifest{
					SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
					Config: pushBlob(t, f.repo, []byte("{}"), types.OCIConfigJSON),
					Layers: []v1.Descriptor{{
						MediaType: simpleSigningMediaType, Size: 1 << 30,
						Digest:      v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
						Annotations: map[string]string{signatureAnnotation: "MEUCIQ=="},
					}},
				})
				f.reg.blobGets.Store(0)
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"cosign-legacy", "a layer of 1073741824 bytes (the manifest says), more than the 1048576 read"},
			noBlobs: true,
		},
		{
			name: "legacy signature layer larger than its manifest says",
			setup: func(t *testing.T, f fixture) {
				big := pushBlob(t, f.repo, bytes.Repeat([]byte("x"), 4<<20), simpleSigningMediaType)
				big.Size = 300
				big.Annotations = map[string]string{signatureAnnotation: "MEUCIQ=="}
				putManifest(t, f.repo, legacyTagOf(f.digest), v1.Manifest{
					SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
					Config: pushBlob(t, f.repo, []byte("{}"), types.OCIConfigJSON),
					Layers: []v1.Descriptor{big},
				})
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"cosign-legacy", "is not the 300 bytes the manifest says"},
		},
		{
			name: "bundle of 1 GB",
			setup: func(t *testing.T, f fixture) {
				sum := sha256.Sum256([]byte("huge"))
				putManifest(t, f.repo, "", map[string]any{
					"schemaVersion": 2, "mediaType": types.OCIManifestSchema1,
					"artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
					"config":       pushBlob(t, f.repo, []byte("{}"), types.OCIEmptyJSON),
					"layers": []v1.Descriptor{{
						MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json", Size: 1 << 30,
						Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
					}},
					"subject": subjectOf(f.repo, t, f.digest),
				})
				f.reg.blobGets.Store(0)
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"sigstore-bundle", "a layer of 1073741824 bytes (the manifest says), more than the 1048576 read"},
			noBlobs: true,
		},
		{
			name: "more bundle referrers than are examined",
			setup: func(t *testing.T, f fixture) {
				config := pushBlob(t, f.repo, []byte("{}"), types.OCIEmptyJSON)
				subject := subjectOf(f.repo, t, f.digest)
				for i := range maxBundles + 6 {
					sum := sha256.Sum256([]byte(fmt.Sprint(i)))
					putManifest(t, f.repo, "", map[string]any{
						"schemaVersion": 2, "mediaType": types.OCIManifestSchema1,
						"artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
						"config":       config,
						"layers": []v1.Descriptor{{
							MediaType: "application/vnd.dev.sigstore.bundle.v0.3+json", Size: 1 << 30,
							Digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
						}},
						"subject": subject,
					})
				}
				f.reg.blobGets.Store(0)
			},
			rules:   []SignatureRule{keyA},
			wantErr: []string{"70 signatures found", "and 56 more refused", "and 6 more bundle referrers not examined (only the first 64 are)"},
			noBlobs: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sr := withAPI
			if tc.noAPI {
				sr = withoutAPI
			}
			repo := sr.repo(t, "case/"+repoName(tc.name))
			f := fixture{reg: sr, repo: repo, digest: pushImage(t, repo)}
			if tc.setup != nil {
				tc.setup(t, f)
			}
			got, err := VerifySignature(context.Background(), f.repo, f.digest, tc.rules)
			if tc.want.Format != "" {
				if err != nil {
					t.Fatalf("VerifySignature: %v", err)
				}
				if got.Format != tc.want.Format || got.KeyID != tc.want.KeyID {
					t.Fatalf("verified %+v, want format %s by %s", got, tc.want.Format, tc.want.KeyID)
				}
				if !strings.HasPrefix(got.Ref, repo.String()) || !strings.Contains(got.Ref, tc.wantRef) {
					t.Errorf("Ref %q, want one of %s containing %q", got.Ref, repo, tc.wantRef)
				}
				t.Logf("verified: %+v", got)
				return
			}
			refusedSaying(t, got, err, tc.wantErr)
			if n := sr.blobGets.Load(); tc.noBlobs && n != 0 {
				t.Errorf("%d blobs read; a hostile signature manifest must be refused before its layers are read", n)
			}
		})
	}
}

// refusedSaying checks that VerifySignature refused (ErrNotSigned), and
// that its error says each of wants.
func refusedSaying(t *testing.T, got Signature, err error, wants []string) {
	t.Helper()
	if !errors.Is(err, ErrNotSigned) {
		t.Fatalf("VerifySignature = %+v, %v; want ErrNotSigned", got, err)
	}
	t.Logf("refused: %v", err)
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
}

// putLayers puts under the image's .sig tag a manifest of n layers that
// are not in the registry, and zeroes the count of blobs read.
func putLayers(t *testing.T, f fixture, n int) {
	t.Helper()
	layers := make([]v1.Descriptor, n)
	for i := range layers {
		sum := sha256.Sum256([]byte(fmt.Sprint(i)))
		layers[i] = v1.Descriptor{
			MediaType:   simpleSigningMediaType,
			Size:        250,
			Digest:      v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
			Annotations: map[string]string{signatureAnnotation: "MEUCIQ=="},
		}
	}
	putManifest(t, f.repo, legacyTagOf(f.digest), v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: pushBlob(t, f.repo, []byte("{}"), types.OCIConfigJSON), Layers: layers,
	})
	f.reg.blobGets.Store(0)
}

// TestVerifySignatureRegistryDown: a registry that cannot be asked is
// not an unsigned image.
func TestVerifySignatureRegistryDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	host := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	repo, err := name.NewRepository(host+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	rule := generatedRule(t)
	sum := sha256.Sum256([]byte("image"))
	_, err = VerifySignature(context.Background(), repo, v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}, []SignatureRule{rule},
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}))
	if err == nil || errors.Is(err, ErrNotSigned) {
		t.Fatalf("VerifySignature with the registry down = %v; want an error that is not ErrNotSigned", err)
	}
	t.Logf("%v", err)
}

// TestVerifySignatureRules: what VerifySignature refuses before it asks
// the registry.
func TestVerifySignatureRules(t *testing.T) {
	repo, _ := name.NewRepository("127.0.0.1:1/app", name.Insecure)
	sum := sha256.Sum256([]byte("image"))
	digest := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	rule := generatedRule(t)
	other := generatedRule(t)
	for _, tc := range []struct {
		name   string
		digest v1.Hash
		rules  []SignatureRule
		want   string
	}{
		{"no rules", digest, nil, "accepts no signer"},
		{"a key ID that is not its key's", digest, []SignatureRule{{Key: rule.Key, KeyID: other.KeyID}}, "is named " + other.KeyID},
		{"no key", digest, []SignatureRule{{KeyID: rule.KeyID}}, "no key"},
		{"weak key", digest, []SignatureRule{{Key: weakKey(t)}}, "curve P-224"},
		{"not a sha256 digest", v1.Hash{Algorithm: "sha512", Hex: "ab"}, []SignatureRule{rule}, "not sha256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifySignature(context.Background(), repo, tc.digest, tc.rules)
			if err == nil || errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("VerifySignature = %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func generatedRule(t *testing.T) SignatureRule {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := KeyID(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return SignatureRule{Key: &k.PublicKey, KeyID: id}
}

func weakKey(t *testing.T) *ecdsa.PublicKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &k.PublicKey
}

// TestParsePublicKeyIsCosignsHint reads cosign's own key file: the key
// ID is the hint cosign writes into its bundles (base64 of the SHA-256
// of the DER key), and cosign's encrypted private key is refused.
func TestParsePublicKeyIsCosignsHint(t *testing.T) {
	c := newCosign(t)
	rule := c.key(t, "k")

	// cosign's hint for the key, from a bundle it writes to a file.
	sr := newSigRegistry(t, true)
	repo := sr.repo(t, "hint")
	digest := pushImage(t, repo)
	bundlePath := filepath.Join(c.dir, "bundle.json")
	if out, err := c.run(t, "sign", "--key", "k.key", "--tlog-upload=false", "--use-signing-config=false",
		"--bundle", bundlePath, "--allow-http-registry", "--allow-insecure-registry", "-y",
		repo.Digest(digest.String()).String()); err != nil {
		t.Fatalf("cosign sign: %v\n%s", err, out)
	}
	var b struct {
		VerificationMaterial struct {
			PublicKey struct {
				Hint string `json:"hint"`
			} `json:"publicKey"`
		} `json:"verificationMaterial"`
	}
	raw, err := os.ReadFile(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	hint, err := base64.StdEncoding.DecodeString(b.VerificationMaterial.PublicKey.Hint)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:" + hex.EncodeToString(hint); rule.KeyID != want {
		t.Errorf("KeyID %s, cosign's hint names %s", rule.KeyID, want)
	}

	privPEM, err := os.ReadFile(filepath.Join(c.dir, "k.key"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParsePublicKey(privPEM)
	if err == nil || !strings.Contains(err.Error(), "this is a private key") {
		t.Fatalf("ParsePublicKey(cosign.key) = %v; want an error saying it is a private key", err)
	}
}

// TestParsePublicKey: one PEM public key, nothing else; an error never
// repeats the bytes it was given.
func TestParsePublicKey(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	spki, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki})
	rule, err := ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	if want := "sha256:" + hex.EncodeToString(sum[:]); rule.KeyID != want {
		t.Errorf("KeyID %s, want %s", rule.KeyID, want)
	}
	if !k.PublicKey.Equal(rule.Key) {
		t.Error("the rule's key is not the key")
	}

	der, _ := x509.MarshalPKCS8PrivateKey(k)
	pkcs8 := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	// cosign's key file, as cosign generate-key-pair names its block.
	sigstore := pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: der})
	weak, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	weakDER, _ := x509.MarshalPKIXPublicKey(&weak.PublicKey)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}})
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "no PEM block"},
		{"not PEM", []byte("sha256:abc"), "no PEM block"},
		{"cosign's encrypted private key", sigstore, "this is a private key"},
		{"a PKCS #8 private key", pkcs8, "this is a private key"},
		{"a certificate", cert, `PEM block "CERTIFICATE"`},
		{"two keys", append(append([]byte{}, pubPEM...), pubPEM...), "data after the PEM block"},
		{"a corrupt key", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{0x30, 1, 2}}), "public key:"},
		{"a weak key", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: weakDER}), "curve P-224"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePublicKey(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParsePublicKey = %v; want an error saying %q", err, tc.want)
			}
			if blk, _ := pem.Decode(tc.in); blk != nil && len(blk.Bytes) > 8 {
				if strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(blk.Bytes)[:16]) {
					t.Errorf("the error repeats the key's bytes: %v", err)
				}
			}
		})
	}
}
