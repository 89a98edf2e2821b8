package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/gitexec"
)

// PasswordEnv holds the password of an encrypted signing key. Never a
// flag: flags show in the process list.
const PasswordEnv = "AIRLOCK_KEY_PASSWORD"

// AttestConfig is how a job's attestation is made: NewPlan fills in what
// the policy and the pull request say, the door where it goes.
type AttestConfig struct {
	// Dir is where the statement, bundle and envelope are written.
	Dir string
	// Key is the signing key: a key file (PEM; an encrypted one takes its
	// password from PasswordEnv or PasswordFile) or a KMS URI. Empty: the
	// statement is written unsigned, and named so.
	Key          string
	PasswordFile string
	// Subjects are the policy's artifact patterns (attest.subjects),
	// relative to the repository.
	Subjects []string
	// Meta is what the statement says of the pull request; the door adds
	// airlock's version.
	Meta attest.Meta
	// Repository is the pull request's repository on the host: the head
	// revision is resolved in it, and artifacts are read from it, or from
	// ArtifactsDir when set (the hook's repository, opened without
	// following symlinks).
	Repository   string
	ArtifactsDir string

	headWasImplicit bool     // no head given: the subject is the repository's HEAD
	subjectNotes    []string // trouble resolving the subject, for the verdict
}

// Attestation is where a job's attestation went (part of the JSON result
// of airlock run).
type Attestation struct {
	Bundle   string `json:"bundle,omitempty"`
	Envelope string `json:"envelope,omitempty"`
	// Unsigned is the statement written without a signature (no key, or
	// signing failed), for forensics.
	Unsigned string `json:"unsigned,omitempty"`
	Error    string `json:"error,omitempty"`
}

// ResolveSubject turns the pull request's revisions into commit ids
// before the job runs (the job can move HEAD and rewrite refs),
// defaulting the head to the repository's HEAD. A failure is noted for
// the verdict.
func (c *AttestConfig) ResolveSubject(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	if c.Meta.HeadSHA == "" {
		c.Meta.HeadSHA, c.headWasImplicit = "HEAD", true
	}
	for _, rev := range []*string{&c.Meta.HeadSHA, &c.Meta.BaseSHA} {
		if *rev == "" || isCommitID(*rev) {
			continue // a commit id stays as given, even if not fetched
		}
		sha, err := gitexec.ResolveCommit(ctx, c.Repository, *rev)
		if err != nil {
			if !c.headWasImplicit || rev != &c.Meta.HeadSHA {
				c.subjectNotes = append(c.subjectNotes, fmt.Sprintf("subject: could not resolve %q: %v", *rev, err))
			}
			sha = ""
		}
		*rev = sha
	}
}

