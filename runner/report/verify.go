package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/review"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/runner/github"
)

// VerifyRequest is what `airlock verify` is asked: one bundle (Bundle),
// an artifact against its job's provenance (Artifact, Bundle the
// provenance or its directory), or every job a store holds for a pull
// request or a commit (Store.Store set); with the signer's public key,
// the subject's commit, a compliance policy, an HTML page of a run
// attestation, JSON output.
type VerifyRequest struct {
	Bundle, KeyFile, Commit, PolicyFile, HTMLFile, Artifact string
	Binding                                                 attest.Binding
	Store                                                   review.Selection
	JSON                                                    bool
}

// ErrNotVerified is what Verify returns when something it checked did
// not verify: what and why were printed.
var ErrNotVerified = errors.New("not verified")

// Verify verifies what req names and prints the result to out (a
// failure's reason to log). Its errors are input.Error (the request
// cannot be honoured), ErrNotVerified, or trouble writing the result.
func Verify(ctx context.Context, req VerifyRequest, out, log io.Writer) error {
	usage := func(format string, args ...any) error { return input.Errorf("", format, args...) }
	switch {
	case req.KeyFile == "":
		return input.Errorf(input.VerifyKey, "required: the public key (PEM) the bundle must be signed with")
	case (req.Bundle == "") == (req.Store.Store == ""):
		return usage("give one bundle, or --store with --pr or --commit")
	case req.Store.Store != "" && (req.Artifact != "" || req.HTMLFile != ""):
		return usage("--artifact and --html are for one bundle, not for a store")
	case req.Store.Store != "" && req.Store.Query.PullRequest == 0 && req.Store.Query.Commit == "":
		return usage("with --store, give --pr N or --commit SHA: the jobs to verify")
	case req.Artifact == "" && (req.Binding.Repository != "" || req.Binding.Invocation != ""):
		return usage("--repository and --run are for an artifact's provenance: with --artifact")
	case req.Artifact != "" && req.HTMLFile != "":
		return usage("--html is for a run attestation: not with --artifact")
	}
	v, err := attest.LoadVerifierFile(req.KeyFile)
	if err != nil {
		return input.Error{Input: input.VerifyKey, Err: err}
	}
	var policy []byte
	if req.PolicyFile != "" {
		if policy, err = files.ReadCapped(req.PolicyFile, 1<<20); err != nil {
			return input.Error{Err: err}
		}
	}
	notVerified := func(err error) error {
		fmt.Fprintf(log, "NOT VERIFIED: %v\n", err)
		return ErrNotVerified
	}
	opts := attest.VerifyOptions{Commit: req.Commit, Compliance: policy, ComplianceName: req.PolicyFile}
	switch {
	case req.Store.Store != "":
		b, entries, err := req.Store.Load(ctx)
		var bad input.Error
		if errors.As(err, &bad) {
			return err
		} else if err != nil {
			return notVerified(err)
		}
		if len(entries) == 0 {
			return notVerified(fmt.Errorf("%s holds no job of %s", req.Store.Store, req.Store.Describe()))
		}
		opts.Commit = "" // each job is checked against the commit it is filed under
		failed, err := review.WriteResults(out, review.VerifyAll(ctx, b, entries, v, opts), req.JSON)
		if err == nil && failed > 0 {
			err = ErrNotVerified
		}
		return err
	case req.Artifact != "":
		req.Binding.Commit = req.Commit
		rep, err := VerifyArtifact(ArtifactQuery{Artifact: req.Artifact, Provenance: req.Bundle, Compliance: policy, ComplianceName: req.PolicyFile, Binding: req.Binding}, v)
		if err != nil {
			return notVerified(err)
		}
		return WriteArtifactVerified(out, rep, req.JSON)
	}
	res, err := VerifyFile(req.Bundle, v, opts)
	if err != nil {
		return notVerified(err)
	}
	if req.HTMLFile != "" {
		if err := attest.WriteHTMLFile(req.HTMLFile, res, true, "signature verified with "+req.KeyFile); err != nil {
			return err
		}
	}
	if req.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	WriteVerified(out, res)
	return nil
}

// StoreReport writes one HTML page over the jobs sel selects to the
// file out, each verified with the public key in keyFile (or read
// unverified without one, and shown so).
func StoreReport(ctx context.Context, sel review.Selection, keyFile, out string) error {
	var v signature.Verifier
	if keyFile != "" {
		var err error
		if v, err = attest.LoadVerifierFile(keyFile); err != nil {
			return input.Error{Input: input.VerifyKey, Err: err}
		}
	}
	b, entries, err := sel.Load(ctx)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("%s holds no job of %s", sel.Store, sel.Describe())
	}
	var page bytes.Buffer
	if err := review.Report(ctx, b, entries, v, sel.Title(), &page); err != nil {
		return err
	}
	return os.WriteFile(out, page.Bytes(), 0o644)
}

// MissingRequest is what `airlock attestations missing` is asked: the
// store and the pull request (sel; its repository as owner/name), the
// runs-on labels of airlock's runners, and the GitHub API to ask
// (a token of the repository's, an API root for GHES and tests).
type MissingRequest struct {
	Store   review.Selection
	RunsOn  []string
	KeyFile string
	Token   string
	BaseURL string
}

// ErrMissing is a pull request with jobs on airlock's runners that no
// stored attestation stands for (named on out).
var ErrMissing = errors.New("jobs without a stored attestation")

// Missing lists, with the GitHub API, the pull request's workflow jobs
// that ran on airlock's runners, and names on out those the store holds
// no run attestation of.
func Missing(ctx context.Context, req MissingRequest, out io.Writer) error {
	owner, repo, ok := strings.Cut(req.Store.Query.Repository, "/")
	switch {
	case !ok || owner == "" || repo == "" || strings.Contains(repo, "/"):
		return input.Errorf("", "give the repository as owner/name: the GitHub API is asked for its pull request's jobs")
	case req.Store.Query.PullRequest <= 0:
		return input.Errorf("", "give the pull request's number")
	case len(req.RunsOn) == 0:
		return input.Errorf("", "give the runs-on label of airlock's runners (as the workflows' runs-on names them)")
	case req.Token == "":
		return input.Errorf("", "no GitHub token: set AIRLOCK_GITHUB_TOKEN (or GITHUB_TOKEN) to one that may read the repository's actions")
	case req.KeyFile == "":
		return input.Errorf(input.VerifyKey, "required: only a stored attestation that verifies stands for a job")
	}
	v, err := attest.LoadVerifierFile(req.KeyFile)
	if err != nil {
		return input.Error{Input: input.VerifyKey, Err: err}
	}
	b, entries, err := req.Store.Load(ctx)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	gh, err := github.New(github.Options{BaseURL: req.BaseURL, Token: req.Token})
	if err != nil {
		return err
	}
	jobs, err := gh.PullRequestJobs(ctx, owner, repo, req.Store.Query.PullRequest)
	if err != nil {
		return err
	}
	missing := review.Missing(review.VerifyAll(ctx, b, entries, v, attest.VerifyOptions{}), jobs, req.RunsOn)
	review.WriteMissing(out, missing, review.OnRunners(jobs, req.RunsOn))
	if len(missing) > 0 {
		return ErrMissing
	}
	return nil
}
