package report

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/images"
	"github.com/airlock-ci/airlock/runner/trust"
)

// Predicate builds the attestation predicate of a job's result. Every
// string that came from the job is clipped and every list bounded
// (attest.Max*), so a job cannot make its own record unbounded; what was
// left out is counted.
func Predicate(res runner.Result, m attest.Meta) attest.Predicate {
	p := attest.Predicate{
		Runner:      runnerOf(res.Sandbox, m),
		Job:         attest.Job{Name: res.Job, Repository: m.Repository, PullRequest: m.PullRequest, BaseSHA: m.BaseSHA, HeadSHA: m.HeadSHA, Author: m.Author, Event: m.Event, ContainerImage: clip(m.ContainerImage, 512)},
		Steps:       []attest.Step{},
		Verdict:     attest.Verdict{Passed: res.Passed, ExitCode: res.ExitCode, Reasons: []string{}, Final: !res.Interim},
		Times:       attest.RunTimes{Start: res.Start, End: res.End},
		Sandbox:     attest.SandboxRef{ID: res.Sandbox.ID, Network: res.Sandbox.Network, User: fmt.Sprintf("%d:%d", res.Sandbox.User.UID, res.Sandbox.User.GID)},
		Policy:      attest.Policy{Sources: []attest.PolicySource{}},
		Egress:      attest.Egress{Start: res.Start, Columns: attest.DecisionColumns, Decisions: []json.RawMessage{}, Summary: []attest.EgressSummary{}},
		Trust:       attest.Trust{Findings: []attest.TrustFinding{}},
		Credentials: attest.Credentials{Withheld: []attest.WithheldCredential{}, Uses: []attest.CredentialUse{}},
		Processes:   attest.Processes{Execs: []attest.Exec{}},
	}
	if pi := res.Policy; pi != nil {
		p.Policy.EffectiveSHA256 = pi.Digest
		for _, s := range pi.Sources {
			p.Policy.Sources = append(p.Policy.Sources, attest.PolicySource{Kind: s.Kind, Path: s.Path, Commit: s.Commit, SHA256: s.SHA256})
		}
		if pi.Agent != nil {
			p.Policy.Agent = &attest.AgentDecision{Agent: pi.Agent.Agent, Reason: pi.Agent.Reason}
		}
	}
	addImages(&p, res.Images)
	addSteps(&p, res.Steps)
	addProcesses(&p, res.Processes) // after addSteps: each exec names its step
	if res.Egress != nil {
		addEgress(&p, res.Egress, res.Start)
	}
	if res.Trust != nil {
		addTrust(&p, res.Trust)
	}
	if res.Credentials != nil {
		addCredentials(&p, res.Credentials)
	}
	if res.Error != "" {
		p.Verdict.Reasons = append(p.Verdict.Reasons, "airlock: "+res.Error)
	}
	return p
}

// runnerOf says what ran the job: airlock, gVisor and its platform, and
// the host (by name and hashed machine id; the Actions run, when there
// is one).
func runnerOf(sb runner.SandboxInfo, m attest.Meta) attest.Runner {
	r := attest.Runner{
		AirlockVersion: m.AirlockVersion, AirlockCommit: m.AirlockCommit,
		GVisorVersion: sb.Runtime, Platform: sb.Platform,
		PlatformReason: clip(sb.PlatformReason, 1024), PlatformAttempts: []attest.PlatformAttempt{},
	}
	for _, a := range sb.PlatformAttempts {
		a.Error = clip(a.Error, 1024)
		r.PlatformAttempts = append(r.PlatformAttempts, a)
	}
	r.Hostname, _ = os.Hostname()
	if id, err := os.ReadFile("/etc/machine-id"); err == nil {
		sum := sha256.Sum256([]byte(strings.TrimSpace(string(id))))
		r.MachineIDSHA256 = hex.EncodeToString(sum[:])
	}
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		r.GitHub = &attest.GitHubRun{
			Repository: os.Getenv("GITHUB_REPOSITORY"), RunID: os.Getenv("GITHUB_RUN_ID"), RunAttempt: os.Getenv("GITHUB_RUN_ATTEMPT"),
			Workflow: os.Getenv("GITHUB_WORKFLOW"), Job: os.Getenv("GITHUB_JOB"), RunnerName: os.Getenv("RUNNER_NAME"),
		}
	}
	return r
}

