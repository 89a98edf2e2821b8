package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeJudge is a KVM judge whose device check and probe are given, and
// whose verdicts are kept under stateRoot as the host's are; probes
// counts the probes it ran.
func fakeJudge(stateRoot string, device, probe error, probes *int) *kvmJudge {
	return &kvmJudge{
		device: func() error { return device },
		key:    func() (string, error) { return "boot=test exe=1", nil },
		probe: func(context.Context) error {
			*probes++
			return probe
		},
		verdicts: newVerdictCache(stateRoot),
	}
}

// The decision: the platform a sandbox gets for what was asked, given
// what the device check and the probe say.
func TestChoosePlatform(t *testing.T) {
	noDevice := errors.New("open /dev/kvm: no such file or directory")
	panicked := errors.New("sandbox: error initializing vCPU(id=0) state: error setting system registers: invalid argument")
	for _, tc := range []struct {
		name          string
		asked         string
		device, probe error
		want          string
		reason        string // in the reason, or in the error
		err           error
		probes        int
	}{
		{"auto, probe passes", "", nil, nil, PlatformKVM, "auto: a probe sandbox booted on kvm", nil, 1},
		{"auto by name, probe passes", "auto", nil, nil, PlatformKVM, "auto: a probe sandbox booted on kvm", nil, 1},
		{"auto, probe fails", "auto", nil, panicked, PlatformSystrap, "kvm unusable: a probe sandbox did not boot on kvm", nil, 1},
		{"auto, no device: no probe", "auto", noDevice, nil, PlatformSystrap, "kvm unusable: open /dev/kvm: no such file or directory", nil, 0},
		{"systrap: no probe", "systrap", nil, nil, PlatformSystrap, "asked for", nil, 0},
		{"kvm, probe passes", "kvm", nil, nil, PlatformKVM, "asked for; a probe sandbox booted on kvm", nil, 1},
		{"kvm, probe fails", "kvm", nil, panicked, "", "error setting system registers: invalid argument; ask for platform auto", ErrPlatformUnusable, 1},
		{"kvm, no device", "kvm", noDevice, nil, "", "platform kvm: open /dev/kvm: no such file or directory; ask for platform auto", ErrPlatformUnusable, 0},
		{"unknown platform", "ptrace", nil, nil, "", `platform "ptrace": use auto, systrap or kvm`, ErrInvalidConfig, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probes := 0
			j := fakeJudge(t.TempDir(), tc.device, tc.probe, &probes)
			got, err := j.choose(context.Background(), tc.asked)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.reason) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("%v, want one line that is %v and says %q", err, tc.err, tc.reason)
				}
			} else if err != nil || got.Platform != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("%+v, %v; want %s for %q", got, err, tc.want, tc.reason)
			}
			if probes != tc.probes {
				t.Errorf("%d probes, want %d", probes, tc.probes)
			}
			// The verdict holds: asking again probes no more.
			j.choose(context.Background(), tc.asked)
			if probes != tc.probes {
				t.Errorf("asked again: %d probes, want still %d", probes, tc.probes)
			}
		})
	}
}

// A failed probe's reason says what KVM's CPUID lacks of the host's,
// when it lacks something; a passing probe's does not.
func TestFailedProbeNamesCPUIDGaps(t *testing.T) {
	const gaps = "KVM's CPUID lacks XSAVE (the host CPU has it)"
	for _, tc := range []struct {
		name  string
		probe error
		want  string
	}{
		{"probe fails", errors.New("error setting system registers"), "error setting system registers; " + gaps},
		{"probe passes", nil, "a probe sandbox booted on kvm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probes := 0
			j := fakeJudge(t.TempDir(), nil, tc.probe, &probes)
			j.cpuidGaps = func() string { return gaps }
			got, err := j.choose(context.Background(), "auto")
			if err != nil || !strings.Contains(got.Reason, tc.want) || (tc.probe == nil) == strings.Contains(got.Reason, gaps) {
				t.Fatalf("%+v, %v; want a reason with %q", got, err, tc.want)
			}
		})
	}
}

