package attest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// Meta is what the attestation says beyond the job's result: who ran it
// and for which pull request.
type Meta struct {
	AirlockVersion, AirlockCommit string
	// Repository names the repository (URL or path); HeadSHA is the
	// subject. Without a head commit the subject is the workspace.
	Repository  string
	HeadSHA     string
	BaseSHA     string
	PullRequest int
	Author      string
	Event       string
	// ContainerImage is the job container's image (runner hook).
	ContainerImage string
}

// Bounds that keep a statement small enough to store.
const (
	MaxExecs        = 5000
	MaxDecisions    = 20000
	MaxArgvBytes    = 1024
	MaxFindings     = 2000
	MaxDestinations = 1000
	MaxDiffBytes    = 4096
	subjectPrefix   = "airlock-subject:v1 "
)

// SubjectFile is the canonical subject file of a commit: its sha256 is
// the subject's sha256 digest, so a tool that only checks sha256 digests
// (cosign verify-blob-attestation with a blob) can match the commit.
func SubjectFile(commit string) []byte { return []byte(commit + "\n") }

// Subject returns the statement's subject for the run.
func Subject(m Meta, workspace string) SubjectInfo {
	name := m.Repository
	if name == "" {
		name = workspace
	}
	if m.HeadSHA != "" {
		sum := sha256.Sum256(SubjectFile(m.HeadSHA))
		return SubjectInfo{Name: name, Digest: map[string]string{"gitCommit": m.HeadSHA, "sha256": hex.EncodeToString(sum[:])}}
	}
	sum := sha256.Sum256([]byte(subjectPrefix + name + "\n"))
	return SubjectInfo{Name: name, Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])}}
}

