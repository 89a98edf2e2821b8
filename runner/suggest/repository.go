package suggest

import (
	"context"
	"fmt"
	"slices"

	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
)

// Repository is where suggested rules go: the repository (a git
// directory) whose policy at Base they are merged into (Dir empty: no
// repository policy), under the organisation's sources.
type Repository struct {
	Dir, Base string
	Org       []policies.Source
}

// ForRepository suggests rules from runs for the repository: merged into
// its policy at the base commit, leaving out what the effective policy
// (organisation and repository) allows already, and vetted against the
// organisation's sources as `airlock policy vet --org` vets. The
// repository's policy that cannot be read is an input.Error about the
// base revision; a policy or a result that does not load is an error of
// the data.
func ForRepository(ctx context.Context, runs []Run, repo Repository, agentRuns bool) (Result, error) {
	srcs := slices.Clone(repo.Org)
	var existing []byte
	if repo.Dir != "" {
		src, err := policies.FromCommit(ctx, repo.Dir, repo.Base)
		if err != nil {
			return Result{}, input.Errorf(input.Base, "repository policy: %w", err)
		}
		if src != nil {
			existing = src.Data
			srcs = append(srcs, *src)
		}
	}
	var current *policies.Egress
	if len(srcs) > 0 {
		eff, err := policies.Load(ctx, srcs)
		if err != nil {
			return Result{}, err
		}
		current = &eff.Policy.Egress
	}
	res, err := Suggest(runs, Options{Existing: existing, Path: policies.RepoPolicyPath, Current: current, AgentRuns: agentRuns})
	if err != nil {
		return Result{}, err
	}
	vetted := append(slices.Clone(repo.Org), policies.Source{Kind: policies.KindRepo, Path: policies.RepoPolicyPath, Data: res.File})
	if _, err := policies.Load(ctx, vetted); err != nil {
		return Result{}, fmt.Errorf("the suggested policy does not pass policy vet, so it is not printed: %w", err)
	}
	return res, nil
}
