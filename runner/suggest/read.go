package suggest

import (
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/files"
)

// EvidenceError is a file given as evidence that is not usable: not an
// airlock bundle or statement, not verified, or unsigned where unsigned
// evidence was not allowed.
type EvidenceError struct {
	Path string
	Err  error
}

func (e EvidenceError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e EvidenceError) Unwrap() error { return e.Err }

// ReadRuns reads the attested runs in paths: each bundle verified with
// v, or with allowUnsigned read unverified (Run.Unverified). A file that
// cannot be read is an error as it is; one that is not usable evidence an
// EvidenceError.
func ReadRuns(paths []string, v signature.Verifier, allowUnsigned bool) ([]Run, error) {
	var runs []Run
	for _, path := range paths {
		b, err := files.ReadCapped(path, attest.MaxBundleSize)
		if err != nil {
			return nil, err
		}
		ver, unverified, err := attest.ReadEvidence(b, v, allowUnsigned)
		if err != nil {
			return nil, EvidenceError{Path: path, Err: err}
		}
		runs = append(runs, Run{Name: path, Predicate: ver.Predicate, Unverified: unverified})
	}
	return runs, nil
}
