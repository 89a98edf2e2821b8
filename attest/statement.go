package attest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Meta is what the attestation says beyond the job's result: who ran it
// and for which pull request.
type Meta struct {
	AirlockVersion, AirlockCommit string
	// Repository names the repository (URL or path); HeadSHA is the
	// subject. Without a head commit the subject is the workspace.
	Repository  string
	HeadSHA     string
	BaseSHA     string
	PullRequest int
	Author      string
	Event       string
	// ContainerImage is the job container's image (runner hook).
	ContainerImage string
}

// Bounds that keep a statement small enough to store.
const (
	MaxExecs        = 5000
	MaxDecisions    = 20000
	MaxArgvBytes    = 1024
	MaxFindings     = 2000
	MaxDestinations = 1000
	MaxDiffBytes    = 4096
	subjectPrefix   = "airlock-subject:v1 "
)

// SubjectFile is the canonical subject file of a commit: its sha256 is
// the subject's sha256 digest, so a tool that only checks sha256 digests
// (cosign verify-blob-attestation with a blob) can match the commit.
func SubjectFile(commit string) []byte { return []byte(commit + "\n") }

// Subject returns the statement's subject for the run.
func Subject(m Meta, workspace string) SubjectInfo {
	name := m.Repository
	if name == "" {
		name = workspace
	}
	if m.HeadSHA != "" {
		sum := sha256.Sum256(SubjectFile(m.HeadSHA))
		return SubjectInfo{Name: name, Digest: map[string]string{"gitCommit": m.HeadSHA, "sha256": hex.EncodeToString(sum[:])}}
	}
	sum := sha256.Sum256([]byte(subjectPrefix + name + "\n"))
	return SubjectInfo{Name: name, Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])}}
}

// MaxStatement bounds a statement (base64 in a bundle, it must stay under
// MaxBundleSize): Fit trims the largest lists until it fits.
const MaxStatement = 10 << 20

// Fit trims a predicate whose statement would pass MaxStatement: egress
// decision rows first, then execs, then findings, halving each, counting
// every item dropped. Summaries and counts stay whole.
func Fit(subject SubjectInfo, p *Predicate) error {
	for range 64 {
		b, err := Statement(subject, *p)
		if err != nil {
			return err
		}
		if len(b) <= MaxStatement {
			return nil
		}
		switch {
		case len(p.Egress.Decisions) > 100:
			n := len(p.Egress.Decisions) / 2
			p.Egress.Dropped += uint64(len(p.Egress.Decisions) - n)
			p.Egress.Decisions = p.Egress.Decisions[:n]
		case len(p.Processes.Execs) > 100:
			n := len(p.Processes.Execs) / 2
			p.Processes.Dropped += uint64(len(p.Processes.Execs) - n)
			p.Processes.Execs = p.Processes.Execs[:n]
		case len(p.Trust.Findings) > 10:
			n := len(p.Trust.Findings) / 2
			p.Trust.Dropped += uint64(len(p.Trust.Findings) - n)
			p.Trust.Findings = p.Trust.Findings[:n]
		default:
			return fmt.Errorf("statement: %d bytes even after trimming", len(b))
		}
	}
	return fmt.Errorf("statement: does not fit")
}

// MaxArtifacts bounds the artifact subjects; maxArtifactSize one file.
const (
	MaxArtifacts    = 100
	maxArtifactSize = 4 << 30
)

// Artifacts digests the files the policy names as subjects (paths
// relative to the workspace, globs allowed), read through os.Root so no
// link leads out of it. What cannot be read is a note, not a subject.
func Artifacts(workspace string, patterns []string) ([]SubjectInfo, []string) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, []string{"artifacts: " + err.Error()}
	}
	defer root.Close()
	var out []SubjectInfo
	var notes []string
	for _, pat := range patterns {
		matches, err := fs.Glob(root.FS(), path.Clean(strings.TrimPrefix(pat, "/")))
		if err != nil || len(matches) == 0 {
			notes = append(notes, fmt.Sprintf("artifact %q: no such file", pat))
			continue
		}
		for _, m := range matches {
			if len(out) == MaxArtifacts {
				notes = append(notes, fmt.Sprintf("more than %d artifacts: the rest are not subjects", MaxArtifacts))
				return out, notes
			}
			f, err := root.Open(m)
			if err != nil {
				notes = append(notes, fmt.Sprintf("artifact %q: %v", m, err))
				continue
			}
			fi, err := f.Stat()
			if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxArtifactSize {
				f.Close()
				notes = append(notes, fmt.Sprintf("artifact %q: not a regular file of at most %d bytes", m, int64(maxArtifactSize)))
				continue
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				notes = append(notes, fmt.Sprintf("artifact %q: %v", m, err))
				continue
			}
			out = append(out, SubjectInfo{Name: m, Digest: map[string]string{"sha256": hex.EncodeToString(h.Sum(nil))}})
		}
	}
	return out, notes
}

// StatementType is the in-toto Statement v1 type.
const StatementType = "https://in-toto.io/Statement/v1"

// statementJSON is an in-toto Statement v1 with airlock's predicate, in
// the standard JSON form ("_type", lowerCamelCase).
type statementJSON struct {
	Type          string        `json:"_type"`
	Subject       []SubjectInfo `json:"subject"`
	PredicateType string        `json:"predicateType"`
	Predicate     Predicate     `json:"predicate"`
}

// Statement serialises the in-toto Statement v1 for subject (the commit)
// and artifacts (further subjects) and predicate. These bytes are what
// is signed and stored.
func Statement(subject SubjectInfo, p Predicate, artifacts ...SubjectInfo) ([]byte, error) {
	if subject.Name == "" || len(subject.Digest) == 0 {
		return nil, fmt.Errorf("statement: the subject needs a name and a digest")
	}
	b, err := json.Marshal(statementJSON{Type: StatementType, Subject: append([]SubjectInfo{subject}, artifacts...), PredicateType: PredicateType, Predicate: p})
	if err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return b, nil
}
