package images

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"

	"github.com/airlock-ci/airlock/policies"
)

// IdentityRule accepts a keyless signature: one whose certificate a
// certificate authority of Root issued to Subject (or a subject that
// SubjectRegexp matches whole) with Issuer as its OIDC issuer. sigstore-go
// checks it, offline: the certificate chain, the identity, and the
// timestamps and log entries that Root requires (see verifierOptions).
type IdentityRule struct {
	Issuer        string
	Subject       string
	SubjectRegexp string
	// Root is the trusted root; RootPath names it in messages.
	Root     *root.TrustedRoot
	RootPath string
}

// LoadIdentity reads the trusted root that id names and checks id.
func LoadIdentity(id policies.SigstoreIdentity) (IdentityRule, error) {
	r := IdentityRule{Issuer: id.Issuer, Subject: id.Subject, SubjectRegexp: id.SubjectRegexp, RootPath: id.TrustedRoot}
	if _, err := r.certificateIdentity(); err != nil {
		return IdentityRule{}, err
	}
	raw, err := os.ReadFile(id.TrustedRoot)
	if err != nil {
		return IdentityRule{}, fmt.Errorf("sigstore identity %s: trusted root: %w", r, err)
	}
	r.Root, err = root.NewTrustedRootFromJSON(raw)
	if err != nil {
		return IdentityRule{}, fmt.Errorf("sigstore identity %s: trusted root %s is not a Sigstore trusted root (cosign trusted-root create writes one): %w", r, id.TrustedRoot, err)
	}
	if len(r.Root.FulcioCertificateAuthorities()) == 0 {
		return IdentityRule{}, fmt.Errorf("sigstore identity %s: trusted root %s names no certificate authority: no certificate can verify under it", r, id.TrustedRoot)
	}
	return r, nil
}

// String names the identity as a reader would: "subject (issuer)".
func (r IdentityRule) String() string {
	s := r.Subject
	if s == "" {
		s = "/" + r.SubjectRegexp + "/"
	}
	return fmt.Sprintf("%s (issuer %s)", s, r.Issuer)
}

// certificateIdentity is r as sigstore-go matches it. sigstore-go's
// regular expressions match anywhere in the subject; the policy's must
// match all of it, so it is anchored here.
func (r IdentityRule) certificateIdentity() (verify.CertificateIdentity, error) {
	if r.Issuer == "" {
		return verify.CertificateIdentity{}, errors.New("sigstore identity: no issuer")
	}
	if (r.Subject == "") == (r.SubjectRegexp == "") {
		return verify.CertificateIdentity{}, fmt.Errorf("sigstore identity (issuer %s): give subject or subjectRegexp, one of the two", r.Issuer)
	}
	re := ""
	if r.SubjectRegexp != "" {
		if _, err := regexp.Compile(r.SubjectRegexp); err != nil {
			return verify.CertificateIdentity{}, fmt.Errorf("sigstore identity (issuer %s): subjectRegexp: %w", r.Issuer, err)
		}
		re = "^(?:" + r.SubjectRegexp + ")$"
	}
	id, err := verify.NewShortCertificateIdentity(r.Issuer, "", r.Subject, re)
	if err != nil {
		return verify.CertificateIdentity{}, fmt.Errorf("sigstore identity %s: %w", r, err)
	}
	return id, nil
}

// verifierOptions are what r's trusted root makes required, as cosign
// verify does by default: a transparency log entry where it names a
// log, a signed timestamp where it names only timestamp authorities, an
// SCT where it names a CT log. A root that names only certificate
// authorities (a private one, with long-lived certificates) leaves the
// current time to check the certificate's validity by.
func verifierOptions(tr *root.TrustedRoot) []verify.VerifierOption {
	var opts []verify.VerifierOption
	switch {
	case len(tr.RekorLogs()) > 0:
		opts = append(opts, verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1))
	case len(tr.TimestampingAuthorities()) > 0:
		opts = append(opts, verify.WithSignedTimestamps(1))
	default:
		opts = append(opts, verify.WithCurrentTime())
	}
	if len(tr.CTLogs()) > 0 {
		opts = append(opts, verify.WithSignedCertificateTimestamps(1))
	}
	return opts
}

// acceptedIdentity is an IdentityRule ready to verify with.
type acceptedIdentity struct {
	rule     IdentityRule
	identity verify.CertificateIdentity
	verifier *verify.Verifier
}