// addSteps records each step by its command's digest, and a step that
// did not pass as a reason of the verdict.
func addSteps(p *attest.Predicate, steps []runner.StepOutcome) {
	for _, s := range steps {
		cmd := sha256.Sum256([]byte(strings.Join(s.Command, "\x00")))
		p.Steps = append(p.Steps, attest.Step{
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
}

// addProcesses records the first attest.MaxExecs execs, argv bounded and
// digested; the rest are counted.
func addProcesses(p *attest.Predicate, procs monitor.Snapshot) {
	execs := procs.Execs
	p.Processes.Dropped = procs.DroppedExecs
	p.Processes.DroppedBySentry, p.Processes.Malformed = procs.DroppedBySentry, procs.Malformed
	if len(execs) > attest.MaxExecs {
		p.Processes.Dropped += uint64(len(execs) - attest.MaxExecs)
		execs = execs[:attest.MaxExecs]
	}
	for _, x := range execs {
		argv, _ := json.Marshal(x.Argv)
		sum := sha256.Sum256(argv)
		e := attest.Exec{Time: x.Time, PID: x.PID, PPID: x.PPID, UID: x.UID, Step: attest.StepAt(p.Steps, x.Time), Source: x.Source, Binary: clip(x.Binary, 512), SHA256: x.SHA256, ArgvSHA256: hex.EncodeToString(sum[:]), ArgvTruncated: x.ArgvTruncated, Argv: boundArgv(x.Argv)}
		if x.Exit != nil {
			t, c := x.Exit.Time, x.Exit.Code
			e.ExitTime, e.ExitCode, e.Signal = &t, &c, x.Exit.Signal
		}
		p.Processes.Execs = append(p.Processes.Execs, e)
	}
}

// addEgress records the first attest.MaxDecisions decisions as rows and
// every decision in the per-destination summary (its tail folded into
// one line).
func addEgress(p *attest.Predicate, eg *egress.Report, start time.Time) {
	p.Egress.Gateway, p.Egress.Mode, p.Egress.ModeNote = eg.Gateway, eg.Mode, clip(eg.ModeNote, 256)
	p.Egress.Dropped = eg.Dropped
	ds := eg.Decisions
	if len(ds) > attest.MaxDecisions {
		p.Egress.Dropped += uint64(len(ds) - attest.MaxDecisions)
		ds = ds[:attest.MaxDecisions]
	}
	for _, d := range ds {
		addr := d.Address
		if d.Name != "" && d.Protocol != rules.ProtoDirect {
			addr = "" // a gateway address: the name says it
		}
		p.Egress.Decisions = append(p.Egress.Decisions, attest.EgressDecision{
			Time: d.Time, PID: d.PID, Protocol: d.Protocol, Name: clip(d.Name, 253), Address: addr, Port: d.Port,
			Method: clip(d.Method, 16), Path: clip(d.Path, 256), Decision: d.Decision, Rule: clip(d.RuleID.Short(), 128),
			RuleKind: string(d.RuleID.Kind), Reason: clip(d.Reason, 256), Upstream: d.Upstream,
			BytesOut: d.BytesOut, BytesIn: d.BytesIn,
		}.Row(start))
	}
	p.Egress.Summary = summarize(eg.Decisions)
	if len(p.Egress.Summary) > attest.MaxDestinations {
		other := attest.EgressSummary{Destination: fmt.Sprintf("(%d other destinations)", len(p.Egress.Summary)-attest.MaxDestinations)}
		for _, d := range p.Egress.Summary[attest.MaxDestinations:] {
			other.Allowed += d.Allowed
			other.Denied += d.Denied
			other.WouldDeny += d.WouldDeny
			other.BytesOut += d.BytesOut
			other.BytesIn += d.BytesIn
		}
		p.Egress.Summary = append(p.Egress.Summary[:attest.MaxDestinations], other)
	}
}

// addTrust records the trust report: findings (the first
// attest.MaxFindings, diffs clipped), notes, and its verdict's reasons.
func addTrust(p *attest.Predicate, tr *trust.Report) {
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
		if i == attest.MaxFindings {
			p.Trust.Dropped = uint64(len(tr.Findings) - i)
			break
		}
		p.Trust.Findings = append(p.Trust.Findings, attest.TrustFinding{
			Phase: string(f.Phase), Category: string(f.Category), Check: string(f.Check), Path: clip(f.Path, 512), Line: f.Line, Kind: string(f.Kind), Severity: string(f.Severity),
			Action: f.Action, Outcome: clip(f.Outcome, 256), Reason: clip(f.Reason, 1024), DiffSHA256: f.DiffSHA256, Diff: clipText(f.Diff, attest.MaxDiffBytes),
		})
	}
	if tr.Failed {
		p.Verdict.Reasons = append(p.Verdict.Reasons, tr.Reason)
	}
}

// addCredentials records what credentials were withheld and where each
// was used (the first attest.MaxDestinations; the rest counted).
func addCredentials(p *attest.Predicate, c *credentials.Record) {
	p.Credentials.Masked, p.Credentials.UsesDropped = c.Masked, c.UsesDropped
	for _, w := range c.Withheld {
		p.Credentials.Withheld = append(p.Credentials.Withheld, attest.WithheldCredential{Name: clip(w.Name, 128), Kinds: w.Kinds, Variables: boundList(w.Variables)})
	}
	for i, u := range c.Uses {
		if i == attest.MaxDestinations {
			for _, rest := range c.Uses[i:] {
				p.Credentials.UsesDropped += rest.Injected + rest.Refused + rest.Elsewhere
			}
			break
		}
		p.Credentials.Uses = append(p.Credentials.Uses, attest.CredentialUse{Credential: clip(u.Credential, 128), Host: clip(u.Host, 253), Route: u.Route,
			Injected: u.Injected, Refused: u.Refused, Elsewhere: u.Elsewhere, Rule: u.Rule})
	}
}

// boundList keeps at most 50 short entries of a list from the job.
func boundList(l []string) []string {
	out := []string{}
	for i, s := range l {
		if i == 50 {
			out = append(out, fmt.Sprintf("... and %d more", len(l)-i))
			break
		}
		out = append(out, clip(s, 128))
	}
	return out
}

// boundArgv keeps the first arguments up to attest.MaxArgvBytes and says
// how many more there were.
func boundArgv(argv []string) []string {
	out := []string{}
	n := 0
	for _, a := range argv {
		if n+len(a) > attest.MaxArgvBytes {
			out = append(out, fmt.Sprintf("...(%d more arguments, see argvSha256)", len(argv)-len(out)))
			break
		}
		n += len(a)
		out = append(out, a)
	}
	return out
}

// summarize totals the decisions per destination (name, or address).
func summarize(ds []rules.Decision) []attest.EgressSummary {
	by := map[string]*attest.EgressSummary{}
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
			s = &attest.EgressSummary{Destination: dest}
			by[dest] = s
		}
		switch d.Decision {
		case rules.Allowed:
			s.Allowed++
		case rules.WouldDeny:
			s.WouldDeny++
		default:
			s.Denied++
		}
		s.BytesOut += d.BytesOut
		s.BytesIn += d.BytesIn
	}
	out := make([]attest.EgressSummary, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b attest.EgressSummary) int { return strings.Compare(a.Destination, b.Destination) })
	return out
}