// A kept verdict is used only when root wrote it, for this key, whole:
// any other file is ignored and the probe runs again (and replaces it).
func TestVerdictCacheIgnoresUntrustedFiles(t *testing.T) {
	requireRoot(t) // chown
	good := `{"key":"boot=test exe=1","usable":true,"reason":"a probe sandbox booted on kvm (cached)"}`
	for _, tc := range []struct {
		name    string
		plant   func(path string) error
		trusted bool
	}{
		{"root's, for this key", func(p string) error { return os.WriteFile(p, []byte(good), 0o600) }, true},
		{"corrupt", func(p string) error { return os.WriteFile(p, []byte(`{"key":"boot=test exe=1","usable":tr`), 0o600) }, false},
		{"unknown field", func(p string) error {
			return os.WriteFile(p, []byte(`{"key":"boot=test exe=1","usable":true,"reason":"x","by":"me"}`), 0o600)
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
			return os.WriteFile(p, []byte(strings.Replace(good, "(cached)", strings.Repeat("x", maxVerdict), 1)), 0o600)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			c := newVerdictCache(root)
			if err := os.MkdirAll(c.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(c.path()); err != nil {
				t.Fatal(err)
			}
			probes := 0
			j := fakeJudge(root, nil, errors.New("probe says no"), &probes)
			usable, why := j.judge(context.Background())
			if tc.trusted {
				if !usable || probes != 0 || !strings.Contains(why, "(cached)") {
					t.Fatalf("usable %v (%s) after %d probes: the kept verdict was not used", usable, why, probes)
				}
				return
			}
			if usable || probes != 1 {
				t.Fatalf("usable %v (%s) after %d probes: the planted verdict was believed", usable, why, probes)
			}
			if fi, err := os.Lstat(c.path()); tc.name != "a directory" && (err != nil || !fi.Mode().IsRegular()) {
				t.Fatalf("the probe's verdict did not replace the planted file: %v %v", fi, err)
			}
		})
	}
	// A state directory others may write: nothing in it is believed.
	root := t.TempDir()
	c := newVerdictCache(root)
	os.MkdirAll(c.dir, 0o700)
	os.WriteFile(c.path(), []byte(good), 0o600)
	os.Chmod(c.dir, 0o777)
	probes := 0
	if usable, _ := fakeJudge(root, nil, errors.New("no"), &probes).judge(context.Background()); usable || probes != 1 {
		t.Errorf("a verdict in a directory anyone may write was believed (usable %v, %d probes)", usable, probes)
	}
}

// The host's key holds still within a boot and a binary, so a verdict
// is found again.
func TestHostKey(t *testing.T) {
	if err := KVMDeviceUsable(); err != nil {
		if _, err := hostKey(); err == nil {
			t.Fatal("a key without /dev/kvm")
		}
		t.Skipf("no /dev/kvm here (%v): its identity is not in a key; the rest of the key is tested where there is one", err)
	}
	a, err := hostKey()
	b, _ := hostKey()
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
// run; on kvm its verdict is the truth a job's sandbox then meets.
func TestProbePlatform(t *testing.T) {
	requireRoot(t)
	root := testStateRoot(t)
	took, err := ProbePlatform(context.Background(), root, PlatformSystrap)
	if err != nil {
		t.Fatalf("systrap probe: %v", err)
	}
	t.Logf("systrap probe booted in %s", took)
	kvmErr := KVMDeviceUsable()
	_, err = ProbePlatform(context.Background(), root, PlatformKVM)
	switch {
	case kvmErr != nil && err == nil:
		t.Fatalf("the kvm probe booted without a usable /dev/kvm (%v)", kvmErr)
	case err != nil:
		if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "goroutine") {
			t.Errorf("the probe's failure is not one line: %q", err)
		}
		t.Logf("kvm probe failed on this host, as a job's sandbox would: %v", err)
	default:
		t.Logf("kvm probe booted on this host")
	}
	log, rerr := os.ReadFile(filepath.Join(platformDir(root), "kvm-probe.log"))
	if rerr != nil || len(log) == 0 {
		t.Errorf("the probe's log is not kept: %v", rerr)
	}
	ents, _ := os.ReadDir(platformDir(root))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "probe-") {
			t.Errorf("the probe left its directory %s", e.Name())
		}
	}
}

