package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// An attestation directory on a full disk: each file is whole or absent,
// never truncated; a bundle whose envelope does not fit goes, and the
// unsigned statement is written in its place if it fits; when nothing
// fits, nothing is left and the log says that no attestation exists.
func TestAttestationOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a small tmpfs")
	}
	key := newTestKey(t)
	// The sizes of what a job writes, on a disk with room.
	att, _ := finishJob(t, t.TempDir(), key.key, t.TempDir(), nil, nil, jobResult("job-0a1b", true))
	bundle := fileSize(att.Bundle)
	if bundle == 0 {
		t.Fatal("no bundle on a disk with room")
	}
	const page = 4096
	pages := func(n int64) int64 { return (n + page - 1) / page }
	for _, tc := range []struct {
		name    string
		room    int64  // bytes left free
		want    string // the log line
		written []string
	}{
		{"no room at all", 0, "ATTESTATION NOT WRITTEN: ", nil},
		{"room for the bundle only", pages(bundle) * page, "ATTESTATION NOT SIGNED: ", []string{".UNSIGNED.intoto.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
				t.Skipf("mount tmpfs: %v", err)
			}
			t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
			attDir := filepath.Join(dir, "att")
			os.Mkdir(attDir, 0o755)
			var st unix.Statfs_t
			unix.Statfs(dir, &st)
			fill := int64(st.Bavail)*st.Bsize - tc.room
			if err := os.WriteFile(filepath.Join(dir, "fill"), make([]byte, fill), 0o644); err != nil {
				t.Fatal(err)
			}
			att, log := finishJob(t, attDir, key.key, t.TempDir(), nil, nil, jobResult("job-0a1b", true))
			if !strings.Contains(log, tc.want) || !strings.Contains(att.Error, "no space left on device") {
				t.Errorf("log:\n%s\nerror %q; want %q and the disk named full", log, att.Error, tc.want)
			}
			entries, _ := os.ReadDir(attDir)
			var got []string
			for _, e := range entries {
				got = append(got, strings.TrimPrefix(e.Name(), "job-0a1b"))
			}
			if strings.Join(got, " ") != strings.Join(tc.written, " ") {
				t.Errorf("files %q, want %q", got, tc.written)
			}
			for _, e := range entries {
				if b, err := os.ReadFile(filepath.Join(attDir, e.Name())); err != nil || len(b) == 0 || !strings.HasSuffix(string(b), "}") {
					t.Errorf("%s is not whole: %d bytes, %v", e.Name(), len(b), err)
				}
			}
		})
	}
}
