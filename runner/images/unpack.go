package images

// The layer unpacker. Every layer is treated as hostile: a registry, a
// compromised build, or an agent's pull request naming an image can put
// anything in a tar. Each group of rules below names the published
// escapes of other unpackers that motivated it:
//
//   - Docker's `docker cp` (CVE-2018-15664) resolved a path with string
//     operations and then used it: a symlink swapped in between led
//     outside. Here no path is resolved by hand: every file system
//     operation goes through an os.Root of dst, which walks one
//     component at a time with openat(O_NOFOLLOW) and refuses any symlink
//     that is absolute or climbs out of dst, including symlinks that an
//     earlier entry or layer planted.
//   - containerd (CVE-2021-32760) applied an entry's mode with a chmod
//     that followed a symlink to a host file. Here modes and owners are
//     set on the descriptor that created the file (fchmod, fchown), or
//     with Root.Lchown, which never follows.
//   - umoci (CVE-2021-29136) let an entry for "/" become a symlink and
//     then applied the following entries to its host target. Here the
//     root of the image can only ever be a directory, and whiteouts of
//     "." and ".." are refused.

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

// LayerStream is one layer of an image, in the order of the image
// config's rootfs.diff_ids.
type LayerStream struct {
	// DiffID is the layer's entry in the image config's rootfs.diff_ids:
	// "sha256:" and 64 lowercase hex digits, the digest of the
	// uncompressed tar.
	DiffID string
	// Open returns the uncompressed tar. Unpack calls it once and closes
	// what it returns.
	Open func() (io.ReadCloser, error)
}

// Budget bounds what one Unpack may write. Both fields must be positive.
type Budget struct {
	// Bytes bounds the file contents written, over all layers, counted as
	// they are written (a sparse file counts its full size, since it is
	// written out in full), plus any bytes a layer carries after its tar's
	// end.
	Bytes int64
	// Entries bounds the tar entries read, over all layers (an inode
	// bomb: a million empty files is a small tar).
	Entries int64
}

// Stats counts what Unpack did.
type Stats struct {
	// Files, Dirs, Symlinks and HardLinks count the entries applied
	// (a directory that several layers name counts once per layer).
	Files, Dirs, Symlinks, HardLinks int64
	// Whiteouts counts whiteout files (.wh.NAME) and opaque markers
	// (.wh..wh..opq) applied.
	Whiteouts int64
	// Skipped counts entries read but deliberately not created: device
	// nodes (character, block), FIFOs, and aufs metadata (.wh..wh.*
	// other than the opaque marker). Unpack never calls mknod: a device
	// node in an image's /dev has no use inside the sandbox, which gets
	// its own /dev.
	Skipped int64
	// Bytes is the file content written.
	Bytes int64
}

// ErrHostileLayer marks a layer that Unpack refused: an entry that would
// leave dst, an entry type it does not create, a malformed tar, or a
// content that does not match the image config's diff id. The error that
// wraps it names the layer and the entry.
var ErrHostileLayer = errors.New("image layer refused")

// ErrTooLarge marks an image that would exceed the Budget.
var ErrTooLarge = errors.New("image larger than the cache allows")

// Limits of Linux's file system interface: a name longer than these would
// fail anyway, later and less clearly.
const (
	pathMax = 4096 // PATH_MAX, bytes of a whole name
	nameMax = 255  // NAME_MAX, bytes of one component
)

// The whiteout names of the OCI image spec (layer.md), from aufs.
const (
	whiteoutPrefix     = ".wh."
	whiteoutMetaPrefix = ".wh..wh."
	whiteoutOpaque     = ".wh..wh..opq"
)

