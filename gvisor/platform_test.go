package gvisor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The platform a sandbox gets: auto takes KVM where /dev/kvm answers,
// systrap elsewhere; kvm where it does not answer is an error that says
// why and what to do.
func TestResolvePlatform(t *testing.T) {
	noKVM := func() error { return errors.New("/dev/kvm: no such file or directory") }
	kvm := func() error { return nil }
	for _, tc := range []struct {
		asked string
		kvm   func() error
		want  string
		err   string
	}{
		{"", kvm, PlatformKVM, ""},
		{"", noKVM, PlatformSystrap, ""},
		{"auto", kvm, PlatformKVM, ""},
		{"auto", noKVM, PlatformSystrap, ""},
		{"systrap", kvm, PlatformSystrap, ""},
		{"kvm", kvm, PlatformKVM, ""},
		{"kvm", noKVM, "", "use --platform systrap"},
		{"ptrace", kvm, "", `platform "ptrace": use auto, systrap or kvm`},
	} {
		got, err := resolvePlatform(tc.asked, tc.kvm)
		switch {
		case tc.err != "":
			if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error saying %q", tc.asked, err, tc.err)
			}
		case err != nil || got != tc.want:
			t.Errorf("%q: %q, %v; want %q", tc.asked, got, err, tc.want)
		}
	}
}

// A step runs on the KVM platform where the host has it.
func TestKVMSandbox(t *testing.T) {
	requireRoot(t)
	if err := KVMUsable(); err != nil {
		t.Skipf("no usable KVM on this host (%v): the KVM platform is not tested here", err)
	}
	sb := newTestSandbox(t, func(c *Config) { c.Platform = PlatformKVM })
	if sb.Config().Platform != PlatformKVM {
		t.Errorf("platform %q", sb.Config().Platform)
	}
	if out, _, res := sh(t, sb, "echo on-kvm"); res.ExitCode != 0 || !strings.Contains(out, "on-kvm") {
		t.Errorf("step: %+v %q", res, out)
	}
}

// The container's init (the small reaper on amd64) reaps what is
// re-parented to it: the orphans of a step that exited leave no zombie
// counting against the process limit.
func TestInitReapsOrphans(t *testing.T) {
	requireRoot(t)
	sb := newTestSandbox(t, nil)
	if out, _, res := sh(t, sb, "for i in $(seq 40); do (sleep 0.1 &); done; true"); res.ExitCode != 0 {
		t.Fatalf("step: %+v %s", res, out)
	}
	var out string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		out, _, _ = sh(t, sb, `n=0; for s in /proc/[0-9]*/stat; do case "$(cut -d' ' -f3 "$s" 2>/dev/null)" in Z) n=$((n+1));; esac; done; echo "zombies=$n init=$(tr '\0' ' ' < /proc/1/cmdline)"`)
		if strings.Contains(out, "zombies=0 ") {
			break
		}
	}
	if !strings.Contains(out, "zombies=0 ") {
		t.Errorf("orphans not reaped: %s", out)
	}
	if elf := reaperELF(); elf != nil && !strings.Contains(out, "init="+reaperPath) {
		t.Errorf("the init is not the reaper: %s", out)
	}
}
