// Package images brings the container images that a job names
// (container:, services:, docker:// actions, `airlock run --image`) onto
// the runner, for the sandbox to run on. It decides whether the
// organisation's policy allows a reference (Decide), pulls it by digest
// from its registry on the host, never in the sandbox (Puller), keeps
// blobs and unpacked roots in a content-addressed cache that every job
// shares (Store), unpacks each image once as if every layer were hostile
// (Unpack), checks the signatures the policy requires (VerifySignature),
// and says what each reference resolved to, for the record (Resolved).
//
// What is trusted: nothing that comes from a registry. Manifests and
// configs are read bounded and strictly; a blob is used only after its
// sha256 matched its digest, and a layer's uncompressed content is used only after
// it matched the config's diff id; the unpacker writes only through an
// os.Root of the image's own directory. The reference may be an agent's
// (its pull request can change the workflow): for an agent's job every
// address the registry's name resolves to is checked against the egress
// deny ranges at dial time, so neither a name nor DNS rebinding reaches
// the runner's own network. Registry credentials (the runner's, the
// host's Docker config) are used on the host only: they are in no
// sandbox, log, error or record.
//
// Layer 3: above the policies (policies) and the egress deny ranges
// (runner/egress/rules) that it applies; runner and the hook use it.
package images
