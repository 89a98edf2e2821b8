package gvisor

import (
	"context"
	"path/filepath"
	"time"

	"github.com/airlock-ci/airlock/gvisor/platform"
)

// The platform a sandbox runs on is package platform's decision (see its
// doc): this file names its types for this package's callers and gives
// it the host's seams, the probe sandbox among them (kvmprobe.go).

// Platforms, as package platform names them.
const (
	PlatformAuto    = platform.Auto
	PlatformSystrap = platform.Systrap
	PlatformKVM     = platform.KVM
)

// ErrPlatformUnusable: the platform the caller insisted on cannot run
// sandboxes on this host.
var ErrPlatformUnusable = platform.ErrUnusable

// PlatformChoice says which platform a sandbox runs on and why.
type PlatformChoice = platform.Choice

// PlatformAttempt is one start of a sandbox.
type PlatformAttempt = platform.Attempt

// KVMDeviceUsable reports why /dev/kvm cannot be opened as the KVM
// platform opens it, or nil (platform.DeviceUsable).
func KVMDeviceUsable() error { return platform.DeviceUsable() }

// probeTimeout bounds a probe: a sandbox boots in well under a second,
// and a host whose KVM hangs is judged unusable after it.
const probeTimeout = 20 * time.Second

// hostJudge is the judge of this host. Its verdict and its probes live
// in platform.HostDir, shared by every state directory of the boot,
// where the host allows it, else under sharedRoot.
func hostJudge(sharedRoot string) platform.Judge {
	dir := platform.Dir(platformDir(sharedRoot))
	return platform.Judge{
		Device: platform.DeviceUsable,
		Key:    platform.HostKey,
		Probe: func(ctx context.Context) error {
			return probeKVMIn(ctx, dir, "", probeTimeout)
		},
		Background: func(key string) string {
			return platform.StartBackground(platform.BackgroundProbe{Dir: dir, Key: key, Timeout: probeTimeout})
		},
		Verdicts:  platform.NewVerdicts(dir),
		CPUIDGaps: platform.KVMCPUIDGaps,
	}
}

// platformDir is a state root's directory for platform verdicts and
// probe logs, where platform.HostDir cannot be had.
func platformDir(stateRoot string) string { return filepath.Join(stateRoot, "platform") }

// probeKVMIn boots a probe sandbox on kvm in pdir, with runsc ("" is
// this binary), within timeout.
func probeKVMIn(ctx context.Context, pdir, runsc string, timeout time.Duration) error {
	_, err := probeIn(ctx, pdir, PlatformKVM, runsc, timeout)
	return err
}
