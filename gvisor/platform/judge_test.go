package platform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fake is a judge whose device check and probe are given, whose
// verdicts are kept in a directory of the test's, and whose background
// probe is only counted (the background process is tested in gvisor,
// with a real one).
type fake struct {
	Judge
	probes, started int
}

func newFake(t *testing.T, device, probe error) *fake {
	return newFakeIn(filepath.Join(t.TempDir(), "platform"), device, probe)
}

// The decision for each platform asked for, given what the device
// check, the kept verdict and the probe say. auto never probes itself:
// without a verdict it is systrap, and a probe starts in the background.
func TestChoose(t *testing.T) {
	noDevice := errors.New("open /dev/kvm: no such file or directory")
	panicked := errors.New("sandbox: error initializing vCPU(id=0) state: error setting system registers: invalid argument")
	booted := &Verdict{Usable: true, Reason: "a probe sandbox booted on kvm (kept)"}
	refused := &Verdict{Usable: false, Reason: "a probe sandbox did not boot on kvm (kept)"}
	for _, tc := range []struct {
		name          string
		asked         string
		device, probe error
		kept          *Verdict
		want          string
		reason        string // in the reason, or in the error
		err           error
		probes        int // probes waited for
		started       int // probes started in the background
	}{
		{"auto, nothing kept: systrap now, a probe beside", "", nil, nil, nil, Systrap, "kvm unusable: not judged yet on this host: this job runs on systrap; a probe starts beside it (test)", nil, 0, 1},
		{"auto by name, nothing kept", "auto", nil, panicked, nil, Systrap, "not judged yet", nil, 0, 1},
		{"auto, kept usable", "auto", nil, nil, booted, KVM, "auto: a probe sandbox booted on kvm (kept)", nil, 0, 0},
		{"auto, kept unusable", "auto", nil, nil, refused, Systrap, "kvm unusable: a probe sandbox did not boot on kvm (kept)", nil, 0, 0},
		{"auto, no device: nothing starts", "auto", noDevice, nil, nil, Systrap, "kvm unusable: open /dev/kvm: no such file or directory", nil, 0, 0},
		{"systrap: nothing starts", "systrap", nil, nil, nil, Systrap, "asked for", nil, 0, 0},
		{"kvm, nothing kept: waits for the probe", "kvm", nil, nil, nil, KVM, "asked for; a probe sandbox booted on kvm", nil, 1, 0},
		{"kvm, kept usable", "kvm", nil, nil, booted, KVM, "asked for; a probe sandbox booted on kvm (kept)", nil, 0, 0},
		{"kvm, probe fails", "kvm", nil, panicked, nil, "", "error setting system registers: invalid argument; ask for platform auto", ErrUnusable, 1, 0},
		{"kvm, kept unusable", "kvm", nil, nil, refused, "", "did not boot on kvm (kept); ask for platform auto", ErrUnusable, 0, 0},
		{"kvm, no device", "kvm", noDevice, nil, nil, "", "platform kvm: open /dev/kvm: no such file or directory; ask for platform auto", ErrUnusable, 0, 0},
		{"unknown platform", "ptrace", nil, nil, nil, "", `platform "ptrace": use auto, systrap or kvm`, ErrUnknown, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.device, tc.probe)
			if tc.kept != nil {
				f.Verdicts.Write(Verdict{Key: "boot=test gvisor=1", Usable: tc.kept.Usable, Reason: tc.kept.Reason})
			}
			got, err := f.Choose(context.Background(), tc.asked)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.reason) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("%v, want one line that is %v and says %q", err, tc.err, tc.reason)
				}
			} else if err != nil || got.Platform != tc.want || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("%+v, %v; want %s for %q", got, err, tc.want, tc.reason)
			}
			if f.probes != tc.probes || f.started != tc.started {
				t.Errorf("%d probes waited for and %d started beside, want %d and %d", f.probes, f.started, tc.probes, tc.started)
			}
		})
	}
}

// The verdict a probe keeps is what the jobs after it get: the
// background probe's (RunBackground), or one waited for.
func TestVerdictHoldsForLaterJobs(t *testing.T) {
	f := newFake(t, nil, nil)
	if c, _ := f.Choose(context.Background(), Auto); c.Platform != Systrap {
		t.Fatalf("first job: %+v", c)
	}
	// What the background process does, here in this one.
	arg := `{"dir":"` + f.Verdicts.Dir() + `","key":"boot=test gvisor=1","timeout":1000000000}`
	if code := RunBackground(arg, func(context.Context, string, string, time.Duration) error { return nil }, nil); code != 0 {
		t.Fatalf("background probe exited %d", code)
	}
	c, err := f.Choose(context.Background(), Auto)
	if err != nil || c.Platform != KVM || !strings.Contains(c.Reason, "auto: a probe sandbox booted on kvm") {
		t.Fatalf("the job after the probe: %+v %v", c, err)
	}
	if c, _ := f.Choose(context.Background(), KVM); c.Platform != KVM || f.probes != 0 {
		t.Errorf("kvm asked for after the verdict: %+v, %d probes", c, f.probes)
	}
	// A job's sandbox that then does not boot on kvm turns the verdict.
	f.Failed("error setting system registers")
	if c, _ := f.Choose(context.Background(), Auto); c.Platform != Systrap || !strings.Contains(c.Reason, "a job's sandbox did not boot on kvm") {
		t.Errorf("after a failed start: %+v", c)
	}
}

