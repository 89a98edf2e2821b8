package attest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"
)

// ErrNotASubject is wrapped (with ErrNotVerified) when a verified
// provenance does not name the artifact: another job's, or the artifact
// was changed.
var ErrNotASubject = errors.New("none of the provenance's subjects")

// VerifiedProvenance is a provenance bundle that passed every check.
type VerifiedProvenance struct {
	Statement  []byte        `json:"-"`
	Subjects   []SubjectInfo `json:"subjects"`
	Provenance Provenance    `json:"predicate"`
}

// ErrNotProvenance is matched (with ErrNotVerified) by a bundle signed
// with the key whose statement is of another predicate type (a run
// attestation): not a provenance at all, as against one that is and
// fails a check.
var ErrNotProvenance = errors.New("not a provenance")

// VerifyProvenance checks a provenance bundle as Verify checks a run
// attestation: the bundle and its signature by v first (signedPayload:
// its failures match ErrNotSigned), then the payload, decoded strictly:
// an in-toto Statement v1 of SLSA provenance v1 (another predicate type
// matches ErrNotProvenance) with airlock's build type, its artifact
// subjects, and the run attestation among its byproducts.
func VerifyProvenance(bundle []byte, v signature.Verifier) (*VerifiedProvenance, error) {
	payload, err := signedPayload(bundle, v)
	if err != nil {
		return nil, err
	}
	pt, err := predicateTypeOf(payload)
	if err != nil {
		return nil, fail("the signed payload is not JSON: %v", err)
	}
	if pt != ProvenanceType {
		if err := noDuplicateKeys(payload); err != nil {
			return nil, fail("the signed payload is not a valid statement: %v", err)
		}
		return nil, fail("predicate type %q, want %q: %w (a run attestation is verified without --artifact)", pt, ProvenanceType, ErrNotProvenance)
	}
	var st provenanceJSON
	if err := strictJSON(payload, &st); err != nil {
		return nil, fail("payload is not an in-toto statement with airlock's SLSA provenance: %v", err)
	}
	switch {
	case st.Type != StatementType:
		return nil, fail("statement type %q, want %q", st.Type, StatementType)
	case st.PredicateType != ProvenanceType:
		return nil, fail("predicate type %q, want %q", st.PredicateType, ProvenanceType)
	case st.Predicate.BuildDefinition.BuildType != JobBuildType:
		return nil, fail("build type %q, want %q (not an airlock job's provenance)", st.Predicate.BuildDefinition.BuildType, JobBuildType)
	}
	if err := checkArtifactSubjects(st.Subject); err != nil {
		return nil, fail("%v", err)
	}
	if bp := st.Predicate.RunDetails.Byproducts; len(bp) != 1 || !IsSHA256(bp[0].Digest["sha256"]) {
		return nil, fail("the provenance names no run attestation (one byproduct with a sha256)")
	}
	return &VerifiedProvenance{Statement: payload, Subjects: st.Subject, Provenance: st.Predicate}, nil
}

// Subject is the subject whose sha256 is sum, or an error that matches
// ErrNotASubject.
func (p *VerifiedProvenance) Subject(sum string) (SubjectInfo, error) {
	if s, ok := p.Holds(sum); ok {
		return s, nil
	}
	return SubjectInfo{}, fail("sha256 %s is %w (%d): the artifact is not one this job made, or it was changed since", sum, ErrNotASubject, len(p.Subjects))
}

// Holds returns the subject whose sha256 digest is sum.
func (p *VerifiedProvenance) Holds(sum string) (SubjectInfo, bool) {
	for _, s := range p.Subjects {
		if s.Digest["sha256"] == sum {
			return s, true
		}
	}
	return SubjectInfo{}, false
}

// Run is the run attestation the provenance names (its byproduct).
func (p *VerifiedProvenance) Run() RunByproduct { return p.Provenance.RunDetails.Byproducts[0] }

// ArtifactOptions say which artifact VerifyArtifact looks for, and
// what else it checks.
type ArtifactOptions struct {
	// SHA256 is the artifact's digest (hex).
	SHA256 string
	// Run is the job's run attestation bundle, when at hand (nil: not).
	// It is verified too, and must be the one the provenance names.
	Run []byte
	// Compliance, when set, is a CUE policy the run attestation's
	// predicate must satisfy (see Comply): it needs Run.
	Compliance     []byte
	ComplianceName string
	// What the consumer expects of the job, each checked when set
	// (Bind): a provenance of another repository, commit or run is
	// not verified, whoever signed it.
	Binding
}

