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
	"syscall"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
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
	// Binding is what the job must be: its repository, commit and run
	// (attest.Binding), each checked when set.
	attest.Binding
}

// ArtifactReport is what VerifyArtifact found: every verified
// provenance that names the artifact (its job), and the bundles of a
// directory that were left out because no key's holder vouches for them
// (their signature does not verify with the key), they are not
// provenances (a run attestation), or they are of another repository,
// commit or run than the query's Binding.
type ArtifactReport struct {
	Artifact   string        `json:"artifact"`
	SHA256     string        `json:"sha256"`
	Jobs       []ArtifactJob `json:"jobs"`
	Unverified []string      `json:"unverified"`
}

// ArtifactJob is one job that made the artifact: its provenance bundle,
// its run attestation's bundle ("" when none lay where it was looked
// for, RunExpected) and what they say.
type ArtifactJob struct {
	Bundle      string `json:"bundle"`
	RunBundle   string `json:"runBundle"`
	RunExpected string `json:"runExpected"`
	*attest.VerifiedArtifact
}

// VerifyArtifact finds the provenance of q.Artifact and checks it with v
// (attest.VerifyProvenance, then its Artifact): in q.Provenance, or in
// each provenance bundle of that directory, where every one that names
// the artifact must pass (another job that made the same bytes is
// checked too), and so must every one signed with the key (fail closed:
// a signed bundle whose content is not valid is not passed over); one
// that names it but is of another repository, commit or run than
// q.Binding is left out (another run's: not what the consumer asks
// about), and listed. The
// run attestation next to the provenance (runAttestationPath) is
// verified with it when it is there, and must be when q.Compliance is
// set. Every failure matches attest.ErrNotVerified.
func VerifyArtifact(q ArtifactQuery, v signature.Verifier) (*ArtifactReport, error) {
	sum, err := fileSHA256(q.Artifact)
	if err != nil {
		return nil, attest.NotVerifiedf("artifact: %w", err)
	}
	rep := &ArtifactReport{Artifact: q.Artifact, SHA256: sum, Jobs: []ArtifactJob{}, Unverified: []string{}}
	fi, err := os.Stat(q.Provenance)
	if err != nil {
		return nil, attest.NotVerifiedf("provenance: %w", err)
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
		return nil, attest.NotVerifiedf("%w", err)
	}
	for _, b := range bundles {
		job, err := verifyJob(b, sum, q, v)
		switch {
		case err == nil:
			rep.Jobs = append(rep.Jobs, job)
		case errors.Is(err, attest.ErrNotASubject):
			// another job's artifacts
		case errors.Is(err, attest.ErrNotSigned), errors.Is(err, attest.ErrNotProvenance), errors.Is(err, attest.ErrNotBound):
			rep.Unverified = append(rep.Unverified, err.Error())
		default:
			return nil, err // signed with the key, and fails
		}
	}
	if len(rep.Jobs) == 0 {
		why := ""
		if n := len(rep.Unverified); n > 0 {
			why = fmt.Sprintf("; %d were left out: not signed with the key, not provenances, or of another repository, commit or run than --repository, --commit and --run (%s): check --key", n, rep.Unverified[0])
		}
		return nil, attest.NotVerifiedf("sha256 %s is a subject of none of the %d provenance bundles in %s that were checked%s; fetch the provenance bundles of the run that uploaded %s", sum, len(bundles), q.Provenance, why, q.Artifact)
	}
	return rep, nil
}

// verifyJob checks one provenance bundle against the artifact's digest:
// its signature and content, then whether it names the artifact, and
// only then the run attestation next to it.
func verifyJob(bundle, sum string, q ArtifactQuery, v signature.Verifier) (ArtifactJob, error) {
	job := ArtifactJob{Bundle: bundle}
	b, err := readRegular(bundle, attest.MaxBundleSize, false)
	if err != nil {
		return job, attest.NotVerifiedf("provenance %s: %w", bundle, err)
	}
	prov, err := attest.VerifyProvenance(b, v)
	if err != nil {
		return job, fmt.Errorf("provenance %s: %w", bundle, err)
	}
	if _, err := prov.Subject(sum); err != nil {
		return job, fmt.Errorf("provenance %s: %w", bundle, err)
	}
	opts := attest.ArtifactOptions{SHA256: sum, Compliance: q.Compliance, ComplianceName: q.ComplianceName, Binding: q.Binding}
	job.RunExpected = runAttestationPath(bundle, prov.Run().Name)
	if job.RunExpected != "" {
		switch run, err := readRegular(job.RunExpected, attest.MaxBundleSize, true); {
		case err == nil:
			opts.Run, job.RunBundle = run, job.RunExpected
		case !errors.Is(err, fs.ErrNotExist):
			return job, attest.NotVerifiedf("provenance %s: its run attestation %s: %w", bundle, job.RunExpected, err)
		}
	}
	if job.VerifiedArtifact, err = prov.Artifact(v, opts); err != nil {
		if opts.Run == nil && opts.Compliance != nil {
			where := "the provenance names none by a file name"
			if job.RunExpected != "" {
				where = "looked for it at " + job.RunExpected
			}
			return job, fmt.Errorf("provenance %s: %w (%s)", bundle, err, where)
		}
		return job, fmt.Errorf("provenance %s: %w", bundle, err)
	}
	return job, nil
}

// runAttestationPath is where the run attestation of the provenance at
// bundle is expected: JOB.sigstore.json next to JOB.provenance.sigstore.json;
// for a bundle named otherwise, the file the provenance names as its
// byproduct (name), in the same directory, when that is a plain name
// ending in .sigstore.json; else "" (none expected).
func runAttestationPath(bundle, name string) string {
	dir, base := filepath.Split(bundle)
	if job, ok := strings.CutSuffix(base, ProvenanceSuffix); ok && job != "" {
		return filepath.Join(dir, job+RunSuffix)
	}
	if name == "" || name != filepath.Base(name) || !filepath.IsLocal(name) || !strings.HasSuffix(name, RunSuffix) || strings.HasSuffix(name, ProvenanceSuffix) {
		return ""
	}
	return filepath.Join(dir, name)
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

// readRegular reads the regular file at path, at most limit bytes,
// opened without blocking (a FIFO is refused, not waited on) and, with
// noFollow, without following a symlink at its last component: anything
// but a regular file is an error, never a wait.
func readRegular(path string, limit int64, noFollow bool) ([]byte, error) {
	f, err := openRegular(path, noFollow)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// openRegular opens path read-only and non-blocking (O_NOFOLLOW too
// with noFollow), and refuses what is not a regular file.
func openRegular(path string, noFollow bool) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if noFollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink, not a regular file: %w", path, err)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		kind := "neither a regular file nor a directory"
		switch {
		case fi.IsDir():
			kind = "a directory"
		case fi.Mode()&fs.ModeNamedPipe != 0:
			kind = "a FIFO"
		}
		return nil, fmt.Errorf("%s is %s, not a regular file", path, kind)
	}
	return f, nil
}

// fileSHA256 is the hex sha256 of the regular file at path.
func fileSHA256(path string) (string, error) {
	f, err := openRegular(path, false)
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