// FromResult builds the predicate of a finished job.
func FromResult(res runner.Result, m Meta) Predicate {
	p := Predicate{
		Runner: Runner{
			AirlockVersion: m.AirlockVersion, AirlockCommit: m.AirlockCommit,
			GVisorVersion: res.Sandbox.Runtime, Platform: res.Sandbox.Platform,
		},
		Job:       Job{Name: res.Job, Repository: m.Repository, PullRequest: m.PullRequest, BaseSHA: m.BaseSHA, HeadSHA: m.HeadSHA, Author: m.Author, Event: m.Event, ContainerImage: clip(m.ContainerImage, 512)},
		Steps:     []Step{},
		Verdict:   Verdict{Passed: res.Passed, ExitCode: res.ExitCode, Reasons: []string{}, Final: !res.Interim},
		Times:     RunTimes{Start: res.Start, End: res.End},
		Sandbox:   SandboxRef{ID: res.Sandbox.ID, Network: res.Sandbox.Network, User: fmt.Sprintf("%d:%d", res.Sandbox.User.UID, res.Sandbox.User.GID)},
		Policy:    Policy{Sources: []PolicySource{}},
		Egress:    Egress{Start: res.Start, Columns: DecisionColumns, Decisions: []json.RawMessage{}, Summary: []EgressSummary{}},
		Trust:     Trust{Findings: []TrustFinding{}},
		Processes: Processes{Execs: []Exec{}},
	}
	p.Runner.Hostname, _ = os.Hostname()
	if id, err := os.ReadFile("/etc/machine-id"); err == nil {
		sum := sha256.Sum256([]byte(strings.TrimSpace(string(id))))
		p.Runner.MachineIDSHA256 = hex.EncodeToString(sum[:])
	}
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		p.Runner.GitHub = &GitHubRun{
			Repository: os.Getenv("GITHUB_REPOSITORY"), RunID: os.Getenv("GITHUB_RUN_ID"), RunAttempt: os.Getenv("GITHUB_RUN_ATTEMPT"),
			Workflow: os.Getenv("GITHUB_WORKFLOW"), Job: os.Getenv("GITHUB_JOB"), RunnerName: os.Getenv("RUNNER_NAME"),
		}
	}
	if pi := res.Policy; pi != nil {
		p.Policy.EffectiveSHA256 = pi.Digest
		for _, s := range pi.Sources {
			p.Policy.Sources = append(p.Policy.Sources, PolicySource{Kind: s.Kind, Path: s.Path, Commit: s.Commit, SHA256: s.SHA256})
		}
		if pi.Agent != nil {
			p.Policy.Agent = &AgentDecision{Agent: pi.Agent.Agent, Reason: pi.Agent.Reason}
		}
	}
	for _, s := range res.Steps {
		cmd := sha256.Sum256([]byte(strings.Join(s.Command, "\x00")))
		p.Steps = append(p.Steps, Step{
			Name: s.Name, CommandSHA256: hex.EncodeToString(cmd[:]), Status: s.Status, Start: s.Start, End: s.End,
			ExitCode: s.ExitCode, Limit: s.Limit, StdoutSHA256: s.StdoutSHA256, StdoutBytes: s.StdoutBytes,
			StderrSHA256: s.StderrSHA256, StderrBytes: s.StderrBytes, Message: clip(s.Message, 512),
		})
		if s.Status != runner.StatusPassed {
			reason := fmt.Sprintf("step %q %s (exit %d)", s.Name, s.Status, s.ExitCode)
			if s.Limit != "" {
				reason += " at the " + s.Limit + " limit"
			}
			p.Verdict.Reasons = append(p.Verdict.Reasons, reason)
		}
	}
	execs := res.Processes.Execs
	p.Processes.Dropped = res.Processes.DroppedExecs
	p.Processes.DroppedBySentry, p.Processes.Malformed = res.Processes.DroppedBySentry, res.Processes.Malformed
	if len(execs) > MaxExecs {
		p.Processes.Dropped += uint64(len(execs) - MaxExecs)
		execs = execs[:MaxExecs]
	}
	for _, x := range execs {
		argv, _ := json.Marshal(x.Argv)
		sum := sha256.Sum256(argv)
		e := Exec{Time: x.Time, PID: x.PID, PPID: x.PPID, Binary: clip(x.Binary, 512), SHA256: x.SHA256, ArgvSHA256: hex.EncodeToString(sum[:]), ArgvTruncated: x.ArgvTruncated, Argv: boundArgv(x.Argv)}
		if x.Exit != nil {
			t, c := x.Exit.Time, x.Exit.Code
			e.ExitTime, e.ExitCode, e.Signal = &t, &c, x.Exit.Signal
		}
		p.Processes.Execs = append(p.Processes.Execs, e)
	}
	if eg := res.Egress; eg != nil {
		p.Egress.Gateway = eg.Gateway
		p.Egress.Dropped = eg.Dropped
		ds := eg.Decisions
		if len(ds) > MaxDecisions {
			p.Egress.Dropped += uint64(len(ds) - MaxDecisions)
			ds = ds[:MaxDecisions]
		}
		for _, d := range ds {
			addr := d.Address
			if d.Name != "" && d.Protocol != rules.ProtoDirect {
				addr = "" // a gateway address: the name says it
			}
			p.Egress.Decisions = append(p.Egress.Decisions, EgressDecision{
				Time: d.Time, PID: d.PID, Protocol: d.Protocol, Name: clip(d.Name, 253), Address: addr, Port: d.Port,
				Method: clip(d.Method, 16), Path: clip(d.Path, 256), Decision: d.Decision, Rule: clip(shortRule(d.Rule), 128),
				Reason: clip(d.Reason, 256), Upstream: d.Upstream,
				BytesOut: d.BytesOut, BytesIn: d.BytesIn,
			}.row(res.Start))
		}
		p.Egress.Summary = summarize(eg.Decisions)
		if len(p.Egress.Summary) > MaxDestinations {
			other := EgressSummary{Destination: fmt.Sprintf("(%d other destinations)", len(p.Egress.Summary)-MaxDestinations)}
			for _, d := range p.Egress.Summary[MaxDestinations:] {
				other.Allowed += d.Allowed
				other.Denied += d.Denied
				other.BytesOut += d.BytesOut
				other.BytesIn += d.BytesIn
			}
			p.Egress.Summary = append(p.Egress.Summary[:MaxDestinations], other)
		}
	}
	if tr := res.Trust; tr != nil {
		p.Trust.ReadOnly = tr.ReadOnly
		if len(p.Trust.ReadOnly) > 100 {
			p.Trust.ReadOnly = p.Trust.ReadOnly[:100]
		}
		p.Trust.Error = clip(tr.Error, 2048)
		p.Trust.Notes = []string{}
		for i, n := range tr.Notes {
			if i == 50 {
				p.Trust.Notes = append(p.Trust.Notes, fmt.Sprintf("... and %d more notes", len(tr.Notes)-i))
				break
			}
			p.Trust.Notes = append(p.Trust.Notes, clip(n, 512))
		}
		if tr.Error != "" {
			p.Verdict.Reasons = append(p.Verdict.Reasons, "trust diffs incomplete: "+clip(tr.Error, 512))
		}
		for i, f := range tr.Findings {
			if i == MaxFindings {
				p.Trust.Dropped = uint64(len(tr.Findings) - i)
				break
			}
			p.Trust.Findings = append(p.Trust.Findings, TrustFinding{
				Phase: f.Phase, Category: f.Category, Path: clip(f.Path, 512), Line: f.Line, Kind: f.Kind, Severity: f.Severity,
				Action: f.Action, Outcome: clip(f.Outcome, 256), Reason: clip(f.Reason, 1024), DiffSHA256: f.DiffSHA256, Diff: truncate(f.Diff, MaxDiffBytes),
			})
		}
		if tr.Failed {
			p.Verdict.Reasons = append(p.Verdict.Reasons, tr.Reason)
		}
	}
	if res.Error != "" {
		p.Verdict.Reasons = append(p.Verdict.Reasons, "airlock: "+res.Error)
	}
	return p
}

