package quota

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Merged says what Merge did.
type Merged struct {
	// Files and Bytes count the regular files written into the
	// workspace and their data (holes not counted).
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Removed counts what the job deleted that was in the workspace.
	Removed int `json:"removed"`
	// SetIDCleared lists files and directories whose set-uid or set-gid
	// bit was not carried over; Devices, the device nodes that were not,
	// and Skipped, the sockets.
	SetIDCleared []string `json:"setIdCleared,omitempty"`
	Devices      []string `json:"devices,omitempty"`
	Skipped      []string `json:"skipped,omitempty"`
}

// maxDepth bounds how deep Merge goes: each level holds two descriptors.
const maxDepth = 4096

// Merge applies an overlay's upper layer (upper) to its lower directory
// (lower), as the overlay showed them together: whiteouts remove, opaque
// directories replace, everything else is written over. It runs after
// the job, which wrote upper, is gone; lower is the host's. Nothing is
// followed: every name is opened relative to its parent's descriptor
// with O_NOFOLLOW, so a symlink that the job left cannot send a write
// out of the workspace, and one in the workspace is replaced, not
// written through. Sparse files stay sparse (a file that is mostly a
// hole would otherwise grow the host's disk past the limit) and hard
// links stay links, for the same reason. Each file leaves upper once it
// is written into lower (and Release trims upper's filesystem every
// 256 MiB), so that the two hold little more than upper did. Set-id bits are dropped, device
// nodes and sockets skipped (runner/workspace's Tidy would clear and
// remove them; here they never reach the host), though what the
// workspace had at their names goes, as the overlay hid it from the job.
// Errors on one entry do not stop the rest.
func Merge(upper, lower string) (Merged, error) {
	return merge(upper, lower, strconv.Itoa(os.Getpid()), false, func() {})
}

// tmpPrefix starts the temporary names a merge makes in the workspace;
// a tag of the merge's own follows (see merge).
const tmpPrefix = ".airlock-merge-"

// trimEvery is how much Merge copies between calls of its trim function.
const trimEvery = 256 << 20

// merge is Merge that calls trim after each trimEvery bytes copied, so
// that what left upper leaves its disk too.
//
// Its temporary names start with tmpPrefix and tag. resume says that a
// merge of the same upper into lower, with the same tag, was begun
// before and killed: the temporary names it left in the workspace (its
// tag's, and no other file's) are removed.
// Every step of a merge can be done again (a file leaves upper once it
// is in lower; a whiteout removes what is already gone; an opaque mark
// is taken off once its directory is replaced), so a resumed merge ends
// with what an uninterrupted one would have written.
func merge(upper, lower, tag string, resume bool, trim func()) (Merged, error) {
	m := &merger{links: map[inode]string{}, trim: trim, resume: resume, tmpNames: tmpPrefix + tag + "-"}
	u, err := openDir(unix.AT_FDCWD, upper)
	if err != nil {
		return Merged{}, err
	}
	defer unix.Close(u)
	l, err := openDir(unix.AT_FDCWD, lower)
	if err != nil {
		return Merged{}, err
	}
	defer unix.Close(l)
	m.root = l
	m.dir(u, l, "", 0)
	return m.out, errors.Join(m.errs...)
}

type inode struct{ dev, ino uint64 }

type merger struct {
	root  int
	out   Merged
	errs  []error
	links map[inode]string // upper hard links already written, by where
	tmp   int              // temporary names made so far
	trim  func()
	// resume: a killed merge is being finished (see merge).
	resume bool
	// tmpNames starts the merge's temporary names.
	tmpNames string
	// untrimmed counts the bytes copied since trim was last called.
	untrimmed int64
	// byHand: copy_file_range was refused; buf is the copy's buffer.
	byHand bool
	buf    []byte
}

func (m *merger) fail(rel string, err error) {
	if len(m.errs) < 100 {
		m.errs = append(m.errs, fmt.Errorf("%s: %w", rel, err))
	}
}

// dir merges the upper directory u into the lower directory l (rel is
// their path from the roots), then gives l u's owner, mode and times.
func (m *merger) dir(u, l int, rel string, depth int) {
	if depth > maxDepth {
		m.fail(rel, fmt.Errorf("deeper than %d directories: not merged", maxDepth))
		return
	}
	if m.resume {
		m.removeTemporaries(l, rel)
	}
	names, err := readNames(u)
	if err != nil {
		m.fail(rel, err)
		return
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(u, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			m.fail(path.Join(rel, name), err)
			continue
		}
		if err := m.entry(u, l, name, path.Join(rel, name), &st, depth); err != nil {
			m.fail(path.Join(rel, name), err)
		}
	}
}

// removeTemporaries removes what a merge that was killed left under a
// temporary name in the workspace directory l (replace makes each entry
// under one, then renames it): only a directory that upper still holds
// can have one, and a resumed merge visits each of those.
func (m *merger) removeTemporaries(l int, rel string) {
	names, err := readNames(l)
	if err != nil {
		m.fail(rel, err)
		return
	}
	for _, name := range names {
		if strings.HasPrefix(name, m.tmpNames) {
			if err := removeAllAt(l, name); err != nil {
				m.fail(path.Join(rel, name), err)
			}
		}
	}
}

