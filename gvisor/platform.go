package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// Platforms airlock runs sandboxes on: systrap (system calls trapped
// with seccomp, works everywhere) and kvm (the sandbox's kernel in a
// virtual machine of /dev/kvm: system calls cost far less, where the host
// has a KVM that gVisor can use). "auto" picks kvm only where a probe
// sandbox has booted on it (kvmprobe.go), else systrap.
//
// KVM is an acceleration, never a requirement of auto: a /dev/kvm that
// opens and answers is not enough (nested virtualisation often offers a
// KVM whose CPUID lacks what gVisor's ring0 sets, and the KVM platform
// then panics while it creates its first vCPU), so the verdict comes from
// booting gVisor on it; and a sandbox that auto started on kvm and that
// still fails to boot is created again on systrap (Create).
const (
	PlatformAuto    = "auto"
	PlatformSystrap = "systrap"
	PlatformKVM     = "kvm"
)

// ErrPlatformUnusable: the platform the caller insisted on cannot run
// sandboxes on this host.
var ErrPlatformUnusable = errors.New("the gVisor platform asked for cannot run on this host")

// PlatformChoice says which platform a sandbox runs on and why, for the
// job's result, its attestation and its report.
type PlatformChoice struct {
	// Asked is what the caller asked for: auto, systrap or kvm.
	Asked string `json:"asked"`
	// Platform is the one the sandbox runs on.
	Platform string `json:"platform"`
	// Reason says why, in one line.
	Reason string `json:"reason"`
	// Attempts are the sandbox's starts, in order: one, or two when a
	// start on kvm failed and the sandbox was created again on systrap.
	Attempts []PlatformAttempt `json:"attempts"`
}

// PlatformAttempt is one start of a sandbox.
type PlatformAttempt struct {
	Platform string `json:"platform"`
	// Error says why the sandbox did not boot; empty: it booted.
	Error string `json:"error,omitempty"`
}

// String is the platform with its reason, as the summary prints it:
// "systrap (kvm unusable: open /dev/kvm: no such file or directory)".
func (p PlatformChoice) String() string {
	if p.Reason == "" {
		return p.Platform
	}
	return p.Platform + " (" + p.Reason + ")"
}

// fallsBack reports whether a failed start may be tried again on
// systrap: only where auto chose kvm. A caller who asked for kvm gets
// the failure.
func (p PlatformChoice) fallsBack() bool {
	return p.Platform == PlatformKVM && (p.Asked == "" || p.Asked == PlatformAuto)
}

// kvmAPIVersion is the only KVM API version Linux has had
// (KVM_API_VERSION), and kvmGetAPIVersion the ioctl that asks for it
// (_IO(KVMIO, 0x00), linux/kvm.h; x/sys/unix does not name it).
const (
	kvmAPIVersion    = 12
	kvmGetAPIVersion = 0xAE00
)

// kvmDevice is the KVM device the KVM platform opens.
const kvmDevice = "/dev/kvm"

// KVMDeviceUsable reports why /dev/kvm cannot be opened as the KVM
// platform opens it, or nil: it opens the device and asks for its API
// version (KVM_GET_API_VERSION). This is necessary, not sufficient: only
// a probe sandbox tells whether gVisor boots on it (ProbePlatform).
func KVMDeviceUsable() error {
	f, err := os.OpenFile(kvmDevice, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion)
	if err != nil {
		return fmt.Errorf("%s: KVM_GET_API_VERSION: %w", kvmDevice, err)
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("%s: KVM API version %d, not %d", kvmDevice, v, kvmAPIVersion)
	}
	return nil
}

// kvmJudge tells whether gVisor's KVM platform runs on this host. Its
// functions are the seams of the decision: the host's (hostJudge) in
// use, fakes in tests.
type kvmJudge struct {
	// device checks /dev/kvm (KVMDeviceUsable): a host without one needs
	// no probe.
	device func() error
	// key names what a verdict holds for (hostKey): this boot, this
	// binary, this /dev/kvm.
	key func() (string, error)
	// probe boots a sandbox on kvm and says why it did not.
	probe func(ctx context.Context) error
	// verdicts is where verdicts are kept; nil: not kept.
	verdicts *verdictCache
	// cpuidGaps says what KVM's CPUID lacks of the host's (kvmCPUIDGaps),
	// added to a failed probe's reason; nil: nothing is added.
	cpuidGaps func() string
}

