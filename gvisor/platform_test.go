package gvisor

import (
	"errors"
	"strings"
	"testing"
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