// entry merges one name of u into l.
func (m *merger) entry(u, l int, name, rel string, st *unix.Stat_t, depth int) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev == 0 { // a whiteout: the job removed it
			var was unix.Stat_t
			existed := unix.Fstatat(l, name, &was, unix.AT_SYMLINK_NOFOLLOW) == nil
			if err := removeAllAt(l, name); err != nil {
				return err
			}
			if existed {
				m.out.Removed++
			}
			return nil
		}
		return m.hide(l, name, rel, &m.out.Devices)
	case unix.S_IFDIR:
		return m.subdir(u, l, name, rel, st, depth)
	case unix.S_IFREG:
		return m.file(u, l, name, rel, st)
	case unix.S_IFLNK:
		return m.symlink(u, l, name, st)
	case unix.S_IFIFO:
		return m.replace(l, name, st, func(tmp string) error { return unix.Mkfifoat(l, tmp, st.Mode&0o777) })
	case unix.S_IFBLK:
		return m.hide(l, name, rel, &m.out.Devices)
	}
	return m.hide(l, name, rel, &m.out.Skipped)
}

// hide handles a device node or a socket, which is not made: what lower
// had at its name goes all the same, since the overlay showed the job
// the node in its place (as the image unpacker does with a layer's).
func (m *merger) hide(l int, name, rel string, report *[]string) error {
	if err := removeAllAt(l, name); err != nil {
		return err
	}
	*report = append(*report, rel)
	return nil
}

// subdir merges a directory: an opaque one (the job removed the lower
// one and made a new one) replaces what was there, as does one over a
// lower non-directory.
func (m *merger) subdir(u, l int, name, rel string, st *unix.Stat_t, depth int) error {
	ud, err := openDir(u, name)
	if err != nil {
		return err
	}
	defer unix.Close(ud)
	var lst unix.Stat_t
	lerr := unix.Fstatat(l, name, &lst, unix.AT_SYMLINK_NOFOLLOW)
	isOpaque := opaque(ud)
	if lerr == nil && (isOpaque || lst.Mode&unix.S_IFMT != unix.S_IFDIR) {
		if err := removeAllAt(l, name); err != nil {
			return err
		}
		lerr = unix.ENOENT
	}
	if errors.Is(lerr, unix.ENOENT) {
		if err := unix.Mkdirat(l, name, 0o700); err != nil {
			return err
		}
	} else if lerr != nil {
		return lerr
	}
	// The lower directory is replaced: the mark has done its work. Taken
	// off before any child moves over, so that a merge resumed after a
	// kill (Abandon) does not empty the directory again of the children
	// that had already left upper for it.
	if isOpaque {
		if err := unix.Fremovexattr(ud, opaqueXattr); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("clear the opaque mark: %w", err)
		}
	}
	ld, err := openDir(l, name)
	if err != nil {
		return err
	}
	defer unix.Close(ld)
	m.dir(ud, ld, rel, depth+1)
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		m.out.SetIDCleared = append(m.out.SetIDCleared, rel)
	}
	return m.attrs(ld, "", st, rel)
}

