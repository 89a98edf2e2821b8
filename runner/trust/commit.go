package trust

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strings"

	"github.com/airlock-ci/airlock/internal/paths"
)

// TreeFile is a file of a commit's tree, as a trusted source lists it
// (the GitHub API; never the workspace's own git objects, which the job
// can rewrite).
type TreeFile struct {
	Path string
	// Mode is git's: 100644, 100755, 120000 (symlink), 160000 (submodule).
	Mode string
	SHA  string
	Size int64
}

// maxCommitFetch bounds the files whose committed bytes are fetched (the
// ones that differ from the workspace).
const maxCommitFetch = 200

// CommitBaseline returns the worktree part of a snapshot as the commit
// says it should be, for comparing with after (the workspace at the end
// of the job): a trust-set file the workspace has unchanged is taken from
// after as is; one that differs gets its committed bytes from fetch (for
// the diff and the revert), up to maxCommitFetch of them. Files of the
// workspace that the commit lacks are simply absent, so Compare sees
// them as created by the job. A committed file that neither first (the
// job's first snapshot) nor after has was never checked out (a sparse
// checkout): it is left out. uid and gid own restored files.
//
// This is the baseline that holds whenever the job changed the files,
// even in the step that checked them out. The .git directory is no part
// of a commit: its entries are the caller's to add.
func CommitBaseline(after, first *Snapshot, tree []TreeFile, set *Set, fetch func(TreeFile) ([]byte, error), uid, gid int) *Snapshot {
	before := &Snapshot{Entries: map[string]*Entry{}}
	// A submodule's files are another repository's: the first snapshot
	// is their baseline (or, checked out later, they are as found).
	subs := submodules(tree)
	for p, a := range after.Entries {
		if paths.BelowAny(p, subs) {
			if first != nil && first.Entries[p] != nil {
				before.Entries[p] = first.Entries[p]
			} else {
				same := *a
				before.Entries[p] = &same
			}
		}
	}
	// A file that is agent-tools for being run, and that the commit
	// lacks (untracked, ignored): as the job's first snapshot found it.
	inTree := map[string]bool{}
	for _, tf := range tree {
		inTree[tf.Path] = true
	}
	for p := range set.scripts {
		if !inTree[p] && first != nil && first.Entries[p] != nil {
			before.Entries[p] = first.Entries[p]
		}
	}
	fetched := 0
	for _, tf := range worktreeFiles(tree, set) {
		mode, _ := gitMode(tf.Mode)
		a := after.Entries[tf.Path]
		if unchanged(a, tf) {
			same := *a
			before.Entries[tf.Path] = &same
			continue
		}
		if a == nil && (first == nil || first.Entries[tf.Path] == nil) {
			continue
		}
		e := &Entry{Category: set.Category(tf.Path), Mode: mode, Size: tf.Size, GitSHA1: tf.SHA, UID: uid, GID: gid}
		before.Entries[tf.Path] = e
		// Unknown bytes still differ from the workspace's.
		e.SHA256 = "git:" + tf.SHA
		if fetched == maxCommitFetch || tf.Size > maxKeep {
			before.note("%s: the committed version was not fetched (more than %d files differ, or larger than %d bytes)", tf.Path, maxCommitFetch, maxKeep)
			continue
		}
		fetched++
		data, err := fetch(tf)
		if err == nil && gitBlobID(data) != tf.SHA {
			err = fmt.Errorf("the bytes fetched are not blob %.12s", tf.SHA)
		}
		if err != nil {
			before.note("%s: the committed version could not be read: %v", tf.Path, err)
			continue
		}
		if mode&fs.ModeSymlink != 0 {
			e.Link = string(data)
			e.SHA256 = ""
			continue
		}
		sum := sha256.Sum256(data)
		e.SHA256 = hex.EncodeToString(sum[:])
		e.data, e.kept = data, true
		e.Facts = facts(tf.Path, data)
	}
	return before
}

// TreeDistance counts the trust-set worktree files in which the workspace
// (after) and a commit's tree differ: the commit the workspace is at is
// the nearest one, whatever its HEAD says.
func TreeDistance(after *Snapshot, tree []TreeFile, set *Set) int {
	n := 0
	inTree := map[string]bool{}
	for _, tf := range worktreeFiles(tree, set) {
		inTree[tf.Path] = true
		if !unchanged(after.Entries[tf.Path], tf) {
			n++
		}
	}
	subs := submodules(tree)
	for p := range after.Entries {
		if !inTree[p] && !paths.Within(p, ".git") && !paths.BelowAny(p, subs) {
			n++
		}
	}
	return n
}

// submodules are the paths of a tree's submodules.
func submodules(tree []TreeFile) []string {
	var out []string
	for _, tf := range tree {
		if tf.Mode == "160000" {
			out = append(out, tf.Path)
		}
	}
	return out
}

// worktreeFiles are the tree's files a snapshot of the worktree covers.
func worktreeFiles(tree []TreeFile, set *Set) []TreeFile {
	var out []TreeFile
	for _, tf := range tree {
		cat := set.Category(tf.Path)
		_, ok := gitMode(tf.Mode)
		if cat == "" || cat == GitHooks || !ok || strings.HasPrefix(tf.Path, ".git/") || underSkipped(tf.Path) {
			continue
		}
		out = append(out, tf)
	}
	return out
}

// unchanged reports a workspace entry with the committed blob and type
// (and, for a file, executable bit).
func unchanged(a *Entry, tf TreeFile) bool {
	mode, _ := gitMode(tf.Mode)
	return a != nil && a.GitSHA1 == tf.SHA && a.Mode.Type() == mode.Type() && a.Mode.Perm()&0o100 == mode.Perm()&0o100
}

