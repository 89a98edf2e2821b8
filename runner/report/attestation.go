package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/internal/gitexec"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/runner"
)

// PasswordEnv holds the password of an encrypted signing key. Never a
// flag: flags show in the process list.
const PasswordEnv = "AIRLOCK_KEY_PASSWORD"

// Files is where one statement went: signed, its bundle and envelope;
// else the statement unsigned (no key, or signing failed), for
// forensics, and why.
type Files struct {
	Bundle   string `json:"bundle,omitempty"`
	Envelope string `json:"envelope,omitempty"`
	Unsigned string `json:"unsigned,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Attestation is where a job's attestation went (part of the JSON result
// of airlock run), and its provenance (Finish).
type Attestation struct {
	Files
	Provenance *ProvenanceFiles `json:"provenance,omitempty"`
	// Stored is what each attestation store did with the bundles.
	Stored []store.Outcome `json:"stored,omitempty"`
}

// runStatement is the run attestation as WriteProvenance needs it: the
// predicate, the artifacts it named, the statement's bytes and the file
// they went to, and the signer (nil: none, for the reason unsignedWhy).
type runStatement struct {
	pred        attest.Predicate
	subject     attest.SubjectInfo
	artifacts   []attest.SubjectInfo
	statement   []byte
	file        string
	signer      signature.Signer
	unsignedWhy string
}

// WriteAttestation builds the statement of a job's result and signs it
// with the configured key; without one, or when signing fails, the
// statement is written unsigned and named so. What it did is said on log.
func WriteAttestation(ctx context.Context, res runner.Result, c *runner.AttestConfig, log io.Writer) *Attestation {
	att, _ := writeRun(ctx, res, c, log)
	return att
}

// writeRun is WriteAttestation, returning the statement it wrote too
// (nil when it wrote none).
func writeRun(ctx context.Context, res runner.Result, c *runner.AttestConfig, log io.Writer) (*Attestation, *runStatement) {
	info := &Attestation{}
	notWritten := func(err error) (*Attestation, *runStatement) {
		info.Error = err.Error()
		fmt.Fprintf(log, "airlock: ATTESTATION NOT WRITTEN: %s\n", info.Error)
		return info, nil
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return notWritten(fmt.Errorf("attestation directory: %v", err))
	}
	run, err := runPredicate(ctx, res, c, log)
	if err != nil {
		return notWritten(err)
	}
	if run.statement, err = attest.Statement(run.subject, run.pred, run.artifacts...); err != nil {
		return notWritten(err)
	}
	run.signer, run.unsignedWhy = loadSigner(ctx, c)
	info.Files = writeStatement(run.signer, run.unsignedWhy, run.statement, filepath.Join(c.Dir, res.Sandbox.ID))
	switch {
	case info.Bundle != "":
		run.file = info.Bundle
		fmt.Fprintf(log, "attestation: %s (signed, %d bytes)\n", info.Bundle, fileSize(info.Bundle))
	case info.Unsigned == "":
		fmt.Fprintf(log, "airlock: ATTESTATION NOT WRITTEN: %s\n", info.Error)
		return info, nil
	default:
		run.file = info.Unsigned
		run.signer, run.unsignedWhy = nil, info.Error
		fmt.Fprintf(log, "airlock: ATTESTATION NOT SIGNED: %s; unsigned statement: %s\n", info.Error, info.Unsigned)
	}
	return info, run
}

// statementMeta is what the statement says of the pull request: c's,
// the repository named from the github context when c names none.
func statementMeta(c *runner.AttestConfig) attest.Meta {
	m := c.Meta
	if m.Repository == "" {
		m.Repository = os.Getenv("GITHUB_REPOSITORY")
		if m.Repository != "" {
			m.Repository = strings.TrimSuffix(os.Getenv("GITHUB_SERVER_URL"), "/") + "/" + m.Repository
		}
	}
	return m
}

// subjectOf is the statement's subject: the repository (its path when
// nothing names it) at the head commit.
func subjectOf(c *runner.AttestConfig, m attest.Meta) attest.SubjectInfo {
	abs, _ := filepath.Abs(c.Repository)
	return attest.Subject(m, abs)
}

// runPredicate builds the run's predicate, bounded to fit a statement,
// its subject and its artifacts (the policy's outputs).
func runPredicate(ctx context.Context, res runner.Result, c *runner.AttestConfig, log io.Writer) (*runStatement, error) {
	m := statementMeta(c)
	pred := Predicate(res, m)
	pred.Verdict.Reasons = append(pred.Verdict.Reasons, c.SubjectNotes()...)
	// The job may have moved HEAD: the subject is what was resolved
	// before it ran, and a move is on record.
	if m.HeadSHA != "" && c.HeadImplicit() {
		if now, err := gitexec.ResolveCommit(context.WithoutCancel(ctx), c.Repository, "HEAD"); err != nil || now != m.HeadSHA {
			pred.Verdict.Reasons = append(pred.Verdict.Reasons, fmt.Sprintf("the job moved HEAD from %s to %q", m.HeadSHA, now))
		}
	}
	subject := subjectOf(c, m)
	if err := attest.Fit(subject, &pred); err != nil {
		return nil, err
	}
	artDir := c.Repository
	if c.ArtifactsDir != "" {
		artDir = c.ArtifactsDir
	}
	artifacts, notes := attest.Artifacts(artDir, c.Outputs)
	for _, n := range notes {
		fmt.Fprintf(log, "airlock: attestation: %s\n", n)
	}
	return &runStatement{pred: pred, subject: subject, artifacts: artifacts}, nil
}

// loadSigner loads the configured key; nil and why when there is none
// or it cannot be loaded.
func loadSigner(ctx context.Context, c *runner.AttestConfig) (signature.Signer, string) {
	if c.Key == "" {
		return nil, "no signing key (give one, or set attest.key in the organisation policy)"
	}
	s, err := attest.LoadSigner(ctx, c.Key, attest.PasswordFromEnv(PasswordEnv, c.PasswordFile))
	if err != nil {
		return nil, err.Error()
	}
	return s, ""
}

// writeStatement signs stmt with s and writes base.sigstore.json and
// base.dsse.json; without a signer (why says why), or when signing or
// writing fails, it writes base.UNSIGNED.intoto.json instead. Each file
// appears whole or not at all (a full disk leaves no truncated
// statement); when not even the unsigned one can be written, Files has
// no file and its Error says why.
func writeStatement(s signature.Signer, why string, stmt []byte, base string) Files {
	unsigned := func(why string) Files {
		f := Files{Unsigned: base + ".UNSIGNED.intoto.json", Error: why}
		if err := writeWhole(f.Unsigned, stmt); err != nil {
			f.Unsigned = ""
			f.Error += "; the unsigned statement could not be written either: " + err.Error()
		}
		return f
	}
	if s == nil {
		return unsigned(why)
	}
	signed, err := attest.Sign(s, stmt)
	if err != nil {
		return unsigned(err.Error())
	}
	f := Files{Bundle: base + ".sigstore.json", Envelope: base + ".dsse.json"}
	for _, w := range []struct {
		path string
		data []byte
	}{{f.Bundle, signed.Bundle}, {f.Envelope, signed.Envelope}} {
		if err := writeWhole(w.path, w.data); err != nil {
			os.Remove(f.Bundle) // a bundle without its envelope: neither
			return unsigned(err.Error())
		}
	}
	return f
}

// writeWhole writes data to path through a temporary file in the same
// directory, renamed over path once complete: path never holds part of
// data. The temporary file goes on any failure.
func writeWhole(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// fileSize is the size of the file at path (0 when it cannot be read).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// GenerateKeys writes an ECDSA P-256 key pair, PREFIX.key (0600,
// encrypted with the password of PasswordEnv or passwordFile when there
// is one) and PREFIX.pub, and says whether the key is encrypted. A file
// that cannot be written (it exists: keys are never overwritten) is an
// input.Error.
func GenerateKeys(prefix, passwordFile string) (state string, err error) {
	password, err := attest.NewKeyPassword(PasswordEnv, passwordFile)
	if err != nil {
		return "", input.Error{Err: err}
	}
	if err := attest.WriteKeyPair(prefix, password); err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			return "", input.Error{Err: err} // where the files go, not the key
		}
		return "", err
	}
	if len(password) > 0 {
		return "encrypted", nil
	}
	return "not encrypted", nil
}
