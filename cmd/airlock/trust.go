package main

import (
	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/report"
)

func newTrustCmd(code *int) *cobra.Command {
	cmd := &cobra.Command{Use: "trust", Short: "Diff the git hooks, git config and CI/build files a pull request touches"}
	var base, head, orgDir, format string
	diff := &cobra.Command{
		Use:   "diff --base REV [--head REV] [DIR]",
		Short: "The authored diff alone: what the commits base..head change in the trust set (no sandbox)",
		Long: `diff reads the commits from git objects (nothing is checked out and
nothing of the repository's config runs) and prints every change to the
trust-sensitive files between the merge base of --base and --head, with a
semantic diff of changed GitHub workflows. The categories and actions come
from the organisation policy and the repository's policy at the base
commit. Exit status 1 when a finding's action is fail.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if base == "" {
				return usagef("--base is required: the pull request's base commit")
			}
			org, err := orgSources(orgDir)
			if err != nil {
				return err
			}
			rep, err := runner.AuthoredReport(c.Context(), dir, org, base, head)
			if err != nil {
				return err
			}
			if err := report.WriteTrust(c.OutOrStdout(), rep, format); err != nil {
				return err
			}
			if rep.Failed {
				*code = 1
			}
			return nil
		},
	}
	diff.Flags().StringVar(&base, "base", "", "the pull request's base commit")
	diff.Flags().StringVar(&head, "head", "HEAD", "the pull request's head commit")
	diff.Flags().StringVar(&orgDir, "org", "", "organisation policy directory (default "+policies.DefaultOrgDir+" when it exists)")
	diff.Flags().StringVar(&format, "format", "markdown", "output: markdown, json or annotations (GitHub workflow commands)")
	cmd.AddCommand(diff)
	return cmd
}