// Binding ties a provenance to the run a consumer expects it from, so
// that a provenance signed for another repository, commit or run (an
// older one, replayed next to the artifact) is not verified.
type Binding struct {
	// Repository must be externalParameters.repository (a trailing
	// slash aside): under GitHub Actions the repository's URL.
	Repository string `json:"repository,omitempty"`
	// Commit must be externalParameters.ref, the commit the job built
	// (hex, any case).
	Commit string `json:"commit,omitempty"`
	// Invocation must be metadata.invocationId, or a prefix of it that
	// ends where a path component or the fragment does: the run's URL
	// (https://github.com/OWNER/REPO/actions/runs/ID) takes each of its
	// attempts' jobs, and not run ID0.
	Invocation string `json:"invocation,omitempty"`
}

// ErrNotBound is matched (with ErrNotVerified) by a provenance that is
// not of the repository, commit or run a Binding expects.
var ErrNotBound = errors.New("not of the expected run")

// Bind checks the provenance against b (ErrNotVerified and ErrNotBound
// when it does not match).
func (p *VerifiedProvenance) Bind(b Binding) error {
	fail := func(format string, args ...any) error {
		return notVerified{err: fmt.Errorf(format, args...), also: ErrNotBound}
	}
	ext := p.Provenance.BuildDefinition.ExternalParameters
	if want := strings.TrimSuffix(b.Repository, "/"); want != "" && strings.TrimSuffix(ext.Repository, "/") != want {
		return fail("the provenance is of repository %q, not %q (--repository): another repository's job made it", ext.Repository, b.Repository)
	}
	if b.Commit != "" && (ext.Ref == "" || !strings.EqualFold(ext.Ref, b.Commit)) {
		return fail("the provenance is of commit %q, not %q (--commit): a job of another commit made it", ext.Ref, b.Commit)
	}
	if id := p.Provenance.RunDetails.Metadata.InvocationID; b.Invocation != "" && !invocationWithin(id, b.Invocation) {
		return fail("the provenance's invocation is %q, not within %q (--run): another run, or another attempt, made it", id, b.Invocation)
	}
	return nil
}

// invocationWithin: id is prefix, or starts with it where a path
// component or the fragment of id begins.
func invocationWithin(id, prefix string) bool {
	if id == prefix {
		return true
	}
	if !strings.HasPrefix(id, prefix) {
		return false
	}
	return strings.HasSuffix(prefix, "/") || strings.HasSuffix(prefix, "#") || id[len(prefix)] == '/' || id[len(prefix)] == '#'
}

// VerifiedArtifact is an artifact a verified provenance names.
type VerifiedArtifact struct {
	// Subject is the artifact as the provenance names it.
	Subject    SubjectInfo         `json:"subject"`
	Provenance *VerifiedProvenance `json:"provenance"`
	// Run is the job's run attestation, verified, when it was given.
	Run *Verified `json:"run"`
}

// VerifyArtifact checks that the provenance bundle, signed by v, names
// an artifact of digest opts.SHA256 among its subjects (VerifyProvenance,
// then Artifact). Each failure matches ErrNotVerified.
func VerifyArtifact(bundle []byte, v signature.Verifier, opts ArtifactOptions) (*VerifiedArtifact, error) {
	if !IsSHA256(opts.SHA256) {
		return nil, fmt.Errorf("artifact digest %q: want a sha256 in lower-case hex", opts.SHA256)
	}
	prov, err := VerifyProvenance(bundle, v)
	if err != nil {
		return nil, err
	}
	return prov.Artifact(v, opts)
}

// Artifact checks a verified provenance for an artifact: opts.SHA256
// among its subjects, then opts.Binding; with opts.Run, that the run
// attestation verifies with v and is the provenance's byproduct (the
// sha256 of its statement); with opts.Compliance, that the run's
// predicate satisfies the policy. Each failure matches ErrNotVerified.
func (p *VerifiedProvenance) Artifact(v signature.Verifier, opts ArtifactOptions) (*VerifiedArtifact, error) {
	sub, err := p.Subject(opts.SHA256)
	if err != nil {
		return nil, err
	}
	if err := p.Bind(opts.Binding); err != nil {
		return nil, err
	}
	out := &VerifiedArtifact{Subject: sub, Provenance: p}
	if opts.Run == nil {
		if opts.Compliance != nil {
			return out, fail("a compliance policy is checked against the job's run attestation (%s), and it is not at hand", p.Run().Name)
		}
		return out, nil
	}
	if out.Run, err = Verify(opts.Run, v, VerifyOptions{}); err != nil {
		return out, fmt.Errorf("run attestation %s: %w", p.Run().Name, err)
	}
	sum := sha256.Sum256(out.Run.Statement)
	if got, want := hex.EncodeToString(sum[:]), p.Run().Digest["sha256"]; got != want {
		return out, fail("the run attestation's statement has sha256 %s, the provenance names %s: it is not this job's run attestation", got, want)
	}
	if opts.Compliance != nil {
		raw, err := json.Marshal(out.Run.Predicate)
		if err != nil {
			return out, fail("predicate: %v", err)
		}
		if err := Comply(opts.ComplianceName, opts.Compliance, raw); err != nil {
			return out, fail("compliance: %w", err)
		}
	}
	return out, nil
}
