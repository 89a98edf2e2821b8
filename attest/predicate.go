// Package attest makes and checks airlock's attestations: an in-toto
// Statement v1 whose subject is the pull request's head commit and whose
// predicate (PredicateType, documented in attest/README.md) says what ran
// in the sandbox, what egress was allowed or denied and what trust-
// sensitive files were touched; signed as a DSSE envelope through
// sigstore's signers and written as a Sigstore bundle that cosign also
// verifies offline. Beside it, a job's artifacts get a SLSA provenance v1
// statement (provenance.go, docs/provenance.md) that names the run
// attestation as its byproduct. A signature is checked in one place:
// signedPayload (verify.go), under Verify and VerifyProvenance, which
// ReadEvidence, VerifyArtifact and the doors call.
//
// Layer 1: a leaf (see internal/layers). It knows statements, signatures and
// the predicate's shape, never a job: runner/report builds the predicate
// from a job's result (report.Predicate). It must not import runner, gvisor or
// policies.
package attest

import (
	"encoding/json"
	"time"
)

// PredicateType names and versions airlock's run predicate.
const PredicateType = "https://github.com/airlock-ci/airlock/attest/run/v1"

// Predicate is what the attestation says about a run. Fields are
// lowerCamelCase, times RFC 3339 UTC, and every field is always present
// (null or empty when unknown), so a compliance policy never mistakes a
// missing value for one it demands. A verifier decodes it strictly:
// unknown fields are an error.
type Predicate struct {
	Runner    Runner    `json:"runner"`
	Policy    Policy    `json:"policy"`
	Job       Job       `json:"job"`
	Steps     []Step    `json:"steps"`
	Processes Processes `json:"processes"`
	Egress    Egress    `json:"egress"`
	Trust     Trust     `json:"trust"`
	// Credentials are the job's own credentials the sandbox saw only as
	// placeholders, and where each went.
	Credentials Credentials `json:"credentials"`
	Verdict     Verdict     `json:"verdict"`
	Times       RunTimes    `json:"times"`
	Sandbox     SandboxRef  `json:"sandbox"`
}

// Runner identifies the software and host that ran the job.
type Runner struct {
	AirlockVersion string `json:"airlockVersion"`
	AirlockCommit  string `json:"airlockCommit"`
	GVisorVersion  string `json:"gvisorVersion"`
	Platform       string `json:"platform"`
	// PlatformReason says why the job ran on Platform ("kvm unusable:
	// ..."), and PlatformAttempts are the sandbox's starts, in order.
	PlatformReason   string            `json:"platformReason"`
	PlatformAttempts []PlatformAttempt `json:"platformAttempts"`
	Hostname         string            `json:"hostname"`
	MachineIDSHA256  string            `json:"machineIdSha256"`
	// GitHub is set when the job ran under GitHub Actions.
	GitHub *GitHubRun `json:"github"`
}

// PlatformAttempt is one start of the job's sandbox: the platform, and
// why it did not boot (empty: it booted).
type PlatformAttempt struct {
	Platform string `json:"platform"`
	Error    string `json:"error"`
}

// GitHubRun identifies a GitHub Actions run.
type GitHubRun struct {
	Repository string `json:"repository"`
	RunID      string `json:"runId"`
	RunAttempt string `json:"runAttempt"`
	Workflow   string `json:"workflow"`
	Job        string `json:"job"`
	RunnerName string `json:"runnerName"`
}

// Policy is the policy that governed the run.
type Policy struct {
	Sources         []PolicySource `json:"sources"`
	EffectiveSHA256 string         `json:"effectiveSha256"`
	Agent           *AgentDecision `json:"agent"`
}

// PolicySource is one policy file.
type PolicySource struct {
	Kind   string `json:"kind"`
	Path   string `json:"path"`
	Commit string `json:"commit"`
	SHA256 string `json:"sha256"`
}

// AgentDecision is the agent-detection outcome.
type AgentDecision struct {
	Agent  bool   `json:"agent"`
	Reason string `json:"reason"`
}

// Job identifies the pull request and job.
type Job struct {
	Name        string `json:"name"`
	Repository  string `json:"repository"`
	PullRequest int    `json:"pullRequest"`
	BaseSHA     string `json:"baseSha"`
	HeadSHA     string `json:"headSha"`
	Author      string `json:"author"`
	Event       string `json:"event"`
	// ContainerImage is the job container's image as the workflow named
	// it (runner hook); what it resolved to, when it was pulled, is in
	// Images.
	ContainerImage string `json:"containerImage"`
	// Images are the images the job pulled from registries (its
	// container's, its services', its Docker actions'), each as written
	// and as resolved; an image the organisation maps to a directory is
	// not among them.
	Images []Image `json:"images,omitempty"`
}

// Image is one image a job ran on: the reference as written, the digest
// it resolved to in its registry (an index's for a multi-platform
// image), the platform's image manifest that ran, the platform, the
// policy rule that allowed it, and the signature that verified it when
// the rule asked for one. A tag that moved between two jobs shows here
// as two digests.
type Image struct {
	Ref         string          `json:"ref"`
	Digest      string          `json:"digest"`
	ImageDigest string          `json:"imageDigest"`
	Platform    string          `json:"platform"`
	Rule        string          `json:"rule"`
	Signature   *ImageSignature `json:"signature,omitempty"`
	Warnings    []string        `json:"warnings,omitempty"`
}

