package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
)

// policyOptions are the flags of `airlock policy eval`.
type policyOptions struct {
	orgDir  string
	repo    string
	base    string
	head    string
	asJSON  bool
	explain bool
}

func (o *policyOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.orgDir, "org", "", "organisation policy directory (*.cue); default "+policies.DefaultOrgDir+" when it exists")
	f.StringVar(&o.repo, "repo", "", "git repository whose "+policies.RepoPolicyPath+" applies")
	f.StringVar(&o.base, "base", "", "the pull request's base commit: the repository policy is read from it")
	f.StringVar(&o.head, "head", "", "the pull request's head commit: report whether it changes the policy")
	f.BoolVar(&o.asJSON, "json", false, "print the effective policy and its sources as JSON")
	f.BoolVar(&o.explain, "explain", false, "print each value with the files that set it (schema default when none)")
}

func newPolicyCmd(code *int) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Validate and evaluate airlock policies (CUE)",
	}
	cmd.AddCommand(newPolicyVetCmd(code), newPolicyEvalCmd(code), newPolicyTestCmd(code))
	return cmd
}

func newPolicyVetCmd(code *int) *cobra.Command {
	var orgDir string
	cmd := &cobra.Command{
		Use:   "vet FILE...",
		Short: "Check policy files against the schema (and the organisation policy with --org)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var org []policies.Source
			if orgDir != "" {
				var err error
				if org, err = policies.LoadOrgDir(orgDir); err != nil {
					return usageError{err}
				}
			}
			bad := 0
			for _, f := range args {
				srcs, err := policies.ReadFiles([]string{f}, policies.KindRepo)
				if err == nil {
					_, err = policies.Load(cmd.Context(), append(append([]policies.Source{}, org...), srcs...))
				}
				if err != nil {
					bad++
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", f, err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "ok %s\n", f)
			}
			if bad > 0 {
				*code = exitDataErr
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&orgDir, "org", "", "also unify with this organisation policy directory")
	return cmd
}

func newPolicyEvalCmd(code *int) *cobra.Command {
	o := &policyOptions{}
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Print the effective policy: schema, organisation policy and the repository's policy at the base commit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := o.evaluate(cmd)
			if err != nil {
				var perr *policies.Error
				if errors.As(err, &perr) {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
					*code = exitDataErr
					return nil
				}
				return err
			}
			if o.explain {
				for _, e := range out.Effective.Explain {
					by := "schema default"
					if len(e.SetBy) > 0 {
						by = strings.Join(e.SetBy, "; ")
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\t# %s\n", e.Path, e.Value, by)
				}
				return nil
			}
			if o.asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "// effective policy %s\n", out.Effective.Digest)
			for _, s := range out.Effective.Sources {
				fmt.Fprintf(cmd.OutOrStdout(), "// source %s %s%s sha256:%s\n", s.Kind, s.Path, atCommit(s.Commit), s.SHA256)
			}
			if out.Change != nil && out.Change.Changed {
				fmt.Fprintf(cmd.OutOrStdout(), "// the head commit changes %s: that change does not apply to this run\n", policies.RepoPolicyPath)
			}
			fmt.Fprint(cmd.OutOrStdout(), out.Effective.CUE)
			return nil
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

// evalResult is what `policy eval --json` prints.
type evalResult struct {
	Effective *policies.Effective    `json:"effective"`
	Change    *policies.PolicyChange `json:"headChangesPolicy,omitempty"`
}

func (o *policyOptions) evaluate(cmd *cobra.Command) (evalResult, error) {
	if (o.repo == "") != (o.base == "") {
		return evalResult{}, usagef("--repo and --base go together: the repository policy is read from the base commit")
	}
	org, err := orgSources(o.orgDir)
	if err != nil {
		return evalResult{}, err
	}
	eff, pr, err := runner.LocalPolicy(cmd.Context(), o.repo, org, "", o.base, o.head)
	return evalResult{Effective: eff, Change: pr.HeadChangesPolicy}, err
}

func atCommit(c string) string {
	if c == "" {
		return ""
	}
	return "@" + c
}

func newPolicyTestCmd(code *int) *cobra.Command {
	return &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run the policy test cases (*.txtar) in DIR (default: .github/airlock-tests)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := ".github/airlock-tests"
			if len(args) == 1 {
				dir = args[0]
			}
			results, err := policies.RunTests(cmd.Context(), dir, cmd.OutOrStdout())
			if err != nil {
				return usageError{err}
			}
			for _, r := range results {
				if r.Failed {
					*code = 1
				}
			}
			return nil
		},
	}
}

// orgSources reads the organisation policy from dir, or from the host's
// default directory (see policies.OrgSources).
func orgSources(dir string) ([]policies.Source, error) {
	srcs, err := policies.OrgSources(dir)
	if err != nil {
		return nil, usageError{err}
	}
	return srcs, nil
}
