package quota

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loop devices and mounts")
	}
}

// newVolume mounts a volume of size bytes over a new workspace holding
// files (path -> content) and releases it at the end of the test if the
// test did not.
func newVolume(t *testing.T, size int64, files map[string]string) (ws, dir string, v *Volume) {
	t.Helper()
	requireRoot(t)
	ws, dir = t.TempDir(), filepath.Join(t.TempDir(), "volume")
	for p, data := range files {
		full := filepath.Join(ws, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, err := Mount(dir, "", ws, Limit{Bytes: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(dir) })
	return ws, dir, v
}

// released checks that nothing of the volume is left: no overlay on the
// workspace, no filesystem, no directory, no loop device on its image.
func released(t *testing.T, ws, dir string) {
	t.Helper()
	if m, ok := mountAt(ws); ok {
		t.Errorf("still mounted on the workspace: %+v", m)
	}
	if _, ok := mountAt(filepath.Join(dir, "fs")); ok {
		t.Error("the volume's filesystem is still mounted")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume's directory is still there: %v", err)
	}
	// The kernel detaches an autoclear loop device once its filesystem
	// is unmounted, on a work queue: a loaded host may take a moment.
	backing := func() (left []string) {
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range loops {
			if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), dir+"/") {
				left = append(left, fmt.Sprintf("%s still backs %s", strings.TrimSpace(string(b)), f))
			}
		}
		return left
	}
	left := backing()
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = backing() {
		time.Sleep(50 * time.Millisecond)
	}
	for _, l := range left {
		t.Error(l)
	}
}

// A write past the limit fails with ENOSPC, on the host as in the sandbox
// (both write through the same overlay), and the image never takes more
// of the host's disk than the limit. The job writes as another user than
// the workspace's owner, as the sandbox does; the kept directory is on
// the host's disk, outside the limit.
func TestWritePastTheLimitFails(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	os.Chmod(base, 0o755) // the job's and owner's users reach the workspace
	os.Chmod(filepath.Dir(base), 0o755)
	ws, dir := filepath.Join(base, "ws"), filepath.Join(t.TempDir(), "volume")
	os.Mkdir(ws, 0o777)
	os.WriteFile(filepath.Join(ws, "README"), []byte("hello"), 0o644)
	os.Mkdir(filepath.Join(ws, "runner"), 0o777)
	os.Chmod(filepath.Join(ws, "runner"), 0o777)
	os.Chown(ws, ownerUID, ownerUID)
	os.Chmod(ws, 0o777)
	v, err := Mount(dir, "", ws, Limit{Bytes: 32 << 20, Keep: []string{"runner"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Release(dir) })
	out, err := runAs(jobUID, "dd if=/dev/zero of="+filepath.Join(ws, "big")+" bs=1M count=64")
	if err == nil || !strings.Contains(out, "No space left on device") {
		t.Fatalf("writing 64 MiB into a 32 MiB workspace: %v %s, want ENOSPC", err, out)
	}
	fi, err := os.Stat(filepath.Join(ws, "big"))
	if err != nil || fi.Size() > 32<<20 || fi.Size() < 30<<20 {
		t.Errorf("the job wrote %v bytes (%v), want about the 32 MiB limit", fi.Size(), err)
	}
	u, err := v.Usage()
	if err != nil || !u.Full() {
		t.Errorf("usage %+v (%v): want full", u, err)
	}
	if out, err := runAs(jobUID, "dd if=/dev/zero of="+filepath.Join(ws, "runner", "kept")+" bs=1M count=8"); err != nil {
		t.Errorf("the kept directory is not on the host's disk: %v %s", err, out)
	}
	if v.Medium() == MediumExt4 {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, "image"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 > 32<<20 {
			t.Errorf("the image takes %d bytes of the host's disk, more than the 32 MiB limit", st.Blocks*512)
		}
	}
	// The workspace's own file is still there, read through the overlay.
	if b, err := os.ReadFile(filepath.Join(ws, "README")); string(b) != "hello" {
		t.Errorf("README = %q, %v", b, err)
	}
	if _, err := v.Release(); err != nil {
		t.Fatal(err)
	}
	released(t, ws, dir)
	for name, size := range map[string]int64{"runner/kept": 8 << 20} {
		if fi, err := os.Stat(filepath.Join(ws, name)); err != nil || fi.Size() != size {
			t.Errorf("%s after the release: %v %v", name, fi, err)
		}
	}
}

const jobUID, ownerUID = 1000, 2000

// runAs runs a shell script as uid (and gid) and returns its output.
func runAs(uid uint32, script string) (string, error) {
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// At most one file per 16 KiB of the limit, as ext4's default: many
// small files run out too, with ENOSPC.
func TestFilesAreBounded(t *testing.T) {
	ws, dir, v := newVolume(t, 16<<20, nil)
	u, _ := v.Usage()
	if max := int64(16<<20) / BytesPerInode; u.LimitFiles > max {
		t.Fatalf("%d inodes for a 16 MiB limit, more than one per 16 KiB (%d)", u.LimitFiles, max)
	}
	var err error
	n := 0
	for ; n < 5000 && err == nil; n++ {
		err = os.WriteFile(filepath.Join(ws, "f"+strconv.Itoa(n)), nil, 0o644)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("creating 5000 empty files in a 16 MiB workspace: %v after %d, want ENOSPC", err, n)
	}
	if u, _ := v.Usage(); !u.Full() {
		t.Errorf("usage %+v: want full (no inode left)", u)
	}
	m, err := v.Release()
	if err != nil {
		t.Fatal(err)
	}
	if m.Files != n-1 {
		t.Errorf("merged %d files, want %d", m.Files, n-1)
	}
	released(t, ws, dir)
}

func TestMountRefuses(t *testing.T) {
	requireRoot(t)
	ws := t.TempDir()
	file := filepath.Join(ws, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		name, workspace string
		size            int64
		want            string
	}{
		{"a limit too small", ws, 1 << 20, "at least 8 MiB"},
		{"no workspace", filepath.Join(ws, "missing"), 32 << 20, "not a directory"},
		{"a file", file, 32 << 20, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "volume")
			_, err := Mount(dir, "", tc.workspace, Limit{Bytes: tc.size})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Mount: %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused Mount left %s", dir)
			}
		})
	}
	t.Run("a workspace bounded already", func(t *testing.T) {
		ws, _, _ := newVolume(t, 16<<20, nil)
		dir := filepath.Join(t.TempDir(), "volume")
		_, err := Mount(dir, "", ws, Limit{Bytes: 16 << 20})
		if err == nil || !strings.Contains(err.Error(), "mounted there already") {
			t.Fatalf("second Mount: %v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused Mount left %s", dir)
		}
	})
}