func loadIdentities(rules []SignatureRule) ([]acceptedIdentity, error) {
	var out []acceptedIdentity
	for _, r := range rules {
		if r.Identity == nil {
			continue
		}
		id, err := r.Identity.certificateIdentity()
		if err != nil {
			return nil, fmt.Errorf("verify image signature: %w", err)
		}
		if r.Identity.Root == nil {
			return nil, fmt.Errorf("verify image signature: sigstore identity %s: no trusted root", r.Identity)
		}
		v, err := verify.NewVerifier(r.Identity.Root, verifierOptions(r.Identity.Root)...)
		if err != nil {
			return nil, fmt.Errorf("verify image signature: sigstore identity %s: %w", r.Identity, err)
		}
		out = append(out, acceptedIdentity{rule: *r.Identity, identity: id, verifier: v})
	}
	return out, nil
}

// certified says whether a bundle is signed with a certificate (keyless)
// rather than a key.
func certified(b *protobundle.Bundle) bool {
	vm := b.GetVerificationMaterial()
	return vm.GetX509CertificateChain() != nil || vm.GetCertificate() != nil
}

// verifyIdentity verifies a certified bundle under each accepted
// identity in turn, with artifact (the signed payload, for a message
// signature; the image's digest is checked by the caller for a DSSE
// statement). It returns the signer, as the record names it, or why it
// was refused.
func (v *verification) verifyIdentity(pb *protobundle.Bundle, artifact verify.ArtifactPolicyOption) (*Identity, string) {
	if len(v.identities) == 0 {
		return nil, "signed with a certificate (keyless), and the policy accepts keys only" + v.claimed(pb)
	}
	b, err := bundle.NewBundle(pb)
	if err != nil {
		return nil, "refused: not a valid Sigstore bundle: " + clipN(err.Error(), 240)
	}
	var reasons []string
	for _, id := range v.identities {
		res, err := id.verifier.Verify(b, verify.NewPolicy(artifact, verify.WithCertificateIdentity(id.identity)))
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("under %s: %s", id.rule, clipN(err.Error(), 240)+leafHint(b, id.rule, err)))
			continue
		}
		s := &Identity{Issuer: id.rule.Issuer}
		if c := res.Signature.Certificate; c != nil {
			s.Subject, s.Issuer = c.SubjectAlternativeName, c.Extensions.Issuer
		}
		return s, ""
	}
	return nil, "certificate" + v.claimed(pb) + " refused: " + strings.Join(reasons, "; ")
}

