package images

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	gcrtransport "github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
	"google.golang.org/protobuf/encoding/protojson"
)

// SignatureRule is one signer an organisation policy accepts: a public
// key (parsed from PEM by ParsePublicKey, the caller having read the
// file), or a Sigstore identity (keyless; LoadIdentity).
type SignatureRule struct {
	// Identity, when set, is the rule: Key and KeyID are not.
	Identity *IdentityRule
	// Key is the signer's public key: ECDSA (P-256, P-384, P-521), RSA
	// (2048 bits or more, PKCS #1 v1.5) or Ed25519.
	Key crypto.PublicKey
	// KeyID is how the record names the key: "sha256:<hex>" of its DER
	// SubjectPublicKeyInfo. Empty means computed from Key; when set it
	// must be that.
	KeyID string
}

// Signature says which signature verified an image, for the record.
type Signature struct {
	// Format is FormatCosignLegacy or FormatSigstoreBundle.
	Format string
	// KeyID is the accepted key it verified with (SignatureRule.KeyID),
	// for a signature by a key.
	KeyID string `json:"keyId,omitempty"`
	// Identity is whom the certificate of a keyless signature was issued
	// to, as verified.
	Identity *Identity `json:"identity,omitempty"`
	// Ref is the signature's own reference: the legacy ".sig" tag, or
	// the bundle referrer's manifest by digest.
	Ref string
}

// Identity is whom a keyless signature's certificate was issued to: its
// subject (SAN) and OIDC issuer.
type Identity struct {
	Subject string `json:"subject"`
	Issuer  string `json:"issuer"`
}

// signer names who signed, for a message and the record.
func (s Signature) signer() string {
	if s.Identity != nil {
		return fmt.Sprintf("%s (issuer %s)", s.Identity.Subject, s.Identity.Issuer)
	}
	return s.KeyID
}

// The formats of Signature.Format: where cosign keeps a signature.
const (
	// FormatCosignLegacy is a "simple signing" payload, a layer of the
	// manifest tagged sha256-<hex>.sig in the image's repository, its
	// signature in the layer's annotation (cosign v1, v2; v3 with
	// --new-bundle-format=false).
	FormatCosignLegacy = "cosign-legacy"
	// FormatSigstoreBundle is a Sigstore bundle (v0.3) holding a DSSE
	// envelope of an in-toto statement about the image, the one layer of
	// an OCI 1.1 referrer of the image's manifest (cosign v3's default).
	FormatSigstoreBundle = "sigstore-bundle"
)

// ErrNotSigned is matched (errors.Is) by VerifySignature's error when no
// signature of the image verifies with an accepted key. Its message
// says what was found and why each was refused.
var ErrNotSigned = errors.New("image not signed as the policy requires")

// What cosign writes, and what airlock checks it against.
const (
	simpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	signatureAnnotation    = "dev.cosignproject.cosign/signature"
	// simpleSigningType is critical.type of cosign's legacy payload.
	simpleSigningType = "cosign container image signature"
	// bundleMediaTypePrefix starts the artifactType of a bundle referrer
	// and the media type of its layer.
	bundleMediaTypePrefix = "application/vnd.dev.sigstore.bundle"
	// cosignSignPredicateType is the predicate of the statement cosign
	// sign writes: a signature, not an attestation (SBOM, provenance).
	cosignSignPredicateType = "https://sigstore.dev/cosign/sign/v1"
	inTotoPayloadType       = "application/vnd.in-toto+json"
)

// bundleMediaTypes are the bundle versions read: 0.3, in both spellings
// of its media type (cosign v3 and sigstore-go write the first).
var bundleMediaTypes = map[string]bool{
	"application/vnd.dev.sigstore.bundle.v0.3+json":        true,
	"application/vnd.dev.sigstore.bundle+json;version=0.3": true,
}

// Bounds on what is read from a registry, which is hostile until a
// signature checks out. cosign's own payloads are a few hundred bytes
// (legacy) or a few kilobytes (a bundle with a certificate and a log
// entry); its manifests a few hundred bytes a layer.
const (
	maxManifestSize  = 1 << 20 // a signature manifest (the registry's size, before fetching)
	maxSignatureLen  = 4 << 10 // base64 of one signature: 512 bytes for RSA-4096
	maxPayloadSize   = 1 << 20 // a legacy payload or a bundle
	maxLegacyLayers  = 64      // signatures in one .sig manifest
	maxBundles       = 64      // bundle referrers examined
	maxReasonEntries = 8       // refusals named in the error; the rest counted
)

