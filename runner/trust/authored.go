package trust

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-ci/airlock/internal/gitexec"
)

// maxBlob bounds a file read from git for the authored diff.
const maxBlob = 1 << 20

// change is one line of `git diff-tree --raw`.
type change struct {
	oldMode, newMode string
	oldObj, newObj   string
	status           byte
	path             string
}

// AuthoredDiff returns the findings for what the pull request's commits
// changed in the trust set: from the merge base of base and head to head,
// read from git objects (nothing is checked out, no filter or diff driver
// runs).
func AuthoredDiff(ctx context.Context, repo, base, head string, set *Set) ([]Finding, error) {
	b, err := gitexec.ResolveCommit(ctx, repo, base)
	if err != nil {
		return nil, fmt.Errorf("base commit: %w (a shallow clone lacks it: fetch the history, e.g. actions/checkout with fetch-depth: 0)", err)
	}
	h, err := gitexec.ResolveCommit(ctx, repo, head)
	if err != nil {
		return nil, fmt.Errorf("head commit: %w", err)
	}
	mbOut, err := gitexec.Run(ctx, repo, "merge-base", b, h)
	if err != nil {
		return nil, fmt.Errorf("merge base of %.12s and %.12s: %w (a shallow clone may lack it)", b, h, err)
	}
	mb := strings.TrimSpace(string(mbOut))
	raw, err := gitexec.RunCapped(ctx, repo, 16<<20, "diff-tree", "-r", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", mb, h)
	if err != nil {
		return nil, fmt.Errorf("diff %.12s..%.12s: %w", mb, h, err)
	}
	changes, err := parseRaw(raw)
	if err != nil {
		return nil, err
	}
	// Files the agent tool configs run, at the head (a new hook and its
	// script) and at the base (a change to what an existing hook runs).
	var trees [][]TreeFile
	var out []Finding
	for _, commit := range []string{h, mb} {
		tree, err := lsTree(ctx, repo, commit)
		if err != nil {
			out = append(out, scriptsIncomplete(set, "the files that agent tool configs run were not read: "+err.Error()))
			break
		}
		trees = append(trees, tree)
	}
	// A config both read for its scripts and changed is read once.
	fetch := fetchOnce(func(tf TreeFile) ([]byte, error) { return blob(ctx, repo, tf.SHA) })
	set, missed := widenForScripts(set, trees, fetch)
	out = append(out, missed...)
	for _, c := range changes {
		cat := set.Category(c.path)
		if cat == "" {
			continue
		}
		oldData, oldErr := fetch(TreeFile{SHA: c.oldObj})
		newData, newErr := fetch(TreeFile{SHA: c.newObj})
		fs := describeChange(c, set.semanticCategory(c.path, cat), oldData, newData, unreadable(errors.Join(oldErr, newErr)))
		out = append(out, stampAuthored(fs, cat, set)...)
	}
	return explainScripts(out, set), nil
}

// lsTree lists a commit's files.
func lsTree(ctx context.Context, repo, commit string) ([]TreeFile, error) {
	raw, err := gitexec.RunCapped(ctx, repo, 64<<20, "ls-tree", "-r", "-z", "-l", "--full-tree", commit)
	if err != nil {
		return nil, fmt.Errorf("list the tree of %.12s: %w", commit, err)
	}
	var out []TreeFile
	for _, rec := range bytes.Split(bytes.TrimSuffix(raw, []byte{0}), []byte{0}) {
		meta, p, ok := strings.Cut(string(rec), "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 || f[1] != "blob" {
			continue
		}
		size, _ := strconv.ParseInt(f[3], 10, 64)
		out = append(out, TreeFile{Path: p, Mode: f[0], SHA: f[2], Size: size})
	}
	return out, nil
}

// stampAuthored marks findings as the pull request's, with the policy's
// action for their category.
func stampAuthored(fs []Finding, cat Category, set *Set) []Finding {
	for i := range fs {
		if fs[i].Category == "" { // a finding may name a category of its own
			fs[i].Category = cat
		}
		fs[i].Phase = Authored
		fs[i].Action = set.AuthoredAction(fs[i].Category)
		fs[i].Severity = severity(fs[i].Action)
	}
	return fs
}

// parseRaw parses `git diff-tree -r -z --raw` output.
func parseRaw(raw []byte) ([]change, error) {
	var out []change
	fields := bytes.Split(bytes.TrimSuffix(raw, []byte{0}), []byte{0})
	for i := 0; i+1 < len(fields); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(string(fields[i]), ":"))
		if len(meta) != 5 || len(meta[4]) == 0 {
			return nil, fmt.Errorf("unexpected git diff-tree output %q", fields[i])
		}
		out = append(out, change{oldMode: meta[0], newMode: meta[1], oldObj: meta[2], newObj: meta[3], status: meta[4][0], path: string(fields[i+1])})
	}
	return out, nil
}