// The background probe process: strict about its argument, one at a
// time (the lock), and no probe where a verdict for the key is kept.
func TestRunBackground(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "platform")
	arg := `{"dir":"` + dir + `","key":"k","timeout":1000000000}`
	probes := 0
	probe := func(_ context.Context, d, runsc string, timeout time.Duration) error {
		probes++
		if d != dir || runsc != "" || timeout != time.Second {
			t.Errorf("probe in %q with %q within %s", d, runsc, timeout)
		}
		return errors.New("no answer in 1s")
	}
	for _, bad := range []string{"", "{}", `{"dir":"` + dir + `","key":"k"}`, `{"dir":"` + dir + `","key":"k","timeout":1,"more":1}`, "[]"} {
		if code := RunBackground(bad, probe, nil); code != 2 || probes != 0 {
			t.Errorf("argument %q: exit %d after %d probes, want 2 and none", bad, code, probes)
		}
	}
	v := NewVerdicts(dir)
	unlock, err := v.TryLock()
	if err != nil {
		t.Fatal(err)
	}
	if !v.Busy() {
		t.Error("the lock is held, yet not busy")
	}
	if code := RunBackground(arg, probe, nil); code != 0 || probes != 0 {
		t.Errorf("while another probe holds the lock: exit %d after %d probes", code, probes)
	}
	unlock()
	if code := RunBackground(arg, probe, func() string { return "KVM's CPUID lacks XSAVE" }); code != 0 || probes != 1 {
		t.Fatalf("exit %d after %d probes", code, probes)
	}
	got, ok := v.Read("k")
	if !ok || got.Usable || !strings.Contains(got.Reason, "did not boot on kvm") || !strings.Contains(got.Reason, "no answer in 1s; KVM's CPUID lacks XSAVE") {
		t.Errorf("kept %+v %v", got, ok)
	}
	if code := RunBackground(arg, probe, nil); code != 0 || probes != 1 {
		t.Errorf("with a verdict kept: exit %d after %d probes, want no probe", code, probes)
	}
	if v.Busy() {
		t.Error("the lock is still held after the probe")
	}
}

// The verdict lives in the host's directory where it can, else in the
// state root's: a host directory that others may write is not used.
func TestDir(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	os.Chmod(base, 0o700)
	host, fallback := filepath.Join(base, "run", "platform"), filepath.Join(base, "state", "platform")
	if got := dirOr(host, fallback); got != host {
		t.Errorf("a host directory that can be made: %s", got)
	}
	os.Chmod(filepath.Dir(host), 0o777)
	if got := dirOr(host, fallback); got != fallback {
		t.Errorf("a host directory whose parent anyone may write: %s", got)
	}
	os.Chmod(filepath.Dir(host), 0o700)
	os.Chmod(host, 0o777)
	if got := dirOr(host, fallback); got != fallback {
		t.Errorf("a host directory anyone may write: %s", got)
	}
	if got := dirOr("/proc/airlock-cannot-be-made", fallback); got != fallback {
		t.Errorf("a host directory that cannot be made: %s", got)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("ownership checks need root")
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
			f := newFake(t, nil, tc.probe)
			f.CPUIDGaps = func() string { return gaps }
			_, why := f.Judge.Judge(context.Background())
			if !strings.Contains(why, tc.want) || (tc.probe == nil) == strings.Contains(why, gaps) {
				t.Fatalf("%q; want a reason with %q", why, tc.want)
			}
		})
	}
}

// newFakeIn is newFake with its verdicts kept in dir.
func newFakeIn(dir string, device, probe error) *fake {
	f := &fake{}
	f.Judge = Judge{
		Device: func() error { return device },
		Key:    func() (string, error) { return "boot=test gvisor=1", nil },
		Probe: func(context.Context) error {
			f.probes++
			return probe
		},
		Background: func(string) string {
			f.started++
			return "a probe starts beside it (test)"
		},
		Verdicts: NewVerdicts(dir),
	}
	return f
}

// A probe that got no answer may have met a host too busy to boot it in
// time: its verdict holds for an hour, not for the boot; any other
// verdict holds for the boot.
func TestNoAnswerIsProbedAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "platform")
	v := NewVerdicts(dir)
	for _, tc := range []struct {
		name  string
		err   error
		until bool
	}{
		{"no answer", fmt.Errorf("%w in 20s (context deadline exceeded)", ErrNoAnswer), true},
		{"panicked", errors.New("error setting system registers"), false},
		{"booted", nil, false},
	} {
		got := verdictOf("k", tc.err, nil)
		if got.Until.IsZero() == tc.until || (tc.until && !strings.Contains(got.Reason, "probed again after")) {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
	v.Write(verdictOf("k", fmt.Errorf("%w in 20s", ErrNoAnswer), nil))
	if _, ok := v.Read("k"); !ok {
		t.Fatal("a fresh no-answer verdict is not believed")
	}
	expired := verdictOf("k", fmt.Errorf("%w in 20s", ErrNoAnswer), nil)
	expired.Until = time.Now().Add(-time.Minute)
	v.Write(expired)
	if _, ok := v.Read("k"); ok {
		t.Error("an expired no-answer verdict is believed")
	}
}

// doctor's probe afresh (Reprobe) replaces what is kept, and keeps a
// probe of no answer for an hour only, as a job's probe does.
func TestReprobe(t *testing.T) {
	f := newFake(t, nil, fmt.Errorf("%w in 20s", ErrNoAnswer))
	f.Verdicts.Write(Verdict{Key: "boot=test gvisor=1", Usable: true, Reason: "kept"})
	if usable, why := f.Reprobe(context.Background()); usable || f.probes != 1 || !strings.Contains(why, "no answer in 20s") {
		t.Fatalf("usable %v (%s) after %d probes", usable, why, f.probes)
	}
	v, ok := f.Verdicts.Read("boot=test gvisor=1")
	if !ok || v.Usable || v.Until.IsZero() {
		t.Errorf("kept %+v %v, want a no-answer verdict with its end", v, ok)
	}
}
