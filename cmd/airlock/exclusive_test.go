package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// exclusiveWrites writes the workspace in every way a job can, all at
// the very end of its step (the sandbox is destroyed right after): each
// kind of open, a write after a read of the same file, a sparse write, a
// truncation, a shared writable mapping without msync, renames, links,
// a removal, modes and a time. First it prints how the sentry mounted
// the workspace (its cache option).
const exclusiveWrites = `set -e
grep ' /workspace ' /proc/self/mounts
mkdir -p d/e
echo a > wo.txt
cat wo.txt > /dev/null
echo b >> wo.txt
exec 3<>rw.txt; printf rw >&3; exec 3>&-
dd if=/dev/zero of=sparse bs=1 count=1 seek=1048576 2>/dev/null
printf 12345678 > trunc; truncate -s 5 trunc; printf x >> trunc
/.airlock/init mmap mapped.txt 'through a mapping'
printf keep > d/e/f; mv d/e/f d/moved; ln d/moved hard; ln -s moved d/link
printf gone > gone; rm gone
chmod 0751 d; chmod 0600 wo.txt
touch -d @1700000000 d/moved
`

// With nothing but the job writing its workspace (airlock run, one
// container), the sentry keeps the workspace's files as its own (the
// mount's cache is fscache, not remote_revalidating): what the job
// wrote, however it wrote it, is in the workspace afterwards all the
// same, bounded or not, as a run with the mount shared leaves it.
func TestExclusiveMountsKeepEveryWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	want := map[string]string{
		"wo.txt":     "a\nb\n",
		"rw.txt":     "rw",
		"trunc":      "12345x",
		"mapped.txt": "through a mapping",
		"d/moved":    "keep",
	}
	for _, bound := range []string{"16G", "0"} {
		t.Run("workspace-size "+bound, func(t *testing.T) {
			trees := map[string]string{}
			for _, mode := range []struct{ name, cache, flag string }{
				{"exclusive", "cache=fscache", ""},
				{"shared", "cache=remote_revalidating", "--runsc-flag=--file-access-mounts=shared"},
			} {
				ws := workspace(t)
				args := []string{"run", "-w", ws, "--state-dir", stateDir(t), "--workspace-size", bound}
				if mode.flag != "" {
					args = append(args, mode.flag)
				}
				var out, errb bytes.Buffer
				if code := execute(append(args, "--", "sh", "-c", exclusiveWrites), &out, &errb); code != 0 {
					t.Fatalf("%s: exit %d: %s%s", mode.name, code, out.String(), errb.String())
				}
				if !strings.Contains(out.String(), mode.cache) {
					t.Fatalf("%s: the workspace is not mounted with %s: %s", mode.name, mode.cache, out.String())
				}
				for f, content := range want {
					if b, err := os.ReadFile(filepath.Join(ws, f)); string(b) != content {
						t.Errorf("%s: %s holds %q (%v), want %q", mode.name, f, b, err, content)
					}
				}
				trees[mode.name] = treeOf(t, ws)
			}
			if trees["exclusive"] != trees["shared"] {
				t.Errorf("the workspace after the exclusive run:\n%s\nafter the shared run:\n%s", trees["exclusive"], trees["shared"])
			}
		})
	}
}

// treeOf lists a workspace: each entry's path, type and mode, size,
// link count and content's digest (a symlink's target), and the time of
// d/moved, which the job set.
func treeOf(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v size=%d links=%d", rel, fi.Mode(), fi.Size(), st.Nlink)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		}
		if rel == "d/moved" {
			line += fmt.Sprintf(" mtime=%d", fi.ModTime().Unix())
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
