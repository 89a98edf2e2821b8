package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/review"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/input"
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
		b, err := req.Store.Open()
		if err != nil {
			return input.Error{Err: err}
		}
		entries, err := req.Store.Find(ctx, b)
		if err != nil {
			return notVerified(err)
		}
		if len(entries) == 0 {
			return notVerified(fmt.Errorf("%s holds no job of %s", req.Store.Store, describe(req.Store)))
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

// describe says what a selection selects, for a message.
func describe(s review.Selection) string {
	what := "the commit " + s.Query.Commit
	if s.Query.PullRequest > 0 {
		what = fmt.Sprintf("pull request %d", s.Query.PullRequest)
	}
	if s.Query.Repository != "" {
		what += " of " + s.Query.Repository
	}
	return what
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
	b, err := sel.Open()
	if err != nil {
		return input.Error{Err: err}
	}
	entries, err := sel.Find(ctx, b)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("%s holds no job of %s", sel.Store, describe(sel))
	}
	var page bytes.Buffer
	if err := review.Report(ctx, b, entries, v, sel.Title(), &page); err != nil {
		return err
	}
	return os.WriteFile(out, page.Bytes(), 0o644)
}
