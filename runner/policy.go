package runner

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// PolicyInfo is what a job's result says about the policy that governed
// it.
type PolicyInfo struct {
	// Digest of the effective policy and every source with its digest.
	Digest  string            `json:"digest"`
	Sources []policies.Source `json:"sources"`
	// HeadChangesPolicy reports a pull request that edits the policy file:
	// the edit does not apply to the run that carries it.
	HeadChangesPolicy *policies.PolicyChange `json:"headChangesPolicy,omitempty"`
	// Agent is the agent-detection decision, when an event was given.
	Agent *policies.Detection `json:"agent,omitempty"`
}

// SandboxFromPolicy turns a policy's sandbox section into a sandbox
// configuration (workspace and state root are the caller's).
func SandboxFromPolicy(p policies.Sandbox) (gvisor.Config, error) {
	var c gvisor.Config
	if p.RootFS != "host" {
		c.RootFS = p.RootFS
	}
	c.WorkspaceMount = p.WorkspaceMount
	c.Platform = p.Platform
	c.ExtraMasks = slices.Sorted(maps.Keys(p.Masks))
	c.Capabilities = append([]string{}, p.Capabilities...)
	for _, m := range p.Mounts {
		c.Mounts = append(c.Mounts, gvisor.Mount{Source: m.Source, Destination: m.Destination, ReadOnly: m.ReadOnly})
	}
	if p.User != nil && !p.User.Image {
		c.User = &gvisor.User{UID: p.User.UID, GID: p.User.GID}
	}
	l, err := LimitsFromPolicy(p.Limits)
	if err != nil {
		return c, err
	}
	c.Limits = l
	return c, nil
}

// LimitsFromPolicy parses the policy's limits.
func LimitsFromPolicy(p policies.Limits) (gvisor.Limits, error) {
	var l gvisor.Limits
	var err error
	if l.JobTimeout, err = policies.ParseDuration(p.JobTimeout); err != nil {
		return l, fmt.Errorf("policy sandbox.limits.jobTimeout: %w", err)
	}
	if l.StepTimeout, err = policies.ParseDuration(p.StepTimeout); err != nil {
		return l, fmt.Errorf("policy sandbox.limits.stepTimeout: %w", err)
	}
	for _, s := range []struct {
		name, val string
		dst       *int64
	}{{"memory", p.Memory, &l.Memory}, {"overlay", p.Overlay, &l.Overlay}, {"tmp", p.Tmp, &l.Tmp}, {"output", p.Output, &l.Output}, {"workspace", p.WorkspaceOrDefault(), &l.Workspace}} {
		if *s.dst, err = policies.ParseSize(s.val); err != nil {
			return l, fmt.Errorf("policy sandbox.limits.%s: %w", s.name, err)
		}
	}
	l.Pids, l.CPUs = p.Pids, p.CPUs
	return l, nil
}

// TightenLimits applies the caller's limits where they are at least as
// strict as the policy's (0 means unlimited), and refuses any that would
// loosen it: a flag can narrow a policy, never widen it.
func TightenLimits(policy, asked gvisor.Limits, set map[input.Name]bool) (gvisor.Limits, error) {
	out := policy
	stricter := func(name input.Name, p, a float64, dst func()) error {
		if !set[name] {
			return nil
		}
		if p != 0 && (a == 0 || a > p) {
			return input.Errorf(name, "more than the policy's sandbox.limits allow; a request can only tighten the policy")
		}
		dst()
		return nil
	}
	for _, c := range []struct {
		name input.Name
		p, a float64
		dst  func()
	}{
		{input.JobTimeout, float64(policy.JobTimeout), float64(asked.JobTimeout), func() { out.JobTimeout = asked.JobTimeout }},
		{input.StepTimeout, float64(policy.StepTimeout), float64(asked.StepTimeout), func() { out.StepTimeout = asked.StepTimeout }},
		{input.Memory, float64(policy.Memory), float64(asked.Memory), func() { out.Memory = asked.Memory }},
		{input.Pids, float64(policy.Pids), float64(asked.Pids), func() { out.Pids = asked.Pids }},
		{input.CPUs, policy.CPUs, asked.CPUs, func() { out.CPUs = asked.CPUs }},
		{input.Overlay, float64(policy.Overlay), float64(asked.Overlay), func() { out.Overlay = asked.Overlay }},
		{input.Tmp, float64(policy.Tmp), float64(asked.Tmp), func() { out.Tmp = asked.Tmp }},
		{input.Output, float64(policy.Output), float64(asked.Output), func() { out.Output = asked.Output }},
		{input.WorkspaceSize, float64(policy.Workspace), float64(asked.Workspace), func() { out.Workspace = asked.Workspace }},
	} {
		if err := stricter(c.name, c.p, c.a, c.dst); err != nil {
			return policy, err
		}
	}
	return out, nil
}

// StepsFromPolicy returns the steps of the policy's job name.
func StepsFromPolicy(p policies.Policy, name string) ([]StepSpec, error) {
	steps, ok := p.Steps[name]
	if !ok {
		return nil, fmt.Errorf("the policy has no job %q under steps; it has: %v", name, slices.Sorted(maps.Keys(p.Steps)))
	}
	var out []StepSpec
	for _, s := range steps {
		d, err := policies.ParseDuration(s.Timeout)
		if err != nil {
			return nil, fmt.Errorf("policy steps.%s %q: %w", name, s.Name, err)
		}
		out = append(out, StepSpec{Name: s.Name, Run: s.Run, Shell: s.Shell, Env: s.Env, WorkingDirectory: s.WorkingDirectory, Timeout: Duration(d)})
	}
	return out, nil
}

// EgressFromPolicy compiles the policy's egress section into the job's
// gateway configuration. lookupEnv reads airlock's own environment, where
// the values of the policy's secrets live.
//
// Audit applies only to a pull request known not to be agent work
// (agent, the detection's outcome, nil when there was no pull request
// event): otherwise egress.mode "audit" is enforced, and the
// configuration says why.
func EgressFromPolicy(e policies.Egress, agent *policies.Detection, lookupEnv func(string) (string, bool)) (*egress.Config, error) {
	note := ""
	if e.Mode == "audit" {
		switch {
		case agent == nil:
			e.Mode = "enforce"
			note = "egress enforced: the organisation policy asks for audit (egress.mode), which applies only to a pull request known not to be agent work, and this job has no pull request event"
		case agent.Agent:
			e.Mode = "enforce"
			note = "egress enforced: the organisation policy asks for audit (egress.mode), which never applies to a pull request detected as agent work"
		}
	}
	pol, err := rules.Compile(e, lookupEnv)
	if err != nil {
		return nil, err
	}
	cfg := &egress.Config{Policy: pol, ProxyPort: e.Network.ProxyPort, ModeNote: note}
	for _, f := range []struct {
		name, val string
		dst       *netip.Prefix
	}{{"link", e.Network.Link, &cfg.Link}, {"pool", e.Network.Pool, &cfg.Pool}} {
		if f.val == "" {
			continue
		}
		p, err := netip.ParsePrefix(f.val)
		if err != nil {
			return nil, fmt.Errorf("policy egress.network.%s: %q is not a CIDR range", f.name, f.val)
		}
		*f.dst = p
	}
	return cfg, nil
}