// WriteAttestation builds the statement of a job's result and signs it
// with the configured key; without one, or when signing fails, the
// statement is written unsigned and named so. What it did is said on log.
func WriteAttestation(ctx context.Context, res Result, c *AttestConfig, log io.Writer) *Attestation {
	info := &Attestation{}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		info.Error = fmt.Sprintf("attestation directory: %v", err)
		fmt.Fprintf(log, "airlock: ATTESTATION NOT WRITTEN: %s\n", info.Error)
		return info
	}
	m := c.Meta
	if m.Repository == "" {
		m.Repository = os.Getenv("GITHUB_REPOSITORY")
		if m.Repository != "" {
			m.Repository = strings.TrimSuffix(os.Getenv("GITHUB_SERVER_URL"), "/") + "/" + m.Repository
		}
	}
	abs, _ := filepath.Abs(c.Repository)
	pred := Predicate(res, m)
	pred.Verdict.Reasons = append(pred.Verdict.Reasons, c.subjectNotes...)
	// The job may have moved HEAD: the subject is what was resolved
	// before it ran, and a move is on record.
	if m.HeadSHA != "" && c.headWasImplicit {
		if now, err := gitexec.ResolveCommit(context.WithoutCancel(ctx), c.Repository, "HEAD"); err != nil || now != m.HeadSHA {
			pred.Verdict.Reasons = append(pred.Verdict.Reasons, fmt.Sprintf("the job moved HEAD from %s to %q", m.HeadSHA, now))
		}
	}
	subject := attest.Subject(m, abs)
	if err := attest.Fit(subject, &pred); err != nil {
		info.Error = err.Error()
		fmt.Fprintf(log, "airlock: ATTESTATION NOT WRITTEN: %v\n", err)
		return info
	}
	artDir := c.Repository
	if c.ArtifactsDir != "" {
		artDir = c.ArtifactsDir
	}
	artifacts, notes := attest.Artifacts(artDir, c.Subjects)
	for _, n := range notes {
		fmt.Fprintf(log, "airlock: attestation: %s\n", n)
	}
	stmt, err := attest.Statement(subject, pred, artifacts...)
	if err != nil {
		info.Error = err.Error()
		fmt.Fprintf(log, "airlock: ATTESTATION NOT WRITTEN: %v\n", err)
		return info
	}
	base := filepath.Join(c.Dir, res.Sandbox.ID)
	unsigned := func(why string) *Attestation {
		info.Unsigned = base + ".UNSIGNED.intoto.json"
		if err := os.WriteFile(info.Unsigned, stmt, 0o644); err != nil {
			why += "; writing the unsigned statement failed too: " + err.Error()
		}
		info.Error = why
		fmt.Fprintf(log, "airlock: ATTESTATION NOT SIGNED: %s; unsigned statement: %s\n", why, info.Unsigned)
		return info
	}
	if c.Key == "" {
		return unsigned("no signing key (--attest-key, or attest.key in the policy)")
	}
	signer, err := attest.LoadSigner(ctx, c.Key, attest.PasswordFromEnv(PasswordEnv, c.PasswordFile))
	if err != nil {
		return unsigned(err.Error())
	}
	signed, err := attest.Sign(signer, stmt)
	if err != nil {
		return unsigned(err.Error())
	}
	info.Bundle, info.Envelope = base+".sigstore.json", base+".dsse.json"
	for path, data := range map[string][]byte{info.Bundle: signed.Bundle, info.Envelope: signed.Envelope} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return unsigned("write " + path + ": " + err.Error())
		}
	}
	fmt.Fprintf(log, "attestation: %s (signed, %d bytes)\n", info.Bundle, len(signed.Bundle))
	return info
}

// Reasons says why a job failed: each step that did not pass, and the
// trust verdict.
func (res Result) Reasons() []string {
	var out []string
	for _, s := range res.Steps {
		if s.Status != StatusPassed {
			out = append(out, fmt.Sprintf("step %s %s", s.Name, s.Status))
		}
	}
	if res.Trust != nil && res.Trust.Failed {
		out = append(out, res.Trust.Reason)
	}
	return out
}

func isCommitID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Retention bounds what a state directory keeps of past jobs'
// attestations: the newest Keep jobs, none older than MaxAge (zero: no
// bound of that kind).
type Retention struct {
	Keep   int
	MaxAge time.Duration
}

// DefaultRetention is what airlock keeps unless told otherwise.
var DefaultRetention = Retention{Keep: 200, MaxAge: 30 * 24 * time.Hour}

// attestationFile is a file WriteAttestation writes: the job's id and
// one of its suffixes.
var attestationFile = regexp.MustCompile(`^(job-[0-9a-f]+)\.(sigstore\.json|dsse\.json|UNSIGNED\.intoto\.json)$`)

// Prune removes from dir the attestation files of the jobs beyond r
// (a job's files go together; the newest file dates a job), and returns
// how many jobs it removed. Only regular files named as WriteAttestation
// names them are touched, nothing is followed out of dir.
func (r Retention) Prune(dir string, now time.Time) (int, error) {
	if r.Keep <= 0 && r.MaxAge <= 0 {
		return 0, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return 0, err
	}
	type job struct {
		files  []string
		newest time.Time
	}
	jobs := map[string]*job{}
	for _, e := range entries {
		m := attestationFile.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		j := jobs[m[1]]
		if j == nil {
			j = &job{}
			jobs[m[1]] = j
		}
		j.files = append(j.files, e.Name())
		if fi.ModTime().After(j.newest) {
			j.newest = fi.ModTime()
		}
	}
	order := slices.SortedFunc(maps.Values(jobs), func(a, b *job) int { return b.newest.Compare(a.newest) })
	removed := 0
	var errs []error
	for i, j := range order {
		if (r.Keep <= 0 || i < r.Keep) && (r.MaxAge <= 0 || now.Sub(j.newest) <= r.MaxAge) {
			continue
		}
		for _, f := range j.files {
			if err := root.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
