package images

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/files"
)

// Snapshots: each prefix of an image's layers has one root in the cache,
// named by its chain id (the OCI image spec's ChainID), so images that
// share a base share its root. The root of layers 1..n is a copy of the
// root of 1..n-1 whose files are hard links to it (directories and
// symlinks are made anew), with layer n applied on top: the unpacker
// never writes into a file that is there (see applyLayer), so the base's
// files are never changed, and the disk holds each file once. A
// snapshot's size file says what its own layer wrote.
//
//	snapshots/<chain hex>/rootfs   the root
//	snapshots/<chain hex>/size     bytes its layer wrote
//
// A job runs on the snapshot of its image's whole chain, read-only (the
// sandbox's writes go to its own overlay), so hard links shared with other
// images are never written through.

// chainIDs are the chain ids of diffIDs: the first layer's diff id, then
// sha256 of the previous chain id, a space and the next diff id.
func chainIDs(diffIDs []v1.Hash) []v1.Hash {
	out := make([]v1.Hash, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			out[i] = d
			continue
		}
		sum := sha256.Sum256([]byte(out[i-1].String() + " " + d.String()))
		out[i] = v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum)}
	}
	return out
}

func (s *Store) snapDir(c v1.Hash) string { return filepath.Join(s.dir, "snapshots", c.Hex) }

// snapshotSize returns what snapshot c's layer wrote, and whether the
// cache holds c whole.
func (s *Store) snapshotSize(c v1.Hash) (int64, bool) {
	fi, err := os.Lstat(filepath.Join(s.snapDir(c), "rootfs"))
	if err != nil || !fi.IsDir() {
		return 0, false
	}
	b, err := files.ReadCapped(filepath.Join(s.snapDir(c), "size"), 64)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// buildSnapshots makes sure the cache holds the snapshot of every prefix
// of the layers (chains are their chain ids), building what it lacks,
// one builder per snapshot at a time. It returns the snapshots' locks,
// held shared, so that no prune removes them before the image that
// builds on them is in roots/: the caller closes them then.
// budget is the image's, shared by its layers: each snapshot built
// spends what its layer wrote and every entry its copy of the base made.
func (s *Store) buildSnapshots(ctx context.Context, chains []v1.Hash, layers []LayerStream, budget *Budget) ([]*os.File, error) {
	var held []*os.File
	for i := range chains {
		lock, err := s.buildSnapshot(ctx, chains, i, layers[i], budget)
		if err != nil {
			for _, l := range held {
				l.Close()
			}
			return nil, err
		}
		held = append(held, lock)
	}
	return held, nil
}

// buildSnapshot builds snapshot i unless the cache holds it, and returns
// its lock, held shared. A snapshot that is there is taken shared
// straight away: a job's lease holds its snapshot shared too, and an
// image whose layers are another's (two services of one layer, say)
// must not wait for that job to end.
func (s *Store) buildSnapshot(ctx context.Context, chains []v1.Hash, i int, layer LayerStream, budget *Budget) (_ *os.File, err error) {
	shared, err := s.lockWait(ctx, "snap", chains[i], unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	if _, ok := s.snapshotSize(chains[i]); ok {
		return shared, nil
	}
	shared.Close()
	lock, err := s.lockWait(ctx, "snap", chains[i], unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			err = unix.Flock(int(lock.Fd()), unix.LOCK_SH)
		}
		if err != nil {
			lock.Close()
		}
	}()
	if _, ok := s.snapshotSize(chains[i]); ok {
		return lock, nil // another pull built it meanwhile
	}
	return lock, s.makeSnapshot(chains, i, layer, budget)
}

// makeSnapshot makes snapshot i: layer 1 into an empty root, or layer i+1
// onto a copy of snapshot i-1 whose files are hard links.
func (s *Store) makeSnapshot(chains []v1.Hash, i int, layer LayerStream, budget *Budget) error {
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "snap-"+chains[i].Hex+"-")
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	rootfs := filepath.Join(tmp, "rootfs")
	var stats Stats
	if i == 0 {
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			return fmt.Errorf("image cache: %w", err)
		}
		stats, err = unpack(rootfs, []LayerStream{layer}, *budget, 0, len(chains), true)
	} else {
		// The base is held (shared) while it is copied: prune leaves it.
		base, lerr := s.lockFile("snap", chains[i-1], unix.LOCK_SH)
		if lerr != nil {
			return lerr
		}
		defer base.Close()
		if _, ok := s.snapshotSize(chains[i-1]); !ok {
			return fmt.Errorf("image cache: the snapshot of layers 1-%d went away while layer %d was added: pull again", i, i+1)
		}
		made, lerr := linkTree(filepath.Join(s.snapDir(chains[i-1]), "rootfs"), rootfs, budget.Entries)
		if lerr != nil {
			return fmt.Errorf("image cache: copy the snapshot of layers 1-%d: %w", i, lerr)
		}
		budget.Entries -= made
		stats, err = applyLayer(rootfs, layer, *budget, i+1, len(chains))
	}
	if err != nil {
		return err
	}
	budget.Bytes -= stats.Bytes
	budget.Entries -= stats.Files + stats.Dirs + stats.Symlinks + stats.HardLinks + stats.Whiteouts + stats.Skipped
	if budget.Bytes < 0 || budget.Entries < 0 {
		return fmt.Errorf("%w: layers 1-%d already hold what the cache allows an image", ErrTooLarge, i+1)
	}
	if err := os.WriteFile(filepath.Join(tmp, "size"), []byte(strconv.FormatInt(stats.Bytes, 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "snapshots"), 0o700); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	if err := os.Rename(tmp, s.snapDir(chains[i])); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	return nil
}

