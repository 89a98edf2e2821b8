package hook

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/trust"
)

// maxAuthoredFetch bounds the blobs the authored diff reads through the
// API (the two sides of changed trust-sensitive files).
const maxAuthoredFetch = 200

// apiTrees is a repository's trees and blobs as the GitHub API has
// them: trust's source of the commits' own files (trust.TreeSource).
type apiTrees struct {
	gh          *github.Client
	owner, repo string
}

// Tree lists a commit's files.
func (g apiTrees) Tree(ctx context.Context, commit string) ([]trust.TreeFile, bool, error) {
	files, truncated, err := g.gh.Tree(ctx, g.owner, g.repo, commit)
	if err != nil {
		return nil, false, err
	}
	out := make([]trust.TreeFile, 0, len(files))
	for _, f := range files {
		out = append(out, trust.TreeFile{Path: f.Path, Mode: f.Mode, SHA: f.SHA, Size: f.Size})
	}
	return out, truncated, nil
}

// Blob reads a blob by id.
func (g apiTrees) Blob(ctx context.Context, sha string) ([]byte, error) {
	return g.gh.Blob(ctx, g.owner, g.repo, sha)
}

// authoredFromAPI is the authored diff of a pull request read through the
// GitHub API: the trees of the merge base and of the head commit the
// event names (never the pull request's current file list, which a later
// push changes), compared by blob and mode, and both sides' bytes of the
// trust-sensitive files that differ. The runner's workspace is no source
// for it: its git objects are what earlier jobs left. An API that fails
// is said in the returned note and never fails the job by itself; trees
// GitHub lists only in part are an incomplete finding.
func authoredFromAPI(ctx context.Context, gh *github.Client, owner, repo, base, head string, set *trust.Set) ([]trust.Finding, string) {
	ctx, cancel := context.WithTimeout(ctx, authoredTimeout)
	defer cancel()
	mb, err := gh.MergeBase(ctx, owner, repo, base, head)
	if err != nil {
		return nil, fmt.Sprintf("authored diff: %v", err)
	}
	src := apiTrees{gh: gh, owner: owner, repo: repo}
	var trees [2][]trust.TreeFile
	for i, commit := range []string{mb, head} {
		files, truncated, err := src.Tree(ctx, commit)
		if err != nil {
			return nil, fmt.Sprintf("authored diff: %v", err)
		}
		if truncated {
			return []trust.Finding{trust.IncompleteAuthored(set, fmt.Sprintf("GitHub lists only part of commit %.12s's tree: the pull request's changes could not all be inspected", commit))}, ""
		}
		trees[i] = files
	}
	fetch := func(tf trust.TreeFile) ([]byte, error) { return src.Blob(ctx, tf.SHA) }
	return trust.AuthoredFromTrees(trees[0], trees[1], set, fetch, maxAuthoredFetch), ""
}

// authoredTimeout bounds the authored diff's API calls (prepare_job
// waits for them).
const authoredTimeout = 60 * time.Second

// checkoutCommits are the commits the job's checkout can be at, the pull
// request's head and the merge commit the event names, with their trees
// read through the GitHub API: the run-time trust baseline is the
// nearer one's tree (trust.Commits.Baseline), so that what the job
// changed is found even in the step that made the checkout, and a
// runner's leftover workspace from an earlier job is no baseline.
func (d *job) checkoutCommits() *trust.Commits {
	return &trust.Commits{IDs: d.commits, Source: apiTrees{gh: d.gh, owner: d.owner, repo: d.repo}, Name: "GitHub"}
}
