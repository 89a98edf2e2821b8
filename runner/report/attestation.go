package report

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
	"github.com/airlock-ci/airlock/runner"
)

// PasswordEnv holds the password of an encrypted signing key. Never a
// flag: flags show in the process list.
const PasswordEnv = "AIRLOCK_KEY_PASSWORD"

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

// WriteAttestation builds the statement of a job's result and signs it
// with the configured key; without one, or when signing fails, the
// statement is written unsigned and named so. What it did is said on log.
func WriteAttestation(ctx context.Context, res runner.Result, c *runner.AttestConfig, log io.Writer) *Attestation {
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
	pred.Verdict.Reasons = append(pred.Verdict.Reasons, c.SubjectNotes()...)
	// The job may have moved HEAD: the subject is what was resolved
	// before it ran, and a move is on record.
	if m.HeadSHA != "" && c.HeadImplicit() {
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
		return unsigned("no signing key (give one, or set attest.key in the organisation policy)")
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