// hostJudge is the judge of this host, keeping its verdicts under
// stateRoot.
func hostJudge(stateRoot string) kvmJudge {
	return kvmJudge{
		device:    KVMDeviceUsable,
		key:       hostKey,
		probe:     func(ctx context.Context) error { return probeKVM(ctx, stateRoot) },
		verdicts:  newVerdictCache(stateRoot),
		cpuidGaps: kvmCPUIDGaps,
	}
}

// judge returns whether KVM boots gVisor here, and why (one line). The
// verdict of a probe is kept for this boot and binary, so the probe runs
// once; concurrent callers wait for one probe.
func (j kvmJudge) judge(ctx context.Context) (bool, string) {
	if err := j.device(); err != nil {
		return false, err.Error()
	}
	key, err := j.key()
	if err != nil || j.verdicts == nil {
		// Nothing to key a verdict by: probe every time (slow, correct).
		return j.probed(ctx)
	}
	if v, ok := j.verdicts.read(key); ok {
		return v.Usable, v.Reason
	}
	unlock, err := j.verdicts.lock(ctx)
	if err != nil {
		return j.probed(ctx)
	}
	defer unlock()
	if v, ok := j.verdicts.read(key); ok {
		return v.Usable, v.Reason // another job probed meanwhile
	}
	usable, why := j.probed(ctx)
	if ctx.Err() == nil {
		j.verdicts.write(verdict{Key: key, Usable: usable, Reason: why})
	}
	return usable, why
}

// probed runs the probe and words its outcome.
func (j kvmJudge) probed(ctx context.Context) (bool, string) {
	at := time.Now().UTC().Format(time.RFC3339)
	if err := j.probe(ctx); err != nil {
		why := "a probe sandbox did not boot on kvm (" + at + "): " + err.Error()
		if j.cpuidGaps != nil {
			if gaps := j.cpuidGaps(); gaps != "" {
				why += "; " + gaps
			}
		}
		return false, why
	}
	return true, "a probe sandbox booted on kvm (" + at + ")"
}

// failed records that a sandbox started on kvm did not boot although a
// probe had, so that later jobs go straight to systrap.
func (j kvmJudge) failed(why string) {
	j.keep(false, "a job's sandbox did not boot on kvm: "+why)
}

// keep writes a verdict for this host's key, where verdicts are kept.
func (j kvmJudge) keep(usable bool, why string) {
	if j.verdicts == nil {
		return
	}
	if key, err := j.key(); err == nil {
		j.verdicts.write(verdict{Key: key, Usable: usable, Reason: why})
	}
}

// choose turns the platform asked for ("" is auto) into the one the
// sandbox starts on, with the reason.
func (j kvmJudge) choose(ctx context.Context, asked string) (PlatformChoice, error) {
	c := PlatformChoice{Asked: asked}
	switch asked {
	case "", PlatformAuto:
		c.Asked = PlatformAuto
		if usable, why := j.judge(ctx); usable {
			c.Platform, c.Reason = PlatformKVM, "auto: "+why
		} else {
			c.Platform, c.Reason = PlatformSystrap, "kvm unusable: "+why
		}
	case PlatformSystrap:
		c.Platform, c.Reason = PlatformSystrap, "asked for"
	case PlatformKVM:
		usable, why := j.judge(ctx)
		if !usable {
			return c, fmt.Errorf("%w: platform kvm: %s; ask for platform auto (it runs on systrap here) or systrap, or set sandbox.platform to \"auto\" in the organisation policy; `airlock doctor` checks the host", ErrPlatformUnusable, why)
		}
		c.Platform, c.Reason = PlatformKVM, "asked for; "+why
	default:
		return c, fmt.Errorf("%w: platform %q: use auto, systrap or kvm", ErrInvalidConfig, asked)
	}
	return c, nil
}

// oneLine keeps the first line of s, bounded, for a reason.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return textsafe.Clip(s, 300, "...")
}