// Unpack applies layers, in order, to dst, an empty directory that the
// caller made (mode 0755) and that nothing else writes while Unpack runs.
// The result is the image's root file system, as an overlay of the layers
// would show it: a later layer's entry replaces what an earlier one put at
// its path, whiteouts remove, opaque markers hide a directory's lower
// content.
//
// Each layer is an uncompressed tar stream whose sha256 must equal DiffID
// (the image config's rootfs.diff_ids entry). The digest is computed while
// the layer is applied, over every byte of the stream up to its end, so a
// mismatch is known only once the layer is on disk.
//
// On any error the caller must remove dst entirely: what it holds then is
// partial, and may be a layer that failed its digest. Unpack does not
// remove it itself, because dst is the caller's.
//
// Nothing is ever written, changed or removed outside dst: all file
// system operations go through an os.Root of dst, and so do those through
// symlinks that the image itself contains. Symlinks are created with any
// target (images hold absolute ones such as /usr/bin/python ->
// /usr/bin/python3.11) but never followed out of dst while unpacking: a
// later entry whose path goes through a symlink that is absolute or climbs
// out of dst is refused. Names are cleaned; a leading "/" or "./" is
// dropped (as Docker and containerd do); a ".." that would climb above
// the root is refused. Owners are set from the tar when Unpack runs as
// root; modes keep setuid, setgid and sticky bits; modification times are
// set where the tar has them, best effort. Device nodes and FIFOs are
// skipped and counted. Extended attributes (file capabilities, SELinux
// labels) are not applied.
//
// budget bounds the bytes written in all (file contents) and the number of
// entries; exceeding it fails with ErrTooLarge, before the entry that would
// exceed it is written. A refused layer fails with ErrHostileLayer, wrapped
// with the layer's number and the entry's name and what is wrong with it.
func Unpack(dst string, layers []LayerStream, budget Budget) (Stats, error) {
	return unpack(dst, layers, budget, 0, len(layers), true)
}

// applyLayer applies layer (number n of total, from 1) to dst, a root
// that Unpack or an earlier applyLayer made: the cache builds an image's
// root on a copy of its base's whose files are hard links to the base's
// (Store.snapshot). That is safe because the unpacker never writes into a
// file that is there: an entry's file is always a new one (O_EXCL, after
// makeRoom removed what was at its path), a hard link entry only adds a
// name, and only directories (which the copy made anew) have their mode,
// owner and times set.
func applyLayer(dst string, layer LayerStream, budget Budget, n, total int) (Stats, error) {
	return unpack(dst, []LayerStream{layer}, budget, n-1, total, false)
}

// unpack applies layers, numbered from skip+1 of total, to dst, which
// must be empty when empty says so.
func unpack(dst string, layers []LayerStream, budget Budget, skip, total int, empty bool) (Stats, error) {
	if budget.Bytes <= 0 || budget.Entries <= 0 {
		return Stats{}, fmt.Errorf("unpack into %s: the budget (%d bytes, %d entries) must be positive in both", dst, budget.Bytes, budget.Entries)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return Stats{}, fmt.Errorf("unpack: %w", err)
	}
	defer root.Close()
	if empty {
		if err := checkEmpty(root); err != nil {
			return Stats{}, fmt.Errorf("unpack into %s: %w: Unpack needs a new empty directory", dst, err)
		}
	}
	u := &unpacker{root: root, budget: budget, chown: os.Geteuid() == 0, layers: total}
	for i, l := range layers {
		u.layer = skip + i + 1
		if err := u.apply(l); err != nil {
			return u.stats, err
		}
	}
	return u.stats, nil
}

// checkEmpty fails unless root holds nothing: a whiteout would otherwise
// remove what the caller had put there.
func checkEmpty(root *os.Root) error {
	f, err := root.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("it is not empty (it holds %q)", names[0])
	}
	if err != nil && err != io.EOF {
		return err
	}
	return nil
}

// unpacker is the state of one Unpack.
type unpacker struct {
	root   *os.Root
	budget Budget
	chown  bool // running as root: set owners from the tar
	layers int  // how many layers in all
	layer  int  // the layer being applied, from 1
	stats  Stats
	spent  int64 // bytes counted against budget.Bytes
	read   int64 // entries counted against budget.Entries
	// Of the layer being applied: every path it created or changed, for
	// opaque markers (see opaque), and the directories whose times to set
	// once the layer is done.
	touched  map[string]uint8
	dirTimes []dirTime
	// Directories this layer made or found, so that an entry's parent is
	// not made again for each of its files. Only a shortcut: every
	// operation still resolves its whole path through the root. Dropped
	// whenever anything is removed.
	dirs map[string]bool
}