// clip bounds a one-line string from the job to n bytes (never half a
// character: textsafe.Clip), marking the cut; clipText does the same for text of several
// lines, with the mark on a line of its own.
func clip(s string, n int) string     { return textsafe.Clip(s, n, "...") }
func clipText(s string, n int) string { return textsafe.Clip(s, n, "\n... (cut)") }

// maxImages bounds the images recorded (a job has a container, at most
// eight services and its Docker actions).
const maxImages = 64

// addImages records what each pulled image resolved to.
func addImages(p *attest.Predicate, imgs []images.Resolved) {
	for i, r := range imgs {
		if i == maxImages {
			break
		}
		im := attest.Image{Ref: clip(r.Ref, 512), Digest: r.Digest, ImageDigest: r.ImageDigest, Platform: r.Platform, Rule: clip(r.Rule, 256)}
		for _, w := range r.Warnings {
			im.Warnings = append(im.Warnings, clip(w, 512))
		}
		if r.Signature != nil {
			im.Signature = &attest.ImageSignature{Format: r.Signature.Format, KeyID: r.Signature.KeyID}
			if id := r.Signature.Identity; id != nil {
				im.Signature.Subject, im.Signature.Issuer = id.Subject, id.Issuer
			}
		}
		p.Job.Images = append(p.Job.Images, im)
	}
}
