package report

import (
	"net/url"
	"strings"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/runner"
)

// The provenance's parts, each read off the run attestation's predicate
// (what the job was, what ran it, what it did) and, where the predicate
// has no field for it, the job's result (its root and limits). Their
// meaning is docs/provenance.md's.

// externalParameters are the job's inputs chosen outside airlock.
func externalParameters(p attest.Predicate) attest.ExternalParameters {
	e := attest.ExternalParameters{
		Repository: p.Job.Repository, Ref: p.Job.HeadSHA, BaseRef: p.Job.BaseSHA, Job: p.Job.Name,
		Event: p.Job.Event, PullRequest: p.Job.PullRequest, Author: p.Job.Author, Agent: p.Policy.Agent,
	}
	if gh := p.Runner.GitHub; gh != nil {
		e.Workflow = gh.Workflow
		if gh.Job != "" {
			e.Job = gh.Job
		}
	}
	return e
}

// internalParameters are what the runner's side set for the job.
func internalParameters(p attest.Predicate, sb runner.SandboxInfo) attest.InternalParameters {
	readOnly := p.Trust.ReadOnly
	if readOnly == nil {
		readOnly = []string{}
	}
	l := sb.Limits
	return attest.InternalParameters{
		Policy:   attest.ProvenancePolicy{EffectiveSHA256: p.Policy.EffectiveSHA256, Sources: p.Policy.Sources},
		Platform: p.Runner.Platform, PlatformReason: p.Runner.PlatformReason, GVisorVersion: p.Runner.GVisorVersion,
		Sandbox: attest.SandboxSettings{
			Network: p.Sandbox.Network, User: p.Sandbox.User, RootFS: sb.RootFS, EgressMode: p.Egress.Mode, ReadOnly: readOnly,
			Limits: attest.SandboxLimits{
				JobTimeoutSeconds: int64(l.JobTimeout.Seconds()), StepTimeoutSeconds: int64(l.StepTimeout.Seconds()),
				MemoryBytes: l.Memory, Pids: l.Pids, CPUs: l.CPUs, WorkspaceBytes: l.Workspace,
			},
		},
	}
}

// dependencies are what the job was built from: the commit (under the
// run attestation's subject name: the repository, or the workspace),
// its root filesystem, the job container's image as the workflow named
// it, and the actions it ran.
func dependencies(p attest.Predicate, subject attest.SubjectInfo, rootfs string, actions []attest.Descriptor) []attest.Descriptor {
	var out []attest.Descriptor
	if c := p.Job.HeadSHA; c != "" {
		loc := subject.Name
		if !strings.Contains(loc, "://") {
			loc = "file://" + loc
		}
		out = append(out, attest.Descriptor{Name: "source", URI: "git+" + loc + "@" + c, Digest: map[string]string{"gitCommit": c}})
	}
	root := attest.Descriptor{Name: "rootfs", URI: "file://" + rootfs, Annotations: map[string]string{"digest": "not taken: a root filesystem is not digested; it is mounted read-only"}}
	if rootfs == "" || rootfs == "host" {
		root.URI, root.Annotations["source"] = "file:///", "the runner host's root filesystem"
	}
	out = append(out, root)
	if img := strings.TrimPrefix(p.Job.ContainerImage, "docker://"); img != "" {
		// What ran is rootfs (the directory the policy maps the image
		// to), not the reference: its digest is the reference's, an
		// annotation, and the dependency has none of its own.
		d := attest.Descriptor{Name: "containerImage", URI: root.URI, Annotations: map[string]string{
			"reference": "docker://" + img,
			"digest":    "not taken: the sandbox ran on rootfs, which is not digested; the reference is as the workflow wrote it",
		}}
		if _, sum, ok := strings.Cut(img, "@sha256:"); ok && attest.IsSHA256(sum) {
			d.Annotations["referenceDigest"] = "sha256:" + sum
		}
		out = append(out, d)
	}
	return append(out, actions...)
}

// builder names the runner host (the runner's name under GitHub
// Actions, else the host name) and airlock's and gVisor's versions.
func builder(r attest.Runner) attest.Builder {
	host := r.Hostname
	if r.GitHub != nil && r.GitHub.RunnerName != "" {
		host = r.GitHub.RunnerName
	}
	if host == "" {
		host = "unknown"
	}
	return attest.Builder{
		ID:      attest.BuilderID + "?host=" + url.QueryEscape(host),
		Version: map[string]string{"airlock": r.AirlockVersion, "airlockCommit": r.AirlockCommit, "gvisor": r.GVisorVersion},
	}
}

// invocationID is the Actions run attempt's URL with the job's sandbox
// id as its fragment, or the sandbox id alone outside Actions.
func invocationID(p attest.Predicate) string {
	gh := p.Runner.GitHub
	if gh == nil || gh.RunID == "" {
		return p.Sandbox.ID
	}
	repo := p.Job.Repository
	if !strings.Contains(repo, "://") {
		repo = "https://github.com/" + gh.Repository
	}
	attempt := gh.RunAttempt
	if attempt == "" {
		attempt = "1"
	}
	return strings.TrimSuffix(repo, "/") + "/actions/runs/" + url.PathEscape(gh.RunID) + "/attempts/" + url.PathEscape(attempt) + "#" + p.Sandbox.ID
}

// runSummary is what the job did, in brief, for the run attestation's
// byproduct: agent, verdict, refused egress, trust findings, and the
// uploads that are not subjects.
func runSummary(p attest.Predicate, refused []attest.UploadRecord, notes []string) attest.RunSummary {
	s := attest.RunSummary{
		PredicateType: attest.PredicateType, Agent: p.Policy.Agent, Verdict: "failed", ExitCode: p.Verdict.ExitCode,
		Reasons: p.Verdict.Reasons, EgressMode: p.Egress.Mode, RefusedEgress: []attest.RefusedEgress{},
		TrustFindings: []attest.FindingRef{}, RefusedUploads: refused, Notes: notes,
	}
	if p.Verdict.Passed {
		s.Verdict = "passed"
	}
	if s.Reasons == nil {
		s.Reasons = []string{}
	}
	for _, e := range p.Egress.Summary {
		if e.Denied > 0 || e.WouldDeny > 0 {
			s.RefusedEgress = append(s.RefusedEgress, attest.RefusedEgress{Destination: e.Destination, Denied: e.Denied, WouldDeny: e.WouldDeny})
		}
	}
	for _, f := range p.Trust.Findings {
		s.TrustFindings = append(s.TrustFindings, attest.FindingRef{Check: f.Check, Category: f.Category, Severity: f.Severity, Path: f.Path})
	}
	return s
}
