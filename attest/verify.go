package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-ci/airlock/internal/input"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	"github.com/sigstore/sigstore/pkg/signature"
	"google.golang.org/protobuf/encoding/protojson"
)

// Bounds on what a verifier reads before the signature checks out.
const (
	MaxBundleSize = 16 << 20
	maxJSONDepth  = 64
)

// ErrNotVerified is matched (errors.Is) by every verification failure;
// its text is not repeated in theirs, which a caller prints after its
// own "NOT VERIFIED:".
var ErrNotVerified = errors.New("not verified")

// ErrNotSigned is matched, besides ErrNotVerified, by a failure before
// the payload is read: not a Sigstore bundle of airlock's shape, or its
// signature does not verify with the key. Nothing in such a bundle can
// be attributed to the key's holder.
var ErrNotSigned = errors.New("not signed with the key")

// notVerified is a verification failure: it matches ErrNotVerified, and
// whatever its own text wraps (%w).
// also: another sentinel it matches (ErrNotSigned, ErrNotBound), or nil.
type notVerified struct {
	err  error
	also error
}

func (e notVerified) Error() string { return e.err.Error() }
func (e notVerified) Unwrap() error { return e.err }
func (e notVerified) Is(target error) bool {
	return target == ErrNotVerified || e.also != nil && target == e.also
}

// VerifyOptions says what a bundle must match besides the signature.
type VerifyOptions struct {
	// Commit, when set, must be the subject's gitCommit digest.
	Commit string
	// Compliance, when set, is a CUE policy the predicate must satisfy
	// (see Comply).
	Compliance []byte
	// ComplianceName names it in errors.
	ComplianceName string
}

// Verified is a bundle that passed every check.
type Verified struct {
	Statement []byte      `json:"-"`
	Subject   SubjectInfo `json:"subject"`
	// Artifacts are the further subjects: files the policy names.
	Artifacts []SubjectInfo `json:"artifacts"`
	Predicate Predicate     `json:"predicate"`
}

// SubjectInfo is the statement's subject.
type SubjectInfo struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// fail is a verification failure (ErrNotVerified) saying why; its
// format may wrap errors with %w.
func fail(format string, args ...any) error {
	return notVerified{err: fmt.Errorf(format, args...)}
}

// NotVerifiedf is a verification failure of a caller of this package
// (it matches ErrNotVerified; format may wrap errors with %w), its text
// not prefixed with "not verified".
func NotVerifiedf(format string, args ...any) error { return fail(format, args...) }

// unsigned is a failure of signedPayload: ErrNotVerified and ErrNotSigned.
func unsigned(format string, args ...any) error {
	return notVerified{err: fmt.Errorf(format, args...), also: ErrNotSigned}
}

// Verify checks a Sigstore bundle: size and shape first, then the DSSE
// signature with v over exactly the stored payload, and only then the
// payload: an in-toto Statement v1 with airlock's predicate type, the
// subject (against opts.Commit), the predicate decoded strictly, and the
// compliance policy. Each failure is one clear reason.
func Verify(bundle []byte, v signature.Verifier, opts VerifyOptions) (*Verified, error) {
	payload, err := signedPayload(bundle, v)
	if err != nil {
		return nil, err
	}
	if pt, _ := predicateTypeOf(payload); pt == ProvenanceType {
		return nil, fail("a provenance statement (%s), not a run attestation: check an artifact against it (verify --artifact)", ProvenanceType)
	}
	var st statementJSON
	if err := strictJSON(payload, &st); err != nil {
		return nil, fail("payload is not an in-toto statement with airlock's predicate: %v", err)
	}
	if st.Type != StatementType {
		return nil, fail("statement type %q, want %q", st.Type, StatementType)
	}
	if st.PredicateType != PredicateType {
		return nil, fail("predicate type %q, want %q", st.PredicateType, PredicateType)
	}
	if len(st.Subject) == 0 || len(st.Subject) > MaxArtifacts+1 {
		return nil, fail("the statement has %d subjects, want the commit and at most %d artifacts", len(st.Subject), MaxArtifacts)
	}
	for _, s := range st.Subject {
		if s.Name == "" || len(s.Digest) == 0 {
			return nil, fail("a subject without a name or a digest")
		}
	}
	sub, p := st.Subject[0], st.Predicate
	if opts.Commit != "" && sub.Digest["gitCommit"] != opts.Commit {
		return nil, fail("the subject is commit %q, not %q", sub.Digest["gitCommit"], opts.Commit)
	}
	// The subject's digests and the predicate agree with each other.
	if c := sub.Digest["gitCommit"]; c != "" {
		want := sha256.Sum256(SubjectFile(c))
		if sub.Digest["sha256"] != hex.EncodeToString(want[:]) {
			return nil, fail("the subject's sha256 is not that of its commit's subject file")
		}
		if p.Job.HeadSHA != c {
			return nil, fail("the subject is commit %q but the predicate's job.headSha is %q", c, p.Job.HeadSHA)
		}
	}
	out := &Verified{Statement: payload, Subject: sub, Artifacts: st.Subject[1:], Predicate: p}
	if opts.Compliance != nil {
		raw, err := json.Marshal(p)
		if err != nil {
			return out, fail("predicate: %v", err)
		}
		if err := Comply(opts.ComplianceName, opts.Compliance, raw); err != nil {
			return out, fail("compliance: %v", err)
		}
	}
	return out, nil
}

