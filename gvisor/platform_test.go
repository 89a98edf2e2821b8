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

	"github.com/airlock-ci/airlock/gvisor/platform"
	"github.com/airlock-ci/airlock/internal/leakcheck"
)

// fakeJudge is a KVM judge whose device check and probe are given, and
// whose verdicts are kept under stateRoot; probes counts the probes it
// ran. usable, when not nil, is a verdict kept before the first job.
// Its background probe starts nothing.
func fakeJudge(stateRoot string, device, probe error, probes *int, usable *bool) *platform.Judge {
	j := &platform.Judge{
		Device: func() error { return device },
		Key:    func() (string, error) { return "boot=test gvisor=1", nil },
		Probe: func(context.Context) error {
			*probes++
			return probe
		},
		Verdicts: platform.NewVerdicts(platformDir(stateRoot)),
	}
	if usable != nil {
		j.Keep(*usable, "a probe sandbox booted on kvm (kept by the test)")
	}
	return j
}

// The first job on a host whose KVM probe hangs does not wait for it.
// The probe here runs a runsc that never answers, in the background
// process exactly as the host's judge starts it (the test binary, like
// airlock, hands platform.ProbeArgv0 to the probe through Dispatch). The
// probe still runs when the job has finished on systrap; the next job
// starts no second probe; the probe ends by itself at its timeout,
// keeps its verdict for the jobs after it, and leaves nothing behind.
func TestFirstJobDoesNotWaitForTheProbe(t *testing.T) {
	requireRoot(t)
	cfg := testConfig(t)
	dir := platformDir(cfg.StateRoot)
	hang := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const timeout = 10 * time.Second
	judge := &platform.Judge{
		Device: func() error { return nil }, // as where /dev/kvm opens
		Key:    func() (string, error) { return "boot=test hanging-probe", nil },
		Probe: func(context.Context) error {
			t.Error("a job waited for the probe")
			return nil
		},
		Background: func(key string) string {
			return platform.StartBackground(platform.BackgroundProbe{Dir: dir, Key: key, Runsc: hang, Timeout: timeout})
		},
		Verdicts: platform.NewVerdicts(dir),
	}
	job := func(want string) {
		t.Helper()
		c := testConfig(t)
		c.StateRoot, c.judge = cfg.StateRoot, judge
		sb := startSandbox(t, c)
		if _, out, res := sh(t, sb, "true"); res.ExitCode != 0 {
			t.Fatalf("step: %+v %s", res, out)
		}
		if err := sb.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
		if p := sb.Platform(); p.Platform != PlatformSystrap || !strings.Contains(p.Reason, want) {
			t.Fatalf("platform %s, want systrap because %q", p, want)
		}
	}
	start := time.Now()
	job("not judged yet on this host: this job runs on systrap; a probe sandbox boots on kvm beside it (pid ")
	if !judge.Verdicts.Busy() {
		t.Fatalf("the job is done (in %s) and the probe is not running: it was waited for, or never started", time.Since(start))
	}
	t.Logf("the first job took %s; the probe still runs", time.Since(start))
	job("a probe sandbox is booting on kvm beside it, for the jobs after it")

	for end := time.Now().Add(timeout + 30*time.Second); judge.Verdicts.Busy(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the probe still runs %s after its timeout", 30*time.Second)
		}
	}
	v, ok := judge.Verdicts.Read("boot=test hanging-probe")
	if !ok || v.Usable || !strings.Contains(v.Reason, "no answer in "+timeout.String()) {
		t.Fatalf("kept verdict %+v %v", v, ok)
	}
	job("kvm unusable: a probe sandbox did not boot on kvm")
	if left := leakcheck.Report(dir, ""); left != "" {
		t.Errorf("the probe left:\n%s", left)
	}
	if probes, _ := filepath.Glob(filepath.Join(dir, "probe-*")); len(probes) > 0 {
		t.Errorf("the probe left its directories: %v", probes)
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
	// The kept verdict, waiting for the probe that the first job of the
	// boot started beside it, if this was that job.
	usable, why := hostJudge(sb.Config().StateRoot).Judge(context.Background())
	if strings.Contains(p.Reason, "not judged yet") {
		if p.Platform != PlatformSystrap {
			t.Errorf("not judged yet, and on %s", p)
		}
	} else if usable != (p.Platform == PlatformKVM) {
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
	probes, usable := 0, true
	cfg := testConfig(t)
	cfg.judge = fakeJudge(cfg.StateRoot, nil, nil, &probes, &usable)
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
	if probes != 0 {
		t.Errorf("%d probes, want none (the verdict was kept)", probes)
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
	cfg.judge = fakeJudge(cfg.StateRoot, nil, errors.New("sandbox: error setting system registers: invalid argument"), &probes, nil)
	_, err := Create(context.Background(), cfg)
	checkRefusal(t, cfg, err)

	cfg = testConfig(t)
	cfg.StateRoot = filepath.Join(cfg.StateRoot, "probe-passed") // no verdict yet
	cfg.Platform = PlatformKVM
	cfg.judge = fakeJudge(cfg.StateRoot, nil, nil, &probes, nil)
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