// ImageSignature names the signature that verified an image: its format
// (cosign-legacy or sigstore-bundle) and who signed: the key's id
// (sha256 of the public key's DER), or for a keyless signature the
// subject and OIDC issuer its certificate was issued to.
type ImageSignature struct {
	Format  string `json:"format"`
	KeyID   string `json:"keyId,omitempty"`
	Subject string `json:"subject,omitempty"`
	Issuer  string `json:"issuer,omitempty"`
}

// Step is one step of the job.
type Step struct {
	Name          string    `json:"name"`
	CommandSHA256 string    `json:"commandSha256"`
	Status        string    `json:"status"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	ExitCode      int       `json:"exitCode"`
	Limit         string    `json:"limit"`
	StdoutSHA256  string    `json:"stdoutSha256"`
	StdoutBytes   int64     `json:"stdoutBytes"`
	StderrSHA256  string    `json:"stderrSha256"`
	StderrBytes   int64     `json:"stderrBytes"`
	// Message is airlock's note on the step (an error, a limit).
	Message string `json:"message"`
}

// Holds reports whether t falls in the step's time span (a step without
// an end holds everything after its start).
func (s Step) Holds(t time.Time) bool {
	return !t.Before(s.Start) && (s.End.IsZero() || !t.After(s.End))
}

// StepAt names the step whose time span holds t ("" when none does).
func StepAt(steps []Step, t time.Time) string {
	for _, s := range steps {
		if s.Holds(t) {
			return s.Name
		}
	}
	return ""
}

// Processes is the runtime-monitoring exec record, bounded.
type Processes struct {
	Execs []Exec `json:"execs"`
	// Dropped counts execs not in Execs (the record was full, or the
	// statement's bounds); DroppedBySentry events gVisor could not
	// deliver; Malformed events that did not decode.
	Dropped         uint64 `json:"dropped"`
	DroppedBySentry uint64 `json:"droppedBySentry"`
	Malformed       uint64 `json:"malformed"`
}

// Exec is one program the sandbox ran.
type Exec struct {
	Time time.Time `json:"time"`
	PID  int32     `json:"pid"`
	PPID int32     `json:"ppid"`
	UID  uint32    `json:"uid"`
	// Step is the step whose time span holds the exec ("" outside the
	// steps); Source how airlock knows of it: "execve" (a process of the
	// job exec'd it) or "airlock" (airlock started it: a step's own
	// process, seen as airlock's exec shim execve'd it). Both are seen at
	// the sentry's execve trace point, which hashed what ran.
	Step   string `json:"step"`
	Source string `json:"source"`
	Binary string `json:"binary"`
	SHA256 string `json:"sha256"`
	// ArgvSHA256 covers the argv as recorded; ArgvTruncated says the
	// runtime monitor had already cut it (64 arguments, 1 KiB each).
	ArgvSHA256    string `json:"argvSha256"`
	ArgvTruncated bool   `json:"argvTruncated"`
	// Argv is bounded further here (MaxArgvBytes); ArgvSHA256 covers
	// the recorded argv whole.
	Argv     []string   `json:"argv"`
	ExitTime *time.Time `json:"exitTime"`
	ExitCode *int       `json:"exitCode"`
	Signal   int        `json:"signal"`
}

// Egress is every network decision and a summary per destination. The
// decisions are rows under Columns (DecisionColumns), times in
// milliseconds since Start: 10,000 of them fit in about a megabyte.
type Egress struct {
	Gateway string `json:"gateway"`
	// Mode is "enforce" or "audit" (egress.mode): under audit, what the
	// rules deny was let through and recorded as "would-deny". ModeNote
	// says why a job ran enforced under an organisation policy in audit
	// (agent work is never audited). Empty in statements made before
	// audit existed.
	Mode      string            `json:"mode"`
	ModeNote  string            `json:"modeNote"`
	Start     time.Time         `json:"start"`
	Columns   []string          `json:"columns"`
	Decisions []json.RawMessage `json:"decisions"`
	Summary   []EgressSummary   `json:"summary"`
	Dropped   uint64            `json:"dropped"`
}

// DecisionColumns name the fields of an egress decision row.
var DecisionColumns = []string{"ms", "pid", "protocol", "name", "address", "port", "method", "path", "decision", "rule", "reason", "upstream", "bytesOut", "bytesIn", "ruleKind"}

// EgressDecision is one decision row, decoded.
type EgressDecision struct {
	Time     time.Time
	PID      int32
	Protocol string
	Name     string
	Address  string
	Port     int
	Method   string
	Path     string
	Decision string
	Rule     string
	Reason   string
	Upstream string
	BytesOut int64
	BytesIn  int64
	// RuleKind is the kind of Rule (runner/egress/rules.RuleKind:
	// "allow", "default-deny", "deny-range", "fronting", ...); empty in
	// rows of statements made before it was recorded, which have one
	// column fewer.
	RuleKind string
}

// Row encodes the decision as a row under DecisionColumns, its time in
// milliseconds since start.
func (d EgressDecision) Row(start time.Time) json.RawMessage {
	b, _ := json.Marshal([]any{d.Time.Sub(start).Milliseconds(), d.PID, d.Protocol, d.Name, d.Address, d.Port, d.Method, d.Path, d.Decision, d.Rule, d.Reason, d.Upstream, d.BytesOut, d.BytesIn, d.RuleKind})
	return b
}

// Rows decodes the decision rows (a row of the wrong shape decodes to
// what could be read).
func (e Egress) Rows() []EgressDecision {
	out := make([]EgressDecision, 0, len(e.Decisions))
	for _, raw := range e.Decisions {
		var r []any
		json.Unmarshal(raw, &r)
		var d EgressDecision
		str := func(i int) string {
			if i < len(r) {
				s, _ := r[i].(string)
				return s
			}
			return ""
		}
		num := func(i int) int64 {
			if i < len(r) {
				switch n := r[i].(type) {
				case float64:
					return int64(n)
				case int64:
					return n
				case int:
					return int64(n)
				case int32:
					return int64(n)
				}
			}
			return 0
		}
		d.Time = e.Start.Add(time.Duration(num(0)) * time.Millisecond)
		d.PID, d.Protocol, d.Name, d.Address, d.Port = int32(num(1)), str(2), str(3), str(4), int(num(5))
		d.Method, d.Path, d.Decision, d.Rule, d.Reason, d.Upstream = str(6), str(7), str(8), str(9), str(10), str(11)
		d.BytesOut, d.BytesIn, d.RuleKind = num(12), num(13), str(14)
		out = append(out, d)
	}
	return out
}

// EgressSummary totals the decisions for one destination.
type EgressSummary struct {
	Destination string `json:"destination"`
	Allowed     int    `json:"allowed"`
	Denied      int    `json:"denied"`
	WouldDeny   int    `json:"wouldDeny"`
	BytesOut    int64  `json:"bytesOut"`
	BytesIn     int64  `json:"bytesIn"`
}

// Trust is every trust finding.
type Trust struct {
	Findings []TrustFinding `json:"findings"`
	// Dropped counts findings past the statement's bound.
	Dropped  uint64   `json:"dropped"`
	ReadOnly []string `json:"readOnly"`
	// Error says the diffs are incomplete; Notes what was not inspected.
	Error string   `json:"error"`
	Notes []string `json:"notes"`
}

// TrustFinding is one change to a trust-sensitive file.
type TrustFinding struct {
	Phase    string `json:"phase"`
	Category string `json:"category"`
	// Check names the check that made the finding (empty in statements
	// made before checks were named).
	Check      string `json:"check"`
	Path       string `json:"path"`
	Line       int    `json:"line"`
	Kind       string `json:"kind"`
	Severity   string `json:"severity"`
	Action     string `json:"action"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason"`
	DiffSHA256 string `json:"diffSha256"`
	// Diff is the start of the diff (MaxDiffBytes), for reviewers.
	Diff string `json:"diff"`
}

