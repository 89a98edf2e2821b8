// Package store keeps a job's signed bundles (its run attestation and its
// provenance) where they outlive the runner, and finds them again for a
// reviewer. A store is named by a storeref.Ref; each kind has its own
// file behind one Backend interface, as Tekton Chains keeps its storage
// backends:
//
//   - oci.go: an OCI registry, in the layout of cosign's BUNDLE_SPEC:
//     each bundle an OCI 1.1 artifact (artifactType the Sigstore bundle
//     media type, the empty config, one layer holding the bundle byte for
//     byte), annotated with what a reviewer filters on, whose subject is
//     a small manifest of its commit, so that the referrers of a commit
//     are its jobs (the referrers API where the registry has it, the
//     sha256-<hex> fallback tag where it answers 404); and a readable tag
//     per job (tag.go) that lists by prefix.
//   - file.go: a directory on a mounted volume (NFS, a PVC), one file per
//     bundle and one per entry.
//
// Keeper (keep.go) is what the doors call when a job ends: it writes a
// pending marker beside the bundles, pushes them to every store with
// bounded retries (go-retryablehttp under go-containerregistry), and
// removes the marker only once every store holds them; the next job on
// the runner retries what is still pending.
//
// What must stay true:
//   - A record is never overwritten or deleted through this package: a
//     job's tag is unique to it (it ends with airlock's job id), a tag that
//     already holds other content is refused (ErrConflict), and nothing
//     here issues a DELETE. A fallback index is only ever added to.
//   - Credentials come from one file on the host (Docker's config.json),
//     are sent only to the registry they are for (never after a redirect
//     to another host), and never reach an error, a log or a record.
//   - Nothing here runs in the sandbox: the doors call it after the job's
//     sandbox is gone.
//   - What a registry or a file store returns is untrusted: sizes are
//     capped and a bundle is checked against its digest before use.
//
// Layer 2: above attest (whose media types it uses) and attest/storeref;
// below runner/report, which makes the records, and the doors.
package store
