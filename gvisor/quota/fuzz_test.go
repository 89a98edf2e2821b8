package quota

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/internal/fuzzinput"
	"golang.org/x/sys/unix"
)

// FuzzMerge builds a hostile upper layer and a workspace (the lower
// layer) from the fuzzer's bytes, read as a small program (see
// mergeProgram), with sentinel directories and files next to the
// workspace and next to its parent, and runs Merge. It asserts:
//
//   - nothing outside the workspace changes: the workspace's parent, its
//     siblings and the parent's siblings keep their names, types, modes,
//     owners, sizes, link counts, inodes, times, contents and symlink
//     targets (the job chooses every symlink target in upper, and the
//     workspace's own symlinks come from a pull request);
//   - the workspace afterwards is exactly the overlay of upper on lower, by
//     a reference model written here: a whiteout (char 0/0) removes, an
//     opaque directory (trusted.overlay.opaque=y) or a directory over a
//     non-directory hides what was below, any other upper entry replaces
//     the lower one, a device node or a socket hides the lower entry but is
//     not made; symlinks are symlinks with the same target (never written
//     through), regular files have upper's content, size, owner, mode
//     without set-id bits, and modification time, names that were one
//     inode in upper are one inode in the workspace, lower entries that
//     upper does not name keep their inode, and no temporary name is left;
//   - sparse files stay sparse (no more blocks than in upper, plus slack);
//   - the report counts what it says: every device node and socket by
//     path, one copied file per upper inode, set-id bits cleared;
//   - Merge promises that each entry is merged or reported; the inputs here
//     are all mergeable, so it must return no error, and every file must
//     have left upper (Merge moves).
func FuzzMerge(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root: whiteouts are device nodes, opaque markers trusted xattrs")
	}
	// The cases of merge_test.go, as programs (see mergeProgram).
	f.Add([]byte{
		opFile<<1 | lower, 0, 0, 3, 'o', 'l', 'd', 0o1, 0o244, // a: old
		opDir<<1 | lower, 0, 3, 0o1, 0o355, // d
		opFile<<1 | upper, 0, 0, 3, 'n', 'e', 'w', 0o1, 0o244, // a: new
		opDir<<1 | upper, 0x81, 5, 0o1, 0o350, // d/ -> sub
		opFile<<1 | upper, 2, 2, 1, 'c', 0o1, 0o240,
		opTime<<1 | upper, 2, 7,
	})
	f.Add([]byte{ // deleted files and trees
		opFile<<1 | lower, 0, 0, 1, 'x', 0o1, 0o244,
		opDir<<1 | lower, 0, 1, 0o1, 0o355,
		opFile<<1 | lower, 1, 2, 1, 'x', 0o1, 0o244,
		opWhiteout<<1 | upper, 0, 0,
		opWhiteout<<1 | upper, 0, 1,
	})
	f.Add([]byte{ // a directory removed and made again (opaque)
		opDir<<1 | lower, 0, 3, 0o1, 0o355,
		opFile<<1 | lower, 1, 0, 1, 'x', 0o1, 0o244,
		opDir<<1 | upper, 0, 3, 0o1, 0o355,
		opOpaque<<1 | upper, 1, 'y',
		opFile<<1 | upper, 1, 1, 1, 'n', 0o1, 0o244,
	})
	f.Add([]byte{ // a file where a directory was, and the other way round
		opDir<<1 | lower, 0, 0, 0o1, 0o355,
		opFile<<1 | lower, 1, 5, 1, 'x', 0o1, 0o244,
		opFile<<1 | lower, 0, 1, 1, 'x', 0o1, 0o244,
		opFile<<1 | upper, 0, 0, 4, 'f', 'i', 'l', 'e', 0o1, 0o244,
		opDir<<1 | upper, 0, 1, 0o1, 0o355,
		opFile<<1 | upper, 1, 4, 1, 'y', 0o1, 0o244,
	})
	f.Add([]byte{ // symlinks out of the workspace, then a lower symlink replaced by a directory
		opDir<<1 | lower, 0, 0, 0o1, 0o355,
		opFile<<1 | lower, 1, 16, 1, 'x', 0o1, 0o244,
		opSymlink<<1 | lower, 0, 1, 0,
		opWhiteout<<1 | upper, 0, 0,
		opSymlink<<1 | upper, 0, 0, 2,
		opSymlink<<1 | upper, 0, 2, 3,
		opDir<<1 | upper, 0, 1, 0o1, 0o355,
		opFile<<1 | upper, 1, 16, 6, 'p', 'w', 'n', 'e', 'd', '!', 0o1, 0o244,
	})
	f.Add([]byte{ // a sparse file
		opSparse<<1 | upper, 0, 0, 255, 3, 'e', 'n', 'd', 200,
		opSparse<<1 | upper, 0, 1, 0, 5, 's', 't', 'a', 'r', 't', 0,
	})
	f.Add([]byte{ // hard links: two names, then three
		opFile<<1 | upper, 0, 0, 4, 'd', 'a', 't', 'a', 0o1, 0o244,
		opLink<<1 | upper, 0, 1, 0,
		opDir<<1 | upper, 0, 3, 0o1, 0o355,
		opFile<<1 | upper, 1, 2, 1, 'z', 0o1, 0o244,
		opLink<<1 | upper, 1, 4, 2,
		opLink<<1 | upper, 0, 5, 2,
	})
	f.Add([]byte{ // set-id bits, device nodes, a socket, a fifo over a lower directory
		opDir<<1 | lower, 0, 2, 0o1, 0o355,
		opFile<<1 | lower, 0, 3, 1, 'x', 0o1, 0o244,
		opFile<<1 | upper, 0, 0, 9, '#', '!', '/', 'b', 'i', 'n', '/', 's', 'h', 0o15, 0o355,
		opDevice<<1 | upper, 0, 1, 0,
		opDevice<<1 | upper, 0, 3, 1,
		opSocket<<1 | upper, 0, 4,
		opFifo<<1 | upper, 0, 2, 0o1, 0o244,
	})
	f.Add([]byte{ // deep trees and odd names
		opDeep<<1 | upper, 0, 63, 9, 10, 11, 12,
		opDeep<<1 | lower, 0, 40, 11, 9,
		opFile<<1 | upper, 40, 0xff, 3, 0xff, '\n', 0xfe, 1, 'x', 0o1, 0o244,
		opOwner<<1 | upper, 5, 3,
	})
	// A hard link between two trees deeper than PATH_MAX: 20 names of
	// 255 bytes each.
	deep := append([]byte{opDeep<<1 | upper, 0, 11, 19}, bytes.Repeat([]byte{11}, 19)...)
	deep = append(append(deep, opDeep<<1|upper, 0, 10, 19), bytes.Repeat([]byte{10}, 19)...)
	f.Add(append(deep, opFile<<1|upper, 20, 0, 1, 'x', 0o1, 0o244, opLink<<1|upper, 40, 1, 0))
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 2048 {
			return
		}
		env := newMergeEnv(t)
		env.run(t, prog)
		before := env.outside(t)
		lowerModel := snapshotTree(t, env.ws, "l")
		upperModel := snapshotTree(t, env.upper, "u")
		want := overlayModel(lowerModel, upperModel)

		m, err := Merge(env.upper, env.ws)

		if after := env.outside(t); !slices.Equal(before, after) {
			t.Errorf("outside the workspace changed:\n%s", lineDiff(before, after))
		}
		got := snapshotTree(t, env.ws, "w")
		if err != nil {
			// What Merge promises when an entry fails: the others are
			// merged, and the failed one is left as the workspace had
			// it, never half written.
			t.Errorf("Merge: %v", err)
			checkPartial(t, "", want, lowerModel, got)
		}
		compareTrees(t, "", want, got, upperModel)
		compareLinks(t, want, got)
		checkReport(t, m, upperModel)
		if err == nil {
			if left := regularFiles(snapshotTree(t, env.upper, "u2"), ""); len(left) > 0 {
				t.Errorf("files still in upper after the merge: %q", left)
			}
		}
	})
}

