package suggest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
)

// Request is what `airlock policy suggest` is asked: the bundles, the
// key that must have signed them (or AllowUnsigned), the repository
// whose policy the rules are merged into (Dir and Base; OrgDir for the
// organisation's), whether agents' runs count, and where the file goes
// (empty: out).
type Request struct {
	Bundles       []string
	KeyFile       string
	AllowUnsigned bool
	Dir, Base     string
	OrgDir        string
	AgentRuns     bool
	Output        string
}

// Failure is a suggestion that could not be made from the evidence (a
// bundle that does not verify or read, a merge that does not vet).
type Failure struct{ Err error }

func (f Failure) Error() string { return f.Err.Error() }
func (f Failure) Unwrap() error { return f.Err }

// Command reads and verifies the runs, suggests the rules and writes
// the repository's policy with them to out or req.Output, saying on
// log what it read and found. Its errors are input.Error (what was
// asked cannot be done), Failure, or the host's trouble.
func Command(ctx context.Context, req Request, out, log io.Writer) error {
	if req.KeyFile == "" && !req.AllowUnsigned {
		return input.Errorf(input.VerifyKey, "required to verify the bundles, unless unsigned evidence is allowed (read unverified)")
	}
	if (req.Dir == "") != (req.Base == "") {
		return input.Errorf(input.Base, "the repository and its base go together: the repository policy is read from the base commit")
	}
	var ver signature.Verifier
	if req.KeyFile != "" {
		var err error
		if ver, err = attest.LoadVerifierFile(req.KeyFile); err != nil {
			return input.Error{Input: input.VerifyKey, Err: err}
		}
	}
	runs, err := ReadRuns(req.Bundles, ver, req.AllowUnsigned)
	var bad EvidenceError
	if errors.As(err, &bad) {
		return Failure{err}
	} else if err != nil {
		return input.Error{Err: err}
	}
	for _, r := range runs {
		if r.Unverified {
			fmt.Fprintf(log, "%s: read UNVERIFIED (unsigned evidence allowed)\n", r.Name)
		}
	}
	org, err := policies.OrgSources(req.OrgDir)
	if err != nil {
		return input.Error{Input: input.OrgDir, Err: err}
	}
	res, err := ForRepository(ctx, runs, Repository{Dir: req.Dir, Base: req.Base, Org: org}, req.AgentRuns)
	var inputErr input.Error
	if errors.As(err, &inputErr) {
		return err
	}
	if err != nil {
		return Failure{err}
	}
	for _, n := range res.Notes {
		fmt.Fprintf(log, "note: %s\n", n)
	}
	fmt.Fprintf(log, "%d rule(s) suggested from %d run(s); nothing for trust (review the trust findings in the reports)\n", len(res.Rules), len(runs))
	if req.Output == "" {
		_, err := out.Write(res.File)
		return err
	}
	return os.WriteFile(req.Output, res.File, 0o644)
}
