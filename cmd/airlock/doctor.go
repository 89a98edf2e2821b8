package main

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/doctor"
	"github.com/airlock-ci/airlock/runner/hook"
	"github.com/airlock-ci/airlock/runner/report"
)

// doctorOptions are the flags of `airlock doctor`. The hook's settings
// default to its environment, as the runner host sets it.
type doctorOptions struct {
	asJSON     bool
	stateDir   string
	hookDir    string
	orgDir     string
	attestKey  string
	node       string
	workspaces []string
	hook       hook.Config
}

func (o *doctorOptions) addFlags(f *pflag.FlagSet, hookCfg hook.Config) {
	o.hook = hookCfg
	f.BoolVar(&o.asJSON, "json", false, "print the checks as JSON")
	f.StringVar(&o.stateDir, "state-dir", runner.DefaultStateRoot, "airlock run's state directory")
	f.StringVar(&o.hookDir, "hook-dir", hookCfg.JobsRoot, "the runner hook's jobs directory ("+hook.JobsRootEnv+")")
	f.StringVar(&o.orgDir, "org", hookCfg.OrgDir, "organisation policy directory ("+hook.OrgDirEnv+"; default /etc/airlock when it exists)")
	f.StringVar(&o.attestKey, "attest-key", hookCfg.AttestKey, "signing key ("+hook.AttestKeyEnv+"; default: the organisation policy's attest.key)")
	f.StringVar(&o.node, "node", "", "the node the runner runs the hook with (<runner>/externals/node20/bin/node; default: node in PATH)")
	f.StringArrayVar(&o.workspaces, "workspace", nil, "a directory jobs work in, such as the runner's _work (repeatable; default $RUNNER_WORKSPACE): no state directory may be inside one")
}

func newDoctorCmd(code *int) *cobra.Command {
	var o doctorOptions
	cmd := &cobra.Command{
		Use:   "doctor [--json]",
		Short: "Check that this host can run airlock's jobs (for the runner's administrator)",
		Long: `doctor checks the host the way a job uses it: root, the kernel, the
cgroup layout and controllers, the gVisor platforms (a probe sandbox
boots on systrap, and on kvm where /dev/kvm opens), a sandbox with a
job's limits, network namespaces and veth, the state directories, node
for the runner hook, the organisation policy and the signing key.

Each line is ok, warn or fail, with the reason and the fix. Exit status:
0 when the host can run jobs (warnings allowed), 69 when a check
failed, 77 when not run as root.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if ws := os.Getenv("RUNNER_WORKSPACE"); len(o.workspaces) == 0 && ws != "" {
				o.workspaces = []string{ws}
			}
			rep := doctor.Run(c.Context(), doctor.Options{
				StateRoot: o.stateDir, HookDir: o.hookDir, Workspaces: o.workspaces,
				OrgDir: o.orgDir, AttestKey: o.attestKey, Node: o.node, Spelling: flagSpelling(), RunscBuildID: runscBuildID,
				AttestStores: o.hook.AttestStores, AttestStoreAuth: o.hook.AttestStoreAuth,
				Password: attest.PasswordFromEnv(report.PasswordEnv, ""),
			})
			if o.asJSON {
				if err := printJSON(c.OutOrStdout(), rep); err != nil {
					return err
				}
			} else {
				rep.WriteText(textsafe.Writer(c.OutOrStdout()))
			}
			switch {
			case !rep.Ready && rep.NotRoot():
				*code = exitNoPerm
			case !rep.Ready:
				*code = exitUnavailable
			}
			return nil
		},
	}
	o.addFlags(cmd.Flags(), hook.ConfigFromEnv(build()))
	return cmd
}
