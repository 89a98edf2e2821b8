package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-ci/airlock/attest/review"
	"github.com/airlock-ci/airlock/runner/hook"
	"github.com/airlock-ci/airlock/runner/report"
)

// selectionFlags are the flags that name a store and the jobs in it.
func selectionFlags(f *pflag.FlagSet, s *review.Selection) {
	f.StringVar(&s.Store, "store", "", "the attestation store: oci://REGISTRY/REPOSITORY or file:///PATH")
	f.StringVar(&s.Auth, "store-auth", "", "Docker config.json with the registry's credentials (default: anonymous)")
	f.StringVar(&s.Query.Repository, "repo", "", "only this repository's jobs (owner/name or its URL)")
	f.IntVar(&s.Query.PullRequest, "pr", 0, "only this pull request's jobs")
	f.StringVar(&s.Query.Commit, "commit", "", "only this commit's jobs (its id, or 7 or more of its first hex digits)")
}

func newAttestationsCmd(code *int) *cobra.Command {
	cmd := &cobra.Command{Use: "attestations", Short: "List and fetch the jobs' records in an attestation store"}
	var sel review.Selection
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls --store URI [--repo R] [--pr N | --commit SHA] [--json]",
		Short: "List the stored jobs, one line each: verdict, kind, time, pull request, commit, run, job and reference",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, entries, err := sel.Load(c.Context())
			if err != nil {
				return err
			}
			return review.WriteList(c.OutOrStdout(), entries, asJSON)
		},
	}
	selectionFlags(ls.Flags(), &sel)
	ls.Flags().BoolVar(&asJSON, "json", false, "print the entries as JSON")
	var getSel review.Selection
	var dir string
	get := &cobra.Command{
		Use:   "get --store URI (--commit SHA | --pr N | REF) -o DIR",
		Short: "Write the stored bundles as files (TAG.sigstore.json) that airlock verify and cosign take",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				getSel.Ref = args[0]
			}
			if dir == "" || (getSel.Ref == "" && getSel.Query.Commit == "" && getSel.Query.PullRequest == 0) {
				return usagef("give -o DIR and what to get: --commit SHA, --pr N, or a reference (a tag or a digest)")
			}
			b, entries, err := getSel.Load(c.Context())
			if err != nil {
				return err
			}
			files, err := review.Get(c.Context(), b, entries, dir)
			for _, f := range files {
				fmt.Fprintln(c.OutOrStdout(), f)
			}
			return err
		},
	}
	selectionFlags(get.Flags(), &getSel)
	get.Flags().StringVarP(&dir, "output", "o", "", "directory to write the bundles to")
	cmd.AddCommand(ls, get, newMissingCmd(code))
	return cmd
}

func newMissingCmd(code *int) *cobra.Command {
	req := report.MissingRequest{Token: cmp.Or(os.Getenv(hook.GitHubTokenEnv), os.Getenv("GITHUB_TOKEN")), BaseURL: cmp.Or(os.Getenv(hook.GitHubAPIEnv), os.Getenv("GITHUB_API_URL"))}
	cmd := &cobra.Command{
		Use:   "missing --store URI --repo OWNER/NAME --pr N --runs-on LABEL --key PUB",
		Short: "Name the pull request's jobs on airlock's runners that have no stored attestation (GitHub API: " + hook.GitHubTokenEnv + " or GITHUB_TOKEN)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			err := report.Missing(c.Context(), req, c.OutOrStdout())
			if errors.Is(err, report.ErrMissing) {
				*code = 1
				return nil
			}
			return err
		},
	}
	selectionFlags(cmd.Flags(), &req.Store)
	cmd.Flags().StringArrayVar(&req.RunsOn, "runs-on", nil, "a runs-on label of airlock's runners (repeatable)")
	cmd.Flags().StringVar(&req.KeyFile, "key", "", "public key (PEM) a stored attestation must verify with to stand for a job")
	return cmd
}