// Bits of unpacker.touched.
const (
	touchedEntry = 1 << iota // the path is an entry of this layer
	touchedBelow             // an entry of this layer lies below the path
)

type dirTime struct {
	name         string
	atime, mtime time.Time
}

// apply applies one layer and checks its digest.
func (u *unpacker) apply(l LayerStream) error {
	want, ok := strings.CutPrefix(l.DiffID, "sha256:")
	if !ok || len(want) != sha256.Size*2 || strings.Trim(want, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: layer %d of %d: its diff id %q is not \"sha256:\" and 64 lowercase hex digits", ErrHostileLayer, u.layer, u.layers, l.DiffID)
	}
	if l.Open == nil {
		return fmt.Errorf("unpack layer %d of %d (%s): no Open function", u.layer, u.layers, l.DiffID)
	}
	rc, err := l.Open()
	if err != nil {
		return fmt.Errorf("unpack layer %d of %d (%s): %w", u.layer, u.layers, l.DiffID, err)
	}
	defer rc.Close()

	h := sha256.New()
	stream := io.TeeReader(rc, h)
	tr := tar.NewReader(stream)
	u.touched = map[string]uint8{}
	u.dirTimes = nil
	u.dirs = map[string]bool{}
	last := "" // the last entry read, to say where a broken tar broke
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			where := "at its start"
			if last != "" {
				where = "after entry " + quoteName(last)
			}
			return fmt.Errorf("%w: layer %d of %d: not a valid tar %s: %w", ErrHostileLayer, u.layer, u.layers, where, err)
		}
		last = hdr.Name
		u.read++
		if u.read > u.budget.Entries {
			return fmt.Errorf("%w: layer %d of %d, entry %s: the image has more than %d entries, the cache's limit: choose a smaller image", ErrTooLarge, u.layer, u.layers, quoteName(hdr.Name), u.budget.Entries)
		}
		if err := u.entry(tr, hdr); err != nil {
			return err
		}
	}
	// The digest covers the whole stream: the tar's end-of-archive blocks
	// and whatever follows them (some builders pad). Read it all, within
	// the budget, since it is read but not written.
	rest := u.budget.Bytes - u.spent
	n, err := io.Copy(io.Discard, io.LimitReader(stream, rest+1))
	if err != nil {
		return fmt.Errorf("unpack layer %d of %d: reading after the tar's end: %w", u.layer, u.layers, err)
	}
	if n > rest {
		return fmt.Errorf("%w: layer %d of %d: more than %d bytes follow the tar's end: choose a smaller image", ErrTooLarge, u.layer, u.layers, rest)
	}
	u.spent += n
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: layer %d: its content is sha256:%s, the image's config says sha256:%s: the registry or the cache served other bytes than the image names; pull again, and if it persists the image is corrupt or tampered with", ErrHostileLayer, u.layer, got, want)
	}
	// Directory times last: entries written into a directory change its
	// modification time. Best effort, as for files.
	for _, d := range u.dirTimes {
		if fi, err := u.root.Lstat(d.name); err == nil && fi.IsDir() {
			_ = u.root.Chtimes(d.name, d.atime, d.mtime)
		}
	}
	return nil
}

