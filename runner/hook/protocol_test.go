package hook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/runner"
)

func TestMountsHost(t *testing.T) {
	m := Mounts{
		{Source: "/home/runner/_work", Target: "/__w"},
		{Source: "/home/runner/_work/_temp", Target: "/__w/_temp"},
		{Source: "/srv/tmp-elsewhere", Target: "/__w/_tool"},
		{Source: "/home/runner/externals", Target: "/__e", ReadOnly: true},
	}
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/__w/repo/repo", "/home/runner/_work/repo/repo", true},
		{"/__w/_temp/x.sh", "/home/runner/_work/_temp/x.sh", true},
		{"/__w/_tool/go", "/srv/tmp-elsewhere/go", true},
		{"/__w/../etc/passwd", "", false},
		{"/__wx/y", "", false},
		{"/__e", "/home/runner/externals", true},
		{"/github/home", "", false},
	} {
		got, ok := m.Host(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Host(%q) = %q %v, want %q %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadInputRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"command":"rm_rf","state":{},"args":{}}`, "unknown command"},
		{`not json`, "not the runner's JSON"},
		{strings.Repeat(" ", maxInput+1), "larger than"},
	} {
		if _, err := ReadInput(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	in, err := ReadInput(strings.NewReader(`{"command":"cleanup_job","responseFile":null,"state":{"container":"x","jobDir":"/run/airlock/hooks/x"},"args":{}}`))
	if err != nil || in.State.JobDir != "/run/airlock/hooks/x" {
		t.Errorf("%+v %v", in, err)
	}
}

// What the hook writes out of the runner's payload (prepare.json, read
// back by the daemon and endStaleJobs; a request, read by the daemon) is
// bounded as its reader bounds it. A payload within maxInput can grow
// when written out: the runner's `&&` and `>` stay one byte each, so a
// large environment passes; one that would grow past the bound (here,
// mounts sent as {}) is refused saying so, before anything is made or
// sent, where it was cut by its reader (FuzzReadInput's bound).
func TestEncodeBounded(t *testing.T) {
	env := strings.Repeat("make && make test > log; ", (maxInput*9/10)/25)
	step := `{"command":"run_script_step","args":{"entryPoint":"bash","environmentVariables":{"CMD":"` + env + `"}}}`
	in, err := ReadInput(strings.NewReader(step))
	if err != nil {
		t.Fatal(err)
	}
	var args ScriptArgs
	if err := json.Unmarshal(in.Args, &args); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(Request{Op: "step", Step: &args}); len(b) <= maxInput {
		t.Fatalf("the step does not grow past the bound with <, > and & escaped: %d bytes", len(b))
	}
	line, err := encodeBounded(Request{Op: "step", Step: &args})
	var back Request
	if err != nil || json.Unmarshal(line, &back) != nil || back.Step.Env["CMD"] != env {
		t.Fatalf("a step of %d bytes: %d bytes written out, %v", len(step), len(line), err)
	}

	mounts := strings.Repeat(`{},`, 60000) + `{}`
	prep := `{"command":"prepare_job","responseFile":"/nonexistent/r.json","args":{"container":{"image":"alpine","systemMountVolumes":[` + mounts + `]}}}`
	if in, err = ReadInput(strings.NewReader(prep)); err != nil {
		t.Fatal(err)
	}
	var pa PrepareArgs
	if err := json.Unmarshal(in.Args, &pa); err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(pa); len(b) <= maxInput {
		t.Fatalf("the case does not grow past the bound: %d bytes", len(b))
	}
	root := t.TempDir()
	err = prepare(context.Background(), Config{JobsRoot: root}, in, io.Discard)
	var ie runner.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "more than the 4194304 the hook reads back") {
		t.Errorf("prepare_job of %d bytes: %v", len(prep), err)
	}
	if left, _ := os.ReadDir(root); len(left) != 0 {
		t.Errorf("prepare_job made %v", left)
	}
	c := Container{SystemMountVolumes: pa.Container.SystemMountVolumes}
	_, err = Call(context.Background(), filepath.Join(root, "no.sock"), Request{Op: "container-step", Container: &c}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "more than the 4194304 the hook reads back") {
		t.Errorf("Call: %v", err)
	}
}
