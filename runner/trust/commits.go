package trust

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// TreeSource is a trusted source of commits' trees (the runner hook:
// the GitHub API), never the workspace's own git objects, which the job
// can rewrite.
type TreeSource interface {
	// Tree lists a commit's files; truncated says the source listed only
	// part of them.
	Tree(ctx context.Context, commit string) (files []TreeFile, truncated bool, err error)
	// Blob is the bytes of the blob with the given id.
	Blob(ctx context.Context, sha string) ([]byte, error)
}

// Commits are the commits a job's checkout can be at (the pull
// request's head, the test merge commit the event names) and where
// their trees are to be had.
type Commits struct {
	// IDs are the commits, in the order they are tried.
	IDs []string
	// Source lists their trees and reads their blobs.
	Source TreeSource
	// Name is the source as the report's notes name it ("GitHub").
	Name string
}

// commitsTimeout bounds the source's calls for one baseline.
const commitsTimeout = 2 * time.Minute

// Baseline is the worktree's baseline as the commit nearest the
// workspace has it (CommitBaseline; the nearest by TreeDistance, as the
// job cannot name its own: its HEAD is not asked), given the repository
// root (a path that names it safely), the job's first snapshot, the
// state after the job and the job's set (with the files its agent tool
// configs run). What the job changed is then found even in the step that
// made the checkout, and a runner's leftover workspace from an earlier
// job is no baseline. When no tree can be had it returns nil, and the
// first snapshot stays the baseline; the note says which it was.
func (c *Commits) Baseline(ctx context.Context, root string, first, after *Snapshot, set *Set) (*Snapshot, string) {
	ctx, cancel := context.WithTimeout(ctx, commitsTimeout)
	defer cancel()
	const fallback = "the worktree was compared with the job's first snapshot"
	var best []TreeFile
	bestCommit, bestDistance := "", -1
	var why []string
	for _, commit := range c.IDs {
		// A test merge commit can be gone (the pull request moved on):
		// the other one still serves.
		tree, truncated, err := c.Source.Tree(ctx, commit)
		switch {
		case err != nil:
			why = append(why, err.Error())
			continue
		case truncated:
			why = append(why, fmt.Sprintf("%s lists only part of commit %.12s's tree", c.Name, commit))
			continue
		}
		if n := TreeDistance(after, tree, set); bestDistance < 0 || n < bestDistance {
			best, bestCommit, bestDistance = tree, commit, n
		}
	}
	if bestDistance < 0 {
		return nil, fmt.Sprintf("%s: %s", fallback, strings.Join(why, "; "))
	}
	// Restored files get the repository's owner.
	uid, gid := 0, 0
	if fi, err := os.Stat(root); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	fetch := func(tf TreeFile) ([]byte, error) { return c.Source.Blob(ctx, tf.SHA) }
	return CommitBaseline(after, first, best, set, fetch, uid, gid), fmt.Sprintf("the worktree was compared with commit %.12s as %s has it", bestCommit, c.Name)
}
