package files

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// OpenBeneath reaches a path below base only without symlinks, and the
// descriptor's path keeps naming what was opened after the job swaps it.
func TestOpenBeneath(t *testing.T) {
	base := t.TempDir()
	host := t.TempDir()
	os.MkdirAll(filepath.Join(base, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(base, "a", "file"), []byte("x"), 0o644)
	os.Symlink(host, filepath.Join(base, "to-host"))
	os.Symlink("a", filepath.Join(base, "to-a"))
	linkedBase := filepath.Join(t.TempDir(), "linked")
	os.Symlink(base, linkedBase)
	for _, tc := range []struct {
		name, base, dir, wantErr string
	}{
		{"a directory", base, filepath.Join(base, "a", "b"), ""},
		{"a file", base, filepath.Join(base, "a", "file"), ""},
		{"the base itself", base, base, ""},
		{"a symlink to the host", base, filepath.Join(base, "to-host"), "without following symlinks"},
		{"a symlink on the way", base, filepath.Join(base, "to-a", "b"), "without following symlinks"},
		{"dot-dot out", base, filepath.Join(base, "a", "..", "..", filepath.Base(host)), "not below"},
		{"elsewhere", base, host, "not below"},
		{"a symlinked base", linkedBase, filepath.Join(linkedBase, "a"), "open " + linkedBase},
		{"missing", base, filepath.Join(base, "nope"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := OpenBeneath(tc.base, tc.dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if target, err := os.Readlink(FDPath(f)); err != nil || target != tc.dir {
				t.Errorf("FDPath names %q (%v), want %q", target, err, tc.dir)
			}
		})
	}
	// A directory is asked for: a file is not one.
	if _, err := OpenDirBeneath(base, filepath.Join(base, "a", "file")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file as a directory: %v", err)
	}
	// Swapped after the open: the descriptor still names the directory.
	f, err := OpenDirBeneath(base, filepath.Join(base, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	os.Rename(filepath.Join(base, "a", "b"), filepath.Join(base, "moved"))
	os.Symlink(host, filepath.Join(base, "a", "b"))
	os.WriteFile(filepath.Join(base, "moved", "marker"), []byte("mine"), 0o644)
	if b, err := os.ReadFile(filepath.Join(FDPath(f), "marker")); err != nil || string(b) != "mine" {
		t.Errorf("after the swap the descriptor reads %q, %v", b, err)
	}
}
