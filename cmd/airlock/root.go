package main

import (
	"io"

	"github.com/spf13/cobra"
)

// execute runs the CLI and returns the process exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	code := exitOK
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Run CI jobs of agent-authored pull requests inside a gVisor sandbox",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newVersionCmd(), newRunCmd(&code), newPolicyCmd(&code), newTrustCmd(&code), newVerifyCmd(&code), newReportCmd(), newKeysCmd(), newHookCmd(&code), newDoctorCmd(&code), newImagesCmd(), newAttestationsCmd(&code))
	if err := root.Execute(); err != nil {
		return exitCodeFor(err, stderr)
	}
	return code
}
