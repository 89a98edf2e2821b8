package platform

import (
	"errors"
	"strings"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// The platforms: auto picks kvm only where a probe sandbox has booted on
// it, else systrap.
const (
	Auto    = "auto"
	Systrap = "systrap"
	KVM     = "kvm"
)

// ErrUnusable: the platform the caller insisted on cannot run sandboxes
// on this host.
var ErrUnusable = errors.New("the gVisor platform asked for cannot run on this host")

// ErrUnknown: the platform asked for is none of auto, systrap and kvm.
var ErrUnknown = errors.New("unknown gVisor platform")

// Choice says which platform a sandbox runs on and why, for the job's
// result, its attestation and its report.
type Choice struct {
	// Asked is what the caller asked for: auto, systrap or kvm.
	Asked string `json:"asked"`
	// Platform is the one the sandbox runs on.
	Platform string `json:"platform"`
	// Reason says why, in one line.
	Reason string `json:"reason"`
	// Attempts are the sandbox's starts, in order: one, or two when a
	// start on kvm failed and the sandbox was created again on systrap.
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one start of a sandbox.
type Attempt struct {
	Platform string `json:"platform"`
	// Error says why the sandbox did not boot; empty: it booted.
	Error string `json:"error,omitempty"`
}

// String is the platform with its reason, as the summary prints it:
// "systrap (kvm unusable: open /dev/kvm: no such file or directory)".
func (c Choice) String() string {
	if c.Reason == "" {
		return c.Platform
	}
	return c.Platform + " (" + c.Reason + ")"
}

// FallsBack reports whether a failed start may be tried again on
// systrap: only where auto chose kvm. A caller who asked for kvm gets
// the failure.
func (c Choice) FallsBack() bool {
	return c.Platform == KVM && (c.Asked == "" || c.Asked == Auto)
}

// OneLine keeps the first line of s, bounded, for a reason.
func OneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return textsafe.Clip(s, 300, "...")
}
