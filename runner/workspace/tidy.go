// Package workspace makes sure that what a sandboxed job leaves in its
// workspace gives nobody on the host more rights than the workspace owner
// has: no set-uid or set-gid files, no device nodes, and nothing owned by
// the sandbox's identity when that differs from the owner.
//
// Tidy runs after the sandbox is destroyed, so nothing inside can race it.
// It never follows symbolic links and never leaves the workspace.
//
// Layer 1: imports nothing of airlock's.
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Report says what Tidy changed.
type Report struct {
	// SetIDCleared lists files whose set-uid/set-gid bits were removed.
	SetIDCleared []string `json:"setIdCleared,omitempty"`
	// DevicesRemoved lists device nodes that were deleted.
	DevicesRemoved []string `json:"devicesRemoved,omitempty"`
	// Chowned counts entries given back to the workspace owner.
	Chowned int `json:"chowned"`
	// Errors lists what could not be fixed.
	Errors []string `json:"errors,omitempty"`
}

// maxListed bounds the paths a report lists.
const maxListed = 100

// Tidy walks dir. Entries owned by sandboxUID, when that is not the
// workspace owner, are given to the owner; set-id bits are cleared on
// everything; device nodes are removed.
func Tidy(dir string, sandboxUID uint32) (Report, error) {
	var rep Report
	root, err := os.Stat(dir)
	if err != nil {
		return rep, fmt.Errorf("tidy workspace: %w", err)
	}
	rst, ok := root.Sys().(*syscall.Stat_t)
	if !ok {
		return rep, errors.New("tidy workspace: no ownership information")
	}
	owner, group := rst.Uid, rst.Gid
	walkErr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			rep.addError(path, err)
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			rep.addError(path, err)
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		mode := fi.Mode()
		if mode&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
			if err := os.Remove(path); err != nil {
				rep.addError(path, err)
			} else {
				rep.DevicesRemoved = appendBounded(rep.DevicesRemoved, path)
			}
			return nil
		}
		if st.Uid == sandboxUID && sandboxUID != owner {
			if err := os.Lchown(path, int(owner), int(group)); err != nil {
				rep.addError(path, err)
			} else {
				rep.Chowned++
			}
		}
		// chown clears set-id bits on regular files already; clear them
		// explicitly for everything that is not a link (directories keep
		// set-gid only if they had it before the job: we cannot know, so
		// we clear it too).
		if mode&fs.ModeSymlink == 0 && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			if err := unix.Fchmodat(unix.AT_FDCWD, path, st.Mode&0o1777, 0); err != nil {
				rep.addError(path, err)
			} else {
				rep.SetIDCleared = appendBounded(rep.SetIDCleared, path)
			}
		}
		return nil
	})
	return rep, walkErr
}

func (r *Report) addError(path string, err error) {
	r.Errors = appendBounded(r.Errors, fmt.Sprintf("%s: %v", path, err))
}

func appendBounded(list []string, s string) []string {
	if len(list) >= maxListed {
		return list
	}
	return append(list, s)
}
