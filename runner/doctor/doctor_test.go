package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/gvisor/cgroup"
	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/testhost"
)

const testStateBase = "/run/airlock-test-doctor"

func TestMain(m *testing.M) {
	gvisor.Dispatch()
	leakcheck.Run(m, testStateBase, "")
}

// The whole report on this very host, as root: every check runs for
// real (probe sandboxes, a job's sandbox, namespaces), the host can run
// jobs, each line that is not ok says what to do, and nothing is left
// behind.
func TestRunOnThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("doctor's checks start sandboxes: they need root")
	}
	state := testhost.StateDir(t, testStateBase)
	rep := Run(context.Background(), Options{StateRoot: state, OrgDir: "../../testdata/sample-org"})
	names := map[string]Check{}
	for _, c := range rep.Checks {
		names[c.Name] = c
		t.Logf("%-5s %-20s %s", c.Status, c.Name, c.Detail)
		if c.Status != OK && c.Fix == "" && c.Name != "kernel" {
			t.Errorf("%s is %s without a fix: %s", c.Name, c.Status, c.Detail)
		}
		if strings.Contains(c.Detail, "\n") || strings.Contains(c.Detail, "goroutine") {
			t.Errorf("%s: not one line: %q", c.Name, c.Detail)
		}
	}
	if !rep.Ready {
		t.Fatalf("this host runs jobs (the suite's sandboxes do), doctor says it cannot: %+v", rep.Checks)
	}
	for _, want := range []string{"root", "binary", "runsc sidecar", "huge pages", "kernel", "cgroups", "platform systrap", "platform kvm", "workspace limit", "sandbox", "network", "state " + state, "node", "organisation policy", "signing key"} {
		if _, ok := names[want]; !ok {
			t.Errorf("no %q check", want)
		}
	}
	if c := names["workspace limit"]; c.Status != OK {
		t.Errorf("this host bounds workspaces (the suite's sandboxes do), doctor says: %+v", c)
	}
	kvm := names["platform kvm"]
	if err := gvisor.KVMDeviceUsable(); err != nil && !strings.Contains(kvm.Detail, err.Error()) {
		t.Errorf("without a usable /dev/kvm (%v) the kvm line says %q", err, kvm.Detail)
	}
	if left := leakcheck.Report(state, ""); left != "" {
		t.Errorf("doctor left behind:\n%s", left)
	}
}

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		ok      bool
	}{
		{"6.18.44-fc-v1045", true}, {"4.14.77", true}, {"4.14", true}, {"5.4.0-150-generic", true},
		{"4.13.16", false}, {"3.10.0-1160.el7.x86_64", false}, {"garbage", false},
	} {
		if _, got := kernelAtLeast(tc.release, MinKernel); got != tc.ok {
			t.Errorf("%s: %v, want %v", tc.release, got, tc.ok)
		}
	}
}

// A state directory fails where a job could write it: inside a
// workspace (also through a symlink), or writable by others.
func TestStateDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ownership checks need root")
	}
	base := t.TempDir()
	ws := filepath.Join(base, "work")
	os.MkdirAll(filepath.Join(ws, "state"), 0o700)
	os.Symlink(filepath.Join(ws, "state"), filepath.Join(base, "link"))
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	for _, tc := range []struct {
		name, dir string
		want      Status
		says      string
	}{
		{"its own directory", filepath.Join(base, "state"), OK, "the first job creates it"},
		{"inside the workspace", filepath.Join(ws, "state"), Fail, "inside the workspace"},
		{"a symlink into the workspace", filepath.Join(base, "link", "x"), Fail, "inside the workspace"},
		{"writable by others", open, Fail, "others may change it"},
	} {
		c := checkStateDir(tc.dir, []string{ws}, nil)
		if c.Status != tc.want || !strings.Contains(c.Detail, tc.says) {
			t.Errorf("%s: %+v, want %s saying %q", tc.name, c, tc.want, tc.says)
		}
	}
}

// The signing key: none warns, a key that does not load fails, a key
// others may read warns, a good one gives its public key's hint.
func TestCheckKey(t *testing.T) {
	dir := t.TempDir()
	priv, pub, err := attest.GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.key")
	os.WriteFile(good, priv, 0o600)
	loose := filepath.Join(dir, "loose.key")
	os.WriteFile(loose, priv, 0o644)
	garbage := filepath.Join(dir, "garbage.key")
	os.WriteFile(garbage, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
	v, err := attest.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	vpub, _ := v.PublicKey()
	hint := attest.KeyHint(vpub)
	for _, tc := range []struct {
		name, ref string
		want      Status
		says      string
	}{
		{"none", "", Warn, "unsigned"},
		{"missing", filepath.Join(dir, "nope.key"), Fail, "no such file"},
		{"garbage", garbage, Fail, "garbage.key"},
		{"good", good, OK, hint},
	} {
		c := checkKey(context.Background(), tc.ref, nil)
		if c.Status != tc.want || !strings.Contains(c.Detail, tc.says) {
			t.Errorf("%s: %+v, want %s saying %q", tc.name, c, tc.want, tc.says)
		}
	}
	if os.Geteuid() == 0 {
		if c := checkKey(context.Background(), loose, nil); c.Status != Warn || !strings.Contains(c.Fix, "chmod 600") {
			t.Errorf("a key others may read: %+v", c)
		}
	}
}

// The organisation policy vets, or its problems are on one line.
func TestCheckPolicy(t *testing.T) {
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "org.cue"), []byte("sandbox: limits: memory: 12\n"), 0o644)
	empty := t.TempDir()
	for _, tc := range []struct {
		name, dir string
		want      Status
		says      string
	}{
		{"the sample", "../../testdata/sample-org", OK, "vet; effective sha256:"},
		{"invalid", bad, Fail, "sandbox.limits.memory"},
		{"no files", empty, Warn, "none"},
	} {
		c := checkPolicyAndKey(context.Background(), Options{OrgDir: tc.dir})[0]
		if c.Status != tc.want || !strings.Contains(c.Detail, tc.says) || strings.Contains(c.Detail, "\n") {
			t.Errorf("%s: %+v, want %s saying %q", tc.name, c, tc.want, tc.says)
		}
	}
}