// file writes a regular file (or links it to where its other name went).
func (m *merger) file(u, l int, name, rel string, st *unix.Stat_t) error {
	key := inode{st.Dev, st.Ino}
	// Not st.Nlink > 1: each name leaves upper once merged, so the last
	// name of an inode that had two has a link count of 1 by now.
	if first, ok := m.links[key]; ok {
		err := m.replace(l, name, st, func(tmp string) error {
			parent, err := openBeneath(m.root, path.Dir(first))
			if err != nil {
				return err
			}
			defer unix.Close(parent)
			return unix.Linkat(parent, path.Base(first), l, tmp, 0)
		})
		if err == nil {
			unix.Unlinkat(u, name, 0) // it leaves upper, as the first name did
		}
		return err
	}
	src, err := unix.Openat(u, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	err = m.replace(l, name, st, func(tmp string) error {
		dst, err := unix.Openat(l, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		defer unix.Close(dst)
		n, err := m.copySparse(dst, src, st.Size)
		m.out.Bytes += n
		m.untrimmed += n
		return err
	})
	if err != nil {
		return err
	}
	m.out.Files++
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		m.out.SetIDCleared = append(m.out.SetIDCleared, rel)
	}
	if st.Nlink > 1 {
		m.links[key] = rel
	}
	// Gone from the upper layer once it is in the workspace: with the
	// volume mounted with discard, its blocks leave the image, so the
	// host never holds the job's data twice (but for one file).
	unix.Unlinkat(u, name, 0)
	if m.untrimmed >= trimEvery {
		m.trim()
		m.untrimmed = 0
	}
	return nil
}

func (m *merger) symlink(u, l int, name string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(u, name, buf)
	if err != nil {
		return err
	}
	target := string(buf[:n])
	return m.replace(l, name, st, func(tmp string) error { return unix.Symlinkat(target, l, tmp) })
}

// replace makes the new entry under a temporary name with make, gives it
// st's owner, mode and times, and renames it over name: the workspace
// never shows a half-written file. A directory in the way is removed
// first (rename cannot replace it with a non-directory).
func (m *merger) replace(l int, name string, st *unix.Stat_t, make func(tmp string) error) error {
	m.tmp++
	tmp := fmt.Sprintf("%s%d", m.tmpNames, m.tmp)
	if err := make(tmp); err != nil {
		removeAllAt(l, tmp) // what make wrote before it failed (a full disk)
		return err
	}
	if err := m.attrs(l, tmp, st, name); err != nil {
		unix.Unlinkat(l, tmp, 0)
		return err
	}
	var lst unix.Stat_t
	if unix.Fstatat(l, name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil && lst.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := removeAllAt(l, name); err != nil {
			unix.Unlinkat(l, tmp, 0)
			return err
		}
	}
	if err := unix.Renameat(l, tmp, l, name); err != nil {
		unix.Unlinkat(l, tmp, 0)
		return err
	}
	return nil
}

// attrs gives name in dir (dir itself when name is "") st's owner, mode
// without set-id bits, and times; never through a symlink.
func (m *merger) attrs(dir int, name string, st *unix.Stat_t, rel string) error {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Fchownat(dir, name, int(st.Uid), int(st.Gid), flags); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if !isLink {
		mode := st.Mode & 0o1777 // no set-uid, no set-gid
		var err error
		if name == "" {
			err = unix.Fchmod(dir, mode)
		} else {
			err = unix.Fchmodat(dir, name, mode, 0)
		}
		if err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if name == "" {
		return unix.UtimesNanoAt(dir, "", ts, unix.AT_EMPTY_PATH)
	}
	return unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copySparse copies src's data extents into dst and sizes dst as src:
// the holes stay holes. It returns the bytes of data copied.
func (m *merger) copySparse(dst, src int, size int64) (int64, error) {
	var copied, off int64
	for off < size {
		data, err := unix.Seek(src, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return copied, fmt.Errorf("find data: %w", err)
		}
		hole, err := unix.Seek(src, data, unix.SEEK_HOLE)
		if err != nil {
			return copied, fmt.Errorf("find a hole: %w", err)
		}
		n, err := m.copyRange(dst, src, data, hole-data)
		copied += n
		if err != nil {
			return copied, err
		}
		off = hole
	}
	if err := unix.Ftruncate(dst, size); err != nil {
		return copied, fmt.Errorf("size: %w", err)
	}
	return copied, nil
}

// copyRange copies n bytes at off from src to dst, at the same offset:
// copy_file_range, which the kernel refuses between two filesystems
// (the volume's ext4 and the workspace's); then by hand, through the
// merger's one buffer.
func (m *merger) copyRange(dst, src int, off, n int64) (int64, error) {
	var done int64
	for done < n && !m.byHand {
		soff, doff := off+done, off+done
		k, err := unix.CopyFileRange(src, &soff, dst, &doff, int(min(n-done, 1<<30)), 0)
		switch {
		case errors.Is(err, unix.EXDEV), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
			m.byHand = true
		case err != nil:
			return done, fmt.Errorf("copy: %w", err)
		case k == 0:
			return done, fmt.Errorf("copy: %w", io.ErrUnexpectedEOF)
		default:
			done += int64(k)
		}
	}
	if m.buf == nil && done < n {
		m.buf = make([]byte, 1<<20)
	}
	for done < n {
		k, err := unix.Pread(src, m.buf[:min(n-done, int64(len(m.buf)))], off+done)
		if err != nil {
			return done, fmt.Errorf("read: %w", err)
		}
		if k == 0 {
			return done, fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
		}
		if _, err := unix.Pwrite(dst, m.buf[:k], off+done); err != nil {
			return done, fmt.Errorf("write: %w", err)
		}
		done += int64(k)
	}
	return done, nil
}

// opaqueXattr marks an overlay's upper directory as hiding the lower one.
const opaqueXattr = "trusted.overlay.opaque"

// opaque reports whether the overlay marked the directory as hiding the
// lower one.
func opaque(fd int) bool {
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, opaqueXattr, buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// openBeneath opens the directory rel below root, refusing any symlink
// on the way. One name at a time: the job's tree can be deeper than
// PATH_MAX, which a whole path given to the kernel cannot.
func openBeneath(root int, rel string) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(rel, "/") {
		next, err := unix.Openat2(fd, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open directory %s: %w", rel, err)
		}
		fd = next
	}
	return fd, nil
}

func openDir(dir int, name string) (int, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open directory %s: %w", name, err)
	}
	return fd, nil
}

// readNames lists a directory's entries by descriptor.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// removeAllAt removes name in dir and, if it is a directory, everything
// in it, without following a symlink.
func removeAllAt(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	sub, err := openDir(dir, name)
	if err != nil {
		return err
	}
	names, err := readNames(sub)
	if err == nil {
		for _, n := range names {
			if strings.ContainsRune(n, '/') {
				continue
			}
			if e := removeAllAt(sub, n); e != nil {
				err = e
			}
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}
