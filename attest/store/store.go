package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/attest/storeref"
)

// The kinds of bundle a job has.
const (
	KindAttestation = "attestation"
	KindProvenance  = "provenance"
)

// Verdicts, as a record's labels say them.
const (
	VerdictPassed = "passed"
	VerdictFailed = "failed"
)

// Labels are what a reviewer filters a job's record on: the OCI store
// writes them as annotations, the file store as the entry's JSON. They
// repeat what the signed statement says (airlock verify --store checks
// that they agree): they are an index, never the evidence.
type Labels struct {
	Kind string `json:"kind"`
	// Repository is the pull request's repository (owner/name, a URL,
	// or the workspace's path for airlock run outside a repository).
	Repository  string `json:"repository"`
	PullRequest int    `json:"pullRequest,omitempty"`
	// Commit is the statement's subject: the head commit.
	Commit string `json:"commit,omitempty"`
	// RunID, RunAttempt, Job and Runner are the Actions run's (empty
	// outside GitHub Actions).
	RunID      string `json:"runId,omitempty"`
	RunAttempt string `json:"runAttempt,omitempty"`
	Job        string `json:"job,omitempty"`
	Runner     string `json:"runner,omitempty"`
	// JobID is airlock's id of the job (its sandbox's): unique, so
	// every job has tags of its own.
	JobID         string    `json:"jobId"`
	Verdict       string    `json:"verdict"`
	Created       time.Time `json:"created"`
	PredicateType string    `json:"predicateType"`
}

// Record is one bundle to keep.
type Record struct {
	Labels
	Bundle []byte
}

// Entry is a stored bundle as a store lists it.
type Entry struct {
	Labels
	// Store is the store's location; Ref names the bundle in it (an OCI
	// store: REGISTRY/REPOSITORY@sha256:... of its manifest; a file
	// store: the bundle's path); Tag is the job's tag.
	Store string `json:"store"`
	Ref   string `json:"ref"`
	Tag   string `json:"tag"`
	// Digest is the bundle's sha256 (sha256:hex), Size its length.
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// Query selects entries: every field given must match (Repository as a
// store writes it, or its owner/name; Commit the commit id or a prefix
// of it).
type Query struct {
	Repository  string
	PullRequest int
	Commit      string
}

// Backend is one store.
type Backend interface {
	// Location names the store (storeref.Ref.Location).
	Location() string
	// Put stores r under its job's tag. A tag that already holds the
	// same bundle is success (a retry); one that holds anything else is
	// ErrConflict, and nothing is written.
	Put(ctx context.Context, r Record) (Entry, error)
	// List lists what q selects, oldest first.
	List(ctx context.Context, q Query) ([]Entry, error)
	// Resolve finds one entry by what a reviewer names: its tag, or its
	// Ref.
	Resolve(ctx context.Context, ref string) (Entry, error)
	// Fetch reads e's bundle, checked against e.Digest.
	Fetch(ctx context.Context, e Entry) ([]byte, error)
}

// commitPreparer is a store that keeps something per commit, shared by
// the commit's jobs, which can be put before a job's own push (see
// Keeper.Prepare).
type commitPreparer interface {
	PrepareCommit(ctx context.Context, repository, commit string) error
}

// ErrConflict is a tag that already holds another record.
var ErrConflict = errors.New("the tag already holds another record; airlock never overwrites a stored record")

// ErrNotFound is a reference that names nothing in the store.
var ErrNotFound = errors.New("not in the store")

// Options are what opening a store takes from the host.
type Options struct {
	// AuthFile is a Docker config.json whose auths (or credential
	// helpers) hold the registries' credentials; empty: anonymous.
	AuthFile string
	// Attempts bounds the tries of one request (4), AttemptTimeout one
	// try (30 s); Deadline bounds a whole Put (2 min).
	Attempts       int
	AttemptTimeout time.Duration
	Deadline       time.Duration
	// RetryWaitMin and RetryWaitMax bound the back-off between tries
	// (250 ms, 5 s).
	RetryWaitMin, RetryWaitMax time.Duration
}

func (o Options) withDefaults() Options {
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 30 * time.Second
	}
	if o.Deadline <= 0 {
		o.Deadline = 2 * time.Minute
	}
	if o.RetryWaitMin <= 0 {
		o.RetryWaitMin = 250 * time.Millisecond
	}
	if o.RetryWaitMax <= 0 {
		o.RetryWaitMax = 5 * time.Second
	}
	return o
}

// Open opens the store r names.
func Open(r storeref.Ref, o Options) (Backend, error) {
	o = o.withDefaults()
	switch r.Kind {
	case storeref.OCI:
		return openOCI(r, o)
	case storeref.File:
		return openFile(r, o)
	}
	return nil, fmt.Errorf("attestation store %q: no such kind of store", r.String())
}

// matches says whether l is selected by q.
func (q Query) matches(l Labels) bool {
	return (q.Repository == "" || q.Repository == l.Repository || q.Repository == ownerName(l.Repository)) &&
		(q.PullRequest == 0 || q.PullRequest == l.PullRequest) &&
		(q.Commit == "" || strings.HasPrefix(l.Commit, q.Commit))
}

// maxLabel bounds a label's string: what the workflow names (a job,
// a runner) is kept to it.
const maxLabel = 512

// check refuses labels a record cannot be stored under.
func (l Labels) check() error {
	for _, v := range []string{l.Repository, l.Commit, l.RunID, l.RunAttempt, l.Job, l.Runner, l.JobID, l.PredicateType} {
		if len(v) > maxLabel {
			return fmt.Errorf("a label of %d bytes, more than %d", len(v), maxLabel)
		}
	}
	switch {
	case l.Kind != KindAttestation && l.Kind != KindProvenance:
		return fmt.Errorf("record kind %q: want %s or %s", l.Kind, KindAttestation, KindProvenance)
	case l.JobID == "":
		return errors.New("record has no job id")
	case l.Verdict != VerdictPassed && l.Verdict != VerdictFailed:
		return fmt.Errorf("record verdict %q: want %s or %s", l.Verdict, VerdictPassed, VerdictFailed)
	case l.Created.IsZero():
		return errors.New("record has no time")
	}
	return nil
}

// digestOf is b's sha256 as sha256:hex.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// Probe checks that the store r names answers with the credentials o
// names, without writing a record: a registry lists the repository's
// tags (none yet is fine), a file store's directory is there and takes
// a file. Used by airlock doctor.
func Probe(ctx context.Context, r storeref.Ref, o Options) error {
	b, err := Open(r, o)
	if err != nil {
		return err
	}
	switch s := b.(type) {
	case *ociStore:
		if _, err := s.puller.List(ctx, s.repo); err != nil && !isStatus(err, 404) {
			return fmt.Errorf("%s: %w", s.Location(), s.explain(ctx, err))
		}
	case *fileStore:
		root, err := s.root()
		if err != nil {
			return err
		}
		defer root.Close()
		name := fmt.Sprintf(".airlock-doctor.%d", os.Getpid())
		if err := root.WriteFile(name, nil, 0o600); err != nil {
			return fmt.Errorf("%s: %w", s.Location(), err)
		}
		root.Remove(name)
	}
	return nil
}
