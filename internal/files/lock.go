package files

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Lock opens the lock file path (made, mode 0600, where it is missing;
// never through a symlink) and takes an flock on it: how is
// unix.LOCK_SH or unix.LOCK_EX, with unix.LOCK_NB to fail at once with
// unix.EWOULDBLOCK where another holds it. Closing the file unlocks.
func Lock(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// LockWait is Lock that waits for a lock another holds, for as long as
// ctx lets it (polling: a blocking flock cannot be cancelled).
func LockWait(ctx context.Context, path string, how int) (*os.File, error) {
	for {
		f, err := Lock(path, how|unix.LOCK_NB)
		if err != unix.EWOULDBLOCK {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the lock %s: %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
