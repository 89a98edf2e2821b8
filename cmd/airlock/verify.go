package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/review"
	"github.com/airlock-ci/airlock/runner/report"
)

func newVerifyCmd(code *int) *cobra.Command {
	var req report.VerifyRequest
	cmd := &cobra.Command{
		Use:   "verify --key PUB [--commit SHA] [--policy compliance.cue] BUNDLE | verify --key PUB --artifact FILE [--repository URL] [--commit SHA] [--run URL] [--policy compliance.cue] BUNDLE|DIR | verify --key PUB --store URI (--pr N | --commit SHA) [--repo R] [--policy compliance.cue]",
		Short: "Verify an airlock attestation bundle, an artifact against its job's provenance, or every stored job of a pull request, offline, and check it against a compliance policy",
		Long: `verify checks the bundle's signature with the public key, then its payload (airlock's
predicate, the subject --commit, a CUE --policy over "predicate"), and prints what ran, its
egress and trust findings, or --json. --artifact FILE checks FILE's sha256 against a job's
provenance (BUNDLE, or DIR's *.provenance.sigstore.json) bound to --repository, --commit and
--run, and the run attestation beside it. --store verifies every job the store holds for --pr
or --commit, each against the commit it is filed under and what the store says of it, one line
each. Exit 0: verified; 1: not verified (why printed).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				req.Bundle = args[0]
			}
			req.Store.Query.Commit = req.Commit
			err := report.Verify(c.Context(), req, c.OutOrStdout(), c.ErrOrStderr())
			if errors.Is(err, report.ErrNotVerified) {
				*code = 1
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.KeyFile, "key", "", "public key (PEM) of the signer")
	f.StringVar(&req.Commit, "commit", "", "the subject must be this commit (with --artifact: the commit the job built; with --store: the jobs of this commit)")
	f.StringVar(&req.Binding.Repository, "repository", "", "with --artifact: the job's repository must be this (its URL)")
	f.StringVar(&req.Binding.Invocation, "run", "", "with --artifact: the provenance's invocation id must be this run's URL, or start with it")
	f.StringVar(&req.PolicyFile, "policy", "", "CUE compliance policy over the field predicate")
	f.StringVar(&req.HTMLFile, "html", "", "also write the HTML report to this file")
	f.StringVar(&req.Artifact, "artifact", "", "check this file against its job's provenance (BUNDLE or DIR)")
	f.BoolVar(&req.JSON, "json", false, "print the verified subject and predicate as JSON")
	f.StringVar(&req.Store.Store, "store", "", "verify the jobs this attestation store holds (oci://REGISTRY/REPOSITORY or file:///PATH)")
	f.StringVar(&req.Store.Auth, "store-auth", "", "with --store: Docker config.json with the registry's credentials")
	f.StringVar(&req.Store.Query.Repository, "repo", "", "with --store: only this repository's jobs")
	f.IntVar(&req.Store.Query.PullRequest, "pr", 0, "with --store: the jobs of this pull request")
	return cmd
}

func newReportCmd() *cobra.Command {
	var keyFile, out string
	var sel review.Selection
	cmd := &cobra.Command{
		Use:   "report [--key PUB] [-o FILE] BUNDLE | report --store URI (--pr N | --commit SHA) [--repo R] [--key PUB] -o FILE",
		Short: "Render an attestation bundle, or every stored job of a pull request, as one self-contained HTML page",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if sel.Store != "" {
				if len(args) > 0 || out == "" || (sel.Query.PullRequest == 0 && sel.Query.Commit == "") {
					return usagef("with --store give -o FILE and --pr N or --commit SHA, and no bundle")
				}
				return report.StoreReport(c.Context(), sel, keyFile, out)
			}
			if len(args) != 1 {
				return usagef("give a bundle, or --store")
			}
			v, status, err := report.ReadForReport(args[0], keyFile)
			if err != nil {
				return usageError{err}
			}
			if out == "" {
				out = strings.TrimSuffix(args[0], ".json") + ".html"
			}
			if err := attest.WriteHTMLFile(out, v, keyFile != "", status); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "public key to verify the bundle (or each stored job) with first")
	cmd.Flags().StringVarP(&out, "output", "o", "", "HTML file (default: the bundle's name with .html)")
	selectionFlags(cmd.Flags(), &sel)
	return cmd
}

func newKeysCmd() *cobra.Command {
	keys := &cobra.Command{Use: "keys", Short: "Signing keys for attestations"}
	var prefix, passwordFile string
	gen := &cobra.Command{
		Use:   "generate --out PREFIX",
		Short: "Write an ECDSA P-256 key pair: PREFIX.key (0600; encrypted when " + report.PasswordEnv + " or --password-file gives a password) and PREFIX.pub",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if prefix == "" {
				return usagef("--out PREFIX is required")
			}
			state, err := report.GenerateKeys(prefix, passwordFile)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "wrote %s.key (%s) and %s.pub\n", prefix, state, prefix)
			return nil
		},
	}
	gen.Flags().StringVar(&prefix, "out", "", "path prefix of the two files")
	gen.Flags().StringVar(&passwordFile, "password-file", "", "file holding the password (when "+report.PasswordEnv+" is not set)")
	keys.AddCommand(gen)
	return keys
}
