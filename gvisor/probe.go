package gvisor

import (
	"context"
	"fmt"
	"os"
	"time"
)

// What `airlock doctor` asks of this package: whether the host can run
// a sandbox at all, whether KVM boots gVisor, and whether a sandbox with
// a job's limits and cgroups starts.

// CheckHost says why this host cannot run sandboxes (not root, no
// /proc/self/exe, no namespaces or seccomp), or nil.
func CheckHost() error { return checkHost() }

// JudgeKVM probes gVisor's KVM platform afresh (when /dev/kvm opens at
// all), keeps the verdict for the jobs that follow, as the first job
// after a boot would, and returns it: whether auto will choose kvm.
func JudgeKVM(ctx context.Context, stateRoot string) (usable bool, why string) {
	return hostJudge(stateRoot).Reprobe(ctx)
}

// ProbeJob creates a sandbox as a job's is made (its default limits,
// cgroups and overlay, the platform auto chooses) over an empty
// workspace, runs `true` in it and destroys it, started from runscExe
// (Config.RunscExe). It returns the platform and how long that took.
func ProbeJob(ctx context.Context, stateRoot, runscExe string) (PlatformChoice, time.Duration, error) {
	ws, err := os.MkdirTemp("", "airlock-probe-workspace-")
	if err != nil {
		return PlatformChoice{}, 0, fmt.Errorf("create a workspace: %w", err)
	}
	defer os.RemoveAll(ws)
	start := time.Now()
	sb, err := Create(ctx, Config{Workspace: ws, StateRoot: stateRoot, Limits: DefaultLimits(), User: &User{UID: 65534, GID: 65534}, RunscExe: runscExe})
	if err != nil {
		return PlatformChoice{}, 0, err
	}
	defer sb.Destroy(context.Background())
	res, err := sb.Exec(ctx, Step{Args: []string{"true"}, Timeout: time.Minute})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("`true` exited %d in the sandbox: %s", res.ExitCode, res.Message)
	}
	return sb.Platform(), time.Since(start), err
}
