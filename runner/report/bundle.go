package report

import (
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/files"
)

// VerifyFile reads the run attestation bundle at path (at most
// attest.MaxBundleSize) and verifies it with v (attest.Verify). Every
// failure, reading included, wraps attest.ErrNotVerified.
func VerifyFile(path string, v signature.Verifier, opts attest.VerifyOptions) (*attest.Verified, error) {
	b, err := files.ReadCapped(path, attest.MaxBundleSize)
	if err != nil {
		return nil, attest.NotVerifiedf("%w", err)
	}
	return attest.Verify(b, v, opts)
}

// ReadForReport reads the bundle at path for the HTML report: verified
// with the public key in keyFile when one is given, else read without a
// check; status says which, for the page to show.
func ReadForReport(path, keyFile string) (v *attest.Verified, status string, err error) {
	b, err := files.ReadCapped(path, attest.MaxBundleSize)
	if err != nil {
		return nil, "", err
	}
	if keyFile == "" {
		v, err = attest.Inspect(b)
		return v, "SIGNATURE NOT CHECKED (give --key)", err
	}
	ver, err := attest.LoadVerifierFile(keyFile)
	if err != nil {
		return nil, "", err
	}
	v, err = attest.Verify(b, ver, attest.VerifyOptions{})
	return v, "signature verified with " + keyFile, err
}
