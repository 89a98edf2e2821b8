package main

import (
	"github.com/spf13/cobra"

	"github.com/airlock-ci/airlock/runner/hook"
)

func newHookCmd(code *int) *cobra.Command {
	return &cobra.Command{
		Use:   "hook",
		Short: "The GitHub Actions runner's container hook (ACTIONS_RUNNER_CONTAINER_HOOKS runs it through index.js)",
		Long: `hook reads one container-hook call from standard input (prepare_job,
run_script_step, run_container_step or cleanup_job) and runs the job's
steps in an airlock sandbox. prepare_job starts a daemon per job that
owns the sandbox, its egress gateway and its records; the other calls
talk to it. Configure the runner host with ` + hook.OrgDirEnv + ` (organisation
policy), ` + hook.AttestKeyEnv + ` (signing key) and ` + hook.JobsRootEnv + `.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			n, err := hook.Handle(c.Context(), hook.ConfigFromEnv(build()), c.InOrStdin(), c.OutOrStdout(), c.ErrOrStderr())
			*code = n
			return err
		},
	}
}
