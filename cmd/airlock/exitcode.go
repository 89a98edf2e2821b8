package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
)

// Exit codes of airlock's own failures. A failing step exits with its own
// code instead; these are chosen from sysexits.h to be told apart from the
// usual step codes (1, 2, 126, 127, 128+N).
const (
	exitOK          = 0
	exitUsage       = 64  // bad flags, arguments or steps file
	exitDataErr     = 65  // an invalid policy
	exitNoInput     = 66  // the workspace or another input does not exist
	exitUnavailable = 69  // the sandbox could not be started on this host (no /proc/self/exe, unsupported kernel, kvm asked for where it cannot boot, runsc failed)
	exitInternal    = 70  // an airlock bug or an unexpected host failure
	exitCantCreate  = 73  // a required attestation store did not take the job's record
	exitNoPerm      = 77  // not root
	exitInterrupted = 130 // SIGINT or SIGTERM: the job was cancelled
)

// usageError marks errors that are the caller's input.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// flagSpelling is how airlock's flags name the inputs that the packages
// below cmd name in words (input.Name).
func flagSpelling() input.Spelling {
	return input.Spelling{
		input.RootFS: "--rootfs", input.Platform: "--platform", input.WorkspaceMount: "--workspace-mount",
		input.Capabilities: "--cap", input.User: "--user",
		input.JobTimeout: "--timeout", input.StepTimeout: "--step-timeout", input.Memory: "--memory", input.Pids: "--pids",
		input.CPUs: "--cpus", input.Overlay: "--overlay-size", input.Tmp: "--tmp-size", input.Output: "--output-limit", input.WorkspaceSize: "--workspace-size", input.Env: "--env", input.Format: "--format",
		input.Base: "--base", input.Event: "--event", input.AttestKey: "--attest-key", input.StateDir: "--state-dir",
		input.Node: "--node", input.OrgDir: "--org", input.VerifyKey: "--key", input.AllowUnsigned: "--allow-unsigned",
	}
}

// exitCodeFor maps an error to an exit code and prints it as one sentence.
func exitCodeFor(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "airlock: %s\n", flagSpelling().Say(err))
	var u usageError
	var in runner.InputError
	var pe runner.PolicyError
	var invalid *policies.Error
	switch {
	case errors.As(err, &pe), errors.As(err, &invalid):
		return exitDataErr
	case errors.As(err, &u), errors.As(err, &in), errors.Is(err, runner.ErrInvalidConfig):
		return exitUsage
	case errors.Is(err, runner.ErrNotRoot):
		return exitNoPerm
	case errors.Is(err, runner.ErrNoWorkspace):
		return exitNoInput
	case errors.Is(err, runner.ErrNoSelfExe), errors.Is(err, runner.ErrStartFailure), errors.Is(err, runner.ErrHostUnsupported), errors.Is(err, runner.ErrPlatformUnusable):
		return exitUnavailable
	}
	return exitInternal
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
