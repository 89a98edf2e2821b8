// Package files reads files whose size is not trusted, opens
// directories a sandboxed job can rearrange, and digests a directory
// tree without following its links (TreeDigest), replaces a file whole
// (WriteAtomic, WriteDurable), and takes flocks on lock files (Lock, LockWait).
//
// Layer 0: the bottom (see internal/layers); imports nothing of airlock's.
package files

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReadCapped reads path whole, refusing a file larger than limit bytes
// without reading past it.
func ReadCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// OpenBeneath opens dir (a directory or a file), which must lie below
// base, as an O_PATH descriptor without following any symlink on the way
// (base itself included): a job that replaced a directory of its
// workspace with a symlink to a host directory gets an error, not the
// host directory. The file names exactly what was opened through its
// /proc/PID/fd link for as long as it is open (see FDPath).
func OpenBeneath(base, dir string) (*os.File, error) {
	return openBeneath(base, dir, 0)
}

// OpenDirBeneath is OpenBeneath for a directory: anything else is an
// error ("not a directory").
func OpenDirBeneath(base, dir string) (*os.File, error) {
	return openBeneath(base, dir, unix.O_DIRECTORY)
}

func openBeneath(base, dir string, flags int) (*os.File, error) {
	rel, err := filepath.Rel(base, dir)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%s is not below %s", dir, base)
	}
	bfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", base, err)
	}
	defer unix.Close(bfd)
	fd, err := unix.Openat2(bfd, rel, &unix.OpenHow{
		Flags:   uint64(unix.O_PATH | unix.O_CLOEXEC | flags),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open without following symlinks", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// FDPath is the path that names an open file's own inode (its link in
// this process's /proc/PID/fd, which child processes such as git can
// use too): opening it, or a path below it, starts from that directory
// whatever its name points at now.
func FDPath(f *os.File) string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
}

// OpenRootBeneath is an os.Root on dir, which must lie below base (or be
// base), reached without following any symlink: every operation through
// it stays inside that directory, whatever the job renames or links
// inside it meanwhile.
func OpenRootBeneath(base, dir string) (*os.Root, error) {
	f, err := OpenDirBeneath(base, dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	root, err := os.OpenRoot(FDPath(f))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return root, nil
}

// OpenRegularBeneath opens p (below base) with flags when it is a
// regular file with one link: its O_PATH descriptor (OpenBeneath, no
// symlink followed) is checked, then opened again through its /proc
// link, which names that very inode, without blocking (a FIFO is refused
// before it is opened). A file with another link could be anywhere.
func OpenRegularBeneath(base, p string, flags int) (*os.File, error) {
	f, err := OpenBeneath(base, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || st.Nlink != 1 {
		return nil, fmt.Errorf("%s is not a regular file with one name", filepath.Base(p))
	}
	return os.OpenFile(FDPath(f), flags|unix.O_NONBLOCK, 0)
}

// WriteAtomic writes b to path through a temporary file in the same
// directory, mode 0600: a reader sees the old file or the new one, never
// a part.
func WriteAtomic(path string, b []byte) error { return writeAtomic(path, b, false) }

// WriteDurable is WriteAtomic that also syncs the file and its
// directory before it returns: a machine that dies right after keeps
// the new file, never an empty one.
func WriteDurable(path string, b []byte) error { return writeAtomic(path, b, true) }

func writeAtomic(path string, b []byte, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	if durable {
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}