// auto on this very host, with its real judge: kvm where a probe boots,
// systrap with the reason elsewhere; and kvm asked for where it cannot
// boot is refused before anything is created, in one line.
func TestAutoPlatformOnThisHost(t *testing.T) {
	requireRoot(t)
	sb := newTestSandbox(t, nil)
	p := sb.Platform()
	t.Logf("auto chose %s", p)
	if len(p.Attempts) != 1 || p.Attempts[0].Error != "" || p.Asked != PlatformAuto {
		t.Fatalf("attempts %+v", p)
	}
	if _, out, res := sh(t, sb, "true"); res.ExitCode != 0 {
		t.Fatalf("step: %+v %s", res, out)
	}
	if err := KVMDeviceUsable(); err != nil {
		if p.Platform != PlatformSystrap || !strings.Contains(p.Reason, "kvm unusable: "+err.Error()) {
			t.Errorf("without /dev/kvm (%v): %s", err, p)
		}
	}
	usable, why := hostJudge(sb.Config().StateRoot).judge(context.Background())
	if usable != (p.Platform == PlatformKVM) {
		t.Errorf("auto chose %s, the kept verdict says usable=%v (%s)", p.Platform, usable, why)
	}
	cfg := testConfig(t)
	cfg.Platform = PlatformKVM
	kvm, err := Create(context.Background(), cfg)
	if usable {
		if err != nil {
			t.Fatalf("kvm asked for where a probe booted: %v", err)
		}
		defer kvm.Destroy(context.Background())
		if _, out, res := sh(t, kvm, "echo on-kvm"); res.ExitCode != 0 || !strings.Contains(out, "on-kvm") {
			t.Errorf("step on kvm: %+v %q", res, out)
		}
		return
	}
	checkRefusal(t, cfg, err)
}

// checkRefusal: a refused platform is one line that says what to do, and
// nothing of the job was created.
func checkRefusal(t *testing.T, cfg Config, err error) {
	t.Helper()
	if !errors.Is(err, ErrPlatformUnusable) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "goroutine") || !strings.Contains(err.Error(), "ask for platform auto") {
		t.Fatalf("kvm asked for where it cannot boot: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(cfg.StateRoot, "jobs", cfg.ID)); !os.IsNotExist(serr) {
		t.Errorf("the refused job left its directory: %v", serr)
	}
}

// A sandbox that auto put on kvm and that does not boot (here: its KVM
// device is /dev/null, so gVisor's KVM platform fails while it boots, as
// it does on a KVM whose vCPUs it cannot set up) is created again on
// systrap, and the job goes on; both attempts are recorded, and the kept
// verdict turns, so that the next job goes to systrap straight away.
// This runs on every kind of host: the probe is the fake one here.
func TestAutoFallsBackToSystrap(t *testing.T) {
	requireRoot(t)
	probes := 0
	cfg := testConfig(t)
	cfg.judge = fakeJudge(cfg.StateRoot, nil, nil, &probes)
	cfg.RunscFlags = []string{"--platform_device_path=/dev/null"}
	sb := startSandbox(t, cfg)
	p := sb.Platform()
	if p.Platform != PlatformSystrap || sb.Config().Platform != PlatformSystrap || len(p.Attempts) != 2 {
		t.Fatalf("platform %+v", p)
	}
	if a := p.Attempts[0]; a.Platform != PlatformKVM || !strings.Contains(a.Error, "VCPU") || strings.Contains(a.Error, "\n") {
		t.Errorf("the kvm attempt: %+v", a)
	}
	if a := p.Attempts[1]; a.Platform != PlatformSystrap || a.Error != "" {
		t.Errorf("the systrap attempt: %+v", a)
	}
	if !strings.Contains(p.Reason, "did not boot on kvm") || !strings.Contains(p.Reason, "created again on systrap") {
		t.Errorf("reason %q", p.Reason)
	}
	if out, _, res := sh(t, sb, "echo went-on"); res.ExitCode != 0 || !strings.Contains(out, "went-on") {
		t.Fatalf("step after the fallback: %+v %q", res, out)
	}
	logs, _ := filepath.Glob(filepath.Join(cfg.StateRoot, "logs", cfg.ID+"-kvm.log"))
	if len(logs) != 1 {
		t.Errorf("the failed start's log is not kept: %v", logs)
	}

	next := testConfig(t)
	next.StateRoot = cfg.StateRoot
	next.judge = cfg.judge
	sb2 := startSandbox(t, next)
	if p := sb2.Platform(); p.Platform != PlatformSystrap || len(p.Attempts) != 1 || !strings.Contains(p.Reason, "a job's sandbox did not boot on kvm") {
		t.Errorf("the next job: %+v", p)
	}
	if probes != 1 {
		t.Errorf("%d probes, want 1", probes)
	}
}

