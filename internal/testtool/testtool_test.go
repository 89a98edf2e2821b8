package testtool

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Skip and Fatalf are recorded.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder, in a goroutine of its own (Skip and Fatalf
// end it), and returns the recorder and what f returned.
func run(t *testing.T, f func(testing.TB) string) (*recorder, string) {
	r := &recorder{TB: t}
	var got string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = f(r)
	}()
	<-done
	return r, got
}

var missingTool = Tool{[]string{"airlock-no-such-tool"}, "apt-get install airlock-no-such-tool", "AIRLOCK_REQUIRE_TESTTOOL_TEST"}

// A missing tool skips, saying what is missing, why and how to install
// it; with its variable set the same message fails the test, and "0"
// counts as unset.
func TestMissingToolSkipsOrFails(t *testing.T) {
	want := "airlock-no-such-tool is not installed (not on PATH): the test runs it; to install: apt-get install airlock-no-such-tool"
	for _, tc := range []struct{ env, skipped, failed string }{
		{"", want, ""},
		{"0", want, ""},
		{"1", "", "AIRLOCK_REQUIRE_TESTTOOL_TEST=1, so this test must run: " + want},
	} {
		t.Setenv(missingTool.Require, tc.env)
		r, _ := run(t, func(tb testing.TB) string { return Path(tb, missingTool, "the test runs it") })
		if r.skipped != tc.skipped || r.failed != tc.failed {
			t.Errorf("%s=%q: skipped %q, failed %q; want %q, %q", missingTool.Require, tc.env, r.skipped, r.failed, tc.skipped, tc.failed)
		}
	}
	t.Setenv(missingTool.Require, "1")
	r, _ := run(t, func(tb testing.TB) string { return InSandbox(tb, missingTool, "/usr/bin:/bin", "the sandbox runs it") })
	if !strings.Contains(r.failed, "airlock-no-such-tool is not installed (not in /usr/bin:/bin, the sandbox's PATH on the host's root): the sandbox runs it; to install: apt-get") {
		t.Errorf("InSandbox: failed %q", r.failed)
	}
}

// A tool found by any of its names, in the first directory that has it
// as an executable file, is its path, with neither a skip nor a failure.
func TestToolFound(t *testing.T) {
	empty, notExec, dir := t.TempDir(), t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(notExec, "second-name"), []byte("#!/bin/sh\n"), 0o644)
	os.Mkdir(filepath.Join(empty, "second-name"), 0o755)
	bin := filepath.Join(dir, "second-name")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := strings.Join([]string{empty, notExec, "relative", dir}, string(filepath.ListSeparator))
	t.Setenv("PATH", path)
	tool := Tool{[]string{"first-name", "second-name"}, "x", "AIRLOCK_REQUIRE_TESTTOOL_TEST"}
	r, got := run(t, func(tb testing.TB) string { return Path(tb, tool, "y") })
	if got != bin || r.skipped != "" || r.failed != "" {
		t.Errorf("Path = %q (skipped %q, failed %q), want %s", got, r.skipped, r.failed, bin)
	}
	t.Setenv("PATH", "")
	r, got = run(t, func(tb testing.TB) string { return InSandbox(tb, tool, path, "y") })
	if got != bin || r.skipped != "" || r.failed != "" {
		t.Errorf("InSandbox = %q (skipped %q, failed %q), want %s", got, r.skipped, r.failed, bin)
	}
}

// Clients is testdata/clients, or a skip that says make test installs
// them.
func TestClients(t *testing.T) {
	t.Setenv(ClientsRequire, "")
	r, got := run(t, func(tb testing.TB) string { return Clients(tb, "the test drives them") })
	switch {
	case r.failed != "":
		t.Fatal(r.failed)
	case r.skipped != "":
		if !strings.Contains(r.skipped, "the Actions client packages are not installed") || !strings.Contains(r.skipped, "to install: make test") {
			t.Errorf("skip: %q", r.skipped)
		}
	case filepath.Base(got) != "clients" || !filepath.IsAbs(got):
		t.Errorf("Clients = %q", got)
	}
}
