package gvisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gvisor.dev/gvisor/runsc/config"
)

// A state directory inside the workspace (or a writable mount) would put the job's own runsc
// state, overlay and attestations in the sandbox's reach: refused with a
// sentence that says what to do, however the path is spelled.
func TestStateRootOutsideWorkspace(t *testing.T) {
	ws := t.TempDir()
	other, rw, ro := t.TempDir(), t.TempDir(), t.TempDir()
	os.Symlink(ws, filepath.Join(other, "to-ws"))
	for _, tc := range []struct {
		name, state string
		refused     bool
	}{
		{"below", filepath.Join(ws, "state"), true},
		{"the workspace itself", ws, true},
		{"through a symlink", filepath.Join(other, "to-ws", "state", "deeper"), true},
		{"relative", "state", true}, // from the workspace, below
		{"outside", filepath.Join(other, "state"), false},
		{"in a writable mount", filepath.Join(rw, "state"), true},
		{"in a read-only mount", filepath.Join(ro, "state"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(ws)
			mounts := []Mount{{Source: rw, Destination: "/cache"}, {Source: ro, Destination: "/ro", ReadOnly: true}}
			_, err := Config{Workspace: ws, StateRoot: tc.state, User: &User{UID: 1000, GID: 1000}, Mounts: mounts}.withDefaults()
			refused := err != nil && errors.Is(err, ErrInvalidConfig) && strings.Contains(err.Error(), "give a state directory outside")
			if refused != tc.refused {
				t.Errorf("state %s: error %v, want refused %v", tc.state, err, tc.refused)
			}
		})
	}
}

func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want User
		ok   bool
	}{
		{"1000", User{1000, 1000}, true},
		{"1000:50", User{1000, 50}, true},
		{"0", User{0, 0}, true},
		{"root", User{}, false},
		{"1000:", User{}, false},
		{":5", User{}, false},
		{"-1", User{}, false},
		{"4294967296", User{}, false},
		{"1000:staff", User{}, false},
	} {
		got, err := ParseUser(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseUser(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

// A mask inside another (or repeated) is dropped: nothing to cover, and
// no mount point inside the empty directory over it.
func TestOutermostMasks(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"/etc/airlock", "/etc/airlock/ci.key", "/opt/k"}, []string{"/etc/airlock", "/opt/k"}},
		{[]string{"/opt/airlock/ci.key", "/opt/airlock"}, []string{"/opt/airlock"}},
		{[]string{"/a", "/a/", "/ab"}, []string{"/a", "/ab"}},
	} {
		if got := outermost(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("outermost(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// ExclusiveMounts is runsc's --file-access-mounts=exclusive; a runsc
// flag the caller gives comes after it, and wins.
func TestExclusiveMountsFlag(t *testing.T) {
	for _, tc := range []struct {
		name      string
		exclusive bool
		flags     []string
		want      config.FileAccessType
	}{
		{"shared by default", false, nil, config.FileAccessShared},
		{"exclusive", true, nil, config.FileAccessExclusive},
		{"a runsc flag after it", true, []string{"--file-access-mounts=shared"}, config.FileAccessShared},
	} {
		conf, err := newRunsc(Config{ExclusiveMounts: tc.exclusive, RunscFlags: tc.flags}, t.TempDir()).config()
		if err != nil {
			t.Fatal(err)
		}
		if conf.FileAccessMounts != tc.want {
			t.Errorf("%s: file access of the mounts %v, want %v", tc.name, conf.FileAccessMounts, tc.want)
		}
	}
}
