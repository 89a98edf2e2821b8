package leakcheck

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A spool in the host's shared spool directory is a leftover when it
// was made since the tests began and its process is this one or gone;
// one of a live process, or older than the tests, is not ours.
func TestSharedSpools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + spoolRoot + " is root's")
	}
	if err := os.MkdirAll(spoolRoot, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := 1 << 22
	for ; ; dead++ {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(dead))); os.IsNotExist(err) {
			break
		}
	}
	since := time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name string
		pid  int
		old  bool
		left bool
	}{
		{"this process's", os.Getpid(), false, true},
		{"an exited process's", dead, false, true},
		{"a live process's", 1, false, false},
		{"from before the tests", os.Getpid(), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp(spoolRoot, "p"+strconv.Itoa(tc.pid)+"-leakcheck-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			if tc.old {
				an := since.Add(-time.Hour)
				if err := os.Chtimes(dir, an, an); err != nil {
					t.Fatal(err)
				}
			}
			if got := strings.Contains(sharedSpools(since), dir+"\n"); got != tc.left {
				t.Errorf("%s reported: %v, want %v", dir, got, tc.left)
			}
		})
	}
}

// A spool under the tests' own state base is a leftover whatever made it.
func TestReportNamesSpools(t *testing.T) {
	base := t.TempDir()
	spool := filepath.Join(base, "state", "uploads", "p1-x")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	if left := Report(base, ""); !strings.Contains(left, "- upload spool: "+spool+"\n") {
		t.Errorf("report %q does not name %s", left, spool)
	}
}
