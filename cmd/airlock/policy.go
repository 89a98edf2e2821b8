package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/suggest"
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
	cmd.AddCommand(newPolicyVetCmd(code), newPolicyEvalCmd(code), newPolicyTestCmd(code), newPolicySuggestCmd(code))
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
			if policies.VetFiles(cmd.Context(), args, org, cmd.OutOrStdout(), cmd.ErrOrStderr()) > 0 {
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
				return err // an invalid policy exits 65 (exitCodeFor)
			}
			switch {
			case o.explain:
				out.Effective.WriteExplain(cmd.OutOrStdout())
			case o.asJSON:
				return printJSON(cmd.OutOrStdout(), out)
			default:
				out.Effective.WriteCUE(cmd.OutOrStdout(), out.Change)
			}
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
	eff, pr, err := runner.LocalPolicy(cmd.Context(), o.repo, o.orgDir, "", o.base, o.head)
	return evalResult{Effective: eff, Change: pr.HeadChangesPolicy}, err
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

func newPolicySuggestCmd(code *int) *cobra.Command {
	var req suggest.Request
	cmd := &cobra.Command{
		Use:   "suggest [--key PUB] [--repo DIR --base REV] [--org DIR] BUNDLE...",
		Short: "Suggest the repository's egress rules from the attestations of audit (or refused) runs",
		Long: `suggest reads attested runs (airlock's Sigstore bundles; with
--allow-unsigned also unsigned statements), verifying each with --key
first, and turns the egress they were refused, or under egress.mode
"audit" would have been refused, into egress.allow rules as narrow as
the evidence: host, ports, and for plain HTTP the methods and path
prefixes seen, each rule with a comment on what it rests on. The rules
are merged into the repository's .github/airlock.cue at --base (what it
allows already is left out) and the file is printed, or written to -o.
It never suggests an IP address, a deny range or anything for trust;
a "*.suffix" rule only stands for several sibling names seen. The
result passes "airlock policy vet --org" before it is printed.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Bundles = args
			err := suggest.Command(cmd.Context(), req, cmd.OutOrStdout(), cmd.ErrOrStderr())
			var failed suggest.Failure
			if errors.As(err, &failed) {
				fmt.Fprintln(cmd.ErrOrStderr(), flagSpelling().Say(err))
				*code = exitDataErr
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.KeyFile, "key", "", "public key (PEM) the bundles must be signed with")
	f.BoolVar(&req.AllowUnsigned, "allow-unsigned", false, "also read bundles no key verifies and unsigned statements (*.UNSIGNED.intoto.json), as unverified evidence")
	f.StringVar(&req.Dir, "repo", "", "git repository whose "+policies.RepoPolicyPath+" the rules are merged into")
	f.StringVar(&req.Base, "base", "", "the commit to read the repository policy from (with --repo)")
	f.StringVar(&req.OrgDir, "org", "", "organisation policy directory (default "+policies.DefaultOrgDir+" when it exists): what it allows is left out, and the result is vetted against it")
	f.StringVarP(&req.Output, "output", "o", "", "write the policy to this file instead of standard output")
	f.BoolVar(&req.AgentRuns, "include-agent-runs", false, "also learn from runs of pull requests detected as agent work (left out by default: what an agent tried to reach is no evidence of what the repository needs)")
	return cmd
}