// node: the version the hook needs, an old one warns, a broken one fails.
func TestCheckNode(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
		return p
	}
	for _, tc := range []struct {
		name, node string
		want       Status
	}{
		{"node 20", script("node20", "echo v20.20.2"), OK},
		{"node 22", script("node22", "echo v22.1.0"), OK},
		{"node 16", script("node16", "echo v16.20.0"), Warn},
		{"broken", script("broken", "exit 3"), Fail},
		{"missing", filepath.Join(dir, "none"), Fail},
	} {
		if c := checkNode(context.Background(), Options{Node: tc.node})[0]; c.Status != tc.want {
			t.Errorf("%s: %+v, want %s", tc.name, c, tc.want)
		}
	}
}

// A state directory whose path leaves no room for a job's monitoring
// socket fails, before any job meets "bind: invalid argument".
func TestStateDirTooLong(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 90))
	if c := checkStateDir(long, nil, nil); c.Status != Fail || !strings.Contains(c.Detail, "too long") {
		t.Errorf("%+v", c)
	}
}

// The text report: a line per check, the fix under one that is not ok,
// and the verdict with the counts.
func TestWriteText(t *testing.T) {
	var b strings.Builder
	Report{Checks: []Check{
		{Name: "root", Status: OK, Detail: "running as root"},
		{Name: "platform kvm", Status: Warn, Detail: "unusable", Fix: "none needed"},
		{Name: "sandbox", Status: Fail, Detail: "did not start", Fix: "see the cgroups line"},
	}}.WriteText(&b)
	want := "ok    root                 running as root\n" +
		"warn  platform kvm         unusable\n" +
		"                           fix: none needed\n" +
		"fail  sandbox              did not start\n" +
		"                           fix: see the cgroups line\n" +
		"this host cannot run airlock's jobs as configured (1 ok, 1 warn, 1 fail)\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// Where the cgroup file system is read-only (a pod's container), the
// cgroups line says that the pod's limits are what hold, and warns with
// the values to set where the pod sets none.
func TestEnclosedCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		e      cgroup.Enclosing
		status string
		want   []string
	}{
		{"pod with limits", cgroup.Enclosing{Memory: 8 << 30, CPUs: 2}, "ok", []string{"read-only", "enclosing cgroup", "policy's memory and CPU limits do not hold", "memory limit 8.0 GiB", "CPU limit 2"}},
		{"pod without a memory limit", cgroup.Enclosing{CPUs: 2}, "warn", []string{"nothing bounds a job's memory", "resources.limits (memory)"}},
		{"pod without limits", cgroup.Enclosing{}, "warn", []string{"nothing bounds a job's memory or cpu", "resources.limits (memory, cpu)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := enclosedCheck("v2 layout", tc.e)
			text := c.Detail + " " + c.Fix
			if string(c.Status) != tc.status {
				t.Errorf("status %q, want %q: %s", c.Status, tc.status, text)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
		})
	}
}

// The huge page advice is gVisor's host-settings check's: each setting
// it would change is named with the command that changes it.
func TestHugePagesAdvice(t *testing.T) {
	tests := []struct {
		shmem, defrag string
		status        Status
		fix           []string // in the fix
	}{
		{"advise", "never", OK, nil},
		{"always", "defer", OK, nil},
		{"within_size", "always", OK, nil},
		{"deny", "never", OK, nil}, // the administrator's choice
		{"never", "never", Warn, []string{"echo advise > " + thpShmem}},
		{"advise", "madvise", Warn, []string{"echo never > " + thpDefrag}},
		{"advise", "defer+madvise", Warn, []string{"echo defer > " + thpDefrag}},
		{"never", "madvise", Warn, []string{"echo advise > " + thpShmem, "echo never > " + thpDefrag}},
	}
	for _, tc := range tests {
		c := hugePagesAdvice(tc.shmem, tc.defrag)
		if c.Status != tc.status {
			t.Errorf("shmem %s defrag %s: %s (%s), want %s", tc.shmem, tc.defrag, c.Status, c.Detail, tc.status)
		}
		for _, f := range tc.fix {
			if !strings.Contains(c.Fix, f) {
				t.Errorf("shmem %s defrag %s: the fix %q lacks %q", tc.shmem, tc.defrag, c.Fix, f)
			}
		}
	}
	for file, want := range map[string]string{"always within_size advise [never] deny force\n": "never", "always defer defer+madvise [madvise] never": "madvise", "never": "never"} {
		if got := chosen(file); got != want {
			t.Errorf("chosen(%q) = %q, want %q", file, got, want)
		}
	}
}
