package runner

import (
	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor"
)

// The sandbox's vocabulary as a door needs it, so that a door (cmd/airlock)
// reaches the sandbox only through this package: the limits and identity a
// user can ask for, their defaults, and the errors that say why a host
// cannot run a job.
type (
	Limits = gvisor.Limits
	User   = gvisor.User
	// WorkspaceVolume is what a job wrote into its bounded workspace.
	WorkspaceVolume = gvisor.Workspace
)

// Defaults of a job's sandbox.
const (
	DefaultStateRoot      = gvisor.DefaultStateRoot
	DefaultWorkspaceMount = gvisor.DefaultWorkspaceMount
)

// Platforms a job's sandbox can run on (gvisor/platform.go).
var Platforms = []string{gvisor.PlatformAuto, gvisor.PlatformSystrap, gvisor.PlatformKVM}

// platformAttempts are a sandbox's starts, as its result and attestation
// record them.
func platformAttempts(p gvisor.PlatformChoice) []attest.PlatformAttempt {
	out := []attest.PlatformAttempt{}
	for _, a := range p.Attempts {
		out = append(out, attest.PlatformAttempt{Platform: a.Platform, Error: a.Error})
	}
	return out
}

// ParseUser reads a numeric "UID" or "UID:GID" (gvisor.ParseUser).
func ParseUser(s string) (User, error) { return gvisor.ParseUser(s) }

// DefaultLimits are the sandbox's limits when nothing sets them.
func DefaultLimits() Limits { return gvisor.DefaultLimits() }

// Errors of a sandbox that could not be created.
var (
	ErrNotRoot         = gvisor.ErrNotRoot
	ErrNoSelfExe       = gvisor.ErrNoSelfExe
	ErrNoWorkspace     = gvisor.ErrNoWorkspace
	ErrStartFailure    = gvisor.ErrStartFailure
	ErrHostUnsupported = gvisor.ErrHostUnsupported
	// ErrPlatformUnusable: kvm was asked for and cannot boot here.
	ErrPlatformUnusable = gvisor.ErrPlatformUnusable
	ErrInvalidConfig    = gvisor.ErrInvalidConfig
)
