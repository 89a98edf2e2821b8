// Package hook is airlock's runner plugin: the GitHub Actions runner's
// container hook (ACTIONS_RUNNER_CONTAINER_HOOKS; see docs/runner.md).
//
// The runner starts one process per call with a JSON document on
// standard input (protocol.go). Since a sandbox, its gateway and its
// records must outlive each call, prepare_job starts a job daemon (one per
// job, detached from the hook process, call.go and daemon.go) that owns
// them; later calls talk to it over a Unix socket in the job's directory
// (wire.go), and cleanup_job tells it to finish.
//
// The daemon's job (job.go) is built from the runner's payloads with the
// same runner.NewPlan as airlock run. What the payloads say (the runner's
// work directory as the workspace, the job container's image, its
// services, the pull request of the event) is planInputs' (inputs.go), a
// pure function; the job acts on it: the organisation's policy and the
// repository's at the base commit read through the GitHub API, the
// runner's directories prepared on the host. Around the session it keeps
// what only the hook needs: Docker actions and services as containers in
// the job's sandbox (containers.go), the trust baseline and authored diff
// from the GitHub API (trust.go), the interim attestation for
// actions/upload-artifact (interim.go) and the check run (check.go).
//
// Trust: everything in a payload and in the job's directories is the job's
// to shape. Host paths are opened without following symlinks, the
// runner's response directory is masked from the job, registry
// credentials serve the pull of their own image on the host alone (piped
// to the daemon, never stored, printed nor passed to the sandbox:
// registry.go), and no program is looked up through the job's PATH.
//
// Layer 7: above runner, below cmd/airlock; it may use gvisor, runner/trust
// and runner/github directly for what is the hook's alone.
package hook
