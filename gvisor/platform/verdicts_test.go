package platform

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// A kept verdict is used only when root wrote it, for this key, whole:
// any other file is ignored and the probe runs again (and replaces it).
func TestVerdictCacheIgnoresUntrustedFiles(t *testing.T) {
	requireRoot(t) // chown
	good := `{"key":"boot=test gvisor=1","usable":true,"reason":"a probe sandbox booted on kvm (cached)"}`
	for _, tc := range []struct {
		name    string
		plant   func(path string) error
		trusted bool
	}{
		{"root's, for this key", func(p string) error { return os.WriteFile(p, []byte(good), 0o600) }, true},
		{"corrupt", func(p string) error { return os.WriteFile(p, []byte(`{"key":"boot=test gvisor=1","usable":tr`), 0o600) }, false},
		{"unknown field", func(p string) error {
			return os.WriteFile(p, []byte(`{"key":"boot=test gvisor=1","usable":true,"reason":"x","by":"me"}`), 0o600)
		}, false},
		{"another boot", func(p string) error {
			return os.WriteFile(p, []byte(strings.Replace(good, "boot=test", "boot=other", 1)), 0o600)
		}, false},
		{"owned by someone else", func(p string) error {
			if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
				return err
			}
			return os.Chown(p, 1000, 1000)
		}, false},
		{"others may write it", func(p string) error {
			if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o666)
		}, false},
		{"a symlink to root's file", func(p string) error {
			real := filepath.Join(filepath.Dir(p), "elsewhere.json")
			if err := os.WriteFile(real, []byte(good), 0o600); err != nil {
				return err
			}
			return os.Symlink(real, p)
		}, false},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, false},
		{"too large", func(p string) error {
			return os.WriteFile(p, []byte(strings.Replace(good, "(cached)", strings.Repeat("x", MaxVerdict), 1)), 0o600)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			c := NewVerdicts(filepath.Join(root, "platform"))
			if err := os.MkdirAll(c.Dir(), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(c.Path()); err != nil {
				t.Fatal(err)
			}
			f := newFakeIn(c.Dir(), nil, errors.New("probe says no"))
			usable, why := f.Judge.Judge(context.Background())
			probes := f.probes
			if tc.trusted {
				if !usable || probes != 0 || !strings.Contains(why, "(cached)") {
					t.Fatalf("usable %v (%s) after %d probes: the kept verdict was not used", usable, why, probes)
				}
				return
			}
			if usable || probes != 1 {
				t.Fatalf("usable %v (%s) after %d probes: the planted verdict was believed", usable, why, probes)
			}
			if fi, err := os.Lstat(c.Path()); tc.name != "a directory" && (err != nil || !fi.Mode().IsRegular()) {
				t.Fatalf("the probe's verdict did not replace the planted file: %v %v", fi, err)
			}
		})
	}
	// A state directory others may write: nothing in it is believed.
	root := t.TempDir()
	c := NewVerdicts(filepath.Join(root, "platform"))
	os.MkdirAll(c.Dir(), 0o700)
	os.WriteFile(c.Path(), []byte(good), 0o600)
	os.Chmod(c.Dir(), 0o777)
	f := newFakeIn(c.Dir(), nil, errors.New("no"))
	if usable, _ := f.Judge.Judge(context.Background()); usable || f.probes != 1 {
		t.Errorf("a verdict in a directory anyone may write was believed (usable %v, %d probes)", usable, f.probes)
	}
}

// The host's key holds still within a boot and a gVisor build, so a
// verdict is found again (gvisor's TestVerdictKeyNamesGVisor checks the
// build's part in a binary that embeds gVisor).
func TestHostKey(t *testing.T) {
	if err := DeviceUsable(); err != nil {
		if _, err := HostKey(); err == nil {
			t.Fatal("a key without /dev/kvm")
		}
		t.Skipf("no /dev/kvm here (%v): its identity is not in a key; the rest of the key is tested where there is one", err)
	}
	a, err := HostKey()
	b, _ := HostKey()
	if err != nil || a != b || !strings.Contains(a, "boot=") {
		t.Fatalf("%q, %q, %v", a, b, err)
	}
}

// CPUID gaps: the CR4 features the host has and KVM does not offer.
func TestCPUIDGaps(t *testing.T) {
	host := map[string]bool{"xsave": true, "pcid": true, "fsgsbase": true, "smep": true, "smap": true}
	full := []cpuidEntry{
		{function: 1, regs: [4]uint32{0, 0, 1<<26 | 1<<17, 0}},
		{function: 7, regs: [4]uint32{0, 1<<0 | 1<<7 | 1<<20, 0, 0}},
	}
	nested := []cpuidEntry{{function: 1}, {function: 7}, {function: 7, index: 1, regs: [4]uint32{0, ^uint32(0), 0, 0}}}
	for _, tc := range []struct {
		name string
		host map[string]bool
		kvm  []cpuidEntry
		want string
	}{
		{"KVM offers all", host, full, ""},
		{"nested KVM offers none", host, nested, "XSAVE PCID FSGSBASE SMEP SMAP"},
		{"the host lacks them too", map[string]bool{"pcid": true}, nested, "PCID"},
		{"no table", host, nil, "XSAVE PCID FSGSBASE SMEP SMAP"},
	} {
		if got := strings.Join(cpuidGaps(tc.host, tc.kvm), " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The probe boots a real sandbox: on systrap it boots wherever sandboxes

// The key names gVisor by its module version and checksum where the
// build has them (airlock's binary: every binary with this gVisor shares
// one verdict per boot), else by the binary's own file (test binaries,
// whose build information lists no modules, and a replaced gVisor).
func TestBuildID(t *testing.T) {
	gv := &debug.Module{Path: "gvisor.dev/gvisor", Version: "v0.0.0-20260905035102-160fafc42237", Sum: "h1:AU5+Ct="}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"gVisor from the module proxy", &debug.BuildInfo{Deps: []*debug.Module{{Path: "cuelang.org/go", Sum: "h1:x"}, gv}}, "gvisor=v0.0.0-20260905035102-160fafc42237@h1:AU5+Ct="},
		{"gVisor replaced", &debug.BuildInfo{Deps: []*debug.Module{{Path: gv.Path, Version: gv.Version, Sum: gv.Sum, Replace: &debug.Module{Path: "../gvisor"}}}}, ""},
		{"no checksum", &debug.BuildInfo{Deps: []*debug.Module{{Path: gv.Path, Version: "(devel)"}}}, ""},
		{"no modules listed", &debug.BuildInfo{}, ""},
		{"no build information", nil, ""},
	} {
		if got := gvisorModule(tc.bi, tc.bi != nil); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	id, err := BuildID()
	if err != nil || !strings.HasPrefix(id, "exe=") {
		t.Errorf("this test binary: %q, %v: want its file's identity", id, err)
	}
}