// kvm asked for (by flag or by the organisation) is never swapped for
// systrap: where the probe fails it is refused before anything is made,
// and where the probe passed but the sandbox still does not boot, the
// failure is one line (the panic stays in the kept log).
func TestKVMAskedForIsNotReplaced(t *testing.T) {
	requireRoot(t)
	probes := 0
	cfg := testConfig(t)
	cfg.Platform = PlatformKVM
	cfg.judge = fakeJudge(cfg.StateRoot, nil, errors.New("sandbox: error setting system registers: invalid argument"), &probes)
	_, err := Create(context.Background(), cfg)
	checkRefusal(t, cfg, err)

	cfg = testConfig(t)
	cfg.StateRoot = filepath.Join(cfg.StateRoot, "probe-passed") // no verdict yet
	cfg.Platform = PlatformKVM
	cfg.judge = fakeJudge(cfg.StateRoot, nil, nil, &probes)
	cfg.RunscFlags = []string{"--platform_device_path=/dev/null"}
	_, err = Create(context.Background(), cfg)
	if !errors.Is(err, ErrStartFailure) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "runsc's log: ") {
		t.Fatalf("kvm that does not boot: %v", err)
	}
	t.Logf("kvm that does not boot: %v", err)
	if _, serr := os.Stat(filepath.Join(cfg.StateRoot, "jobs", cfg.ID)); !os.IsNotExist(serr) {
		t.Errorf("the failed job left its directory: %v", serr)
	}
}

// The container's init (the small reaper on amd64, the airlock binary
// elsewhere, arm64 among them) reaps what is re-parented to it: the
// orphans of a step that exited leave no zombie counting against the
// process limit.
func TestInitReapsOrphans(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name   string
		helper bool
		init   string
	}{
		{"this architecture's init", false, map[bool]string{true: reaperPath, false: initPath}[reaperELF() != nil]},
		{"airlock as init (arm64)", true, initPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newTestSandbox(t, func(c *Config) { c.helperInit = tc.helper })
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
			if !strings.Contains(out, "init="+tc.init) {
				t.Errorf("the init is not %s: %s", tc.init, out)
			}
		})
	}
}

// A probe whose airlock was killed leaves its directory with a free lock
// and, maybe, processes: the next probe removes both; a probe still
// running (its lock held) is left alone.
func TestProbeRemovesStaleProbes(t *testing.T) {
	requireRoot(t)
	root := testStateRoot(t)
	pdir := platformDir(root)
	stale, live := filepath.Join(pdir, "probe-kvm-stale"), filepath.Join(pdir, "probe-systrap-live")
	for _, d := range []string{stale, live} {
		if err := os.MkdirAll(filepath.Join(d, "runsc"), 0o700); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Hour)
		os.Chtimes(d, old, old)
	}
	lock, err := lockJobDir(live)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { lock.Close(); os.RemoveAll(live) }()
	// A leftover that names the stale probe's directory, as runsc's do.
	left := exec.Command("/bin/sh", "-c", "sleep 60", filepath.Join(stale, "runsc"))
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- left.Wait() }()
	if _, err := ProbePlatform(context.Background(), root, PlatformSystrap); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale probe's directory is still there: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		left.Process.Kill()
		t.Errorf("the stale probe's process still runs")
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a running probe's directory was removed: %v", err)
	}
}
