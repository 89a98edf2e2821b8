package report

import (
	"net/url"
	"strings"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor/quota"
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
func internalParameters(p attest.Predicate, sb runner.SandboxInfo, vol *runner.WorkspaceVolume) attest.InternalParameters {
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
				EnforcedBy: sb.LimitsEnforcedBy, WorkspaceMedium: workspaceMedium(vol),
			},
		},
	}
}

// workspaceMedium is where a bounded workspace's writes were kept until
// the merge ("tmpfs": in memory, no loop devices), or "" (on the disk, or
// no bound).
func workspaceMedium(v *runner.WorkspaceVolume) string {
	if v == nil || v.Medium == quota.MediumExt4 {
		return ""
	}
	return v.Medium
}

// dependencies are what the job was built from: the commit (under the
// run attestation's subject name: the repository, or the workspace),
// its root filesystem, the job container's image (as the workflow named
// it; by the digest that ran when it was pulled), the actions it ran,
// and the other images it pulled (its services', a Docker action's the
// actions do not name), each by the digest that ran.
func dependencies(p attest.Predicate, subject attest.SubjectInfo, rootfs string, actions []attest.Descriptor) []attest.Descriptor {
	var out []attest.Descriptor
	if c := p.Job.HeadSHA; c != "" {
		loc := subject.Name
		if !strings.Contains(loc, "://") {
			loc = "file://" + loc
		}
		out = append(out, attest.Descriptor{Name: "source", URI: "git+" + loc + "@" + c, Digest: map[string]string{"gitCommit": c}})
	}
	img := strings.TrimPrefix(strings.TrimSpace(p.Job.ContainerImage), "docker://")
	// The job container's image, when the job pulled it: the first
	// pull of its reference (the job's image is pulled before the job
	// starts, before its services and actions).
	var jobImage *attest.Image
	for i := range p.Job.Images {
		if img != "" && p.Job.Images[i].Ref == img {
			jobImage = &p.Job.Images[i]
			break
		}
	}
	root := attest.Descriptor{Name: "rootfs", URI: "file://" + rootfs, Annotations: map[string]string{"digest": "not taken: a root filesystem is not digested; it is mounted read-only"}}
	switch {
	case rootfs == "" || rootfs == "host":
		root.URI, root.Annotations["source"] = "file:///", "the runner host's root filesystem"
	case jobImage != nil:
		root.Annotations["source"] = "the job container's image, pulled and unpacked on the host: containerImage (docker://" + img + ", " + jobImage.ImageDigest + ")"
	}
	out = append(out, root)
	// Each pulled image once: by reference and the digest that ran.
	seen := map[string]bool{}
	if jobImage != nil {
		d := imageDependency("containerImage", *jobImage)
		seen["docker://"+jobImage.Ref+"@"+d.Digest["sha256"]] = true
		out = append(out, d)
	} else if img != "" {
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
	for _, a := range actions {
		if sum := a.Digest["sha256"]; strings.HasPrefix(a.Name, "docker://") && sum != "" {
			// A Docker action's pulled image (runner hook): the
			// signature that verified it is the pull's record.
			seen[a.Name+"@"+sum] = true
			a = withPull(a, p.Job.Images)
		}
		out = append(out, a)
	}
	for _, im := range p.Job.Images {
		d := imageDependency("docker://"+im.Ref, im)
		if key := d.Name + "@" + d.Digest["sha256"]; !seen[key] {
			seen[key] = true
			out = append(out, d)
		}
	}
	return out
}

// imageDependency is a pulled image as a dependency: named name, with
// the digest of the image manifest that ran (the platform's, for a
// multi-platform image) and, in its annotations, the reference as
// written, the digest it resolved to in its registry (an index's for a
// multi-platform image), the platform, the policy rule that allowed it,
// the signature that verified it (format and key id) when the rule asked
// for one, and what a rule in mode warn let through.
func imageDependency(name string, im attest.Image) attest.Descriptor {
	d := attest.Descriptor{Name: name, Annotations: map[string]string{
		"reference": "docker://" + im.Ref,
		"digest":    im.Digest,
		"platform":  im.Platform,
		"rule":      im.Rule,
	}}
	if sum, ok := strings.CutPrefix(im.ImageDigest, "sha256:"); ok && attest.IsSHA256(sum) {
		d.Digest = map[string]string{"sha256": sum}
	} else {
		d.Annotations["imageDigest"] = "not recorded as sha256:<hex>: " + clip(im.ImageDigest, 80)
	}
	if _, sum, ok := strings.Cut(im.Ref, "@sha256:"); ok && attest.IsSHA256(sum) {
		d.Annotations["referenceDigest"] = "sha256:" + sum
	}
	addSignature(d.Annotations, im)
	return d
}

// addSignature puts the signature that verified im, and the warnings of
// its pull, into annotations.
func addSignature(annotations map[string]string, im attest.Image) {
	if s := im.Signature; s != nil {
		annotations["signature"] = s.Format
		if s.KeyID != "" {
			annotations["signatureKeyId"] = s.KeyID
		}
		if s.Subject != "" {
			annotations["signatureSubject"] = s.Subject
			annotations["signatureIssuer"] = s.Issuer
		}
	}
	if len(im.Warnings) > 0 {
		annotations["warnings"] = strings.Join(im.Warnings, "; ")
	}
}

// withPull is a Docker action's descriptor (runner hook: the pulled
// image's digest, the digest it resolved to, the platform) with what
// its pull recorded besides: the rule, the signature, the warnings. The
// descriptor given is not changed.
func withPull(a attest.Descriptor, pulled []attest.Image) attest.Descriptor {
	for _, im := range pulled {
		if "docker://"+im.Ref != a.Name || im.ImageDigest != "sha256:"+a.Digest["sha256"] {
			continue
		}
		ann := make(map[string]string, len(a.Annotations)+4)
		for k, v := range a.Annotations {
			ann[k] = v
		}
		if ann["rule"] == "" {
			ann["rule"] = im.Rule
		}
		addSignature(ann, im)
		a.Annotations = ann
		return a
	}
	return a
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
