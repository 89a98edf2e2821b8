// Package policies loads airlock's policy: a CUE schema embedded in the
// binary, the organisation's policy files from the runner host, and the
// repository's .github/airlock.cue read from the pull request's base
// commit, all unified into one effective policy.
//
// Security rules kept here: the repository's file is read from git objects
// of the base commit, never from the working tree (which the agent wrote);
// a repository can only tighten what the organisation set, because CUE
// unification turns a widening into a conflict; the schema is closed, so a
// misspelt field is an error rather than a silently ignored one. Policy
// text is untrusted input too (a pull request can propose one): files are
// size-capped, imports are refused, and evaluation has a deadline.
//
// Layer 1: a leaf (see internal/layers). It knows policies and events, never
// sandboxes or jobs: it imports only internal packages (git plumbing),
// never runner, gvisor or attest.
package policies