// predicateTypeOf peeks at a signed statement's predicate type, for a
// failure that names what it is instead of its first unknown field. It
// is a hint only: the caller checks the strictly decoded type too.
func predicateTypeOf(payload []byte) (string, error) {
	var head struct {
		PredicateType string `json:"predicateType"`
	}
	if err := json.Unmarshal(payload, &head); err != nil {
		return "", err
	}
	return head.PredicateType, nil
}

// signedPayload checks a signed statement up to its signature: its
// size and depth; its form, a Sigstore bundle of airlock's media type
// (.sigstore.json) or the bare DSSE envelope airlock writes beside it
// (.dsse.json), which carries the same signature; one envelope of the
// in-toto payload type with exactly one signature, and that signature
// by v over exactly the stored payload. Only then is the payload
// returned, for its caller to parse. Every airlock statement is checked
// here.
func signedPayload(bundle []byte, v signature.Verifier) ([]byte, error) {
	if len(bundle) > MaxBundleSize {
		return nil, unsigned("the bundle is %d bytes, more than the %d a verifier reads", len(bundle), MaxBundleSize)
	}
	if err := checkDepth(bundle, maxJSONDepth); err != nil {
		return nil, unsigned("%v", err)
	}
	env, err := readEnvelope(bundle)
	if err != nil {
		return nil, unsigned("%v", err)
	}
	if env.payloadType != PayloadType {
		return nil, unsigned("payload type %q, want %q", env.payloadType, PayloadType)
	}
	if n := len(env.sigs); n != 1 {
		return nil, unsigned("the envelope has %d signatures; airlock bundles have exactly one", n)
	}
	pae := dsse.PAE(env.payloadType, env.payload)
	if err := v.VerifySignature(bytes.NewReader(env.sigs[0]), bytes.NewReader(pae)); err != nil {
		return nil, unsigned("signature: %v: the bundle was not signed with this key, or it was changed since (check that --key is the public key of the runner's attest.key)", err)
	}
	return env.payload, nil
}

// envelope is a DSSE envelope's content, from a Sigstore bundle or bare.
type envelope struct {
	payloadType string
	payload     []byte
	sigs        [][]byte
}

// readEnvelope decodes a Sigstore bundle of airlock's media type, or a
// bare DSSE envelope, into its envelope; it does not check the
// signature. What airlock writes besides them (an unsigned statement)
// and anything else are refused with what the file is and which to give.
func readEnvelope(b []byte) (envelope, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return envelope{}, fmt.Errorf("not a Sigstore bundle (.sigstore.json) nor a DSSE envelope (.dsse.json): %v", err)
	}
	_, isBundle := keys["mediaType"]
	_, isEnvelope := keys["payloadType"]
	_, isStatement := keys["_type"]
	switch {
	case isStatement && !isBundle && !isEnvelope:
		return envelope{}, errors.New("an in-toto statement without a signature (airlock writes its .UNSIGNED.intoto.json when the job had no signing key): there is nothing to verify; `airlock report` shows it, marked unverified")
	case isEnvelope && !isBundle:
		return readDSSE(b)
	}
	var pb protobundle.Bundle
	if err := (protojson.UnmarshalOptions{}).Unmarshal(b, &pb); err != nil {
		return envelope{}, fmt.Errorf("not a Sigstore bundle (.sigstore.json) nor a DSSE envelope (.dsse.json): %v", err)
	}
	if pb.GetMediaType() != BundleMediaType {
		return envelope{}, fmt.Errorf("bundle media type %q, want %q", pb.GetMediaType(), BundleMediaType)
	}
	env := pb.GetDsseEnvelope()
	if env == nil {
		return envelope{}, errors.New("the bundle holds no DSSE envelope")
	}
	out := envelope{payloadType: env.GetPayloadType(), payload: env.GetPayload()}
	for _, s := range env.GetSignatures() {
		out.sigs = append(out.sigs, s.GetSig())
	}
	return out, nil
}

// readDSSE decodes a bare DSSE envelope strictly: its fields and nothing
// else, payload and signatures in standard base64 as the DSSE
// specification's JSON form has them (URL-safe base64 is accepted too,
// as go-securesystemslib's verifier accepts it).
func readDSSE(b []byte) (envelope, error) {
	var raw dsse.Envelope
	if err := strictJSON(b, &raw); err != nil {
		return envelope{}, fmt.Errorf("not a DSSE envelope: %v", err)
	}
	payload, err := raw.DecodeB64Payload()
	if err != nil {
		return envelope{}, fmt.Errorf("DSSE envelope: payload: %v", err)
	}
	out := envelope{payloadType: raw.PayloadType, payload: payload}
	for i, s := range raw.Signatures {
		sig, err := decodeB64(s.Sig)
		if err != nil {
			return envelope{}, fmt.Errorf("DSSE envelope: signature %d: %v", i+1, err)
		}
		out.sigs = append(out.sigs, sig)
	}
	return out, nil
}