// describeChange is the findings of one changed path, given both sides'
// bytes (nil for a side that does not exist); unreadable, when set, says
// why a side's bytes are not to be had (and nothing is shown).
func describeChange(c change, cat Category, oldData, newData []byte, unreadable string) []Finding {
	f := Finding{Path: c.path, Check: CheckAuthoredDiff}
	switch {
	case c.status == 'A':
		f.Kind, f.Reason = KindAdded, "added by the pull request"
	case c.status == 'D':
		f.Kind, f.Reason = KindDeleted, "deleted by the pull request"
	case c.oldMode != c.newMode && (c.oldMode == "120000" || c.newMode == "120000"):
		f.Kind, f.Reason = KindSymlink, fmt.Sprintf("type changed (mode %s -> %s)", c.oldMode, c.newMode)
	case c.oldObj != "" && c.oldObj == c.newObj:
		f.Kind, f.Reason = KindModeChanged, fmt.Sprintf("mode %s -> %s", c.oldMode, c.newMode)
	default:
		f.Kind, f.Reason = KindModified, "changed by the pull request"
	}
	if c.newMode == "120000" {
		f.Reason += " (a symlink)"
	}
	if unreadable != "" {
		f.Diff = "(" + unreadable + ")"
		return []Finding{f}
	}
	// Files where only some content matters.
	if b, a := facts(c.path, oldData), facts(c.path, newData); c.status == 'M' && b != nil && a != nil {
		if slices.Equal(b, a) {
			return nil
		}
		f.Reason = factsReason(b, a)
	}
	f.Diff, f.DiffSHA256 = unifiedDiff(c.path, oldData, newData)
	f.Line = firstChangedLine(f.Diff)
	out := []Finding{f}
	if cat == CI && isWorkflow(c.path) && c.status != 'D' {
		out = append(out, WorkflowEscalations(c.path, oldData, newData)...)
	}
	if c.status != 'D' {
		out = append(out, agentFindings(cat, c.path, oldData, newData)...)
	}
	return out
}

// unreadable says why a side could not be read, "" when it could.
func unreadable(err error) string {
	if err == nil {
		return ""
	}
	return "not shown: " + err.Error()
}

func isWorkflow(p string) bool {
	ext := path.Ext(p)
	return strings.HasPrefix(p, ".github/workflows/") && (ext == ".yml" || ext == ".yaml")
}

// blob reads a git object, nil for the null object.
func blob(ctx context.Context, repo, obj string) ([]byte, error) {
	if strings.Trim(obj, "0") == "" {
		return nil, nil
	}
	out, err := gitexec.RunCapped(ctx, repo, maxBlob, "cat-file", "blob", obj)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// firstChangedLine is the new-side line of the first hunk of a unified
// diff, 0 when there is none.
func firstChangedLine(diff string) int {
	i := strings.Index(diff, "\n@@ -")
	if i < 0 {
		return 0
	}
	rest := diff[i+5:]
	plus := strings.Index(rest, " +")
	if plus < 0 {
		return 0
	}
	num := rest[plus+2:]
	end := strings.IndexAny(num, ", ")
	if end < 0 {
		return 0
	}
	n, _ := strconv.Atoi(num[:end])
	// The hunk starts with context lines; the change is a bit below.
	for _, l := range strings.Split(diff[i+1:], "\n")[1:] {
		if strings.HasPrefix(l, "+") || strings.HasPrefix(l, "-") {
			break
		}
		n++
	}
	return n
}

// AuthoredReport is the authored diff alone, decided, without a job:
// what the commits base..head of the repository in dir change in the
// set.
func AuthoredReport(ctx context.Context, dir, base, head string, set *Set) (*Report, error) {
	findings, err := AuthoredDiff(ctx, dir, base, head, set)
	if err != nil {
		return nil, err
	}
	rep := &Report{Findings: findings}
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	rep.Decide()
	return rep, nil
}