// Credentials say which of the job's credentials were withheld from its
// sandbox and how each was used: names, kinds, variables, hosts and
// counts, never a value.
type Credentials struct {
	Withheld []WithheldCredential `json:"withheld"`
	Uses     []CredentialUse      `json:"uses"`
	// UsesDropped counts the requests not counted in Uses (the record
	// holds a bounded number of credential and host pairs).
	UsesDropped int `json:"usesDropped"`
	// Masked counts the values the job masked (::add-mask::); they and
	// every withheld value are redacted ("***") from argv, paths and
	// messages before anything is signed.
	Masked int `json:"masked"`
}

// WithheldCredential is one credential the sandbox saw as a placeholder.
type WithheldCredential struct {
	Name      string   `json:"name"`
	Kinds     []string `json:"kinds"`
	Variables []string `json:"variables"`
}

// CredentialUse counts one credential's requests to one host: put back
// (injected), refused by the credentials policy (with its rule), or its
// placeholder sent where it does not belong (elsewhere).
type CredentialUse struct {
	Credential string `json:"credential"`
	Host       string `json:"host"`
	Route      string `json:"route"`
	Injected   int    `json:"injected"`
	Refused    int    `json:"refused"`
	Elsewhere  int    `json:"elsewhere"`
	Rule       string `json:"rule"`
}

// Verdict is the job's outcome.
type Verdict struct {
	Passed   bool     `json:"passed"`
	ExitCode int      `json:"exitCode"`
	Reasons  []string `json:"reasons"`
	// Final is false for an attestation of a job still running (its
	// steps so far, written for a step of the job to upload): only the
	// final one has the run-time trust diff and the job's verdict.
	Final bool `json:"final"`
}

// RunTimes bounds the run.
type RunTimes struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// SandboxRef identifies the sandbox.
type SandboxRef struct {
	ID      string `json:"id"`
	Network string `json:"network"`
	User    string `json:"user"`
}
