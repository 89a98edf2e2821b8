package main

import (
	"context"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/pflag"

	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/trust"
)

// policyMode says whether this run is governed by a policy: any policy
// flag, or an organisation policy installed on the host.
func (o *runOptions) policyMode() bool {
	return o.orgDir != "" || o.base != "" || o.eventFile != "" || o.jobFromPolicy != "" || hostHasOrgPolicy()
}

// applyPolicy loads the effective policy (organisation files, then the
// repository's file at the base commit) and sets the job's sandbox from
// it. Flags may only tighten what the policy sets.
func (o *runOptions) applyPolicy(ctx context.Context, flags *pflag.FlagSet, job *runner.Job) error {
	if !o.policyMode() {
		return nil
	}
	srcs, err := loadOrgPolicy(o.orgDir)
	if err != nil {
		return err
	}
	info := &runner.PolicyInfo{}
	base, head := o.base, o.head
	var pr *policies.PullRequest
	if o.eventFile != "" {
		payload, err := files.ReadCapped(o.eventFile, policies.MaxEventSize)
		if err != nil {
			return usageError{err}
		}
		p, err := policies.ParsePullRequest(payload)
		if err != nil {
			return usageError{fmt.Errorf("--event %s: %w", o.eventFile, err)}
		}
		pr = &p
		if base == "" {
			base = p.BaseSHA
		}
		if head == "" {
			head = p.HeadSHA
		}
	}
	if base != "" {
		src, err := policies.FromCommit(ctx, o.workspace, base)
		if err != nil {
			return usageError{fmt.Errorf("repository policy: %w", err)}
		}
		if src != nil {
			srcs = append(srcs, *src)
		}
		if head != "" {
			c, err := policies.CompareCommits(ctx, o.workspace, base, head)
			if err != nil {
				return usageError{fmt.Errorf("compare policy at base and head: %w", err)}
			}
			info.HeadChangesPolicy = &c
		}
	}
	eff, err := policies.Load(ctx, srcs)
	if err != nil {
		return policyError{err}
	}
	info.Digest, info.Sources = eff.Digest, eff.Sources
	o.attestSubjects = eff.Policy.Attest.Subjects
	o.policyKey = eff.Org.Attest.Key
	if eff.Policy.Attest.Key != "" && eff.Policy.Attest.Key != o.policyKey {
		fmt.Fprintf(os.Stderr, "airlock: ignoring attest.key from the repository policy: the signing key is the organisation's to choose\n")
	}
	o.meta.BaseSHA, o.meta.HeadSHA = base, head
	if pr != nil {
		o.meta.PullRequest, o.meta.Author, o.meta.Event = pr.Number, pr.Author, "pull_request"
	}
	if pr != nil {
		d := policies.Decide(eff.Policy.Agents, *pr)
		info.Agent = &d
	}
	job.Policy = info

	cfg, err := runner.SandboxFromPolicy(eff.Policy.Sandbox)
	if err != nil {
		return policyError{err}
	}
	if flags.Changed("rootfs") && o.rootfs != cfg.RootFS {
		return usagef("--rootfs: the policy sets the root filesystem (sandbox.rootfs)")
	}
	if flags.Changed("workspace-mount") && o.workspaceMount != cfg.WorkspaceMount {
		return usagef("--workspace-mount: the policy sets it (sandbox.workspaceMount)")
	}
	for _, c := range o.caps {
		if !slices.Contains(cfg.Capabilities, c) {
			return usagef("--cap %s: the policy does not grant it (sandbox.capabilities); a flag can only tighten the policy", c)
		}
	}
	if flags.Changed("cap") {
		cfg.Capabilities = o.caps
	}
	if o.user != "" {
		u, err := parseUser(o.user)
		if err != nil {
			return err
		}
		if cfg.User != nil && *cfg.User != u {
			return usagef("--user: the policy sets the identity (sandbox.user)")
		}
		cfg.User = &u
	}
	asked, err := o.limits()
	if err != nil {
		return err
	}
	set := map[string]bool{}
	for _, n := range []string{"timeout", "step-timeout", "memory", "pids", "cpus", "overlay-size", "tmp-size", "output-limit"} {
		set[n] = flags.Changed(n)
	}
	if cfg.Limits, err = runner.TightenLimits(cfg.Limits, asked, set); err != nil {
		return usageError{err}
	}
	if job.Egress, err = runner.EgressFromPolicy(eff.Policy.Egress, os.LookupEnv); err != nil {
		return policyError{err}
	}
	trustSet, err := trust.NewSet(eff.Policy.Trust)
	if err != nil {
		return policyError{err}
	}
	job.Trust = &runner.Trust{Set: trustSet}
	if base != "" {
		job.Trust.Base, job.Trust.Head = base, head
		if head == "" {
			job.Trust.Head = "HEAD"
		}
	}
	cfg.ExtraMasks = append(cfg.ExtraMasks, o.masks...)
	cfg.StateRoot, cfg.Workspace, cfg.RunscFlags = o.stateDir, o.workspace, o.runscFlags
	job.Sandbox = cfg
	if o.jobFromPolicy != "" {
		if job.Steps, err = runner.StepsFromPolicy(eff.Policy, o.jobFromPolicy); err != nil {
			return usageError{err}
		}
		if job.Name == "" {
			job.Name = o.jobFromPolicy
		}
	}
	return nil
}

// policyError marks an invalid policy (exit 65).
type policyError struct{ err error }

func (p policyError) Error() string { return p.err.Error() }
func (p policyError) Unwrap() error { return p.err }
