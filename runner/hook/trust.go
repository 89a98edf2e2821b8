package hook

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

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

// commitBaseline is the worktree's trust baseline as the pull request's
// commit has it, read through the GitHub API: what the job changed is
// found even in the step that made the checkout, and a runner's leftover
// workspace from an earlier job is no baseline. The commit is the head or
// the merge commit the event names, whichever the workspace is nearer:
// the job cannot name its own (its HEAD is not asked). An API that fails
// leaves the job's first snapshot as the baseline, said in the note.
func (d *job) commitBaseline(root string, set *trust.Set, first, after *trust.Snapshot) (*trust.Snapshot, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const fallback = "the worktree was compared with the job's first snapshot"
	var best []trust.TreeFile
	bestCommit, bestDistance := "", -1
	var why []string
	for _, commit := range d.commits {
		// A test merge commit can be gone (the pull request moved on):
		// the other one still serves.
		files, truncated, err := d.gh.Tree(ctx, d.owner, d.repo, commit)
		switch {
		case err != nil:
			why = append(why, err.Error())
			continue
		case truncated:
			why = append(why, fmt.Sprintf("GitHub lists only part of commit %.12s's tree", commit))
			continue
		}
		tree := treeFiles(files)
		if n := trust.TreeDistance(after, tree, set); bestDistance < 0 || n < bestDistance {
			best, bestCommit, bestDistance = tree, commit, n
		}
	}
	if bestDistance < 0 {
		return nil, fmt.Sprintf("%s: %s", fallback, strings.Join(why, "; "))
	}
	uid, gid := 0, 0
	if fi, err := os.Stat(root); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	fetch := func(tf trust.TreeFile) ([]byte, error) { return d.gh.Blob(ctx, d.owner, d.repo, tf.SHA) }
	return trust.CommitBaseline(after, first, best, set, fetch, uid, gid), fmt.Sprintf("the worktree was compared with commit %.12s as GitHub has it", bestCommit)
}
