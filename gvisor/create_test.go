package gvisor

import (
	"os"
	"path/filepath"
	"testing"
)

// The gofer finds its bundle on the command line runsc gives it
// (container.createGoferProcess: "gofer", "--bundle", dir, ...).
func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root=/r", "gofer", "--bundle", "/j/bundle", "--gofer-mount-confs=lisafs:self", "id"}, "/j/bundle"},
		{[]string{"gofer", "--bundle=/j/bundle", "id"}, "/j/bundle"},
		{[]string{"gofer", "-bundle", "/j/bundle"}, "/j/bundle"},
		{[]string{"gofer", "--bundle"}, ""},
		{[]string{"gofer", "--", "--bundle", "/x"}, ""},
		{[]string{"gofer", "--bundles", "/x", "--bundle-x=/y"}, ""},
	} {
		if got := flagValue(tc.args, "bundle"); got != tc.want {
			t.Errorf("flagValue(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// A root plan is only followed where no one but airlock's own user could
// have put it: a gofer of some other bundle (runsc do in /tmp) ignores a
// planted rootfs.json.
func TestWrittenByUs(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "mine")
	os.WriteFile(mine, nil, 0o600)
	open := filepath.Join(dir, "open")
	os.WriteFile(open, nil, 0o600)
	os.Chmod(open, 0o666)
	link := filepath.Join(dir, "link")
	os.Symlink(mine, link)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, nil, 0o600)
	os.Lchown(other, os.Geteuid()+1, -1)
	for _, tc := range []struct {
		path string
		want bool
	}{
		{dir, true},
		{mine, true},
		{open, false},
		{link, false},
		{other, os.Geteuid() != 0}, // chown needs root; as root it is someone else's
		{filepath.Join(dir, "missing"), false},
		{"/tmp", false},
	} {
		if got := writtenByUs(tc.path); got != tc.want {
			t.Errorf("writtenByUs(%s) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
