package platform

import (
	"context"
	"fmt"
	"time"
)

// Judge tells whether gVisor's KVM platform runs on this host. Its
// functions are the seams of the decision: the host's (Host) in use,
// fakes in tests.
type Judge struct {
	// Device checks /dev/kvm (DeviceUsable): a host without one needs no
	// probe.
	Device func() error
	// Key names what a verdict holds for (HostKey).
	Key func() (string, error)
	// Probe boots a sandbox on kvm and says why it did not. The caller
	// waits for it: only kvm asked for explicitly, and doctor, use it.
	Probe func(ctx context.Context) error
	// Background starts a probe that keeps its verdict for key in
	// Verdicts, without waiting for it (StartBackground); it returns
	// what the job's reason says of it. Nil: no probe starts, and auto
	// stays on systrap until a verdict is kept.
	Background func(key string) string
	// Verdicts is where verdicts are kept; nil: not kept.
	Verdicts *Verdicts
	// CPUIDGaps says what KVM's CPUID lacks of the host's (KVMCPUIDGaps),
	// added to a failed probe's reason; nil: nothing is added.
	CPUIDGaps func() string
}

// Choose turns the platform asked for ("" is auto) into the one the
// sandbox starts on, with the reason. auto never waits for a probe; kvm
// asked for does, when no verdict is kept.
func (j Judge) Choose(ctx context.Context, asked string) (Choice, error) {
	c := Choice{Asked: asked}
	switch asked {
	case "", Auto:
		c.Asked = Auto
		if usable, why := j.kept(); usable {
			c.Platform, c.Reason = KVM, "auto: "+why
		} else {
			c.Platform, c.Reason = Systrap, "kvm unusable: "+why
		}
	case Systrap:
		c.Platform, c.Reason = Systrap, "asked for"
	case KVM:
		usable, why := j.Judge(ctx)
		if !usable {
			return c, fmt.Errorf("%w: platform kvm: %s; ask for platform auto (it runs on systrap here) or systrap, or set sandbox.platform to \"auto\" in the organisation policy; `airlock doctor` checks the host", ErrUnusable, why)
		}
		c.Platform, c.Reason = KVM, "asked for; "+why
	default:
		return c, fmt.Errorf("%w: platform %q: use auto, systrap or kvm", ErrUnknown, asked)
	}
	return c, nil
}

// kept returns the kept verdict, without waiting: where none is kept
// yet, KVM counts as unusable for this job, and a probe starts in the
// background for the jobs after it.
func (j Judge) kept() (bool, string) {
	if err := j.Device(); err != nil {
		return false, err.Error()
	}
	if j.Verdicts == nil {
		return false, "not judged: no place to keep a verdict (this job runs on systrap; `airlock doctor` probes the host)"
	}
	key, err := j.Key()
	if err != nil {
		return false, "not judged: " + err.Error() + " (this job runs on systrap; `airlock doctor` probes the host)"
	}
	if v, ok := j.Verdicts.Read(key); ok {
		return v.Usable, v.Reason
	}
	why := "not judged yet on this host: this job runs on systrap"
	if j.Background != nil {
		why += "; " + j.Background(key)
	}
	return false, why
}

// Judge returns whether KVM boots gVisor here, and why (one line),
// waiting for a probe when no verdict is kept. The verdict is kept, so
// the probe runs once per key; concurrent callers wait for one probe.
func (j Judge) Judge(ctx context.Context) (bool, string) {
	if err := j.Device(); err != nil {
		return false, err.Error()
	}
	key, err := j.Key()
	if err != nil || j.Verdicts == nil {
		// Nothing to key a verdict by: probe every time (slow, correct).
		return j.Probed(ctx)
	}
	if v, ok := j.Verdicts.Read(key); ok {
		return v.Usable, v.Reason
	}
	unlock, err := j.Verdicts.Lock(ctx)
	if err != nil {
		return j.Probed(ctx)
	}
	defer unlock()
	if v, ok := j.Verdicts.Read(key); ok {
		return v.Usable, v.Reason // another job probed meanwhile
	}
	return j.probeAndKeep(ctx, key)
}

// Reprobe probes afresh, whatever verdict is kept, and keeps the new one
// as a job's probe would (`airlock doctor`).
func (j Judge) Reprobe(ctx context.Context) (bool, string) {
	if err := j.Device(); err != nil {
		return false, err.Error()
	}
	key, err := j.Key()
	if err != nil || j.Verdicts == nil {
		return j.Probed(ctx)
	}
	return j.probeAndKeep(ctx, key)
}

// probeAndKeep probes and keeps the verdict for key (one of no answer
// for an hour only), unless ctx ended the probe.
func (j Judge) probeAndKeep(ctx context.Context, key string) (bool, string) {
	v := verdictOf(key, j.Probe(ctx), j.CPUIDGaps)
	if ctx.Err() == nil {
		j.Verdicts.Write(v)
	}
	return v.Usable, v.Reason
}

// Probed runs the probe and words its outcome.
func (j Judge) Probed(ctx context.Context) (bool, string) {
	return Worded(j.Probe(ctx), j.CPUIDGaps)
}

// Worded words a probe's outcome as a verdict's reason: err nil means
// it booted. gaps, when given, adds what KVM's CPUID lacks to a failure.
func Worded(err error, gaps func() string) (bool, string) {
	at := time.Now().UTC().Format(time.RFC3339)
	if err != nil {
		why := "a probe sandbox did not boot on kvm (" + at + "): " + err.Error()
		if gaps != nil {
			if g := gaps(); g != "" {
				why += "; " + g
			}
		}
		return false, why
	}
	return true, "a probe sandbox booted on kvm (" + at + ")"
}

// Failed records that a sandbox started on kvm did not boot although a
// probe had, so that later jobs go straight to systrap.
func (j Judge) Failed(why string) {
	j.Keep(false, "a job's sandbox did not boot on kvm: "+why)
}

// Keep writes a verdict for this host's key, where verdicts are kept.
func (j Judge) Keep(usable bool, why string) {
	if j.Verdicts == nil {
		return
	}
	if key, err := j.Key(); err == nil {
		j.Verdicts.Write(Verdict{Key: key, Usable: usable, Reason: why})
	}
}