// decodeB64 decodes standard base64, or URL-safe base64, padded or not.
func decodeB64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// checkDepth refuses JSON nested deeper than max, before any decoder
// builds it: one pass over the bytes, skipping strings.
func checkDepth(b []byte, max int) error {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return fmt.Errorf("JSON nested deeper than %d levels", max)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

// Inspect decodes a bundle's (or a bare DSSE envelope's) statement
// WITHOUT checking its signature, for rendering a report the caller
// labels as unverified.
func Inspect(bundle []byte) (*Verified, error) {
	if len(bundle) > MaxBundleSize {
		return nil, fmt.Errorf("the bundle is %d bytes, more than %d", len(bundle), MaxBundleSize)
	}
	if err := checkDepth(bundle, maxJSONDepth); err != nil {
		return nil, err
	}
	env, err := readEnvelope(bundle)
	if err != nil {
		return nil, err
	}
	if env.payloadType != PayloadType {
		return nil, fmt.Errorf("payload type %q, want %q", env.payloadType, PayloadType)
	}
	return inspectStatement(env.payload)
}

// InspectStatement decodes an unsigned in-toto statement (what airlock
// writes when it has no signing key), for a caller that labels what it
// read as unverified.
func InspectStatement(statement []byte) (*Verified, error) {
	if len(statement) > MaxBundleSize {
		return nil, fmt.Errorf("the statement is %d bytes, more than %d", len(statement), MaxBundleSize)
	}
	if err := checkDepth(statement, maxJSONDepth); err != nil {
		return nil, err
	}
	return inspectStatement(statement)
}

func inspectStatement(payload []byte) (*Verified, error) {
	var st statementJSON
	if err := json.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("payload is not an in-toto statement: %v", err)
	}
	if st.PredicateType != PredicateType {
		return nil, fmt.Errorf("predicate type %q, want %q", st.PredicateType, PredicateType)
	}
	out := &Verified{Predicate: st.Predicate, Statement: payload}
	if len(st.Subject) > 0 {
		out.Subject = st.Subject[0]
	}
	return out, nil
}

// strictJSON decodes one JSON value, refusing unknown fields, keys that
// repeat in an object (Go matches keys without regard to case, so
// "predicateType" and "PREDICATETYPE" would be one field read twice) and
// trailing data.
func strictJSON(b []byte, v any) error {
	if err := noDuplicateKeys(b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// noDuplicateKeys reads the JSON tokens (jsontext: one allocation-free
// pass, which also refuses invalid UTF-8 and exact duplicate names) and
// refuses an object with the same key twice compared without case, as
// encoding/json matches keys to fields.
func noDuplicateKeys(b []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b))
	type frame struct {
		object bool
		keys   map[string]bool
		name   bool // the next token is a name
	}
	var stack []frame
	for {
		t, err := dec.ReadToken()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var se *jsontext.SyntacticError
			if errors.As(err, &se) && errors.Is(se.Err, jsontext.ErrDuplicateName) {
				return fmt.Errorf("the key %s appears twice in an object", se.JSONPointer)
			}
			return err
		}
		switch t.Kind() {
		case '"':
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].name {
				k := strings.ToLower(t.String())
				if stack[n-1].keys[k] {
					return fmt.Errorf("the key %q appears twice in an object", t.String())
				}
				stack[n-1].keys[k], stack[n-1].name = true, false
				continue
			}
		case '{':
			stack = append(stack, frame{object: true, keys: map[string]bool{}, name: true})
			continue
		case '[':
			stack = append(stack, frame{})
			continue
		case '}', ']':
			stack = stack[:len(stack)-1]
		}
		// A value ended: in an object, a name comes next.
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].name = true
		}
	}
}

// ReadEvidence reads one run's attestation for a tool that learns from
// it (airlock policy suggest): a bundle verified with v; or, with
// allowUnsigned, a bundle no key checked (v nil) or an unsigned
// statement, reported as unverified. A bundle whose signature does not
// verify is refused whatever allowUnsigned says.
func ReadEvidence(b []byte, v signature.Verifier, allowUnsigned bool) (out *Verified, unverified bool, err error) {
	if inspected, berr := Inspect(b); berr == nil {
		if v != nil {
			if out, err = Verify(b, v, VerifyOptions{}); err != nil {
				return nil, false, fmt.Errorf("NOT VERIFIED: %w", err)
			}
			return out, false, nil
		}
		if !allowUnsigned {
			return nil, false, input.Errorf(input.VerifyKey, "not given: a bundle is not verified without it")
		}
		return inspected, true, nil
	}
	st, err := InspectStatement(b)
	if err != nil {
		return nil, false, fmt.Errorf("neither an airlock bundle nor an airlock statement: %w", err)
	}
	if !allowUnsigned {
		return nil, false, input.Errorf(input.AllowUnsigned, "not given: an unsigned statement is refused without it")
	}
	return st, true, nil
}