// Which tree an op builds in.
const (
	lower = 0
	upper = 1
)

// The ops of a merge program: byte op<<1|tree, then the op's arguments.
const (
	opFile     = iota // parent, name, len, data..., mode (2 bytes)
	opSparse          // parent, name, offset/64KiB, len, data..., extra hole/4KiB
	opDir             // parent, name, mode (2 bytes)
	opSymlink         // parent, name, target
	opLink            // parent, name, source (a non-directory of the same tree)
	opWhiteout        // parent, name (in lower: an empty file)
	opOpaque          // dir, value ('y' marks it opaque)
	opFifo            // parent, name, mode (2 bytes)
	opDevice          // parent, name, kind (upper only)
	opSocket          // parent, name (upper only)
	opDeep            // parent, depth, names...
	opOwner           // entry, owner
	opTime            // entry, time
	numOps
)

// mergeEnv is where a program runs:
//
//	base/outer/{keep, sub/f, ws -> ../parent/ws}   the parent's sibling
//	base/parent/ws                                  the workspace (lower)
//	base/parent/sentinel/{keep, sub/f}              the workspace's sibling
//	base/parent/outside                             a file next to it
//	base/upper                                      the upper layer
type mergeEnv struct {
	base, ws, upper string
	names           []string
	targets         []string
	dirs, entries   [2][][]string // per tree: directories (root first), non-directories
}

