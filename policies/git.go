package policies

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-ci/airlock/internal/gitexec"
)

// RepoPolicyPath is where a repository keeps its policy.
const RepoPolicyPath = ".github/airlock.cue"

// git runs a read-only plumbing command in repo (see gitexec).
func git(ctx context.Context, repo string, args ...string) ([]byte, error) {
	return gitexec.Run(ctx, repo, args...)
}

// treeEntry is what `git ls-tree` says of a path at a commit.
type treeEntry struct {
	mode, kind, object string
}

// resolveCommit turns a revision into a full commit id.
func resolveCommit(ctx context.Context, repo, rev string) (string, error) {
	return gitexec.ResolveCommit(ctx, repo, rev)
}

// lookup returns the tree entry of path at commit, or ok=false.
func lookup(ctx context.Context, repo, commit, path string) (treeEntry, bool, error) {
	out, err := git(ctx, repo, "ls-tree", "-z", "--full-tree", commit, "--", path)
	if err != nil {
		return treeEntry{}, false, err
	}
	line := strings.TrimSuffix(string(out), "\x00")
	if line == "" {
		return treeEntry{}, false, nil
	}
	meta, name, ok := strings.Cut(line, "\t")
	f := strings.Fields(meta)
	if !ok || len(f) != 3 || name != path {
		return treeEntry{}, false, fmt.Errorf("unexpected git ls-tree output %q", line)
	}
	return treeEntry{mode: f[0], kind: f[1], object: f[2]}, true, nil
}

// FromCommit reads the repository policy from the git objects of a commit
// (the pull request's base), never from the working tree. It returns nil
// when the commit has no policy file. A symlink, a directory or a
// submodule at that path is an error: a policy must be a regular file.
func FromCommit(ctx context.Context, repo, rev string) (*Source, error) {
	commit, err := resolveCommit(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	e, ok, err := lookup(ctx, repo, commit, RepoPolicyPath)
	if err != nil || !ok {
		return nil, err
	}
	if e.kind != "blob" || (e.mode != "100644" && e.mode != "100755") {
		return nil, fmt.Errorf("%s at %s is a %s (mode %s), not a regular file; a symlink could point outside the repository, so it is refused", RepoPolicyPath, commit[:12], e.kind, e.mode)
	}
	sizeOut, err := git(ctx, repo, "cat-file", "-s", e.object)
	if err != nil {
		return nil, err
	}
	size, err := strconv.ParseInt(strings.TrimSpace(string(sizeOut)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("size of %s: %w", RepoPolicyPath, err)
	}
	if size > MaxFileSize {
		return nil, fmt.Errorf("%s at %s: %d bytes, at most %d", RepoPolicyPath, commit[:12], size, MaxFileSize)
	}
	data, err := git(ctx, repo, "cat-file", "blob", e.object)
	if err != nil {
		return nil, err
	}
	return &Source{Kind: KindRepo, Path: RepoPolicyPath, Commit: commit, Data: data}, nil
}

// PolicyChange says whether the pull request's head changes the policy
// file against its base. Such a change never applies to the run that
// carries it; it is reported as a trust finding.
type PolicyChange struct {
	Changed    bool   `json:"changed"`
	BaseObject string `json:"baseObject,omitempty"`
	HeadObject string `json:"headObject,omitempty"`
}

// CompareCommits compares the policy file's git object at base and head.
func CompareCommits(ctx context.Context, repo, base, head string) (PolicyChange, error) {
	var c PolicyChange
	for _, side := range []struct {
		rev string
		dst *string
	}{{base, &c.BaseObject}, {head, &c.HeadObject}} {
		commit, err := resolveCommit(ctx, repo, side.rev)
		if err != nil {
			return c, err
		}
		e, ok, err := lookup(ctx, repo, commit, RepoPolicyPath)
		if err != nil {
			return c, err
		}
		if ok {
			*side.dst = e.mode + " " + e.object
		}
	}
	c.Changed = c.BaseObject != c.HeadObject
	return c, nil
}