// A volume left by an airlock that was killed is released from its
// directory alone (Abandon), the job's writes whole or none of them:
// killed while the job ran (or with its mounts gone in a reboot), the
// job never ended and nothing it wrote reaches the workspace; killed
// once its merge had begun, the merge is finished.
func TestAbandonLeftover(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reboot  bool
		merging bool
	}{{"killed during the job", false, false}, {"rebooted during the job", true, false}, {"killed during the merge", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ws, dir, v := newVolume(t, 16<<20, map[string]string{"old": "old", "gone": "gone"})
			if err := os.WriteFile(filepath.Join(ws, "new"), []byte("new"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(ws, "gone")); err != nil {
				t.Fatal(err)
			}
			if tc.merging {
				if err := markMerging(v.mergingMark(), []byte("test")); err != nil {
					t.Fatal(err)
				}
			}
			if tc.reboot {
				unix.Sync()
				for _, p := range []string{ws, filepath.Join(dir, "fs")} {
					if err := unix.Unmount(p, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			left, err := Abandon(dir)
			if err != nil {
				t.Fatal(err)
			}
			released(t, ws, dir)
			want := map[string]string{"old": "old", "gone": "gone"}
			if tc.merging {
				want = map[string]string{"old": "old", "new": "new"}
			}
			if left.Resumed != tc.merging || left.Discarded == tc.merging || left.Workspace != ws {
				t.Errorf("leftover %+v", left)
			}
			entries, _ := os.ReadDir(ws)
			if len(entries) != len(want) {
				t.Errorf("workspace holds %v, want %v", entries, want)
			}
			for name, data := range want {
				if b, err := os.ReadFile(filepath.Join(ws, name)); string(b) != data {
					t.Errorf("%s = %q, %v; want %q", name, b, err, data)
				}
			}
		})
	}
}

// With a templates directory the first volume of a size makes the empty
// image once, and later ones copy it: each still bounds its own
// workspace, and takes only its metadata of the host's disk.
func TestTemplates(t *testing.T) {
	requireRoot(t)
	templates := filepath.Join(t.TempDir(), "templates")
	for i := 0; i < 2; i++ {
		ws, dir := t.TempDir(), filepath.Join(t.TempDir(), "volume")
		v, err := Mount(dir, templates, ws, Limit{Bytes: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if made, _ := filepath.Glob(filepath.Join(templates, "ext4-*.img")); len(made) != 1 {
			t.Fatalf("templates after volume %d: %v", i+1, made)
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, "image"), &st); err != nil || st.Size != 16<<20 || st.Blocks*512 > 4<<20 {
			t.Errorf("volume %d's image: %d bytes, %d on disk (%v)", i+1, st.Size, st.Blocks*512, err)
		}
		err = os.WriteFile(filepath.Join(ws, "big"), make([]byte, 20<<20), 0o644)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("volume %d: writing 20 MiB into 16: %v", i+1, err)
		}
		if _, err := v.Release(); err != nil {
			t.Fatal(err)
		}
		released(t, ws, dir)
	}
}
