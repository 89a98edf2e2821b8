package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-ci/airlock/internal/gitexec"
	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/trust"
)

// maxAuthoredFetch bounds the trust-set files whose two sides the hook
// reads through the contents API (two calls each).
const maxAuthoredFetch = 100

// authoredFromAPI is the authored diff of a pull request read through the
// GitHub API: its changed files, and for those in the trust set the bytes
// at the merge base and the head commit. The runner's workspace is no source for
// it: its git objects are what earlier jobs left. What could not be read
// is said in the returned note, and never fails the job by itself.
func authoredFromAPI(ctx context.Context, gh *github.Client, owner, repo string, number int, base, head string, set *trust.Set) ([]trust.Finding, string) {
	changed, truncated, err := gh.ChangedFiles(ctx, owner, repo, number)
	if err != nil {
		return nil, fmt.Sprintf("authored diff: the pull request's files could not be read: %v", err)
	}
	if base, err = gh.MergeBase(ctx, owner, repo, base, head); err != nil {
		return nil, fmt.Sprintf("authored diff: %v", err)
	}
	var notes []string
	if truncated {
		notes = append(notes, fmt.Sprintf("authored diff: the pull request changes more files than GitHub lists (%d read); the others were not inspected", len(changed)))
	}
	var files []trust.ChangedContent
	for _, f := range changed {
		for _, c := range sides(f) {
			if set.Category(c.Path) == "" {
				continue
			}
			if len(files) == maxAuthoredFetch {
				notes = append(notes, fmt.Sprintf("authored diff: more than %d trust-sensitive files changed; the first %d were inspected", maxAuthoredFetch, maxAuthoredFetch))
				return trust.AuthoredFromContents(files, set), strings.Join(notes, "; ")
			}
			var oldErr, newErr error
			if c.Status != 'A' {
				c.Old, oldErr = gh.FileAtRef(ctx, owner, repo, c.Path, base)
			}
			if c.Status != 'D' {
				c.New, newErr = gh.FileAtRef(ctx, owner, repo, c.Path, head)
			}
			c.Unreadable = oldErr != nil || newErr != nil
			files = append(files, c)
		}
	}
	return trust.AuthoredFromContents(files, set), strings.Join(notes, "; ")
}

// sides turns one changed file into the changes to compare: a rename or
// copy is its new path added and, for a rename, its old path deleted.
func sides(f github.ChangedFile) []trust.ChangedContent {
	switch f.Status {
	case "added", "copied":
		return []trust.ChangedContent{{Path: f.Path, Status: 'A'}}
	case "removed":
		return []trust.ChangedContent{{Path: f.Path, Status: 'D'}}
	case "renamed":
		out := []trust.ChangedContent{{Path: f.Path, Status: 'A'}}
		if f.Previous != "" {
			out = append(out, trust.ChangedContent{Path: f.Previous, Status: 'D'})
		}
		return out
	case "unchanged":
		return nil
	}
	return []trust.ChangedContent{{Path: f.Path, Status: 'M'}}
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
	tree := make([]trust.TreeFile, 0, len(files))
	for _, f := range files {
		tree = append(tree, trust.TreeFile{Path: f.Path, Mode: f.Mode, SHA: f.SHA, Size: f.Size})
	}
	uid, gid := 0, 0
	if fi, err := os.Stat(repoDir); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	fetch := func(tf trust.TreeFile) ([]byte, error) { return d.gh.Blob(ctx, d.owner, d.repo, tf.SHA) }
	return trust.CommitBaseline(after, tree, set, fetch, uid, gid), fmt.Sprintf("the worktree was compared with commit %.12s as GitHub has it", head)
}