// entry applies one tar entry.
func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // records for the whole archive (a comment, a charset): nothing to apply
	}
	name, why := cleanName(hdr.Name)
	if why != "" {
		return u.refuse(hdr, "its name %s", why)
	}
	if hdr.Uid < 0 || hdr.Uid > 1<<32-2 || hdr.Gid < 0 || hdr.Gid > 1<<32-2 {
		return u.refuse(hdr, "its owner %d:%d is not a Linux user and group id", hdr.Uid, hdr.Gid)
	}
	base := path.Base(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(hdr, name)
	}
	// The root of the image is a directory, always: an entry that would
	// make it anything else is how umoci's CVE-2021-29136 reached the host.
	if name == "." && hdr.Typeflag != tar.TypeDir {
		return u.refuse(hdr, "it would replace the image's root directory with a %s", typeName(hdr.Typeflag))
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse: // archive/tar reads the old '\x00' as TypeReg
		return u.file(tr, hdr, name)
	case tar.TypeDir:
		return u.dir(hdr, name)
	case tar.TypeSymlink:
		return u.symlink(hdr, name)
	case tar.TypeLink:
		return u.hardlink(hdr, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		// Never mknod. What a lower layer had at the path goes, as the
		// node would hide it.
		if err := u.parent(hdr, name); err != nil {
			return err
		}
		if _, err := u.makeRoom(hdr, name, false); err != nil {
			return err
		}
		u.stats.Skipped++
		return nil
	default:
		return u.refuse(hdr, "its type %s is not one airlock unpacks (regular file, directory, symlink, hard link; devices and FIFOs are skipped)", typeName(hdr.Typeflag))
	}
}

// cleanName makes an entry's name relative to the image's root and clean,
// or says why it cannot. This is for clear errors: confinement is os.Root's.
func cleanName(raw string) (name, why string) {
	if raw == "" {
		return "", "is empty"
	}
	if strings.IndexByte(raw, 0) >= 0 {
		return "", "contains a NUL byte"
	}
	if len(raw) > pathMax {
		return "", fmt.Sprintf("is %d bytes long, longer than Linux's PATH_MAX (%d)", len(raw), pathMax)
	}
	// A leading "/" or "./" is relative to the image's root, as Docker and
	// containerd read it.
	rel := strings.TrimLeft(raw, "/")
	depth := 0
	for c := range strings.SplitSeq(rel, "/") {
		switch c {
		case "", ".":
		case "..":
			if depth == 0 {
				return "", `climbs out of the image's root with ".."`
			}
			depth--
		default:
			if len(c) > nameMax {
				return "", fmt.Sprintf("has a component %d bytes long, longer than Linux's NAME_MAX (%d)", len(c), nameMax)
			}
			depth++
		}
	}
	if rel == "" {
		return ".", ""
	}
	return path.Clean(rel), ""
}

// parent makes sure the directory holding name exists, making missing
// ones (mode 0755, as Docker does) through the root.
func (u *unpacker) parent(hdr *tar.Header, name string) error {
	dir := path.Dir(name)
	if dir == "." || u.dirs[dir] {
		return nil
	}
	if err := u.root.MkdirAll(dir, 0o755); err != nil {
		return u.fsError(hdr, "making its directory", err)
	}
	u.dirs[dir] = true
	return nil
}

// makeRoom removes what is at name so that a new entry can take its place.
// A directory is kept when keepDir (a directory entry over a directory
// keeps the lower layers' content); it says whether it did.
func (u *unpacker) makeRoom(hdr *tar.Header, name string, keepDir bool) (kept bool, err error) {
	fi, err := u.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, u.fsError(hdr, "looking at what is at its path", err)
	}
	switch {
	case fi.IsDir() && keepDir:
		return true, nil
	case fi.IsDir():
		clear(u.dirs)
		err = u.root.RemoveAll(name)
	default:
		clear(u.dirs) // it may have been a symlink a parent went through
		err = u.root.Remove(name)
	}
	if err != nil {
		return false, u.fsError(hdr, "removing what a lower layer put at its path", err)
	}
	return false, nil
}

