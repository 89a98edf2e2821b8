package runner

import (
	"context"
	"fmt"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/gitexec"
)

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
	// Outputs are the policy's artifact patterns (attest.outputs, and
	// the deprecated attest.subjects), relative to the repository: the
	// files the job leaves there that are subjects of its run
	// attestation and of its provenance.
	Outputs []string
	// Actions are the actions the job ran (runner hook: owner/repo@ref
	// and the digest of its directory, taken before the step ran), for
	// the provenance's resolved dependencies.
	Actions []attest.Descriptor
	// Meta is what the statement says of the pull request; the door adds
	// airlock's version.
	Meta attest.Meta
	// Repository is the pull request's repository on the host: the head
	// revision is resolved in it, and artifacts are read from it, or from
	// ArtifactsDir when set (the hook's repository, opened without
	// following symlinks).
	Repository   string
	ArtifactsDir string
	// Stores are where the bundles are kept after the job (the
	// organisation policy's attest.store and the door's), StoreAuth the
	// Docker config.json with their credentials.
	Stores    []storeref.Ref
	StoreAuth string
	// StoreSessions keeps the stores open from the commit's preparation
	// while the job runs to the push after it (report.PrepareStores sets
	// it); nil: the push opens them.
	StoreSessions *store.Sessions

	headWasImplicit bool     // no head given: the subject is the repository's HEAD
	subjectNotes    []string // trouble resolving the subject, for the verdict
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

// ResolveSubjectMeanwhile runs ResolveSubject in the background and
// returns the function that waits for it (a Job's BeforeSteps: the
// subject is resolved before the first step can move HEAD).
func (c *AttestConfig) ResolveSubjectMeanwhile(ctx context.Context) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.ResolveSubject(ctx)
	}()
	return func() { <-done }
}

// HeadResolved says whether the head is a commit id (given as one, or
// resolved).
func (c *AttestConfig) HeadResolved() bool { return isCommitID(c.Meta.HeadSHA) }

// SubjectNotes are the trouble ResolveSubject had, for the verdict.
func (c *AttestConfig) SubjectNotes() []string { return c.subjectNotes }

// HeadImplicit says the head is the repository's HEAD as it was before
// the job ran (none was given): a job that moves HEAD is on record.
func (c *AttestConfig) HeadImplicit() bool { return c.headWasImplicit }

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