// leafHint says why a certificate's chain did not verify, which
// sigstore-go's error does not: expired, or issued by an authority that
// the trusted root does not name.
func leafHint(b *bundle.Bundle, rule IdentityRule, err error) string {
	if !strings.Contains(err.Error(), "leaf certificate") {
		return ""
	}
	vc, verr := b.VerificationContent()
	if verr != nil || vc.Certificate() == nil {
		return ""
	}
	cert := vc.Certificate()
	dated := len(rule.Root.RekorLogs()) > 0 || len(rule.Root.TimestampingAuthorities()) > 0
	switch now := time.Now(); {
	case !dated && now.After(cert.NotAfter):
		return fmt.Sprintf(" (its certificate expired at %s, and the trusted root names no log or timestamp authority that could date the signature before that)", cert.NotAfter.UTC().Format(time.RFC3339))
	case !dated && now.Before(cert.NotBefore):
		return fmt.Sprintf(" (its certificate is not valid before %s)", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf(" (its certificate was not issued by a certificate authority of the trusted root %s, or not when the signature was made)", rule.RootPath)
}

// claimed is what a bundle's leaf certificate says of its holder,
// before anything is verified: a hint for an error, never a decision.
func (v *verification) claimed(pb *protobundle.Bundle) string {
	b := bundle.Bundle{Bundle: pb}
	vc, err := b.VerificationContent()
	if err != nil || vc.Certificate() == nil {
		return ""
	}
	sum, err := certificate.SummarizeCertificate(vc.Certificate())
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (it names %s, issuer %s)", clip(sum.SubjectAlternativeName), clip(sum.Extensions.Issuer))
}

// The annotations of a legacy keyless signature's layer (cosign's
// static.CertificateAnnotationKey and ChainAnnotationKey).
const (
	certificateAnnotation = "dev.sigstore.cosign/certificate"
	chainAnnotation       = "dev.sigstore.cosign/chain"
	// logEntryAnnotation is the Rekor entry that cosign v1 and v2 keep
	// beside a signature (static.BundleAnnotationKey): its body, time,
	// index and log, and the log's signed entry timestamp over them.
	logEntryAnnotation = "dev.sigstore.cosign/bundle"
	// maxCertificates bounds the certificates read from the two.
	maxCertificates = 10
)

// legacyBundle is a legacy keyless signature as a Sigstore bundle
// (v0.1, which carries a certificate chain, a message signature and log
// entries with their promises), for sigstore-go to verify: the signature
// over the payload's SHA-256, the certificates of the layer's
// annotations, leaf first, and its Rekor entry where it has one.
func legacyBundle(payload, sig []byte, annotations map[string]string) (*protobundle.Bundle, error) {
	var certs []*protocommon.X509Certificate
	for _, key := range []string{certificateAnnotation, chainAnnotation} {
		rest := []byte(annotations[key])
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				return nil, fmt.Errorf("%s holds a PEM %q, want CERTIFICATE", key, clip(block.Type))
			}
			if len(certs) == maxCertificates {
				return nil, fmt.Errorf("more than %d certificates", maxCertificates)
			}
			certs = append(certs, &protocommon.X509Certificate{RawBytes: block.Bytes})
		}
		if len(bytes.TrimSpace(rest)) != 0 {
			return nil, fmt.Errorf("%s is not PEM certificates", key)
		}
		if key == certificateAnnotation && len(certs) != 1 {
			return nil, fmt.Errorf("%s holds %d certificates, want 1", key, len(certs))
		}
	}
	vm := &protobundle.VerificationMaterial{
		Content: &protobundle.VerificationMaterial_X509CertificateChain{
			X509CertificateChain: &protocommon.X509CertificateChain{Certificates: certs},
		},
	}
	if raw := annotations[logEntryAnnotation]; raw != "" {
		entry, err := legacyLogEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", logEntryAnnotation, err)
		}
		vm.TlogEntries = []*protorekor.TransparencyLogEntry{entry}
	}
	digest := sha256.Sum256(payload)
	return &protobundle.Bundle{
		MediaType:            "application/vnd.dev.sigstore.bundle+json;version=0.1",
		VerificationMaterial: vm,
		Content: &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: digest[:]},
			Signature:     sig,
		}},
	}, nil
}

// legacyLogEntry reads cosign's Rekor entry annotation into the entry a
// bundle carries. Nothing in it is trusted here: sigstore-go checks the
// promise with the log's key from the trusted root, and that the body
// holds this signature and certificate.
func legacyLogEntry(raw string) (*protorekor.TransparencyLogEntry, error) {
	if len(raw) > maxPayloadSize {
		return nil, fmt.Errorf("%d bytes, more than %d", len(raw), maxPayloadSize)
	}
	var rb struct {
		SignedEntryTimestamp []byte `json:"SignedEntryTimestamp"`
		Payload              struct {
			Body           []byte `json:"body"`
			IntegratedTime int64  `json:"integratedTime"`
			LogIndex       int64  `json:"logIndex"`
			LogID          string `json:"logID"`
		} `json:"Payload"`
	}
	if err := json.Unmarshal([]byte(raw), &rb); err != nil {
		return nil, fmt.Errorf("not cosign's Rekor bundle: %s", clip(err.Error()))
	}
	logID, err := hex.DecodeString(rb.Payload.LogID)
	if err != nil || len(logID) != sha256.Size {
		return nil, fmt.Errorf("log ID %q is not a SHA-256 in hex", clip(rb.Payload.LogID))
	}
	var kind struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(rb.Payload.Body, &kind); err != nil || kind.Kind == "" || kind.APIVersion == "" {
		return nil, errors.New("its body is not a Rekor entry (no kind and apiVersion)")
	}
	if len(rb.SignedEntryTimestamp) == 0 {
		return nil, errors.New("no signed entry timestamp")
	}
	return &protorekor.TransparencyLogEntry{
		LogIndex:          rb.Payload.LogIndex,
		LogId:             &protocommon.LogId{KeyId: logID},
		KindVersion:       &protorekor.KindVersion{Kind: kind.Kind, Version: kind.APIVersion},
		IntegratedTime:    rb.Payload.IntegratedTime,
		InclusionPromise:  &protorekor.InclusionPromise{SignedEntryTimestamp: rb.SignedEntryTimestamp},
		CanonicalizedBody: rb.Payload.Body,
	}, nil
}
