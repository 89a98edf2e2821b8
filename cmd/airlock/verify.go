package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/runner/report"
)

func newVerifyCmd(code *int) *cobra.Command {
	var keyFile, commitSHA, policyFile, htmlFile, artifact string
	var bind attest.Binding
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify --key PUB [--commit SHA] [--policy compliance.cue] BUNDLE | verify --key PUB --artifact FILE [--repository URL] [--commit SHA] [--run URL] [--policy compliance.cue] BUNDLE|DIR",
		Short: "Verify an airlock attestation bundle, or an artifact against its job's provenance, offline, and check it against a compliance policy",
		Long: `verify checks the bundle's signature with the public key, then its payload (airlock's
predicate, the subject --commit, a CUE --policy over "predicate"), and prints what ran, its
egress and trust findings, or --json. --artifact FILE checks FILE's sha256 against a job's
provenance (BUNDLE, or DIR's *.provenance.sigstore.json) bound to --repository, --commit and
--run, and the run attestation beside it. Exit 0: verified; 1: not verified (why printed).`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if keyFile == "" {
				return usagef("--key is required: the public key (PEM) the bundle must be signed with")
			}
			v, err := attest.LoadVerifierFile(keyFile)
			if err != nil {
				return usageError{err}
			}
			var policy []byte
			if policyFile != "" {
				if policy, err = files.ReadCapped(policyFile, 1<<20); err != nil {
					return usageError{err}
				}
			}
			notVerified := func(err error) error {
				*code = 1
				fmt.Fprintf(c.ErrOrStderr(), "NOT VERIFIED: %v\n", err)
				return nil
			}
			switch {
			case artifact == "" && (bind.Repository != "" || bind.Invocation != ""):
				return usagef("--repository and --run are for an artifact's provenance: with --artifact")
			case artifact != "" && htmlFile != "":
				return usagef("--html is for a run attestation: not with --artifact")
			case artifact != "":
				bind.Commit = commitSHA
				rep, err := report.VerifyArtifact(report.ArtifactQuery{Artifact: artifact, Provenance: args[0], Compliance: policy, ComplianceName: policyFile, Binding: bind}, v)
				if err != nil {
					return notVerified(err)
				}
				return report.WriteArtifactVerified(c.OutOrStdout(), rep, asJSON)
			}
			res, err := report.VerifyFile(args[0], v, attest.VerifyOptions{Commit: commitSHA, Compliance: policy, ComplianceName: policyFile})
			if err != nil {
				return notVerified(err)
			}
			if htmlFile != "" {
				if err := attest.WriteHTMLFile(htmlFile, res, true, "signature verified with "+keyFile); err != nil {
					return err
				}
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), res)
			}
			report.WriteVerified(c.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "public key (PEM) of the signer")
	cmd.Flags().StringVar(&commitSHA, "commit", "", "the subject must be this commit (with --artifact: the commit the job built)")
	cmd.Flags().StringVar(&bind.Repository, "repository", "", "with --artifact: the job's repository must be this (its URL)")
	cmd.Flags().StringVar(&bind.Invocation, "run", "", "with --artifact: the provenance's invocation id must be this run's URL, or start with it")
	cmd.Flags().StringVar(&policyFile, "policy", "", "CUE compliance policy over the field predicate")
	cmd.Flags().StringVar(&htmlFile, "html", "", "also write the HTML report to this file")
	cmd.Flags().StringVar(&artifact, "artifact", "", "check this file against its job's provenance (BUNDLE or DIR)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the verified subject and predicate as JSON")
	return cmd
}

func newReportCmd() *cobra.Command {
	var keyFile, out string
	cmd := &cobra.Command{
		Use:   "report [--key PUB] [-o FILE] BUNDLE",
		Short: "Render an attestation bundle as a self-contained HTML page",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
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
	cmd.Flags().StringVar(&keyFile, "key", "", "public key to verify the bundle with first")
	cmd.Flags().StringVarP(&out, "output", "o", "", "HTML file (default: the bundle's name with .html)")
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
			password, err := attest.NewKeyPassword(report.PasswordEnv, passwordFile)
			if err != nil {
				return usageError{err}
			}
			if err := attest.WriteKeyPair(prefix, password); err != nil {
				var pathErr *fs.PathError
				if errors.As(err, &pathErr) {
					return usageError{err} // where the files go, not the key
				}
				return err
			}
			state := "not encrypted"
			if len(password) > 0 {
				state = "encrypted"
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
