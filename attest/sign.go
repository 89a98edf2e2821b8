package attest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/kms"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/airlock-ci/airlock/internal/files"
)

// Media and payload types.
const (
	PayloadType     = "application/vnd.in-toto+json"
	BundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
)

// maxKeyFile bounds a key file read.
const maxKeyFile = 64 << 10

// PasswordFunc returns the password of an encrypted key (nil: none).
type PasswordFunc func() ([]byte, error)

// PasswordFromEnv reads the password from an environment variable, or
// from a file when the variable names none and file is set: never from a
// flag, where it would show in the process list.
func PasswordFromEnv(env, file string) PasswordFunc {
	return func() ([]byte, error) {
		if v, ok := os.LookupEnv(env); ok {
			if v == "" {
				return nil, fmt.Errorf("%s is set but empty", env)
			}
			return []byte(v), nil
		}
		if file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("read the key password: %w", err)
			}
			return bytes.TrimRight(b, "\r\n"), nil
		}
		return nil, fmt.Errorf("the key is encrypted: set %s or give a password file", env)
	}
}

// NewKeyPassword is the password a new key is encrypted with: from the
// environment variable env when it is set, else from file when given;
// neither: none, and the key is written unencrypted.
func NewKeyPassword(env, file string) ([]byte, error) {
	if _, set := os.LookupEnv(env); !set && file == "" {
		return nil, nil
	}
	p, err := PasswordFromEnv(env, file)()
	if err != nil {
		return nil, fmt.Errorf("%w (for an unencrypted key, unset %s and give no password file)", err, env)
	}
	return p, nil
}

// LoadSigner loads a signer from a key file (PEM: ECDSA P-256 or Ed25519,
// plain or "ENCRYPTED SIGSTORE PRIVATE KEY") or a KMS URI (any provider
// compiled in: see kms.SupportedProviders).
func LoadSigner(ctx context.Context, ref string, password PasswordFunc) (signature.Signer, error) {
	if strings.Contains(ref, "://") {
		// Only providers compiled in: sigstore would otherwise run a
		// "sigstore-kms-<scheme>" plugin from PATH.
		if !slices.ContainsFunc(kms.SupportedProviders(), func(p string) bool { return strings.HasPrefix(ref, p) }) {
			return nil, fmt.Errorf("signing key %s: no KMS provider for it in this build (compiled in: %v); use a key file", ref, kms.SupportedProviders())
		}
		sv, err := kms.Get(ctx, ref, crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("signing key %s: %w (providers compiled in: %v)", ref, err, kms.SupportedProviders())
		}
		return sv, nil
	}
	b, err := files.ReadCapped(ref, maxKeyFile)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	pf := func(bool) ([]byte, error) {
		if password == nil {
			return nil, fmt.Errorf("the key is encrypted and no password was given")
		}
		return password()
	}
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(b, pf)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", ref, err)
	}
	switch k := priv.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("signing key %s: ECDSA keys must be P-256", ref)
		}
		return signature.LoadECDSASignerVerifier(k, crypto.SHA256)
	case ed25519.PrivateKey:
		return signature.LoadED25519SignerVerifier(k)
	}
	return nil, fmt.Errorf("signing key %s: %T keys are not supported; use ECDSA P-256 or Ed25519", ref, priv)
}

// LoadVerifierFile loads the public key (PEM) in the file at path.
func LoadVerifierFile(path string) (signature.Verifier, error) {
	pub, err := files.ReadCapped(path, 64<<10)
	if err != nil {
		return nil, err
	}
	return LoadVerifier(pub)
}

// LoadVerifier loads a public key (PEM) for verification.
func LoadVerifier(pemBytes []byte) (signature.Verifier, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("public key: ECDSA keys must be P-256")
		}
		return signature.LoadECDSAVerifier(k, crypto.SHA256)
	case ed25519.PublicKey:
		return signature.LoadED25519Verifier(k)
	}
	return nil, fmt.Errorf("public key: %T keys are not supported", pub)
}

// Signed is the output of Sign.
type Signed struct {
	// Bundle is the Sigstore bundle (v0.3, public-key material).
	Bundle []byte
	// Envelope is the raw DSSE envelope.
	Envelope []byte
}

// Sign wraps statement in a DSSE envelope signed by s (the signature is
// over the DSSE pre-authentication encoding of exactly these bytes) and
// returns it as a Sigstore bundle and as a raw envelope.
func Sign(s signature.Signer, statement []byte) (Signed, error) {
	sig, err := s.SignMessage(bytes.NewReader(dsse.PAE(PayloadType, statement)))
	if err != nil {
		return Signed{}, fmt.Errorf("sign: %w", err)
	}
	env, err := json.Marshal(dsse.Envelope{
		PayloadType: PayloadType,
		Payload:     base64.StdEncoding.EncodeToString(statement),
		Signatures:  []dsse.Signature{{Sig: base64.StdEncoding.EncodeToString(sig)}},
	})
	if err != nil {
		return Signed{}, err
	}
	pub, err := s.PublicKey()
	if err != nil {
		return Signed{}, err
	}
	b := &protobundle.Bundle{
		MediaType: BundleMediaType,
		VerificationMaterial: &protobundle.VerificationMaterial{
			Content: &protobundle.VerificationMaterial_PublicKey{PublicKey: &protocommon.PublicKeyIdentifier{Hint: KeyHint(pub)}},
		},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: statement, PayloadType: PayloadType, Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	}
	out, err := protojson.Marshal(b)
	if err != nil {
		return Signed{}, fmt.Errorf("encode bundle: %w", err)
	}
	return Signed{Bundle: out, Envelope: env}, nil
}

// KeyHint is the base64 sha256 of the public key's DER, a hint for
// verifiers holding several keys.
func KeyHint(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// GenerateKeyPair makes an ECDSA P-256 key pair as PEM; with a password
// the private key is an ENCRYPTED SIGSTORE PRIVATE KEY.
func GenerateKeyPair(password []byte) (privPEM, pubPEM []byte, err error) {
	pf := func(bool) ([]byte, error) { return password, nil }
	if len(password) == 0 {
		pf = nil
	}
	if pf == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		if privPEM, err = cryptoutils.MarshalPrivateKeyToPEM(key); err != nil {
			return nil, nil, err
		}
		pubPEM, err = cryptoutils.MarshalPublicKeyToPEM(key.Public())
		return privPEM, pubPEM, err
	}
	return cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), pf)
}

// WriteKeyPair generates a key pair (see GenerateKeyPair) and writes it as
// prefix.key (0600) and prefix.pub (0644). Neither file may exist yet: an
// existing key is never overwritten (the error wraps fs.ErrExist), and
// nothing is left behind when the second file cannot be written.
func WriteKeyPair(prefix string, password []byte) error {
	priv, pub, err := GenerateKeyPair(password)
	if err != nil {
		return err
	}
	if err := createNew(prefix+".key", priv, 0o600); err != nil {
		return err
	}
	if err := createNew(prefix+".pub", pub, 0o644); err != nil {
		os.Remove(prefix + ".key")
		return err
	}
	return nil
}

// createNew writes a key file that must not exist yet.
func createNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("%w (not overwriting an existing key)", err)
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}
