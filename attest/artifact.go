package attest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

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

// VerifyProvenance checks a provenance bundle as Verify checks a run
// attestation: the bundle and its signature by v first (signedPayload),
// then the payload, decoded strictly: an in-toto Statement v1 of SLSA
// provenance v1 with airlock's build type, its artifact subjects, and
// the run attestation among its byproducts.
func VerifyProvenance(bundle []byte, v signature.Verifier) (*VerifiedProvenance, error) {
	payload, err := signedPayload(bundle, v)
	if err != nil {
		return nil, err
	}
	if pt := predicateTypeOf(payload); pt != ProvenanceType {
		return nil, fail("predicate type %q, want %q (a run attestation is verified without an artifact)", pt, ProvenanceType)
	}
	var st provenanceJSON
	if err := strictJSON(payload, &st); err != nil {
		return nil, fail("payload is not an in-toto statement with airlock's SLSA provenance: %v", err)
	}
	switch {
	case st.Type != StatementType:
		return nil, fail("statement type %q, want %q", st.Type, StatementType)
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
// an artifact of digest opts.SHA256 among its subjects; with opts.Run,
// that the run attestation verifies with v and is the provenance's
// byproduct (the sha256 of its statement); with opts.Compliance, that
// the run's predicate satisfies the policy. Each failure wraps
// ErrNotVerified.
func VerifyArtifact(bundle []byte, v signature.Verifier, opts ArtifactOptions) (*VerifiedArtifact, error) {
	if !IsSHA256(opts.SHA256) {
		return nil, fmt.Errorf("artifact digest %q: want a sha256 in lower-case hex", opts.SHA256)
	}
	prov, err := VerifyProvenance(bundle, v)
	if err != nil {
		return nil, err
	}
	sub, ok := prov.Holds(opts.SHA256)
	if !ok {
		return nil, fmt.Errorf("%w: sha256 %s is %w (%d): the artifact is not one this job made, or it was changed", ErrNotVerified, opts.SHA256, ErrNotASubject, len(prov.Subjects))
	}
	out := &VerifiedArtifact{Subject: sub, Provenance: prov}
	if opts.Run == nil {
		if opts.Compliance != nil {
			return out, fail("a compliance policy is checked against the job's run attestation (%s), and it is not at hand", prov.Run().Name)
		}
		return out, nil
	}
	if out.Run, err = Verify(opts.Run, v, VerifyOptions{}); err != nil {
		return out, fmt.Errorf("run attestation %s: %w", prov.Run().Name, err)
	}
	sum := sha256.Sum256(out.Run.Statement)
	if got, want := hex.EncodeToString(sum[:]), prov.Run().Digest["sha256"]; got != want {
		return out, fail("the run attestation's statement has sha256 %s, the provenance names %s: it is not this job's run attestation", got, want)
	}
	if opts.Compliance != nil {
		raw, err := json.Marshal(out.Run.Predicate)
		if err != nil {
			return out, fail("predicate: %v", err)
		}
		if err := Comply(opts.ComplianceName, opts.Compliance, raw); err != nil {
			return out, fail("compliance: %v", err)
		}
	}
	return out, nil
}
