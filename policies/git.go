package policies

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// RepoPolicyPath is where a repository keeps its policy.
const RepoPolicyPath = ".github/airlock.cue"

// gitTimeout bounds each git command.
const gitTimeout = 30 * time.Second

// git runs a read-only plumbing command in repo. The repository's own
// config is the agent's to write, so nothing in it may run: hooks and
// fsmonitor are switched off, system and global config ignored, and only
// plumbing commands that apply no filters are used.
func git(ctx context.Context, repo string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	full := append([]string{"-C", repo, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-replace-objects"}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		// The workspace may belong to another user than airlock's.
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*",
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// treeEntry is what `git ls-tree` says of a path at a commit.
type treeEntry struct {
	mode, kind, object string
}

// resolveCommit turns a revision into a full commit id.
func resolveCommit(ctx context.Context, repo, rev string) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") {
		return "", fmt.Errorf("revision %q: give a commit id or ref", rev)
	}
	out, err := git(ctx, repo, "rev-parse", "--verify", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("resolve %s in %s: %w", rev, repo, err)
	}
	return strings.TrimSpace(string(out)), nil
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
