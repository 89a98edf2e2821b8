// Package monitor receives gVisor runtime-monitoring events from a sandbox
// and turns them into a bounded process record: execs (with the binary's
// sha256), exits, connects, forks refused with EAGAIN, and, when the job
// has read-only trust paths, writes refused with EROFS (opens are most of
// a build's events, so they are traced only then: PodInitConfig). The
// sentry runs airlock's own trace sink (sink.go: gVisor's remote sink,
// filtered) and sends only the events a record keeps. A
// process record is made in one place: Record.apply (record.go), for
// every event the receiver accepts.
//
// The sentry sends events over a SOCK_SEQPACKET Unix socket: one handshake
// message each way, then one packet per event made of a small header
// (header size, message type, dropped count) and a protobuf payload from
// gvisor.dev/gvisor/pkg/sentry/seccheck/points/points_go_proto.
//
// Trust: the sentry is trusted code, but every field it reports (paths,
// argv, addresses) is chosen by the untrusted workload. Every packet is
// therefore treated as hostile input: sizes are checked before use, unknown
// or malformed packets are counted and skipped, strings are truncated, and
// the record stops growing at fixed bounds while counting what it dropped.
// Nothing a packet contains can make the receiver panic, block the sandbox
// (the sentry drops events rather than wait for us) or grow memory without
// bound.
//
// Layer 1: imports nothing of airlock's; only gvisor uses it directly, the
// rest reads its records through gvisor and runner.
package monitor