func boundArgv(argv []string) []string {
	out := []string{}
	n := 0
	for _, a := range argv {
		if n+len(a) > MaxArgvBytes {
			out = append(out, fmt.Sprintf("...(%d more arguments, see argvSha256)", len(argv)-len(out)))
			break
		}
		n += len(a)
		out = append(out, a)
	}
	return out
}

// summarize totals the decisions per destination (name, or address).
func summarize(ds []rules.Decision) []EgressSummary {
	by := map[string]*EgressSummary{}
	for _, d := range ds {
		dest := d.Name
		if dest == "" {
			dest = d.Address
		}
		if d.Port != 0 && d.Protocol != rules.ProtoDNS {
			dest = fmt.Sprintf("%s:%d", dest, d.Port)
		}
		s := by[dest]
		if s == nil {
			s = &EgressSummary{Destination: dest}
			by[dest] = s
		}
		if d.Decision == rules.Allowed {
			s.Allowed++
		} else {
			s.Denied++
		}
		s.BytesOut += d.BytesOut
		s.BytesIn += d.BytesIn
	}
	out := make([]EgressSummary, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b EgressSummary) int { return strings.Compare(a.Destination, b.Destination) })
	return out
}

// MaxStatement bounds a statement (base64 in a bundle, it must stay under
// MaxBundleSize): Fit trims the largest lists until it fits.
const MaxStatement = 10 << 20

