package runner

import (
	"context"
	"slices"

	"github.com/airlock-ci/airlock/internal/gitexec"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/trust"
)

// AuthoredReport is the authored diff alone, without a sandbox (`airlock
// trust diff`): what the commits base..head of the repository in dir
// change in the trust set that the organisation's sources (org) and the
// repository's policy at base define, decided (trust.AuthoredReport).
func AuthoredReport(ctx context.Context, dir string, org []policies.Source, base, head string) (*trust.Report, error) {
	if _, err := gitexec.ResolveCommit(ctx, dir, base); err != nil {
		return nil, input.Errorf(input.Base, "%w (a shallow clone lacks older commits: fetch the history, e.g. actions/checkout with fetch-depth: 0)", err)
	}
	srcs := slices.Clone(org)
	src, err := policies.FromCommit(ctx, dir, base)
	if err != nil {
		return nil, inputf("repository policy: %w", err)
	}
	if src != nil {
		srcs = append(srcs, *src)
	}
	eff, err := policies.Load(ctx, srcs)
	if err != nil {
		return nil, PolicyError{err}
	}
	set, err := trust.NewSet(eff.Policy.Trust)
	if err != nil {
		return nil, PolicyError{err}
	}
	rep, err := trust.AuthoredReport(ctx, dir, base, head, set)
	if err != nil {
		return nil, InputError{Err: err}
	}
	return rep, nil
}