// file writes a regular file, within the budget.
func (u *unpacker) file(tr *tar.Reader, hdr *tar.Header, name string) error {
	// A sparse entry's Size is its expanded size: a terabyte of holes in
	// a few bytes of tar. Refuse before writing anything.
	if rest := u.budget.Bytes - u.spent; hdr.Size > rest {
		return u.tooLarge(hdr, rest)
	}
	if err := u.parent(hdr, name); err != nil {
		return err
	}
	if _, err := u.makeRoom(hdr, name, false); err != nil {
		return err
	}
	// O_EXCL: never open what is there (makeRoom removed it), so never
	// through a symlink, and never into another hard link's inode.
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return u.fsError(hdr, "creating it", err)
	}
	n, err := io.Copy(&budgetWriter{f: f, u: u}, tr)
	u.stats.Bytes += n
	if err != nil {
		f.Close()
		var tl tooLargeError
		switch {
		case errors.As(err, &tl):
			return u.tooLarge(hdr, tl.rest)
		case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, tar.ErrHeader):
			return fmt.Errorf("%w: layer %d of %d, entry %s: its data ends before its size (%d bytes): %w", ErrHostileLayer, u.layer, u.layers, quoteName(hdr.Name), hdr.Size, err)
		}
		return u.fsError(hdr, "writing it", err)
	}
	err = u.meta(hdr, f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = u.fsError(hdr, "writing it", cerr)
	}
	if err != nil {
		return err
	}
	_ = u.root.Chtimes(name, atime(hdr), hdr.ModTime) // best effort
	u.touch(name)
	u.stats.Files++
	return nil
}

// budgetWriter counts file content against the budget as it is written.
type budgetWriter struct {
	f *os.File
	u *unpacker
}

type tooLargeError struct{ rest int64 }

func (e tooLargeError) Error() string { return fmt.Sprintf("more than %d bytes", e.rest) }

func (w *budgetWriter) Write(p []byte) (int, error) {
	rest := w.u.budget.Bytes - w.u.spent
	if int64(len(p)) > rest {
		return 0, tooLargeError{rest}
	}
	n, err := w.f.Write(p)
	w.u.spent += int64(n)
	return n, err
}

// dir makes a directory, or keeps one that is there (with its content)
// and applies the entry's owner and mode to it.
func (u *unpacker) dir(hdr *tar.Header, name string) error {
	if name == "." {
		u.stats.Dirs++
		// dst itself: the caller made it; its mode and owner stay.
		u.touch(name)
		return nil
	}
	if err := u.parent(hdr, name); err != nil {
		return err
	}
	kept, err := u.makeRoom(hdr, name, true)
	if err != nil {
		return err
	}
	if !kept {
		if err := u.root.Mkdir(name, 0o700); err != nil {
			return u.fsError(hdr, "making it", err)
		}
	}
	u.dirs[name] = true
	f, err := u.root.OpenFile(name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return u.fsError(hdr, "opening it", err)
	}
	err = u.meta(hdr, f)
	f.Close()
	if err != nil {
		return err
	}
	u.dirTimes = append(u.dirTimes, dirTime{name, atime(hdr), hdr.ModTime})
	u.touch(name)
	u.stats.Dirs++
	return nil
}

// meta sets owner and mode on an open file or directory: by descriptor,
// so on what Unpack made and nothing a path could lead to
// (CVE-2021-32760). Owner first: chown clears setuid and setgid.
func (u *unpacker) meta(hdr *tar.Header, f *os.File) error {
	if u.chown {
		if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
			return u.fsError(hdr, "setting its owner", err)
		}
	}
	if err := f.Chmod(fileMode(hdr.Mode)); err != nil {
		return u.fsError(hdr, "setting its mode", err)
	}
	return nil
}

// fileMode converts a tar mode's permission, setuid, setgid and sticky
// bits; images need them (sudo, su, /tmp).
func fileMode(m int64) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func atime(hdr *tar.Header) time.Time {
	if hdr.AccessTime.IsZero() {
		return hdr.ModTime
	}
	return hdr.AccessTime
}