// linkTree makes dst a copy of the tree src whose regular files are hard
// links to src's: directories are made anew (their mode, owner and times
// set once their content is in), symlinks are made anew with the same
// target, and nothing is followed (every name is opened relative to its
// directory's descriptor with O_NOFOLLOW, and every one written is in a
// directory it made itself). Descriptors, not paths: an image's names may
// be as long as PATH_MAX below its root (Unpack allows it), so longer
// than that below the cache's directory. src is a snapshot that nothing
// writes while it is copied. It makes at most max entries (each costs an
// inode or a directory entry: an image of many layers over a large base
// would otherwise multiply them), and returns how many it made.
func linkTree(src, dst string, max int64) (int64, error) {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: src, Err: err}
	}
	made := int64(1)
	if made > max {
		return made, tooManyEntries(max)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return made, err
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return made, &fs.PathError{Op: "open", Path: dst, Err: err}
	}
	defer unix.Close(dfd)
	err = linkDir(sfd, dfd, ".", &st, &made, max)
	return made, err
}

// tooManyEntries is linkTree's refusal past max entries.
func tooManyEntries(max int64) error {
	return fmt.Errorf("%w: copying the layers below this one makes more than %d files and directories", ErrTooLarge, max)
}

// linkDir copies the directory sfd into dfd, which it made (rel is
// their path below the roots, for errors), then gives dfd st's owner,
// mode and times.
func linkDir(sfd, dfd int, rel string, st *unix.Stat_t, made *int64, max int64) error {
	dup, err := unix.Dup(sfd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), rel)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		p := path.Join(rel, name)
		if *made++; *made > max {
			return tooManyEntries(max)
		}
		var cst unix.Stat_t
		if err := unix.Fstatat(sfd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := linkSubdir(sfd, dfd, name, p, &cst, made, max); err != nil {
				return err
			}
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(sfd, name, buf)
			if err != nil {
				return &fs.PathError{Op: "readlink", Path: p, Err: err}
			}
			if err := unix.Symlinkat(string(buf[:n]), dfd, name); err != nil {
				return &fs.PathError{Op: "symlink", Path: p, Err: err}
			}
			if err := unix.Fchownat(dfd, name, int(cst.Uid), int(cst.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil && os.Geteuid() == 0 {
				return &fs.PathError{Op: "lchown", Path: p, Err: err}
			}
		case unix.S_IFREG:
			if err := unix.Linkat(sfd, name, dfd, name, 0); err != nil {
				return &fs.PathError{Op: "link", Path: p, Err: err}
			}
		}
		// Nothing else is in a snapshot: the unpacker makes no devices.
	}
	if os.Geteuid() == 0 {
		if err := unix.Fchown(dfd, int(st.Uid), int(st.Gid)); err != nil {
			return &fs.PathError{Op: "chown", Path: rel, Err: err}
		}
	}
	if err := unix.Fchmod(dfd, st.Mode&0o7777); err != nil {
		return &fs.PathError{Op: "chmod", Path: rel, Err: err}
	}
	unix.UtimesNanoAt(dfd, "", []unix.Timespec{st.Atim, st.Mtim}, unix.AT_EMPTY_PATH)
	return nil
}

// linkSubdir makes the directory name in dfd and copies sfd's into it.
func linkSubdir(sfd, dfd int, name, rel string, st *unix.Stat_t, made *int64, max int64) error {
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		return &fs.PathError{Op: "mkdir", Path: rel, Err: err}
	}
	sub, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(sub)
	dsub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(dsub)
	return linkDir(sub, dsub, rel, st, made, max)
}

// removeUnusedSnapshots removes the snapshots that no image in roots/
// builds on and that no pull is building or copying now, and returns what
// their layers had written.
func (s *Store) removeUnusedSnapshots() int64 {
	used := map[string]bool{}
	list, _ := s.List()
	for _, e := range list {
		for _, c := range e.Chain {
			used[c] = true
		}
	}
	ents, _ := os.ReadDir(filepath.Join(s.dir, "snapshots"))
	freed := int64(0)
	for _, e := range ents {
		if used[e.Name()] {
			continue
		}
		c, err := v1.NewHash("sha256:" + e.Name())
		if err != nil {
			continue
		}
		lock, err := s.lockFile("snap", c, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			continue // being built, or copied from
		}
		size, _ := s.snapshotSize(c)
		gone := filepath.Join(s.dir, "tmp", "gone-snap-"+c.Hex)
		if os.Rename(s.snapDir(c), gone) == nil {
			os.RemoveAll(gone)
			freed += size
		}
		lock.Close()
	}
	return freed
}

// snapshotBytes is what every snapshot's layer wrote: the disk the roots
// use, each file once.
func (s *Store) snapshotBytes() int64 {
	ents, _ := os.ReadDir(filepath.Join(s.dir, "snapshots"))
	n := int64(0)
	for _, e := range ents {
		if c, err := v1.NewHash("sha256:" + e.Name()); err == nil {
			size, _ := s.snapshotSize(c)
			n += size
		}
	}
	return n
}
