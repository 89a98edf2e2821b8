package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-ci/airlock/gvisor/cgroup"
	"github.com/airlock-ci/airlock/gvisor/quota"
	"golang.org/x/sys/unix"
)

// Reaped describes one leftover job that Reap cleaned up.
type Reaped struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	// SandboxUID is the identity the job's workload ran as.
	SandboxUID uint32 `json:"sandboxUid"`
	OwnerPID   int    `json:"ownerPid"`
	// Writes says what became of what the job wrote in its bounded
	// workspace ("" when it had none): merged or discarded, and why.
	Writes string `json:"writes,omitempty"`
}

// Reap removes the job directories under stateRoot whose owner is gone (its
// lock is free): the sandbox, its processes, cgroups and state. Jobs of a
// live airlock are left alone. It returns what it cleaned so the caller can
// also tidy those workspaces.
func Reap(ctx context.Context, stateRoot string) ([]Reaped, error) {
	if stateRoot == "" {
		stateRoot = DefaultStateRoot
	}
	jobs := filepath.Join(stateRoot, "jobs")
	removeStaleNewJobs(jobs + ".new")
	ents, err := os.ReadDir(jobs)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", jobs, err)
	}
	var out []Reaped
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		dir := filepath.Join(jobs, e.Name())
		r, ok, err := reapOne(ctx, dir, e.Name())
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// removeStaleNewJobs removes what airlocks killed while they made a job
// directory left in staging (newJobDir): a directory holding at most its
// lock, whose lock is free. One younger than a minute is left alone: its
// airlock may not have taken the lock yet.
func removeStaleNewJobs(staging string) {
	ents, _ := os.ReadDir(staging)
	dirs := make([]string, 0, len(ents))
	for _, e := range ents {
		dirs = append(dirs, filepath.Join(staging, e.Name()))
	}
	removeUnlocked(dirs, time.Minute, nil)
}

// removeUnlocked removes each of dirs that is a directory at least
// minAge old whose lock (lockJobDir) is free: its airlock died. Younger
// ones may not have had their lock taken yet. tidy, when set, runs first,
// with the lock held.
func removeUnlocked(dirs []string, minAge time.Duration, tidy func(dir string)) {
	for _, d := range dirs {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < minAge {
			continue
		}
		lock, err := lockJobDir(d)
		if err != nil {
			continue // its airlock holds it
		}
		if tidy != nil {
			tidy(d)
		}
		os.RemoveAll(d)
		lock.Close()
	}
}

func reapOne(ctx context.Context, dir, id string) (Reaped, bool, error) {
	// Never created here: a job directory has its lock from the start
	// (newJobDir), so one without is being removed by its airlock, after
	// its sandbox was destroyed, or was left half-removed.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		if fi, err := os.Lstat(dir); err == nil && time.Since(fi.ModTime()) > time.Minute {
			os.RemoveAll(dir)
		}
		return Reaped{}, false, nil
	}
	if err != nil {
		return Reaped{}, false, fmt.Errorf("open lock of %s: %w", dir, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return Reaped{}, false, nil // a live airlock owns it
	}
	var own owner
	if b, err := os.ReadFile(filepath.Join(dir, "owner.json")); err == nil {
		json.Unmarshal(b, &own)
	}
	r := runsc{global: []string{"--root=" + filepath.Join(dir, "runsc"), "--shared-root=" + sharedRoot, "--log=" + filepath.Join(dir, "runsc.log")}, logDir: dir}
	err = destroyJob(r, id, dir, cgroup.Recorded(own.Cgroups))
	// The volume's own record names its workspace: released even when the
	// owner file was never written.
	left, rerr := quota.Abandon(volumeDir(filepath.Dir(filepath.Dir(dir)), id))
	if rerr != nil {
		err = errors.Join(err, rerr)
	}
	if rmErr := os.RemoveAll(dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove %s: %w", dir, rmErr))
	}
	out := Reaped{ID: id, Workspace: own.Workspace, SandboxUID: own.UID, OwnerPID: own.PID}
	switch {
	case left.Resumed:
		out.Writes = "merged: the job had ended, and the merge its airlock began was finished"
	case left.Discarded:
		out.Writes = "discarded: the job never ended, and what it wrote in its bounded workspace was kept out of " + left.Workspace
	}
	return out, true, err
}
