// Package report says what a job did, to each reader: the attestation's
// predicate (Predicate) and the signed statement with its retention
// (WriteAttestation, Retention), the job's SLSA provenance of its
// artifacts beside it (Finish; docs/provenance.md) and the check of an
// artifact against it (VerifyArtifact, WriteArtifactVerified), the human
// summary (WriteSummary and its parts), and, when airlock runs as a step
// of a GitHub Actions job, the workflow commands and job summary
// (PauseWorkflowCommands, PublishTrust).
//
// It reads a runner.Result and writes; it decides nothing about the job.
// Everything a job wrote into its result is bounded here before it is
// signed (a hostile step can make its messages, argv and diffs huge,
// never the statement).
//
// Layer 6: above runner (whose Result it reads) and the job's parts whose
// records it renders (runner/egress, runner/credentials, runner/trust);
// below the doors (runner/hook, cmd/airlock).
package report