// symlink makes a symlink. Its target is text, written as the image has
// it and never resolved here; os.Root refuses to follow it later if it
// is absolute or climbs out of dst.
func (u *unpacker) symlink(hdr *tar.Header, name string) error {
	switch {
	case hdr.Linkname == "":
		return u.refuse(hdr, "it is a symlink with an empty target")
	case strings.IndexByte(hdr.Linkname, 0) >= 0:
		return u.refuse(hdr, "its symlink target contains a NUL byte")
	case len(hdr.Linkname) > pathMax:
		return u.refuse(hdr, "its symlink target is %d bytes long, longer than Linux's PATH_MAX (%d)", len(hdr.Linkname), pathMax)
	}
	if err := u.parent(hdr, name); err != nil {
		return err
	}
	if _, err := u.makeRoom(hdr, name, false); err != nil {
		return err
	}
	if err := u.root.Symlink(hdr.Linkname, name); err != nil {
		return u.fsError(hdr, "making the symlink", err)
	}
	if u.chown {
		if err := u.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return u.fsError(hdr, "setting its owner", err)
		}
	}
	// No times: Root.Chtimes would follow the link. No mode: Linux has none.
	u.touch(name)
	u.stats.Symlinks++
	return nil
}

// hardlink links name to an entry already in dst. Root.Link resolves both
// names inside dst and links a symlink itself, never its target, so a hard
// link can neither reach a host file nor turn a symlink into one.
func (u *unpacker) hardlink(hdr *tar.Header, name string) error {
	target, why := cleanName(hdr.Linkname)
	if why != "" {
		return u.refuse(hdr, "its hard link target %s %s", quoteName(hdr.Linkname), why)
	}
	if target == name {
		return u.refuse(hdr, "it is a hard link to itself")
	}
	fi, err := u.root.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) {
		return u.refuse(hdr, "its hard link target %s is not in the image (a hard link must name an entry of this layer or a lower one)", quoteName(hdr.Linkname))
	}
	if err != nil {
		return u.fsError(hdr, "looking up its hard link target "+quoteName(hdr.Linkname), err)
	}
	if fi.IsDir() {
		return u.refuse(hdr, "its hard link target %s is a directory", quoteName(hdr.Linkname))
	}
	if err := u.parent(hdr, name); err != nil {
		return err
	}
	if _, err := u.makeRoom(hdr, name, false); err != nil {
		return err
	}
	if err := u.root.Link(target, name); err != nil {
		return u.fsError(hdr, "linking it to "+quoteName(hdr.Linkname), err)
	}
	u.touch(name)
	u.stats.HardLinks++
	return nil
}

// whiteout applies a whiteout entry: .wh.NAME removes NAME, and
// .wh..wh..opq makes its directory opaque. Both act in the entry's own
// directory, through the root.
func (u *unpacker) whiteout(hdr *tar.Header, name string) error {
	dir, base := path.Dir(name), path.Base(name)
	if base == whiteoutOpaque {
		if err := u.opaque(hdr, dir); err != nil {
			return err
		}
		u.stats.Whiteouts++
		return nil
	}
	if strings.HasPrefix(base, whiteoutMetaPrefix) {
		u.stats.Skipped++ // aufs's own metadata (.wh..wh.plnk, ...): Docker and containerd skip it too
		return nil
	}
	victim := strings.TrimPrefix(base, whiteoutPrefix)
	if victim == "" || victim == "." || victim == ".." {
		return u.refuse(hdr, "it is a whiteout of %q, which names no entry", victim)
	}
	clear(u.dirs)
	if err := u.root.RemoveAll(path.Join(dir, victim)); err != nil {
		return u.fsError(hdr, "removing "+quoteName(path.Join(dir, victim)), err)
	}
	u.stats.Whiteouts++
	return nil
}