// VerifySignature finds the signatures of the image digest in repo, in
// both formats cosign writes (a Sigstore bundle referrer, through the
// referrers API or its tag fallback; the legacy sha256-<hex>.sig tag),
// and returns the first that verifies with one of rules and signs digest.
// It works offline, as cosign verify --key with --insecure-ignore-tlog:
// no transparency log, no Fulcio, no network but the registry.
//
// When none verifies, the error matches ErrNotSigned and says what was
// found and why each was refused. A registry that cannot be asked (down,
// refusing the credentials) is another error, which does not match it.
// opts are the registry's (credentials, transport); ctx bounds it all.
func VerifySignature(ctx context.Context, repo name.Repository, digest v1.Hash, rules []SignatureRule, opts ...remote.Option) (Signature, error) {
	if len(rules) == 0 {
		return Signature{}, errors.New("verify image signature: the policy accepts no signer (no key or identity given)")
	}
	if digest.Algorithm != "sha256" || len(digest.Hex) != 64 {
		return Signature{}, fmt.Errorf("verify image signature: the image digest %q is not sha256:<64 hex>", digest)
	}
	keys, err := loadRules(rules)
	if err != nil {
		return Signature{}, err
	}
	identities, err := loadIdentities(rules)
	if err != nil {
		return Signature{}, err
	}
	v := &verification{
		ctx:        ctx,
		repo:       repo,
		digest:     digest,
		keys:       keys,
		identities: identities,
		opts:       append(append([]remote.Option{}, opts...), remote.WithContext(ctx)),
	}
	// cosign v3's default format first; the legacy one after. A failure
	// to ask the registry about one format does not hide a verified
	// signature in the other.
	var failed []error
	for _, find := range []func() (*Signature, error){v.bundles, v.legacy} {
		sig, err := find()
		if sig != nil {
			return *sig, nil
		}
		if err != nil {
			failed = append(failed, err)
		}
		if ctx.Err() != nil {
			return Signature{}, fmt.Errorf("verify the signature of %s: %w", v.imageRef(), ctx.Err())
		}
	}
	if len(failed) > 0 {
		return Signature{}, fmt.Errorf("verify the signature of %s: the registry could not be asked (check that it is reachable and that its credentials are given): %w%s",
			v.imageRef(), joined(failed), v.summary("; besides, "))
	}
	if len(v.found) == 0 {
		return Signature{}, fmt.Errorf("%w: %s: no signature found (no Sigstore bundle referrer, no %s tag): sign it with cosign sign, as one of the accepted signers (%s)",
			ErrNotSigned, v.imageRef(), legacyTag(digest), v.accepted())
	}
	return Signature{}, fmt.Errorf("%w: %s: %s; accepted signers: %s", ErrNotSigned, v.imageRef(), v.summary(""), v.accepted())
}

// joined is errors.Join on one line: each still matches errors.Is.
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, err := range j {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; and ")
}

func (j joined) Unwrap() []error { return j }

// ParsePublicKey reads one PEM "PUBLIC KEY" block (as cosign
// generate-key-pair writes cosign.pub) into a rule with its key ID.
func ParsePublicKey(pemBytes []byte) (SignatureRule, error) {
	block, rest := pem.Decode(pemBytes)
	if block == nil {
		return SignatureRule{}, errors.New("public key: no PEM block found (want -----BEGIN PUBLIC KEY-----, as in cosign.pub)")
	}
	if strings.Contains(block.Type, "PRIVATE KEY") {
		// The bytes are not repeated: a private key never reaches an error.
		return SignatureRule{}, fmt.Errorf("public key: this is a private key (PEM %q): give the public key (cosign public-key --key <file> prints it)", block.Type)
	}
	if block.Type != "PUBLIC KEY" {
		return SignatureRule{}, fmt.Errorf("public key: PEM block %q, want \"PUBLIC KEY\"", block.Type)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return SignatureRule{}, errors.New("public key: data after the PEM block (give one key per file)")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return SignatureRule{}, fmt.Errorf("public key: %w", err)
	}
	id, err := KeyID(pub)
	if err != nil {
		return SignatureRule{}, fmt.Errorf("public key: %w", err)
	}
	return SignatureRule{Key: pub, KeyID: id}, nil
}

