package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/airlock-ci/airlock/internal/gitexec"
	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/trust"
)

// maxAuthoredFetch bounds the blobs the authored diff reads through the
// API (the two sides of changed trust-sensitive files).
const maxAuthoredFetch = 200

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
	var trees [2][]trust.TreeFile
	for i, commit := range []string{mb, head} {
		files, truncated, err := gh.Tree(ctx, owner, repo, commit)
		if err != nil {
			return nil, fmt.Sprintf("authored diff: %v", err)
		}
		if truncated {
			return []trust.Finding{trust.IncompleteAuthored(set, fmt.Sprintf("GitHub lists only part of commit %.12s's tree: the pull request's changes could not all be inspected", commit))}, ""
		}
		trees[i] = treeFiles(files)
	}
	fetch := func(tf trust.TreeFile) ([]byte, error) { return gh.Blob(ctx, owner, repo, tf.SHA) }
	return trust.AuthoredFromTrees(trees[0], trees[1], set, fetch, maxAuthoredFetch), ""
}

// authoredTimeout bounds the authored diff's API calls (prepare_job
// waits for them).
const authoredTimeout = 60 * time.Second

func treeFiles(files []github.TreeFile) []trust.TreeFile {
	out := make([]trust.TreeFile, 0, len(files))
	for _, f := range files {
		out = append(out, trust.TreeFile{Path: f.Path, Mode: f.Mode, SHA: f.SHA, Size: f.Size})
	}
	return out
}

// commitBaseline is the worktree's trust baseline as the checked-out
// commit has it, read through the GitHub API: what the job changed is
// found even in the step that made the checkout, and a runner's leftover
// workspace from an earlier job is no baseline. Only the pull request's
// head and merge commits are taken; the job cannot name its own.
func (d *hookJob) commitBaseline(repoDir string, set *trust.Set, after *trust.Snapshot) (*trust.Snapshot, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const fallback = "the worktree was compared with the job's first snapshot"
	head, err := gitexec.ResolveCommit(ctx, repoDir, "HEAD")
	if err != nil {
		return nil, fmt.Sprintf("%s: the checkout's commit could not be read (%v)", fallback, err)
	}
	if !slices.Contains(d.commits, head) {
		return nil, fmt.Sprintf("%s: the checkout is at %.12s, not the pull request's head or merge commit", fallback, head)
	}
	files, truncated, err := d.gh.Tree(ctx, d.owner, d.repo, head)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("%s: %v", fallback, err)
	case truncated:
		return nil, fmt.Sprintf("%s: GitHub lists only part of commit %.12s's tree", fallback, head)
	}
	tree := treeFiles(files)
	uid, gid := 0, 0
	if fi, err := os.Stat(repoDir); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	fetch := func(tf trust.TreeFile) ([]byte, error) { return d.gh.Blob(ctx, d.owner, d.repo, tf.SHA) }
	return trust.CommitBaseline(after, tree, set, fetch, uid, gid), fmt.Sprintf("the worktree was compared with commit %.12s as GitHub has it", head)
}
