package files

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// treeScript is the shell form of TreeDigest that docs/provenance.md
// gives, for a reviewer without airlock.
const treeScript = `cd "$1" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort | while IFS= read -r p; do
  if [ -L "$p" ]; then printf '%s\000%s\000%s\n' "$p" 120000 "$(readlink -n "$p" | sha256sum | cut -c1-64)"
  elif [ -d "$p" ]; then printf '%s\000%s\000\n' "$p" 040000
  elif [ -n "$(find "$p" -prune -perm /111)" ]; then printf '%s\000%s\000%s\n' "$p" 100755 "$(sha256sum < "$p" | cut -c1-64)"
  else printf '%s\000%s\000%s\n' "$p" 100644 "$(sha256sum < "$p" | cut -c1-64)"; fi
done | sha256sum | cut -c1-64`

// TreeDigest names a tree by its paths, git's modes and contents: the
// permission bits beyond the execute bit do not count, a symlink counts
// by its target's text and is never followed, and the documented shell
// form gives the same digest.
func TestTreeDigest(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o644)
	base := func(dir string) {
		os.MkdirAll(filepath.Join(dir, "dist", "sub"), 0o755)
		os.WriteFile(filepath.Join(dir, "action.yml"), []byte("runs: {using: node20, main: dist/index.js}\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "dist", "index.js"), []byte("console.log(1)\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "dist.txt"), []byte("sorts before dist/"), 0o644)
		os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o755)
		os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "link"))
	}
	digest := func(t *testing.T, edit func(dir string)) string {
		t.Helper()
		dir := t.TempDir()
		base(dir)
		if edit != nil {
			edit(dir)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		d, err := TreeDigest(root)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("bash", "-c", treeScript, "tree", dir).Output()
		if err != nil {
			t.Fatalf("the shell form: %v", err)
		}
		if sh := strings.TrimSpace(string(out)); sh != d {
			t.Errorf("the shell form gives %s, TreeDigest %s", sh, d)
		}
		return d
	}
	same := digest(t, nil)
	for _, tc := range []struct {
		name    string
		edit    func(dir string)
		changes bool
	}{
		{"another umask", func(dir string) { os.Chmod(filepath.Join(dir, "action.yml"), 0o600) }, false},
		{"the linked file changed", func(dir string) { os.WriteFile(filepath.Join(outside, "secret"), []byte("other"), 0o644) }, false},
		{"a file's content", func(dir string) { os.WriteFile(filepath.Join(dir, "dist", "index.js"), []byte("evil()\n"), 0o644) }, true},
		{"an execute bit", func(dir string) { os.Chmod(filepath.Join(dir, "action.yml"), 0o744) }, true},
		{"a symlink's target", func(dir string) {
			os.Remove(filepath.Join(dir, "link"))
			os.Symlink("dist/index.js", filepath.Join(dir, "link"))
		}, true},
		{"an empty directory", func(dir string) { os.Mkdir(filepath.Join(dir, "empty"), 0o755) }, true},
		{"a rename", func(dir string) { os.Rename(filepath.Join(dir, "run.sh"), filepath.Join(dir, "run2.sh")) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := digest(t, tc.edit); (got != same) != tc.changes {
				t.Errorf("digest %s, unchanged %s: changes = %v, want %v", got, same, got != same, tc.changes)
			}
		})
	}
	t.Run("a FIFO", func(t *testing.T) {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
			t.Skip(err)
		}
		root, _ := os.OpenRoot(dir)
		defer root.Close()
		if _, err := TreeDigest(root); err == nil || !strings.Contains(err.Error(), "fifo") {
			t.Errorf("err = %v", err)
		}
	})
}
