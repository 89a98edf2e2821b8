package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/internal/gitexec"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/trust"
)

// publishTrust shows the trust findings where a reviewer looks: GitHub
// annotations (when running in GitHub Actions) and the job summary file.
func publishTrust(r *trust.Report, stdout, stderr io.Writer) {
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		r.WriteAnnotations(stdout)
	}
	if p := os.Getenv("GITHUB_STEP_SUMMARY"); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			_, err = io.WriteString(f, r.Markdown())
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "airlock: write the job summary: %v\n", err)
		}
	}
}

// pauseWorkflowCommands stops GitHub's processing of workflow commands
// in the log (when running under GitHub Actions) and returns the function
// that resumes it.
func pauseWorkflowCommands(w io.Writer) func() {
	if os.Getenv("GITHUB_ACTIONS") != "true" {
		return func() {}
	}
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	fmt.Fprintf(w, "::stop-commands::%s\n", token)
	return func() { fmt.Fprintf(w, "::%s::\n", token) }
}

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
			if _, err := gitexec.ResolveCommit(c.Context(), dir, base); err != nil {
				return usageError{fmt.Errorf("--base: %w (a shallow clone lacks older commits: fetch the history, e.g. actions/checkout with fetch-depth: 0)", err)}
			}
			srcs, err := loadOrgPolicy(orgDir)
			if err != nil {
				return err
			}
			src, err := policies.FromCommit(c.Context(), dir, base)
			if err != nil {
				return usageError{fmt.Errorf("repository policy: %w", err)}
			}
			if src != nil {
				srcs = append(srcs, *src)
			}
			eff, err := policies.Load(c.Context(), srcs)
			if err != nil {
				return policyError{err}
			}
			set, err := trust.NewSet(eff.Policy.Trust)
			if err != nil {
				return policyError{err}
			}
			findings, err := trust.AuthoredDiff(c.Context(), dir, base, head, set)
			if err != nil {
				return usageError{err}
			}
			rep := &trust.Report{Findings: findings}
			if rep.Findings == nil {
				rep.Findings = []trust.Finding{}
			}
			rep.Decide()
			out := c.OutOrStdout()
			switch format {
			case "json":
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			case "annotations":
				rep.WriteAnnotations(out)
			case "markdown":
				io.WriteString(out, rep.Markdown())
			default:
				return usagef("--format %q: want markdown, json or annotations", format)
			}
			if rep.Failed {
				*code = 1
			}
			return nil
		},
	}
	diff.Flags().StringVar(&base, "base", "", "the pull request's base commit")
	diff.Flags().StringVar(&head, "head", "HEAD", "the pull request's head commit")
	diff.Flags().StringVar(&orgDir, "org", "", "organisation policy directory (default "+defaultOrgPolicyDir+" when it exists)")
	diff.Flags().StringVar(&format, "format", "markdown", "output: markdown, json or annotations (GitHub workflow commands)")
	cmd.AddCommand(diff)
	return cmd
}
