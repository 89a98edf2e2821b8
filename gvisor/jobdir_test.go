package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Another airlock's Reap takes a job directory whose lock it can take
// for a leftover, and removes it. So a new job's directory must never be
// seen with its lock free: a watcher spins on the path of the next job's
// lock file and tries the lock the moment it can open it; it must find
// it held, every time, and the job must get its directory every time.
// (The directory was made, then locked, and Reap could fall between the
// two: CI's TestJobsAtOnce lost a job to another's Reap that way.)
func TestNewJobDirIsLockedWhenSeen(t *testing.T) {
	jobs := filepath.Join(t.TempDir(), "jobs")
	if err := os.Mkdir(jobs, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		id := fmt.Sprintf("job-%d", i)
		watching, freeSeen := make(chan struct{}), make(chan bool, 1)
		go func() {
			close(watching)
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				f, err := os.OpenFile(filepath.Join(jobs, id, "lock"), os.O_RDWR, 0)
				if err != nil {
					continue
				}
				free := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
				f.Close()
				freeSeen <- free
				return
			}
			freeSeen <- false
		}()
		<-watching
		lock, err := newJobDir(jobs, id)
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		if <-freeSeen {
			t.Fatalf("job %d: its directory was seen with its lock free", i)
		}
		lock.Close()
		os.RemoveAll(filepath.Join(jobs, id))
	}
	if ents, _ := os.ReadDir(jobs + ".new"); len(ents) != 0 {
		t.Errorf("left in staging: %v", ents)
	}
	// An id in use is refused, and leaves nothing in staging.
	lock, err := newJobDir(jobs, "taken")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := newJobDir(jobs, "taken"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("a second job of one id: %v", err)
	}
	if ents, _ := os.ReadDir(jobs + ".new"); len(ents) != 0 {
		t.Errorf("left in staging by the refused one: %v", ents)
	}
}

// What a killed airlock can leave of a job directory that Reap cannot
// tell by its lock: a directory in staging (killed before the rename)
// and a job directory without its lock (killed while removing it). Reap
// removes each once it is a minute old, and leaves a younger one, which
// may be an airlock's at work on it, alone; it never makes a lock file.
func TestReapStagingAndLocklessLeftovers(t *testing.T) {
	state := t.TempDir()
	old := time.Now().Add(-2 * time.Minute)
	mk := func(dir string, aged bool) string {
		if err := os.MkdirAll(filepath.Join(dir, "runsc"), 0o700); err != nil {
			t.Fatal(err)
		}
		if aged {
			if err := os.Chtimes(dir, old, old); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	staleNew := mk(filepath.Join(state, "jobs.new", "job-a"), true)
	youngNew := mk(filepath.Join(state, "jobs.new", "job-b"), false)
	staleHalf := mk(filepath.Join(state, "jobs", "job-c"), true)
	youngHalf := mk(filepath.Join(state, "jobs", "job-d"), false)
	reaped, err := Reap(context.Background(), state)
	if err != nil || len(reaped) != 0 {
		t.Fatalf("reaped %v, %v", reaped, err)
	}
	for dir, gone := range map[string]bool{staleNew: true, youngNew: false, staleHalf: true, youngHalf: false} {
		if _, err := os.Stat(dir); os.IsNotExist(err) != gone {
			t.Errorf("%s: gone %v, want %v", dir, os.IsNotExist(err), gone)
		}
	}
	if _, err := os.Stat(filepath.Join(youngHalf, "lock")); !os.IsNotExist(err) {
		t.Errorf("Reap made a lock file in a job directory: %v", err)
	}
}