// KeyID names a public key as the record does: "sha256:<hex>" of its
// DER SubjectPublicKeyInfo. It refuses keys too weak or of a kind cosign
// does not sign with.
func KeyID(pub crypto.PublicKey) (string, error) {
	if err := checkKey(pub); err != nil {
		return "", err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// checkKey accepts the keys cosign makes or imports, as sigstore's
// key policy does, without its dependencies.
func checkKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return fmt.Errorf("ECDSA key on curve %s: want P-256, P-384 or P-521", k.Curve.Params().Name)
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 || n > 8192 {
			return fmt.Errorf("RSA key of %d bits: want 2048 to 8192", n)
		}
		return nil
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return errors.New("Ed25519 key of the wrong length")
		}
		return nil
	case nil:
		return errors.New("no key")
	}
	return fmt.Errorf("unsupported key type %T: want ECDSA, RSA or Ed25519", pub)
}

// acceptedKey is a rule ready to verify with.
type acceptedKey struct {
	id string
	// verifiers: the key's default hash first; for ECDSA keys whose
	// default is not SHA-256 also SHA-256, cosign verify's default
	// (--signature-digest-algorithm).
	verifiers []signature.Verifier
}

func loadRules(rules []SignatureRule) ([]acceptedKey, error) {
	keys := make([]acceptedKey, 0, len(rules))
	for i, r := range rules {
		if r.Identity != nil {
			continue
		}
		id, err := KeyID(r.Key)
		if err != nil {
			return nil, fmt.Errorf("verify image signature: accepted key %d: %w", i+1, err)
		}
		if r.KeyID != "" && r.KeyID != id {
			return nil, fmt.Errorf("verify image signature: accepted key %d is named %s but its key is %s", i+1, r.KeyID, id)
		}
		v, err := signature.LoadDefaultVerifier(r.Key)
		if err != nil {
			return nil, fmt.Errorf("verify image signature: accepted key %s: %w", id, err)
		}
		k := acceptedKey{id: id, verifiers: []signature.Verifier{v}}
		if ec, ok := r.Key.(*ecdsa.PublicKey); ok && ec.Curve != elliptic.P256() {
			v256, err := signature.LoadVerifier(r.Key, crypto.SHA256)
			if err != nil {
				return nil, fmt.Errorf("verify image signature: accepted key %s: %w", id, err)
			}
			k.verifiers = append(k.verifiers, v256)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// verification is one VerifySignature call: what it asks and what it
// found so far.
type verification struct {
	ctx    context.Context
	repo   name.Repository
	digest v1.Hash
	keys   []acceptedKey
	// identities are the accepted Sigstore identities (keyless).
	identities []acceptedIdentity
	opts       []remote.Option
	// found says, for each signature found, why it was refused.
	found []string
	// unexamined counts the bundle referrers past maxBundles.
	unexamined int
}

func (v *verification) imageRef() string { return v.repo.Digest(v.digest.String()).String() }

func (v *verification) refuse(format string, args ...any) {
	v.found = append(v.found, fmt.Sprintf(format, args...))
}

// summary is "<n> signatures found: <why each was refused>", after
// prefix, or "" when none was found.
func (v *verification) summary(prefix string) string {
	n := len(v.found) + v.unexamined
	if n == 0 {
		return ""
	}
	shown := v.found
	more := ""
	if len(shown) > maxReasonEntries {
		more = fmt.Sprintf("; and %d more refused", len(shown)-maxReasonEntries)
		shown = shown[:maxReasonEntries]
	}
	if v.unexamined > 0 {
		more += fmt.Sprintf("; and %d more bundle referrers not examined (only the first %d are)", v.unexamined, maxBundles)
	}
	noun := "signatures"
	if n == 1 {
		noun = "signature"
	}
	return fmt.Sprintf("%s%d %s found: %s%s", prefix, n, noun, strings.Join(shown, "; "), more)
}

// accepted names the accepted keys and identities.
func (v *verification) accepted() string {
	var names []string
	for _, k := range v.keys {
		names = append(names, "key "+k.id)
	}
	for _, id := range v.identities {
		names = append(names, id.rule.String())
	}
	return strings.Join(names, ", ")
}

// verifyWith returns the first accepted key whose verifier accepts sig
// over msg.
func (v *verification) verifyWith(sig, msg []byte) (acceptedKey, bool) {
	for _, k := range v.keys {
		for _, ver := range k.verifiers {
			if ver.VerifySignature(bytes.NewReader(sig), bytes.NewReader(msg)) == nil {
				return k, true
			}
		}
	}
	return acceptedKey{}, false
}

// legacyTag is where cosign's legacy format keeps the signatures of
// digest.
func legacyTag(digest v1.Hash) string { return digest.Algorithm + "-" + digest.Hex + ".sig" }

// legacy checks the signatures under the image's .sig tag.
func (v *verification) legacy() (*Signature, error) {
	tag := v.repo.Tag(legacyTag(v.digest))
	where := fmt.Sprintf("%s %s", FormatCosignLegacy, tag)
	// HEAD first: the registry's size of the manifest, refused before a
	// byte of it is read when it is more than any signature manifest.
	var raw []byte
	var contentType types.MediaType
	head, err := remote.Head(tag, v.opts...)
	switch {
	case isNotFound(err):
		return nil, nil
	case err != nil && isTransport(err):
		return nil, fmt.Errorf("look up %s: %w", tag, err)
	case err != nil:
		// The registry answered HEAD without a size or a digest: GET the
		// tag (go-containerregistry bounds it), and measure it after.
		desc, err := remote.Get(tag, v.opts...)
		if isNotFound(err) {
			return nil, nil
		}
		if err != nil {
			if reason, ok := unusable(err); ok {
				v.refuse("%s: refused: %s", where, reason)
				return nil, nil
			}
			return nil, fmt.Errorf("fetch %s: %w", tag, err)
		}
		if len(desc.Manifest) > maxManifestSize {
			v.refuse("%s: refused: its manifest is %d bytes, more than the %d read", where, len(desc.Manifest), maxManifestSize)
			return nil, nil
		}
		raw, contentType = desc.Manifest, desc.MediaType
	case head.Size > maxManifestSize:
		v.refuse("%s: refused: its manifest is %d bytes, more than the %d read", where, head.Size, maxManifestSize)
		return nil, nil
	default:
		// By the digest HEAD gave: what is read is what was measured.
		raw, contentType, err = v.manifest(v.repo.Digest(head.Digest.String()))
		if err != nil {
			if reason, ok := unusable(err); ok {
				v.refuse("%s: refused: %s", where, reason)
				return nil, nil
			}
			return nil, fmt.Errorf("fetch %s: %w", tag, err)
		}
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		v.refuse("%s: refused: not an image manifest: %s", where, clip(err.Error()))
		return nil, nil
	}
	if err := checkManifestType(m.MediaType, contentType); err != nil {
		v.refuse("%s: refused: %s", where, clip(err.Error()))
		return nil, nil
	}
	if n := len(m.Layers); n > maxLegacyLayers {
		v.refuse("%s: refused: %d layers, more than the %d signatures read from one manifest", where, n, maxLegacyLayers)
		return nil, nil
	}
	if len(m.Layers) == 0 {
		v.refuse("%s: refused: no layers (no signature in it)", where)
		return nil, nil
	}
	for i, layer := range m.Layers {
		where := where
		if len(m.Layers) > 1 {
			where = fmt.Sprintf("%s layer %d", where, i+1)
		}
		sig, err := v.legacyLayer(where, tag.String(), layer)
		if sig != nil || err != nil {
			return sig, err
		}
	}
	return nil, nil
}

// legacyLayer checks one simple-signing layer: the signature over the
// stored bytes first, and only then what they say.
func (v *verification) legacyLayer(where, ref string, layer v1.Descriptor) (*Signature, error) {
	if layer.MediaType != simpleSigningMediaType {
		v.refuse("%s: refused: media type %q, want %q", where, clip(string(layer.MediaType)), simpleSigningMediaType)
		return nil, nil
	}
	b64, ok := layer.Annotations[signatureAnnotation]
	if !ok || b64 == "" {
		v.refuse("%s: refused: no %s annotation", where, signatureAnnotation)
		return nil, nil
	}
	if len(b64) > maxSignatureLen {
		v.refuse("%s: refused: a signature annotation of %d bytes, more than %d", where, len(b64), maxSignatureLen)
		return nil, nil
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		v.refuse("%s: refused: the signature annotation is not base64: %s", where, clip(err.Error()))
		return nil, nil
	}
	payload, err := v.blob(layer)
	if err != nil {
		if reason, ok := unusable(err); ok {
			v.refuse("%s: refused: %s", where, reason)
			return nil, nil
		}
		return nil, fmt.Errorf("fetch %s payload %s: %w", where, layer.Digest, err)
	}
	signed, reason := v.legacySigner(sig, payload, layer.Annotations)
	if signed == nil {
		v.refuse("%s: %s", where, reason)
		return nil, nil
	}
	by := signed.signer()
	var p simpleSigning
	if err := json.Unmarshal(payload, &p, json.RejectUnknownMembers(true)); err != nil {
		v.refuse("%s by %s: refused: the signed payload is not cosign's simple signing payload: %s", where, by, clip(err.Error()))
		return nil, nil
	}
	if p.Critical.Type != simpleSigningType {
		v.refuse("%s by %s: refused: payload type %q, want %q", where, by, clip(p.Critical.Type), simpleSigningType)
		return nil, nil
	}
	if got := p.Critical.Image.DockerManifestDigest; got != v.digest.String() {
		v.refuse("%s by %s: refused: it signs image %s, not this one (a signature copied from another image)", where, by, clip(got))
		return nil, nil
	}
	signed.Format, signed.Ref = FormatCosignLegacy, ref
	return signed, nil
}

// legacySigner verifies a legacy signature over payload: with an
// accepted key, or, where the layer carries a certificate, under an
// accepted identity. It returns who signed, or why none verifies.
func (v *verification) legacySigner(sig, payload []byte, annotations map[string]string) (*Signature, string) {
	if key, ok := v.verifyWith(sig, payload); ok {
		return &Signature{KeyID: key.id}, ""
	}
	if annotations[certificateAnnotation] == "" {
		if len(v.keys) == 0 {
			return nil, "signed with a key, and the policy accepts Sigstore identities only"
		}
		// A legacy signature does not name its key: a wrong key and a
		// changed payload look alike.
		return nil, "signature does not verify with an accepted key (signed with another key, or the payload was changed)"
	}
	pb, err := legacyBundle(payload, sig, annotations)
	if err != nil {
		return nil, "refused: its certificate: " + clip(err.Error())
	}
	id, reason := v.verifyIdentity(pb, verify.WithArtifact(bytes.NewReader(payload)))
	if id == nil {
		return nil, reason
	}
	return &Signature{Identity: id}, ""
}

// simpleSigning is cosign's legacy payload. Unknown members are refused:
// "critical" means a reader that does not understand it must not accept.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// bundles checks the Sigstore bundle referrers of the image.
func (v *verification) bundles() (*Signature, error) {
	// The referrers API, or the sha256-<hex> tag where the registry has
	// none (go-containerregistry falls back by itself). Either index is
	// bounded by go-containerregistry (100 MiB); only its first
	// maxBundles bundle entries are examined.
	idx, err := remote.Referrers(v.repo.Digest(v.digest.String()), v.opts...)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the referrers of %s: %w", v.imageRef(), err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		v.refuse("%s: refused: the referrers index of the image: %s", FormatSigstoreBundle, clip(err.Error()))
		return nil, nil
	}
	seen := 0
	for _, desc := range im.Manifests {
		declared := strings.HasPrefix(desc.ArtifactType, bundleMediaTypePrefix)
		// Some registries list a referrer under its config's media type
		// (go-containerregistry's own pkg/registry: the empty config
		// cosign writes) or none: its manifest says. Others (an SBOM, a
		// Notary signature, ...) are not ours to judge.
		if !declared && desc.ArtifactType != "" && desc.ArtifactType != string(types.OCIEmptyJSON) {
			continue
		}
		if seen++; seen > maxBundles {
			v.unexamined++
			continue
		}
		sig, err := v.bundle(desc, declared)
		if sig != nil || err != nil {
			return sig, err
		}
		if v.ctx.Err() != nil {
			return nil, v.ctx.Err()
		}
	}
	return nil, nil
}

// bundle checks one referrer: its manifest, its one bundle layer, the
// DSSE signature over the stored payload, and only then the statement.
// declared says the referrers index listed it as a bundle; if not, a
// manifest that is not one is passed over without a word.
func (v *verification) bundle(desc v1.Descriptor, declared bool) (*Signature, error) {
	ref := v.repo.Digest(desc.Digest.String())
	where := fmt.Sprintf("%s %s", FormatSigstoreBundle, ref)
	layer, err := v.bundleLayer(ref, where, desc, declared)
	if layer == nil || err != nil {
		return nil, err
	}
	b, err := v.readBundle(where, *layer)
	if b == nil || err != nil {
		return nil, err
	}
	env := b.GetDsseEnvelope()
	signed := &Signature{Format: FormatSigstoreBundle, Ref: ref.String()}
	if certified(b) {
		// The statement's subject is checked below, as for a key.
		id, reason := v.verifyIdentity(b, verify.WithoutArtifactUnsafe())
		if id == nil {
			v.refuse("%s: %s", where, reason)
			return nil, nil
		}
		signed.Identity = id
	} else {
		key, ok := v.verifyWith(env.GetSignatures()[0].GetSig(), dsse.PAE(env.GetPayloadType(), env.GetPayload()))
		if !ok {
			v.refuse("%s%s", where, v.bundleSigner(b))
			return nil, nil
		}
		signed.KeyID = key.id
	}
	if !v.signsImage(where, signed.signer(), env.GetPayload()) {
		return nil, nil
	}
	return signed, nil
}

// bundleLayer reads a referrer's manifest and returns its one bundle
// layer; nil (and no error) when it is refused, or passed over (not a
// bundle, and not declared as one).
func (v *verification) bundleLayer(ref name.Digest, where string, desc v1.Descriptor, declared bool) (*v1.Descriptor, error) {
	if desc.Size > maxManifestSize {
		v.refuse("%s: refused: its manifest is %d bytes, more than the %d read", where, desc.Size, maxManifestSize)
		return nil, nil
	}
	raw, contentType, err := v.manifest(ref)
	if err != nil {
		if reason, ok := unusable(err); ok {
			v.refuse("%s: refused: %s", where, reason)
			return nil, nil
		}
		return nil, fmt.Errorf("fetch %s: %w", ref, err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		v.refuse("%s: refused: not an image manifest: %s", where, clip(err.Error()))
		return nil, nil
	}
	artifactType := m.ArtifactType
	if artifactType == "" {
		artifactType = string(m.Config.MediaType)
	}
	if !strings.HasPrefix(artifactType, bundleMediaTypePrefix) {
		if declared {
			v.refuse("%s: refused: listed as a bundle, its manifest's artifact type is %q", where, clip(artifactType))
		}
		return nil, nil
	}
	if err := checkManifestType(m.MediaType, contentType); err != nil {
		v.refuse("%s: refused: %s", where, clip(err.Error()))
		return nil, nil
	}
	if m.Subject == nil || m.Subject.Digest != v.digest {
		v.refuse("%s: refused: its manifest's subject is not the image", where)
		return nil, nil
	}
	if len(m.Layers) != 1 {
		v.refuse("%s: refused: %d layers, want the one bundle", where, len(m.Layers))
		return nil, nil
	}
	layer := m.Layers[0]
	if !strings.HasPrefix(string(layer.MediaType), bundleMediaTypePrefix) {
		v.refuse("%s: refused: layer media type %q, want a Sigstore bundle", where, clip(string(layer.MediaType)))
		return nil, nil
	}
	return &layer, nil
}

// readBundle reads the bundle in layer and returns it when it is a v0.3
// bundle with a DSSE envelope of one in-toto signature; nil (and no
// error) when it is refused.
func (v *verification) readBundle(where string, layer v1.Descriptor) (*protobundle.Bundle, error) {
	raw, err := v.blob(layer)
	if err != nil {
		if reason, ok := unusable(err); ok {
			v.refuse("%s: refused: %s", where, reason)
			return nil, nil
		}
		return nil, fmt.Errorf("fetch %s bundle %s: %w", where, layer.Digest, err)
	}
	var b protobundle.Bundle
	// protojson refuses unknown fields and repeated keys.
	if err := protojson.Unmarshal(raw, &b); err != nil {
		v.refuse("%s: refused: not a Sigstore bundle: %s", where, clip(err.Error()))
		return nil, nil
	}
	if !bundleMediaTypes[b.GetMediaType()] {
		v.refuse("%s: refused: bundle media type %q, want version 0.3", where, clip(b.GetMediaType()))
		return nil, nil
	}
	env := b.GetDsseEnvelope()
	if env == nil {
		// cosign v3 signs an image with a DSSE envelope; a bare message
		// signature over a digest says nothing of what was signed.
		v.refuse("%s: refused: no DSSE envelope (cosign sign writes one)", where)
		return nil, nil
	}
	if env.GetPayloadType() != inTotoPayloadType {
		v.refuse("%s: refused: payload type %q, want %q", where, clip(env.GetPayloadType()), inTotoPayloadType)
		return nil, nil
	}
	if n := len(env.GetSignatures()); n != 1 {
		// As sigstore-go: a bundle's envelope has exactly one signature.
		v.refuse("%s: refused: %d signatures in its envelope, want 1", where, n)
		return nil, nil
	}
	return &b, nil
}

// signsImage says whether payload, verified as signed by by, is
// cosign's signature statement of this image; if not, it says why.
func (v *verification) signsImage(where, by string, payload []byte) bool {
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		v.refuse("%s by %s: refused: the signed payload is not an in-toto statement: %s", where, by, clip(err.Error()))
		return false
	}
	// Validate accepts statement types v1 (cosign sign) and v0.1 (cosign
	// attest), and wants a digest in every subject.
	if err := st.Validate(); err != nil {
		v.refuse("%s by %s: refused: the signed statement: %s", where, by, clip(err.Error()))
		return false
	}
	if st.GetPredicateType() != cosignSignPredicateType {
		// cosign verify accepts any statement about the image; an
		// attestation (an SBOM, provenance) is not a signature of it.
		v.refuse("%s by %s: refused: an attestation of type %q, not a signature (predicate %s)", where, by, clip(st.GetPredicateType()), cosignSignPredicateType)
		return false
	}
	for _, s := range st.GetSubject() {
		if s.GetDigest()[v.digest.Algorithm] == v.digest.Hex {
			return true
		}
	}
	v.refuse("%s by %s: refused: it signs %s, not this image (a signature copied from another image)", where, by, subjects(&st))
	return false
}

// bundleSigner says why a bundle's signature verified with no accepted
// key, naming the key its hint names (cosign writes base64 of the
// SHA-256 of the DER key, airlock's key ID). The hint is not signed:
// it only says which key to look for.
func (v *verification) bundleSigner(b *protobundle.Bundle) string {
	vm := b.GetVerificationMaterial()
	if len(v.keys) == 0 {
		return ": signed with a key, and the policy accepts Sigstore identities only"
	}
	hint := vm.GetPublicKey().GetHint()
	if hint == "" {
		return ": signature does not verify with an accepted key (the bundle names no key)"
	}
	id := "key hint " + fmt.Sprintf("%q", clip(hint))
	if raw, err := base64.StdEncoding.DecodeString(hint); err == nil && len(raw) == sha256.Size {
		id = "sha256:" + hex.EncodeToString(raw)
	}
	for _, k := range v.keys {
		if k.id == id {
			return fmt.Sprintf(" by %s: signature does not verify (the bundle was changed after signing)", id)
		}
	}
	return fmt.Sprintf(" by %s (not an accepted key)", id)
}

// subjects names a statement's subject digests, for an error.
func subjects(st *intoto.Statement) string {
	var out []string
	for _, s := range st.GetSubject() {
		for alg, d := range s.GetDigest() {
			out = append(out, clip(alg+":"+d))
		}
		if len(out) >= 4 {
			break
		}
	}
	if len(out) == 0 {
		return "no digest"
	}
	return strings.Join(out, ", ")
}

// manifest fetches a manifest by digest (go-containerregistry checks the
// digest and bounds the read at 100 MiB; the caller checked the size the
// registry gave) and refuses more than maxManifestSize.
func (v *verification) manifest(ref name.Digest) ([]byte, types.MediaType, error) {
	desc, err := remote.Get(ref, v.opts...)
	if err != nil {
		return nil, "", err
	}
	if len(desc.Manifest) > maxManifestSize {
		return nil, "", unusableErr(fmt.Sprintf("its manifest is %d bytes, more than the %d read", len(desc.Manifest), maxManifestSize))
	}
	return desc.Manifest, desc.MediaType, nil
}

// blob fetches a layer the manifest describes: refused before fetching
// when its size is more than a payload can be, read no further than that
// size, and checked against the digest.
func (v *verification) blob(layer v1.Descriptor) ([]byte, error) {
	if layer.Size <= 0 || layer.Size > maxPayloadSize {
		return nil, unusableErr(fmt.Sprintf("a layer of %d bytes (the manifest says), more than the %d read", layer.Size, maxPayloadSize))
	}
	if layer.Digest.Algorithm != "sha256" {
		return nil, unusableErr(fmt.Sprintf("layer digest %q is not sha256", clip(layer.Digest.String())))
	}
	l, err := remote.Layer(v.repo.Digest(layer.Digest.String()), v.opts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, layer.Size+1))
	if err != nil {
		if isNotFound(err) {
			return nil, unusableErr("its layer " + layer.Digest.String() + " is missing from the registry")
		}
		// A short or corrupt body fails go-containerregistry's digest
		// check at EOF: the registry served something else.
		if !isTransport(err) {
			return nil, unusableErr(fmt.Sprintf("its layer %s: %s", layer.Digest, clip(err.Error())))
		}
		return nil, err
	}
	if int64(len(b)) != layer.Size {
		return nil, unusableErr(fmt.Sprintf("its layer %s is not the %d bytes the manifest says", layer.Digest, layer.Size))
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != layer.Digest.Hex {
		return nil, unusableErr(fmt.Sprintf("its layer %s does not match its digest", layer.Digest))
	}
	return b, nil
}

// checkManifestType accepts the image manifests cosign writes: OCI, or
// Docker's with COSIGN_DOCKER_MEDIA_TYPES. The manifest's own field says,
// or else the registry's Content-Type (the field is optional in OCI).
func checkManifestType(field, contentType types.MediaType) error {
	mt := field
	if mt == "" {
		mt = contentType
	}
	switch mt {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
		return nil
	}
	return fmt.Errorf("manifest media type %q, want an image manifest", clip(string(mt)))
}

// unusableError is a signature the registry holds but that cannot be
// read as one: a reason to refuse it, not a failure to ask.
type unusableError string

func (e unusableError) Error() string { return string(e) }

func unusableErr(s string) error { return unusableError(s) }

// unusable says whether err is about the signature rather than the
// registry, and the reason to record. A 404 (a manifest or layer gone)
// and a body that is not what was asked for are; a registry that cannot
// be reached, refuses the credentials or fails (5xx) is not.
func unusable(err error) (string, bool) {
	var u unusableError
	if errors.As(err, &u) {
		return string(u), true
	}
	if isNotFound(err) {
		return "missing from the registry (404)", true
	}
	var te *gcrtransport.Error
	if errors.As(err, &te) {
		return "", false
	}
	if !isTransport(err) {
		// Decoding or digest errors from go-containerregistry.
		return clip(err.Error()), true
	}
	return "", false
}

func isNotFound(err error) bool {
	var te *gcrtransport.Error
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// isTransport says whether err is the registry's answer or the network's
// failure (as opposed to what the bytes were).
func isTransport(err error) bool {
	var te *gcrtransport.Error
	if errors.As(err, &te) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) {
		return true // net.Error, url.Error
	}
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// clip bounds a string from the registry before it enters an error,
// and is printable.
func clip(s string) string { return clipN(s, 120) }

// clipN is clip to max runes.
func clipN(s string, max int) string {
	var b strings.Builder
	for i, r := range s {
		if i >= max {
			b.WriteString("…")
			break
		}
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}