// gitMode turns a git file mode into the workspace's; submodules and
// anything else are not files.
func gitMode(m string) (fs.FileMode, bool) {
	switch m {
	case "100644":
		return 0o644, true
	case "100755":
		return 0o755, true
	case "120000":
		return fs.ModeSymlink | 0o777, true
	}
	return 0, false
}

// underSkipped reports a path below a directory the snapshot does not
// walk (node_modules and the like), which the workspace side lacks too.
func underSkipped(p string) bool {
	if strings.HasPrefix(p, ".github/") {
		return false
	}
	parts := strings.Split(p, "/")
	for _, d := range parts[:len(parts)-1] {
		if skipDirs[d] {
			return true
		}
	}
	return false
}

// WithGit returns a copy of s with the .git entries of other (the job's
// first snapshot) added: a commit says nothing of the git directory.
func (s *Snapshot) WithGit(other *Snapshot) *Snapshot {
	out := &Snapshot{Entries: map[string]*Entry{}, Notes: append([]string{}, s.Notes...), Truncated: s.Truncated}
	for p, e := range s.Entries {
		out.Entries[p] = e
	}
	if other != nil {
		for p, e := range other.Entries {
			if paths.Within(p, ".git") {
				out.Entries[p] = e
			}
		}
		out.Notes = append(out.Notes, other.Notes...)
		out.Truncated = out.Truncated || other.Truncated
	}
	return out
}

// AuthoredFromTrees returns the authored findings between two trees of a
// trusted source (the pull request's merge base and head, through the
// GitHub API): every trust-set path whose blob or mode differs, with both
// sides' bytes from fetch for the first maxFetch of them (the rest are
// reported without a diff, never left out).
func AuthoredFromTrees(base, head []TreeFile, set *Set, fetch func(TreeFile) ([]byte, error), maxFetch int) []Finding {
	old := map[string]TreeFile{}
	for _, tf := range base {
		old[tf.Path] = tf
	}
	var changes []change
	seen := map[string]bool{}
	for _, tf := range head {
		seen[tf.Path] = true
		b, ok := old[tf.Path]
		switch {
		case !ok:
			changes = append(changes, change{oldMode: "000000", newMode: tf.Mode, oldObj: nullObject, newObj: tf.SHA, status: 'A', path: tf.Path})
		case b.SHA != tf.SHA || b.Mode != tf.Mode:
			changes = append(changes, change{oldMode: b.Mode, newMode: tf.Mode, oldObj: b.SHA, newObj: tf.SHA, status: 'M', path: tf.Path})
		}
	}
	for _, tf := range base {
		if !seen[tf.Path] {
			changes = append(changes, change{oldMode: tf.Mode, newMode: "000000", oldObj: tf.SHA, newObj: nullObject, status: 'D', path: tf.Path})
		}
	}
	sizes := map[string]int64{}
	for _, tf := range append(append([]TreeFile{}, base...), head...) {
		sizes[tf.SHA] = tf.Size
	}
	// A config both read for its scripts and changed is fetched once.
	fetch = fetchOnce(fetch)
	set, out := widenForScripts(set, [][]TreeFile{head, base}, fetch)
	fetched := 0
	for _, c := range changes {
		cat := set.Category(c.path)
		if cat == "" {
			continue
		}
		var sides [2][]byte
		why := ""
		for i, obj := range []string{c.oldObj, c.newObj} {
			if obj == nullObject || why != "" {
				continue
			}
			if fetched == maxFetch || sizes[obj] > maxBlob {
				why = fmt.Sprintf("not shown: more than %d files to fetch, or larger than %d bytes", maxFetch, maxBlob)
				continue
			}
			fetched++
			data, err := fetch(TreeFile{Path: c.path, SHA: obj, Size: sizes[obj]})
			if err == nil && gitBlobID(data) != obj {
				err = fmt.Errorf("the bytes fetched are not blob %.12s", obj)
			}
			why = unreadable(err)
			sides[i] = data
		}
		out = append(out, stampAuthored(describeChange(c, set.semanticCategory(c.path, cat), sides[0], sides[1], why), cat, set)...)
	}
	return explainScripts(out, set)
}

// nullObject is git's id for "no such side".
const nullObject = "0000000000000000000000000000000000000000"

// IncompleteAuthored is the finding for an authored diff that could not
// be taken in full: it carries the strictest authored action of the
// policy, so that what could not be seen cannot pass where a change
// would have failed.
func IncompleteAuthored(set *Set, reason string) Finding {
	action := ActionAllow
	for _, c := range set.order {
		switch a := set.AuthoredAction(c); {
		case a == ActionFail:
			action = ActionFail
		case a == ActionWarn && action == ActionAllow:
			action = ActionWarn
		}
	}
	return Finding{Phase: Authored, Category: Inspection, Check: CheckAuthoredDiff, Path: ".", Kind: KindIncomplete, Action: action, Severity: severity(action), Reason: reason}
}

// WithoutHooks returns a copy of s without git hooks other than git's own
// samples: compared with it, any other hook is found (and reverted:
// removed), whenever it appeared. For CI runners, whose checkouts have no
// hooks.
func (s *Snapshot) WithoutHooks() *Snapshot {
	out := &Snapshot{Entries: map[string]*Entry{}, Notes: s.Notes, Truncated: s.Truncated}
	for p, e := range s.Entries {
		if e.Category == GitHooks && !strings.HasSuffix(p, ".sample") {
			continue
		}
		out.Entries[p] = e
	}
	return out
}
