package quota

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Each case changes the workspace through the overlay, as the job does,
// then checks the workspace on the host after Release.
func TestReleaseMergesWhatTheJobDid(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		job   func(t *testing.T, ws string)
		check func(t *testing.T, ws string, m Merged)
	}{{
		name:  "new and changed files",
		files: map[string]string{"a": "old", "dir/b": "old"},
		job: func(t *testing.T, ws string) {
			must(t, os.WriteFile(filepath.Join(ws, "a"), []byte("new"), 0o600)) // mode of the old file kept
			must(t, os.MkdirAll(filepath.Join(ws, "dir/sub"), 0o750))
			must(t, os.WriteFile(filepath.Join(ws, "dir/sub/c"), []byte("c"), 0o640))
			must(t, os.Chtimes(filepath.Join(ws, "dir/sub/c"), time.Unix(1e9, 5), time.Unix(1e9, 5)))
		},
		check: func(t *testing.T, ws string, m Merged) {
			wantFile(t, ws, "a", "new", 0o644)
			wantFile(t, ws, "dir/b", "old", 0o644)
			wantFile(t, ws, "dir/sub/c", "c", 0o640)
			if fi, _ := os.Stat(filepath.Join(ws, "dir/sub/c")); !fi.ModTime().Equal(time.Unix(1e9, 5)) {
				t.Errorf("mtime %v not kept", fi.ModTime())
			}
			if fi, _ := os.Stat(filepath.Join(ws, "dir/sub")); fi.Mode().Perm() != 0o750 {
				t.Errorf("dir/sub mode %v", fi.Mode())
			}
		},
	}, {
		name:  "deleted files and trees",
		files: map[string]string{"gone": "x", "tree/a/b": "x", "tree/c": "x", "kept": "x"},
		job: func(t *testing.T, ws string) {
			must(t, os.Remove(filepath.Join(ws, "gone")))
			must(t, os.RemoveAll(filepath.Join(ws, "tree")))
		},
		check: func(t *testing.T, ws string, m Merged) {
			wantGone(t, ws, "gone")
			wantGone(t, ws, "tree")
			wantFile(t, ws, "kept", "x", 0o644)
			if m.Removed != 2 {
				t.Errorf("removed %d, want 2", m.Removed)
			}
		},
	}, {
		name:  "a directory removed and made again (opaque)",
		files: map[string]string{"d/old": "x"},
		job: func(t *testing.T, ws string) {
			must(t, os.RemoveAll(filepath.Join(ws, "d")))
			must(t, os.Mkdir(filepath.Join(ws, "d"), 0o755))
			must(t, os.WriteFile(filepath.Join(ws, "d/new"), []byte("n"), 0o644))
		},
		check: func(t *testing.T, ws string, m Merged) {
			wantGone(t, ws, "d/old")
			wantFile(t, ws, "d/new", "n", 0o644)
		},
	}, {
		name:  "a file where a directory was, and the other way round",
		files: map[string]string{"was-dir/x": "x", "was-file": "x"},
		job: func(t *testing.T, ws string) {
			must(t, os.RemoveAll(filepath.Join(ws, "was-dir")))
			must(t, os.WriteFile(filepath.Join(ws, "was-dir"), []byte("file"), 0o644))
			must(t, os.Remove(filepath.Join(ws, "was-file")))
			must(t, os.MkdirAll(filepath.Join(ws, "was-file"), 0o755))
			must(t, os.WriteFile(filepath.Join(ws, "was-file/y"), []byte("y"), 0o644))
		},
		check: func(t *testing.T, ws string, m Merged) {
			wantFile(t, ws, "was-dir", "file", 0o644)
			wantFile(t, ws, "was-file/y", "y", 0o644)
		},
	}, {
		// The job replaces a workspace directory with a symlink out of
		// it, then writes "through" it: the merge makes the symlink,
		// never writes out of the workspace.
		name:  "a symlink out of the workspace",
		files: map[string]string{"out/keep": "x"},
		job: func(t *testing.T, ws string) {
			must(t, os.RemoveAll(filepath.Join(ws, "out")))
			must(t, os.Symlink(outside, filepath.Join(ws, "out")))
			must(t, os.Symlink(secret, filepath.Join(ws, "link")))
		},
		check: func(t *testing.T, ws string, m Merged) {
			for _, name := range []string{"out", "link"} {
				if fi, err := os.Lstat(filepath.Join(ws, name)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
					t.Errorf("%s: %v %v, want a symlink", name, fi, err)
				}
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("the merge wrote outside the workspace: %v", ents)
			}
		},
	}, {
		// A 64 GiB file that is all hole fits a 32 MiB limit: copied
		// as data it would put 64 GiB on the host's disk.
		name: "a sparse file",
		job: func(t *testing.T, ws string) {
			f, err := os.Create(filepath.Join(ws, "sparse"))
			must(t, err)
			must(t, f.Truncate(64<<30))
			_, err = f.WriteAt([]byte("end"), 64<<30-3)
			must(t, err)
			_, err = f.WriteAt([]byte("start"), 0)
			must(t, err)
			f.Close()
		},
		check: func(t *testing.T, ws string, m Merged) {
			var st unix.Stat_t
			must(t, unix.Stat(filepath.Join(ws, "sparse"), &st))
			if st.Size != 64<<30 || st.Blocks*512 > 1<<20 {
				t.Errorf("size %d, %d bytes on disk: want 64 GiB in under 1 MiB", st.Size, st.Blocks*512)
			}
			f, _ := os.Open(filepath.Join(ws, "sparse"))
			defer f.Close()
			buf := make([]byte, 5)
			f.ReadAt(buf, 0)
			end := make([]byte, 3)
			f.ReadAt(end, 64<<30-3)
			if string(buf) != "start" || string(end) != "end" {
				t.Errorf("data %q %q", buf, end)
			}
		},
	}, {
		// 2000 names of one 4 MiB file fit the limit; copied one by one
		// they would take 8 GiB.
		name: "hard links",
		job: func(t *testing.T, ws string) {
			must(t, os.WriteFile(filepath.Join(ws, "data"), make([]byte, 4<<20), 0o644))
			must(t, os.Mkdir(filepath.Join(ws, "links"), 0o755))
			for i := 0; i < 2000; i++ {
				must(t, os.Link(filepath.Join(ws, "data"), filepath.Join(ws, "links", strconv.Itoa(i))))
			}
		},
		check: func(t *testing.T, ws string, m Merged) {
			var st unix.Stat_t
			must(t, unix.Stat(filepath.Join(ws, "links/1999"), &st))
			if st.Nlink != 2001 {
				t.Errorf("nlink %d, want 2001", st.Nlink)
			}
			if m.Bytes > 4<<20 {
				t.Errorf("merged %d bytes of data, want one copy (4 MiB)", m.Bytes)
			}
		},
	}, {
		name: "set-id bits and device nodes",
		job: func(t *testing.T, ws string) {
			must(t, os.WriteFile(filepath.Join(ws, "suid"), []byte("#!/bin/sh"), 0o755))
			must(t, os.Chmod(filepath.Join(ws, "suid"), 0o755|os.ModeSetuid|os.ModeSetgid))
			must(t, unix.Mknod(filepath.Join(ws, "mem"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 1))))
		},
		check: func(t *testing.T, ws string, m Merged) {
			wantFile(t, ws, "suid", "#!/bin/sh", 0o755)
			if fi, _ := os.Stat(filepath.Join(ws, "suid")); fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("suid mode %v", fi.Mode())
			}
			wantGone(t, ws, "mem")
			if len(m.SetIDCleared) != 1 || len(m.Devices) != 1 {
				t.Errorf("report %+v", m)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ws, dir, v := newVolume(t, 32<<20, tc.files)
			tc.job(t, ws)
			m, err := v.Release()
			if err != nil {
				t.Fatal(err)
			}
			released(t, ws, dir)
			tc.check(t, ws, m)
			if ents, _ := filepath.Glob(filepath.Join(ws, ".airlock-merge-*")); len(ents) > 0 {
				t.Errorf("temporary files left: %v", ents)
			}
		})
	}
}

func wantFile(t *testing.T, ws, rel, data string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(ws, rel)
	fi, err := os.Lstat(p)
	if err != nil {
		t.Errorf("%s: %v", rel, err)
		return
	}
	b, _ := os.ReadFile(p)
	if !fi.Mode().IsRegular() || string(b) != data || fi.Mode().Perm() != mode {
		t.Errorf("%s: %v %q, want a file %q with mode %v", rel, fi.Mode(), b, data, mode)
	}
}

func wantGone(t *testing.T, ws, rel string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(ws, rel)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there (%v)", rel, err)
	}
}

// Merge moves: a file leaves the upper layer once it is in the workspace,
// so the host does not hold what the job wrote twice while it merges.
func TestMergeMoves(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(upper, "d"), 0o755)
	for _, p := range []string{"a", "d/b"} {
		if err := os.WriteFile(filepath.Join(upper, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Merge(upper, lower)
	if err != nil || m.Files != 2 {
		t.Fatalf("merge: %+v %v", m, err)
	}
	for _, p := range []string{"a", "d/b"} {
		if _, err := os.Stat(filepath.Join(upper, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still in the upper layer: %v", p, err)
		}
		wantFile(t, lower, p, p, 0o644)
	}
}