// Fit trims a predicate whose statement would pass MaxStatement: egress
// decision rows first, then execs, then findings, halving each, counting
// every item dropped. Summaries and counts stay whole.
func Fit(subject SubjectInfo, p *Predicate) error {
	for range 64 {
		b, err := Statement(subject, *p)
		if err != nil {
			return err
		}
		if len(b) <= MaxStatement {
			return nil
		}
		switch {
		case len(p.Egress.Decisions) > 100:
			n := len(p.Egress.Decisions) / 2
			p.Egress.Dropped += uint64(len(p.Egress.Decisions) - n)
			p.Egress.Decisions = p.Egress.Decisions[:n]
		case len(p.Processes.Execs) > 100:
			n := len(p.Processes.Execs) / 2
			p.Processes.Dropped += uint64(len(p.Processes.Execs) - n)
			p.Processes.Execs = p.Processes.Execs[:n]
		case len(p.Trust.Findings) > 10:
			n := len(p.Trust.Findings) / 2
			p.Trust.Dropped += uint64(len(p.Trust.Findings) - n)
			p.Trust.Findings = p.Trust.Findings[:n]
		default:
			return fmt.Errorf("statement: %d bytes even after trimming", len(b))
		}
	}
	return fmt.Errorf("statement: does not fit")
}

// MaxArtifacts bounds the artifact subjects; maxArtifactSize one file.
const (
	MaxArtifacts    = 100
	maxArtifactSize = 4 << 30
)

// Artifacts digests the files the policy names as subjects (paths
// relative to the workspace, globs allowed), read through os.Root so no
// link leads out of it. What cannot be read is a note, not a subject.
func Artifacts(workspace string, patterns []string) ([]SubjectInfo, []string) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return nil, []string{"artifacts: " + err.Error()}
	}
	defer root.Close()
	var out []SubjectInfo
	var notes []string
	for _, pat := range patterns {
		matches, err := fs.Glob(root.FS(), path.Clean(strings.TrimPrefix(pat, "/")))
		if err != nil || len(matches) == 0 {
			notes = append(notes, fmt.Sprintf("artifact %q: no such file", pat))
			continue
		}
		for _, m := range matches {
			if len(out) == MaxArtifacts {
				notes = append(notes, fmt.Sprintf("more than %d artifacts: the rest are not subjects", MaxArtifacts))
				return out, notes
			}
			f, err := root.Open(m)
			if err != nil {
				notes = append(notes, fmt.Sprintf("artifact %q: %v", m, err))
				continue
			}
			fi, err := f.Stat()
			if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxArtifactSize {
				f.Close()
				notes = append(notes, fmt.Sprintf("artifact %q: not a regular file of at most %d bytes", m, int64(maxArtifactSize)))
				continue
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				notes = append(notes, fmt.Sprintf("artifact %q: %v", m, err))
				continue
			}
			out = append(out, SubjectInfo{Name: m, Digest: map[string]string{"sha256": hex.EncodeToString(h.Sum(nil))}})
		}
	}
	return out, notes
}

// clip bounds a job-derived string.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// StatementType is the in-toto Statement v1 type.
const StatementType = "https://in-toto.io/Statement/v1"

// statementJSON is an in-toto Statement v1 with airlock's predicate, in
// the standard JSON form ("_type", lowerCamelCase).
type statementJSON struct {
	Type          string        `json:"_type"`
	Subject       []SubjectInfo `json:"subject"`
	PredicateType string        `json:"predicateType"`
	Predicate     Predicate     `json:"predicate"`
}

// Statement serialises the in-toto Statement v1 for subject (the commit)
// and artifacts (further subjects) and predicate. These bytes are what
// is signed and stored.
func Statement(subject SubjectInfo, p Predicate, artifacts ...SubjectInfo) ([]byte, error) {
	if subject.Name == "" || len(subject.Digest) == 0 {
		return nil, fmt.Errorf("statement: the subject needs a name and a digest")
	}
	b, err := json.Marshal(statementJSON{Type: StatementType, Subject: append([]SubjectInfo{subject}, artifacts...), PredicateType: PredicateType, Predicate: p})
	if err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return b, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "\n... (cut)"
}

// shortRule drops what a decision row says anyway: "egress.allow[0]
// (proxy.golang.org)" is "allow[0]" next to the name.
func shortRule(r string) string {
	r = strings.TrimPrefix(r, "egress.")
	if strings.HasPrefix(r, "allow[") {
		r, _, _ = strings.Cut(r, " (")
	}
	return r
}