// opaque removes from dir everything that lower layers put there, and
// keeps what this layer has written so far: the marker may come after
// the layer's own entries in the same directory. What the layer writes
// after the marker is its own and stays too. Iterative, so a deep tree
// cannot exhaust the stack.
func (u *unpacker) opaque(hdr *tar.Header, dir string) error {
	fi, err := u.root.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing below to hide
	}
	if err != nil {
		return u.fsError(hdr, "looking at its directory", err)
	}
	if !fi.IsDir() {
		return u.refuse(hdr, "it is an opaque marker in %s, which is a %s, not a directory", quoteName(dir), fileKind(fi.Mode()))
	}
	clear(u.dirs)
	stack := []string{dir}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		f, err := u.root.OpenFile(d, os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			return u.fsError(hdr, "reading "+quoteName(d), err)
		}
		entries, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return u.fsError(hdr, "reading "+quoteName(d), err)
		}
		for _, e := range entries {
			p := path.Join(d, e.Name())
			t := u.touched[p]
			switch {
			case t != 0 && e.IsDir():
				stack = append(stack, p) // this layer's: look for lower content inside
			case t&touchedEntry != 0:
				// this layer's file, symlink or hard link: keep
			default:
				if err := u.root.RemoveAll(p); err != nil {
					return u.fsError(hdr, "removing "+quoteName(p), err)
				}
			}
		}
	}
	return nil
}

// touch records that this layer wrote name, for opaque.
func (u *unpacker) touch(name string) {
	u.touched[name] |= touchedEntry
	for p := path.Dir(name); p != "." && u.touched[p]&touchedBelow == 0; p = path.Dir(p) {
		u.touched[p] |= touchedBelow
	}
}

// refuse is an ErrHostileLayer for hdr.
func (u *unpacker) refuse(hdr *tar.Header, format string, args ...any) error {
	return fmt.Errorf("%w: layer %d of %d, entry %s: %s", ErrHostileLayer, u.layer, u.layers, quoteName(hdr.Name), fmt.Sprintf(format, args...))
}

func (u *unpacker) tooLarge(hdr *tar.Header, rest int64) error {
	return fmt.Errorf("%w: layer %d of %d, entry %s: its %d bytes exceed the %d bytes left of the cache's %d: choose a smaller image or raise the image cache's size", ErrTooLarge, u.layer, u.layers, quoteName(hdr.Name), hdr.Size, rest, u.budget.Bytes)
}

// fsError classifies a failed file system operation on hdr's behalf. A
// path that os.Root would not follow, and anything else the layer's
// content provoked, refuses the layer; the host's own failures (a full
// disk) do not blame it.
func (u *unpacker) fsError(hdr *tar.Header, doing string, err error) error {
	switch {
	case isEscape(err):
		return fmt.Errorf("%w: layer %d of %d, entry %s: %s: its path leaves the image's root, through \"..\" or a symlink that is absolute or climbs out; airlock does not follow those while unpacking: %w", ErrHostileLayer, u.layer, u.layers, quoteName(hdr.Name), doing, err)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: layer %d of %d, entry %s: %s: too many symlinks on its path: %w", ErrHostileLayer, u.layer, u.layers, quoteName(hdr.Name), doing, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EIO),
		errors.Is(err, syscall.EROFS), errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.EMFILE),
		errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("unpack layer %d of %d, entry %s: %s: %w", u.layer, u.layers, quoteName(hdr.Name), doing, err)
	}
	return fmt.Errorf("%w: layer %d of %d, entry %s: %s: %w", ErrHostileLayer, u.layer, u.layers, quoteName(hdr.Name), doing, err)
}

// isEscape reports os.Root's refusal of a path that leaves it. The error
// is unexported in package os; its text is stable and documented by the
// tests.
func isEscape(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}

// quoteName quotes an entry name for an error: escaped (a name may hold
// control characters) and shortened if very long.
func quoteName(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%q (%d bytes)", s[:120]+"…"+s[len(s)-60:], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func typeName(t byte) string {
	switch t {
	case tar.TypeReg:
		return "regular file"
	case tar.TypeDir:
		return "directory"
	case tar.TypeSymlink:
		return "symlink"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "FIFO"
	}
	return fmt.Sprintf("%q", t)
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "regular file"
	}
	return m.Type().String()
}
