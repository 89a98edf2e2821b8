package workspace

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTidy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create device nodes and chown")
	}
	ws := t.TempDir() // owned by root: the owner
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("x"), 0o4755); err != nil {
		t.Fatal(err)
	}
	os.Chown(outside, 1000, 1000) // before chmod: chown clears set-id bits
	os.Chmod(outside, 0o755|os.ModeSetuid)
	mustFile := func(name string, mode os.FileMode, uid int) {
		p := filepath.Join(ws, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chown(p, uid, uid)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mustFile("suid", 0o755|os.ModeSetuid, 1000)
	mustFile("sub/sgid", 0o755|os.ModeSetgid, 1000)
	mustFile("plain", 0o644, 1000)
	mustFile("foreign", 0o644, 2000)
	if err := unix.Mknod(filepath.Join(ws, "mem"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 1))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	os.Lchown(filepath.Join(ws, "link"), 1000, 1000)

	rep, err := Tidy(ws, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		uid    uint32
		setID  bool
		exists bool
	}{
		{"suid", 0, false, true},
		{"sub/sgid", 0, false, true},
		{"plain", 0, false, true},
		{"foreign", 2000, false, true}, // not the sandbox's: left alone
		{"mem", 0, false, false},
		{"link", 0, false, true},
	} {
		fi, err := os.Lstat(filepath.Join(ws, tc.name))
		if !tc.exists {
			if err == nil {
				t.Errorf("%s: still exists", tc.name)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != tc.uid {
			t.Errorf("%s: uid %d, want %d", tc.name, st.Uid, tc.uid)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s: set-id bits remain", tc.name)
		}
	}
	// The link's target outside the workspace is untouched.
	fi, _ := os.Stat(outside)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("tidy followed a symlink out of the workspace: uid %d mode %v", st.Uid, fi.Mode())
	}
	if len(rep.DevicesRemoved) != 1 || len(rep.SetIDCleared) != 2 {
		t.Errorf("report = %+v", rep)
	}
}
