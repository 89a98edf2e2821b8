package gvisor

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// RunscSidecar is the file name of airlock's runsc sidecar
// (cmd/airlock-runsc), beside the airlock binary: runsc and the gVisor
// packages alone, without airlock's policy, attestation and GitHub
// packages, whose start-up (package initialisation and page faults of a
// larger binary) each process of the big binary pays. A job's gofer and
// sandbox are started from it (Config.RunscExe), as gVisor's own
// installation starts its sentry from a sidecar beside runsc
// (runsc/gvisorbinaries).
const RunscSidecar = "airlock-runsc"

// ErrNoSidecar: the airlock binary was built with a sidecar's build ID
// but no file of that name is beside it.
var ErrNoSidecar = errors.New("no runsc sidecar beside the airlock binary")

// FindRunsc returns the path of the runsc sidecar beside exe (the airlock
// binary) when sandboxes may be started from it: its Go build ID is
// buildID (the sidecar that make built with this airlock, whose ID the
// link recorded), it is a regular file, and it and its directory are
// owned by root or exe's owner and writable by their owner alone. The
// sidecar runs as root outside the sandbox: a file that anyone else could
// replace is never started.
//
// An empty buildID (airlock built by plain `go build`, or a test binary)
// gives "" and nil: sandboxes start from exe itself, which holds the same
// runsc. Otherwise an error says what is wrong, and the caller starts
// sandboxes from exe too (a slower start, nothing less safe).
func FindRunsc(exe, buildID string) (string, error) {
	if buildID == "" {
		return "", nil
	}
	airlock, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return "", fmt.Errorf("resolve the airlock binary %s: %w", exe, err)
	}
	var owner syscall.Stat_t
	if err := syscall.Stat(airlock, &owner); err != nil {
		return "", fmt.Errorf("stat the airlock binary: %w", err)
	}
	path := filepath.Join(filepath.Dir(airlock), RunscSidecar)
	if err := ownedAlone(filepath.Dir(path), owner.Uid, true); err != nil {
		return "", fmt.Errorf("runsc sidecar %s: its directory %w", path, err)
	}
	if err := ownedAlone(path, owner.Uid, false); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: install %s (make build makes it) beside airlock", ErrNoSidecar, path)
		}
		return "", fmt.Errorf("runsc sidecar %s: %w", path, err)
	}
	id, err := goBuildID(path)
	if err != nil {
		return "", fmt.Errorf("runsc sidecar %s: %w", path, err)
	}
	if id != buildID {
		return "", fmt.Errorf("runsc sidecar %s is of another build (Go build ID %q, this airlock's is %q): install the airlock and airlock-runsc that one make build made", path, id, buildID)
	}
	return path, nil
}

// OwnRunsc is FindRunsc beside this process's own binary.
func OwnRunsc(buildID string) (string, error) {
	if buildID == "" {
		return "", nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the airlock binary: %w", err)
	}
	return FindRunsc(exe, buildID)
}

// ownedAlone checks that path (not followed if a symlink) is a directory
// (dir) or regular file owned by root or uid that only its owner may
// write.
func ownedAlone(path string, uid uint32, dir bool) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	mode := st.Mode & syscall.S_IFMT
	switch {
	case dir && mode != syscall.S_IFDIR:
		return errors.New("is not a directory")
	case !dir && mode != syscall.S_IFREG:
		return errors.New("is not a regular file (a symlink is not followed)")
	case st.Uid != 0 && st.Uid != uid:
		return fmt.Errorf("is owned by uid %d, neither root nor the airlock binary's owner", st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("may be written by others than its owner (mode %04o)", st.Mode&0o7777)
	}
	return nil
}

// goBuildID reads the Go build ID of the ELF executable at path from its
// note (what `go tool buildid` prints): a few hundred bytes near the
// start, not a hash of the whole file.
func goBuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("read it as an executable: %w", err)
	}
	defer f.Close()
	s := f.Section(".note.go.buildid")
	if s == nil {
		return "", errors.New("it has no Go build ID: not a Go binary")
	}
	note, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("read its build ID: %w", err)
	}
	// An ELF note: name size, description size, type (4: Go build ID),
	// the name "Go" padded to 4 bytes, then the ID.
	const goBuildIDTag = 4
	if len(note) < 16 || f.ByteOrder.Uint32(note[8:]) != goBuildIDTag || !bytes.Equal(note[12:16], []byte("Go\x00\x00")) {
		return "", errors.New("its Go build ID note is malformed")
	}
	n := int(f.ByteOrder.Uint32(note[4:]))
	if f.ByteOrder.Uint32(note[0:]) != 4 || n > len(note)-16 {
		return "", errors.New("its Go build ID note is malformed")
	}
	return string(note[16 : 16+n]), nil
}
