package report

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/files"
)

// maxProvenanceBundles bounds the bundles a directory search reads.
const maxProvenanceBundles = 10_000

// ArtifactQuery is what VerifyArtifact checks: an artifact file, and
// where its provenance is.
type ArtifactQuery struct {
	// Artifact is the file (an upload's zip, an output file).
	Artifact string
	// Provenance is a provenance bundle, or a directory whose
	// *.provenance.sigstore.json are searched for one that names the
	// artifact.
	Provenance string
	// Compliance, when set, is a CUE policy over the run predicate of the
	// job that made the artifact (its run attestation must lie next to
	// the provenance).
	Compliance     []byte
	ComplianceName string
}

// ArtifactReport is what VerifyArtifact found: every verified
// provenance that names the artifact (its job), and the bundles of a
// directory that did not verify.
type ArtifactReport struct {
	Artifact   string        `json:"artifact"`
	SHA256     string        `json:"sha256"`
	Jobs       []ArtifactJob `json:"jobs"`
	Unverified []string      `json:"unverified"`
}

// ArtifactJob is one job that made the artifact: its provenance bundle,
// its run attestation's bundle ("" when none lay next to it) and what
// they say.
type ArtifactJob struct {
	Bundle    string `json:"bundle"`
	RunBundle string `json:"runBundle"`
	*attest.VerifiedArtifact
}

// VerifyArtifact finds the provenance of q.Artifact and checks it with v
// (attest.VerifyArtifact): in q.Provenance, or in each provenance bundle
// of that directory, where every one that names the artifact must pass
// (another job that made the same bytes is checked too). The run
// attestation named like the provenance (same job id) is verified with
// it when it is there, and must be when q.Compliance is set. Every
// failure wraps attest.ErrNotVerified.
func VerifyArtifact(q ArtifactQuery, v signature.Verifier) (*ArtifactReport, error) {
	sum, err := fileSHA256(q.Artifact)
	if err != nil {
		return nil, fmt.Errorf("%w: artifact: %v", attest.ErrNotVerified, err)
	}
	rep := &ArtifactReport{Artifact: q.Artifact, SHA256: sum, Jobs: []ArtifactJob{}, Unverified: []string{}}
	fi, err := os.Stat(q.Provenance)
	if err != nil {
		return nil, fmt.Errorf("%w: provenance: %v", attest.ErrNotVerified, err)
	}
	if !fi.IsDir() {
		job, err := verifyJob(q.Provenance, sum, q, v)
		if err != nil {
			return nil, err
		}
		rep.Jobs = append(rep.Jobs, job)
		return rep, nil
	}
	bundles, err := provenanceBundles(q.Provenance)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", attest.ErrNotVerified, err)
	}
	for _, b := range bundles {
		job, err := verifyJob(b, sum, q, v)
		switch {
		case err == nil:
			rep.Jobs = append(rep.Jobs, job)
		case errors.Is(err, attest.ErrNotASubject):
			// another job's artifacts
		case errors.Is(err, errProvenance):
			rep.Unverified = append(rep.Unverified, err.Error())
		default:
			return nil, err // it names the artifact, and fails
		}
	}
	if len(rep.Jobs) == 0 {
		why := ""
		if n := len(rep.Unverified); n > 0 {
			why = fmt.Sprintf("; %d did not verify (%s)", n, rep.Unverified[0])
		}
		return nil, fmt.Errorf("%w: sha256 %s is a subject of none of the %d provenance bundles in %s%s", attest.ErrNotVerified, sum, len(bundles), q.Provenance, why)
	}
	return rep, nil
}

// errProvenance marks a bundle that did not verify as a provenance, as
// against one that did and names the artifact but fails a check.
var errProvenance = errors.New("provenance")

// verifyJob checks one provenance bundle against the artifact's digest,
// with the run attestation next to it when there is one.
func verifyJob(bundle, sum string, q ArtifactQuery, v signature.Verifier) (ArtifactJob, error) {
	job := ArtifactJob{Bundle: bundle}
	prov, err := files.ReadCapped(bundle, attest.MaxBundleSize)
	if err != nil {
		return job, fmt.Errorf("%w: %w %s: %v", attest.ErrNotVerified, errProvenance, bundle, err)
	}
	if _, err := attest.VerifyProvenance(prov, v); err != nil {
		return job, fmt.Errorf("%w %s: %w", errProvenance, bundle, err)
	}
	opts := attest.ArtifactOptions{SHA256: sum, Compliance: q.Compliance, ComplianceName: q.ComplianceName}
	runPath := strings.TrimSuffix(bundle, ProvenanceSuffix) + RunSuffix
	if runPath != bundle {
		switch run, err := files.ReadCapped(runPath, attest.MaxBundleSize); {
		case err == nil:
			opts.Run, job.RunBundle = run, runPath
		case !errors.Is(err, fs.ErrNotExist):
			return job, fmt.Errorf("%w: run attestation %s: %v", attest.ErrNotVerified, runPath, err)
		}
	}
	if job.VerifiedArtifact, err = attest.VerifyArtifact(prov, v, opts); err != nil {
		if opts.Run == nil && opts.Compliance != nil && !errors.Is(err, attest.ErrNotASubject) {
			return job, fmt.Errorf("provenance %s: %w (looked for it at %s)", bundle, err, runPath)
		}
		return job, fmt.Errorf("provenance %s: %w", bundle, err)
	}
	return job, nil
}

// provenanceBundles are the regular files named *.provenance.sigstore.json
// in dir, in name order.
func provenanceBundles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ProvenanceSuffix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no *%s in %s", ProvenanceSuffix, dir)
	}
	if len(out) > maxProvenanceBundles {
		return nil, fmt.Errorf("%d provenance bundles in %s, more than the %d a search reads: name the bundle", len(out), dir, maxProvenanceBundles)
	}
	slices.Sort(out)
	return out, nil
}

// fileSHA256 is the hex sha256 of the regular file at path.
func fileSHA256(path string) (string, error) {
	// Stat first: opening a FIFO would wait for a writer.
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
