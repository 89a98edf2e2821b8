package runner

import (
	"context"

	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
)

// LocalPolicy is the effective policy and the pull request as `airlock
// run` finds them on its host: the organisation's policy files (in
// orgDir, or the host's policies.DefaultOrgDir when empty), the
// event payload (eventFile, optional: agent detection, base and head),
// and the repository's policy read from the workspace's git objects at
// the base commit. base and head, when given, win over the event's; with
// both, whether the head edits the policy is on record.
//
// The runner hook does not use this: a runner's workspace holds what
// earlier jobs left, so the hook reads the repository's policy through
// the GitHub API.
func LocalPolicy(ctx context.Context, workspace, orgDir, eventFile, base, head string) (*policies.Effective, PullRequest, error) {
	pr := PullRequest{Base: base, Head: head}
	org, err := policies.OrgSources(orgDir)
	if err != nil {
		return nil, pr, input.Error{Input: input.OrgDir, Err: err}
	}
	srcs := org
	if eventFile != "" {
		payload, err := files.ReadCapped(eventFile, policies.MaxEventSize)
		if err != nil {
			return nil, pr, InputError{Err: err}
		}
		ev, err := policies.ParsePullRequest(payload)
		if err != nil {
			return nil, pr, input.Errorf(input.Event, "%s: %w", eventFile, err)
		}
		pr.Event = &ev
		if pr.Base == "" {
			pr.Base = ev.BaseSHA
		}
		if pr.Head == "" {
			pr.Head = ev.HeadSHA
		}
	}
	if pr.Base != "" {
		src, err := policies.FromCommit(ctx, workspace, pr.Base)
		if err != nil {
			return nil, pr, inputf("repository policy: %w", err)
		}
		if src != nil {
			srcs = append(srcs, *src)
		}
		if pr.Head != "" {
			c, err := policies.CompareCommits(ctx, workspace, pr.Base, pr.Head)
			if err != nil {
				return nil, pr, inputf("compare policy at base and head: %w", err)
			}
			pr.HeadChangesPolicy = &c
		}
	}
	eff, err := policies.Load(ctx, srcs)
	if err != nil {
		return nil, pr, PolicyError{err}
	}
	return eff, pr, nil
}