func newMergeEnv(t *testing.T) *mergeEnv {
	base := t.TempDir()
	e := &mergeEnv{base: base, ws: filepath.Join(base, "parent", "ws"), upper: filepath.Join(base, "upper")}
	for _, d := range []string{"outer/sub", "parent/ws", "parent/sentinel/sub", "upper"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"outer/keep", "outer/sub/f", "parent/sentinel/keep", "parent/sentinel/sub/f", "parent/outside"} {
		if err := os.WriteFile(filepath.Join(base, p), []byte("sentinel "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../parent/ws", filepath.Join(base, "outer/ws")); err != nil {
		t.Fatal(err)
	}
	e.names = []string{
		"a", "b", "c", "d", "e", "sub",
		".wh.a", ".hidden", "with\nnewline", "\xff\xfe\xfd", "L" + strings.Repeat("o", 252) + "ng",
		strings.Repeat("\xff", 255), " ", "-rf", "...", ".airlock-merge-x",
		"keep", "sentinel", "ws", "outside",
	}
	e.targets = []string{
		"../sentinel", "../../outer/keep", filepath.Join(base, "parent/sentinel"), filepath.Join(base, "parent/sentinel/keep"),
		"/", "/etc/passwd", ".", "..", "../outside", "a", "a/b", "../../../../../../../../..",
		"/proc/self/root" + filepath.Join(base, "parent/sentinel"), filepath.Join(base, "outer"), "../ws", "sub/../../sentinel",
	}
	e.dirs = [2][][]string{{{}}, {{}}}
	return e
}

// reader hands out a program's bytes, then zeros.
type reader struct{ *fuzzinput.Reader }

func (r *reader) mode() uint32 { return (uint32(r.Byte())<<8 | uint32(r.Byte())) & 0o7777 }

// name is a name from the pool (often, so that upper and lower meet) or
// bytes of the program, never "/" or NUL, never "." or "..".
func (e *mergeEnv) name(r *reader) string {
	c := r.Byte()
	if c < 0xf0 {
		return e.names[int(c)%len(e.names)]
	}
	b := bytes.Map(func(r rune) rune {
		if r == '/' || r == 0 {
			return '_'
		}
		return r
	}, r.Bytes(int(r.Byte())%255+1))
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return "_" + string(b)
	}
	return string(b)
}

// run builds upper and lower from prog; ops that the file system refuses
// (a name that is there already, a parent that is not a directory) are
// left out.
func (e *mergeEnv) run(t *testing.T, prog []byte) {
	r := &reader{fuzzinput.New(prog)}
	roots := [2]int{}
	for i, p := range []string{e.ws, e.upper} {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		roots[i] = fd
	}
	for ops := 0; r.Len() > 0 && ops < 96; ops++ {
		c := r.Byte()
		tree := int(c & 1)
		op := int(c>>1) % numOps
		root := roots[tree]
		switch op {
		case opOpaque, opOwner, opTime:
			var target []string
			if op == opOpaque {
				target = pick(e.dirs[tree], r.Byte())
			} else {
				all := append(slices.Clone(e.dirs[tree][1:]), e.entries[tree]...)
				if len(all) == 0 {
					continue
				}
				target = pick(all, r.Byte())
			}
			e.attr(t, root, target, op, r)
			continue
		}
		dir := e.parent(t, roots, tree, r.Byte())
		if dir == nil {
			continue
		}
		name := e.name(r)
		e.make(t, root, tree, dir, name, op, r)
	}
}

func pick(list [][]string, c byte) []string { return list[int(c)%len(list)] }

// parent picks a directory of tree; in upper, it may be one of lower's,
// made in upper too (as the overlay copies a directory up).
func (e *mergeEnv) parent(t *testing.T, roots [2]int, tree int, c byte) []string {
	if tree == upper && c&0x80 != 0 {
		dir := pick(e.dirs[lower], c&0x7f)
		if len(dir) > 64 {
			return nil
		}
		for i := range dir {
			fd, err := openPath(roots[upper], dir[:i])
			if err != nil {
				return nil
			}
			err = unix.Mkdirat(fd, dir[i], 0o755)
			unix.Close(fd)
			if err == nil {
				e.dirs[upper] = append(e.dirs[upper], slices.Clone(dir[:i+1]))
			} else if !errors.Is(err, unix.EEXIST) {
				return nil
			}
		}
		return dir
	}
	return pick(e.dirs[tree], c)
}

// make makes one entry name in dir of tree.
func (e *mergeEnv) make(t *testing.T, root, tree int, dir []string, name string, op int, r *reader) {
	fd, err := openPath(root, dir)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	p := append(slices.Clone(dir), name)
	switch op {
	case opFile, opSparse:
		var data []byte
		var off, hole int64
		if op == opSparse {
			off = int64(r.Byte()) << 16
			data = r.Bytes(int(r.Byte()))
			hole = int64(r.Byte()) << 12
		} else {
			data = r.Bytes(int(r.Byte()))
		}
		mode := uint32(0o644)
		if op == opFile {
			mode = r.mode()
		}
		f, err := unix.Openat(fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return
		}
		defer unix.Close(f)
		if _, err := unix.Pwrite(f, data, off); err != nil {
			t.Fatal(err)
		}
		if hole > 0 {
			if err := unix.Ftruncate(f, off+int64(len(data))+hole); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Fchmod(f, mode); err != nil {
			t.Fatal(err)
		}
	case opDir:
		mode := r.mode()
		if unix.Mkdirat(fd, name, 0o700) != nil {
			return
		}
		if err := unix.Fchmodat(fd, name, mode, 0); err != nil {
			t.Fatal(err)
		}
		e.dirs[tree] = append(e.dirs[tree], p)
		return
	case opDeep:
		depth := int(r.Byte())%64 + 1
		if len(dir)+depth > 80 {
			return
		}
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { unix.Close(d) }()
		for i := range depth {
			if i > 0 {
				name = e.name(r)
			}
			if unix.Mkdirat(d, name, 0o755) != nil {
				return
			}
			next, err := unix.Openat(d, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(d)
			d = next
			dir = append(slices.Clone(dir), name)
			e.dirs[tree] = append(e.dirs[tree], dir)
		}
		return
	case opSymlink:
		c := r.Byte()
		target := e.targets[int(c)%len(e.targets)]
		if c >= 0xf0 {
			target = strings.ReplaceAll(string(r.Bytes(int(r.Byte())%64+1)), "\x00", "")
			if target == "" {
				target = "x"
			}
		}
		if unix.Symlinkat(target, fd, name) != nil {
			return
		}
	case opLink:
		c := r.Byte()
		if len(e.entries[tree]) == 0 {
			return
		}
		src := pick(e.entries[tree], c)
		sfd, err := openPath(root, src[:len(src)-1])
		if err != nil {
			return
		}
		err = unix.Linkat(sfd, src[len(src)-1], fd, name, 0)
		unix.Close(sfd)
		if err != nil {
			return
		}
	case opWhiteout, opDevice:
		mode, dev := uint32(unix.S_IFCHR), uint64(0)
		if op == opDevice {
			if tree == lower {
				return
			}
			if r.Byte()&1 == 0 {
				dev = unix.Mkdev(1, 3)
			} else {
				mode, dev = unix.S_IFBLK, unix.Mkdev(7, 0)
			}
		} else if tree == lower {
			mode = unix.S_IFREG // the host's workspace holds no whiteouts: an empty file
		}
		if unix.Mknodat(fd, name, mode|0o644, int(dev)) != nil {
			return
		}
	case opFifo:
		mode := r.mode()
		if unix.Mkfifoat(fd, name, 0o600) != nil {
			return
		}
		if err := unix.Fchmodat(fd, name, mode, 0); err != nil {
			t.Fatal(err)
		}
	case opSocket:
		if tree == lower || len(name) > 80 {
			return
		}
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Bind(s, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", fd, name)})
		unix.Close(s)
		if err != nil {
			return
		}
	}
	e.entries[tree] = append(e.entries[tree], p)
}

// attr changes an entry that is there: its opaque marker, owner or time.
func (e *mergeEnv) attr(t *testing.T, root int, p []string, op int, r *reader) {
	c := r.Byte()
	if op == opOpaque {
		fd, err := openPath(root, p)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		val := []byte{c}
		if c == 0 {
			val = []byte("yes")
		}
		if err := unix.Fsetxattr(fd, "trusted.overlay.opaque", val, 0); err != nil {
			t.Fatal(err)
		}
		return
	}
	if len(p) == 0 {
		return
	}
	fd, err := openPath(root, p[:len(p)-1])
	if err != nil {
		return
	}
	defer unix.Close(fd)
	name := p[len(p)-1]
	if op == opOwner {
		ids := []int{0, 1, 1000, 65534, 4242}
		unix.Fchownat(fd, name, ids[int(c)%len(ids)], ids[int(c>>4)%len(ids)], unix.AT_SYMLINK_NOFOLLOW)
		return
	}
	ts := unix.NsecToTimespec(int64(c)*1_000_000_007 + 1e18)
	unix.UtimesNanoAt(fd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// openPath opens the directory at comps below root, one name at a time,
// following no symlink (paths here may be longer than PATH_MAX).
func openPath(root int, comps []string) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	for _, c := range comps {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// mnode is a file system entry as the model sees it.
type mnode struct {
	kind         uint32 // S_IFMT bits
	mode         uint32 // permission and set-id bits
	uid, gid     uint32
	mtime        int64
	size, blocks int64
	nlink        uint64
	ino          uint64
	rdev         uint64
	data         string // regular file: see contentDigest
	target       string // symlink
	opaque       bool   // directory: trusted.overlay.opaque is "y"
	children     map[string]*mnode
	linkKey      string // which inode the model says it is ("" for a directory)
	fromUpper    bool   // the merge made it (or, a directory, gave it upper's attributes)
	upperBlocks  int64  // a file made from upper: its blocks there
}

// snapshotTree reads the tree at dir, descriptor by descriptor.
func snapshotTree(t *testing.T, dir, tag string) *mnode {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	n := nodeOf(&st, tag)
	snapshotDir(t, fd, n, tag, nil)
	return n
}

func nodeOf(st *unix.Stat_t, tag string) *mnode {
	n := &mnode{kind: st.Mode & unix.S_IFMT, mode: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid,
		mtime: st.Mtim.Nano(), size: st.Size, blocks: st.Blocks, nlink: st.Nlink, ino: st.Ino, rdev: st.Rdev}
	if n.kind != unix.S_IFDIR {
		n.linkKey = fmt.Sprintf("%s%d", tag, st.Ino)
	}
	return n
}

// snapshotDir fills n with the entries of the directory fd, but for
// those that skip names.
func snapshotDir(t *testing.T, fd int, n *mnode, tag string, skip func(name string) bool) {
	t.Helper()
	names, err := readNames(fd)
	if err != nil {
		t.Fatal(err)
	}
	n.children = map[string]*mnode{}
	buf := make([]byte, 16)
	if k, err := unix.Fgetxattr(fd, "trusted.overlay.opaque", buf); err == nil && string(buf[:k]) == "y" {
		n.opaque = true
	}
	for _, name := range names {
		if skip != nil && skip(name) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		c := nodeOf(&st, tag)
		switch c.kind {
		case unix.S_IFDIR:
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			snapshotDir(t, sub, c, tag, nil)
			unix.Close(sub)
		case unix.S_IFREG:
			f, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			c.data = contentDigest(t, f, st.Size)
			unix.Close(f)
		case unix.S_IFLNK:
			lb := make([]byte, unix.PathMax)
			k, err := unix.Readlinkat(fd, name, lb)
			if err != nil {
				t.Fatal(err)
			}
			c.target = string(lb[:k])
		}
		n.children[name] = c
	}
}

// contentDigest hashes a file's content as its non-zero 4 KiB blocks and
// their offsets, reading only the data that SEEK_DATA finds: the same for
// two files of equal size and content, however their holes lie.
func contentDigest(t *testing.T, fd int, size int64) string {
	t.Helper()
	h := sha256.New()
	binary.Write(h, binary.LittleEndian, size)
	const bs = 4096
	buf := make([]byte, bs)
	next := int64(0) // the first block not hashed yet
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		for b := max(data/bs, next); b*bs < hole; b++ {
			k, err := unix.Pread(fd, buf, b*bs)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.ContainsFunc(buf[:k], func(r rune) bool { return r != 0 }) {
				binary.Write(h, binary.LittleEndian, b)
				h.Write(buf[:k])
			}
			next = b + 1
		}
		off = hole
	}
	return hex.EncodeToString(h.Sum(nil))
}

// overlayModel is what the workspace must hold after the merge: lower
// with upper applied as the overlay showed them.
func overlayModel(lower, upper *mnode) *mnode {
	out := cloneModel(lower)
	applyModel(out, upper)
	return out
}

func cloneModel(n *mnode) *mnode {
	c := *n
	if n.children != nil {
		c.children = map[string]*mnode{}
		for k, v := range n.children {
			c.children[k] = cloneModel(v)
		}
	}
	return &c
}

func applyModel(l, u *mnode) {
	for name, un := range u.children {
		switch un.kind {
		case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFSOCK:
			// A whiteout removes; a device or a socket is not made, but
			// hid the lower entry from the job all the same.
			delete(l.children, name)
		case unix.S_IFDIR:
			ln := l.children[name]
			if ln == nil || ln.kind != unix.S_IFDIR || un.opaque {
				ln = &mnode{kind: unix.S_IFDIR, children: map[string]*mnode{}}
			}
			applyModel(ln, un)
			ln.mode, ln.uid, ln.gid, ln.mtime, ln.fromUpper = un.mode&0o1777, un.uid, un.gid, un.mtime, true
			l.children[name] = ln
		default:
			c := *un
			c.children = nil
			c.mode &= 0o1777
			c.fromUpper = true
			c.upperBlocks = un.blocks
			if un.kind != unix.S_IFREG {
				c.linkKey = fmt.Sprintf("%p", &c) // made anew, one inode per name
			}
			l.children[name] = &c
		}
	}
}

// compareTrees reports where got differs from want.
func compareTrees(t *testing.T, rel string, want, got, upperModel *mnode) {
	t.Helper()
	if rel != "" {
		where := fmt.Sprintf("%q", rel)
		switch {
		case want.kind != got.kind:
			t.Errorf("%s: type %o, want %o", where, got.kind, want.kind)
			return
		case want.kind == unix.S_IFDIR && !want.fromUpper:
			if got.mode != want.mode || got.uid != want.uid || got.gid != want.gid || got.ino != want.ino {
				t.Errorf("%s: a workspace directory that upper does not name changed: %+v, was %+v", where, got, want)
			}
		default:
			if want.kind != unix.S_IFLNK && got.mode != want.mode {
				t.Errorf("%s: mode %o, want %o", where, got.mode, want.mode)
			}
			if got.uid != want.uid || got.gid != want.gid {
				t.Errorf("%s: owner %d:%d, want %d:%d", where, got.uid, got.gid, want.uid, want.gid)
			}
			if got.mtime != want.mtime {
				t.Errorf("%s: mtime %d, want %d", where, got.mtime, want.mtime)
			}
			if want.kind != unix.S_IFDIR && (got.size != want.size || got.data != want.data) {
				t.Errorf("%s: content (%d bytes) is not the model's (%d bytes)", where, got.size, want.size)
			}
			if got.target != want.target {
				t.Errorf("%s: symlink to %q, want %q", where, got.target, want.target)
			}
			if want.kind == unix.S_IFREG && want.fromUpper && got.blocks > want.upperBlocks+128 {
				t.Errorf("%s: %d blocks, %d in upper: the merge filled holes", where, got.blocks, want.upperBlocks)
			}
			if !want.fromUpper && got.ino != want.ino {
				t.Errorf("%s: a workspace entry that upper does not name was made anew", where)
			}
		}
	}
	if want.kind != unix.S_IFDIR {
		return
	}
	var names []string
	for name := range want.children {
		names = append(names, name)
	}
	for name := range got.children {
		if want.children[name] == nil {
			t.Errorf("%q: in the workspace, but neither lower nor upper puts it there (%+v)", path.Join(rel, name), got.children[name])
		}
	}
	sort.Strings(names)
	for _, name := range names {
		g := got.children[name]
		if g == nil {
			t.Errorf("%q: missing from the workspace (want %+v)", path.Join(rel, name), want.children[name])
			continue
		}
		compareTrees(t, path.Join(rel, name), want.children[name], g, upperModel)
	}
}

// checkPartial checks that each entry of got is the model's (want) or
// the workspace's before the merge (lower), and that what lower had is
// not gone unless the model removes it.
func checkPartial(t *testing.T, rel string, want, lower, got *mnode) {
	t.Helper()
	same := func(a, b *mnode) bool {
		return a != nil && b != nil && a.kind == b.kind &&
			(a.kind == unix.S_IFDIR || a.size == b.size && a.data == b.data && a.target == b.target)
	}
	child := func(n *mnode, name string) *mnode {
		if n == nil || n.kind != unix.S_IFDIR {
			return nil
		}
		return n.children[name]
	}
	for name, g := range got.children {
		p := path.Join(rel, name)
		w, l := child(want, name), child(lower, name)
		switch {
		case same(g, w):
			checkPartial(t, p, w, l, g)
		case same(g, l):
			checkPartial(t, p, w, l, g)
		default:
			t.Errorf("%q: after a failed merge, neither the workspace's nor upper's (%+v)", p, g)
		}
	}
	if lower == nil || lower.kind != unix.S_IFDIR {
		return
	}
	for name := range lower.children {
		if got.children[name] == nil && child(want, name) != nil {
			t.Errorf("%q: gone after a failed merge, though neither kept nor removed", path.Join(rel, name))
		}
	}
}

// compareLinks checks that names are one inode in the workspace exactly
// when the model says so.
func compareLinks(t *testing.T, want, got *mnode) {
	t.Helper()
	keyToIno, inoToKey := map[string]uint64{}, map[uint64]string{}
	var walk func(rel string, w, g *mnode)
	walk = func(rel string, w, g *mnode) {
		if w == nil || g == nil || w.kind != g.kind {
			return
		}
		if w.kind != unix.S_IFDIR {
			if ino, ok := keyToIno[w.linkKey]; ok && ino != g.ino {
				t.Errorf("%q: not the same inode as the other names of upper's inode %s", rel, w.linkKey)
			}
			if key, ok := inoToKey[g.ino]; ok && key != w.linkKey {
				t.Errorf("%q: one inode with a name it was not linked to (%s, %s)", rel, key, w.linkKey)
			}
			keyToIno[w.linkKey], inoToKey[g.ino] = g.ino, w.linkKey
			return
		}
		for name, wc := range w.children {
			walk(path.Join(rel, name), wc, g.children[name])
		}
	}
	walk("", want, got)
}

// checkReport checks Merged against upper.
func checkReport(t *testing.T, m Merged, up *mnode) {
	t.Helper()
	var devices, sockets, setid []string
	whiteouts := 0
	inodes := map[uint64][]string{}
	setidInodes := map[uint64]bool{}
	size := int64(0)
	var walk func(rel string, n *mnode)
	walk = func(rel string, n *mnode) {
		for name, c := range n.children {
			p := path.Join(rel, name)
			switch c.kind {
			case unix.S_IFCHR:
				if c.rdev == 0 {
					whiteouts++
				} else {
					devices = append(devices, p)
				}
			case unix.S_IFBLK:
				devices = append(devices, p)
			case unix.S_IFSOCK:
				sockets = append(sockets, p)
			case unix.S_IFDIR:
				if c.mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
					setid = append(setid, p)
				}
				walk(p, c)
			case unix.S_IFREG:
				if inodes[c.ino] == nil {
					size += c.size
				}
				inodes[c.ino] = append(inodes[c.ino], p)
				if c.mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
					setidInodes[c.ino] = true
				}
			}
		}
	}
	walk("", up)
	sameSet := func(what string, got, want []string) {
		got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("report: %s %q, want %q", what, got, want)
		}
	}
	sameSet("devices", m.Devices, devices)
	sameSet("skipped", m.Skipped, sockets)
	if m.Files != len(inodes) {
		t.Errorf("report: %d files copied, want %d (one per upper inode)", m.Files, len(inodes))
	}
	if m.Bytes > size {
		t.Errorf("report: %d bytes copied, more than the %d of upper's files", m.Bytes, size)
	}
	if m.Removed > whiteouts {
		t.Errorf("report: %d removed, from %d whiteouts", m.Removed, whiteouts)
	}
	cleared := map[string]bool{}
	for _, p := range m.SetIDCleared {
		cleared[p] = true
	}
	for _, p := range setid {
		if !cleared[p] {
			t.Errorf("report: the set-id directory %q is not in SetIDCleared", p)
		}
		delete(cleared, p)
	}
	for ino := range setidInodes {
		found := false
		for _, p := range inodes[ino] {
			found = found || cleared[p]
			delete(cleared, p)
		}
		if !found {
			t.Errorf("report: the set-id file %q is not in SetIDCleared", inodes[ino])
		}
	}
	if len(cleared) > 0 {
		t.Errorf("report: SetIDCleared names %v, which had no set-id bit", cleared)
	}
}

// regularFiles lists the regular files in the tree n.
func regularFiles(n *mnode, rel string) []string {
	var out []string
	for name, c := range n.children {
		switch c.kind {
		case unix.S_IFREG:
			out = append(out, path.Join(rel, name))
		case unix.S_IFDIR:
			out = append(out, regularFiles(c, path.Join(rel, name))...)
		}
	}
	return out
}

// outside describes everything under base but the workspace and upper:
// one line per entry with its type, mode, owner, size, links, inode,
// times, content and target.
func (e *mergeEnv) outside(t *testing.T) []string {
	t.Helper()
	fd, err := unix.Open(e.base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	root := nodeOf(&st, "o")
	snapshotDir(t, fd, root, "o", func(name string) bool { return name == "upper" || name == "parent" })
	pfd, err := unix.Openat(fd, "parent", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	if err := unix.Fstat(pfd, &st); err != nil {
		t.Fatal(err)
	}
	parent := nodeOf(&st, "o")
	snapshotDir(t, pfd, parent, "o", func(name string) bool { return name == "ws" })
	root.children["parent"] = parent
	var out []string
	var walk func(rel string, n *mnode)
	walk = func(rel string, n *mnode) {
		out = append(out, fmt.Sprintf("%q type=%o mode=%o %d:%d size=%d nlink=%d ino=%d mtime=%d data=%s target=%q",
			rel, n.kind, n.mode, n.uid, n.gid, n.size, n.nlink, n.ino, n.mtime, n.data, n.target))
		for name, c := range n.children {
			walk(path.Join(rel, name), c)
		}
	}
	walk("/", root)
	slices.Sort(out)
	return out
}

func lineDiff(before, after []string) string {
	var b strings.Builder
	for _, l := range before {
		if !slices.Contains(after, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
