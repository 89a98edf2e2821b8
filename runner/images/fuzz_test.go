package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/fuzzinput"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// FuzzUnpack feeds the unpacker layers that a registry controls. The
// first byte chooses how the rest is read: as raw bytes for one layer,
// plain or through the pull's decompression (tarball.LayerFromOpener:
// gzip when the bytes say so), or as a program (see tarGen) that writes
// tar layers with archive/tar and by hand: names with "..", absolute
// names, names of the host's files, symlinks out of the root then files
// through them, hard links out of the root and to symlinks, duplicate
// entries, whiteouts and opaque markers, device nodes, unknown types,
// declared sizes longer than the body, sparse bombs, long names and PAX
// headers, bytes after the tar's end, a wrong diff id; plain or gzipped.
//
// Whatever the input, it asserts:
//   - nothing outside the unpack root changes (a sentinel directory and a
//     file next to it, the host's /etc/passwd), and neither do the
//     snapshots the cache builds a later layer on (their files are hard
//     links that a layer must never write through);
//   - the root stays the caller's directory (mode 0755), and holds no
//     device node, FIFO or socket, and no more file bytes than the budget;
//   - Unpack fails only with ErrHostileLayer or ErrTooLarge (the host's
//     disk is fine here), never panics;
//
// and for programs:
//   - building the layers as the cache does (a snapshot per layer, each a
//     hard-linked copy of the one below: unpack, linkTree, applyLayer)
//     ends as Unpack does, with the same refusal or the same tree;
//   - where no layer holds a symlink, the outcome and the tree are those of
//     a reference model of the OCI layer rules written here (later entries
//     replace, whiteouts remove, opaque markers hide lower layers, parents
//     are made 0755, names are cleaned or refused, hard links need a
//     target in the root, the budget counts entries and bytes): the same
//     refusal class, or the same paths, types, modes, owners, file
//     contents, file times and hard links, and the same Stats.
func FuzzUnpack(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root (owners are set from the tar only as root; airlock's tests run as root)")
	}
	umask := unix.Umask(0)
	unix.Umask(umask)
	// Raw layers: streams of unpack_test.go's rows, plain and gzipped.
	for _, b := range [][]byte{
		tarRaw(reg("../escape", "x")),
		tarRaw(symlinkE("lnk", "../sentinel"), reg("lnk/keep", "pwned")),
		tarRaw(dirE("d/", 0o755), reg("d/f", "f"), symlinkE("d", "../sentinel"), reg("d/keep", "pwned")),
		tarRaw(reg("f", "f"), hardlinkE("f", "f")),
		tarRaw(symlinkE("lnk", "../outside"), hardlinkE("h", "lnk")),
		tarRaw(reg("before", "b"), paxE("nul", tar.TypeReg, []byte("x"), [2]string{"path", "a\x00/../../escape"})),
		tarRaw(paxE("bomb", tar.TypeReg, []byte("x"), [2]string{"GNU.sparse.size", strconv.FormatInt(1<<40, 10)}, [2]string{"GNU.sparse.numblocks", "1"}, [2]string{"GNU.sparse.map", "0,1"})),
		tarRaw(tentry{raw: append(rawHeader("x\x00../../escape", tar.TypeReg, 1), padBlock([]byte("x"))...)}),
		tarRaw(dirE("./", 0o755), reg("etc/passwd", "root"), reg("etc/.wh.passwd", ""), reg("opt/a", "a"), reg("opt/.wh..wh..opq", ""), nodeE("dev/null", tar.TypeChar)),
		[]byte(strings.Repeat("this is not a tar archive\n", 80)),
	} {
		f.Add(append([]byte{3}, b...))
		f.Add(append([]byte{7}, gzipped(b)...))
	}
	// Programs (see tarGen) like the rows of TestUnpackHostile and
	// TestUnpackImage, written as ops (a name or target is an index in
	// tarGen's pools), each plain (0), gzipped (4) and with a small
	// budget (8).
	for _, p := range [][]byte{
		{gReg, 0, 2, 'a', 'b', 0o1, 0o244, 0, 0, gLayer, gDir, 5, 0o1, 0o355, 0, 0, gReg, 6, 1, 'x', 0o1, 0o244, 0, 0},
		{gSymlink, 14, 3, gReg, 16, 1, 'x', 0o1, 0o244, 0, 0},                 // lnk -> ../sentinel; lnk/keep
		{gSymlink, 14, 0, gReg, 37, 1, 'x', 0o1, 0o244, 0, 0},                 // lnk -> /; lnk/<base>/sentinel/keep
		{gSymlink, 14, 5, gLayer, gReg, 15, 1, 'x', 0o1, 0o244, 0, 0},         // through two layers
		{gHardlink, 6, 34, gReg, 33, 4, 'r', 'o', 'o', 't', 0o1, 0o244, 0, 0}, // hard link to a host file's name
		{gReg, 0, 1, 'a', 0o1, 0o244, 0, 0, gHardlink, 1, 0, gHardlink, 6, 9}, // hard links in and out
		{gDir, 5, 0o1, 0o355, 0, 0, gReg, 6, 1, 'e', 0o1, 0o244, 0, 0, gLayer, gWhiteout, 5, gOpaque, 0, gReg, 0, 0, 0o1, 0o244, 0, 0},
		{gReg, 3, 1, 'x', 0o1, 0o244, 0, 0, gLayer, gNode, 3, 0, gNode, 7, 1, gNode, 6, 2},
		{gReg, 31, 1, 'x', 0o1, 0o244, 0, 0, gReg, 32, 1, 'x', 0o1, 0o244, 0, 0, gReg, 30, 1, 'x', 0o1, 0o244, 0, 0},
		{gSparse, 0, 3, 2, 1, 'x', 5, 2, 'y', 'z', gSparse, 1, 250, 1, 0, 1, 'q'},
		{gTruncated, 0, 3, 10, 'p', 'a', 'r', 't'},
		{gReg, 0, 1, 'x', 0o1, 0o244, 0, 0, gTrailing, 200},
		{gGlobal, gReg, 0, 1, 'x', 0o1, 0o244, 0, 0, gOdd, 1, 0, gBadPax},
		{gReg, 0, 1, 'x', 0o15, 0o355, 3, 7, gDir, 1, 0o13, 0o377, 2, 0, gCorrupt},
		{gReg, 32, 1, 'x', 0o1, 0o244, 0, 0, gReg, 39, 1, 'y', 0o1, 0o244, 0, 0, gLayer, gReg, 0, 1, 'x', 0o1, 0o244, 0, 0},
	} {
		f.Add(append([]byte{0}, p...))
		f.Add(append([]byte{4}, p...))
		f.Add(append([]byte{8}, p...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > 16<<10 {
			return
		}
		// mode&3 == 3: raw bytes (mode&4: through the decompression);
		// else a program (mode&4: gzipped; mode&8: a small budget).
		mode, prog := data[0], data[1:]
		e := newFuzzEnv(t)
		if mode&3 == 3 {
			e.raw(t, prog, mode&4 != 0)
			return
		}
		budget := Budget{Bytes: 1 << 20, Entries: 1000}
		if mode&8 != 0 {
			budget = Budget{Bytes: 4096, Entries: 8}
		}
		g := newTarGen(e, prog)
		streams := g.streams(t, mode&4 != 0)

		before := e.state(t)
		st, err := Unpack(e.dst, streams, budget)
		e.checkAfter(t, before, st, err, budget)
		got := fuzzTree(t, e.dst)

		// The model, where it knows what to expect.
		if want, ok := runModel(g.layers, budget, umask); ok {
			if c := errClass(err); c != want.class {
				t.Errorf("Unpack: %v (%s), the model says %s", err, c, want.class)
			} else if err == nil {
				if !slices.Equal(got, want.tree) {
					t.Errorf("the tree is not the model's:\n%s", lineDiff(want.tree, got))
				}
				if st != want.stats {
					t.Errorf("stats %+v, the model's %+v", st, want.stats)
				}
			}
		}

		// The cache's way: a snapshot per layer.
		if errors.Is(err, ErrTooLarge) {
			return // the two count the budget differently
		}
		chainErr, chainTree := e.chain(t, g.streams(t, mode&4 != 0), budget)
		if err != nil {
			// The entry that failed may be a file half written: made
			// now, its time never set.
			got, chainTree = withoutTimes(got), withoutTimes(chainTree)
		}
		if errClass(chainErr) != errClass(err) {
			t.Errorf("Unpack: %v; layer by layer as the cache builds snapshots: %v", err, chainErr)
		} else if !slices.Equal(got, chainTree) {
			t.Errorf("Unpack and the snapshots differ:\n%s", lineDiff(got, chainTree))
		}
	})
}

// tarRaw is tarOf without a *testing.T, for seeds.
func tarRaw(entries ...tentry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if e.raw != nil {
			tw.Flush()
			buf.Write(e.raw)
			continue
		}
		h := e.hdr
		if tw.WriteHeader(&h) == nil {
			io.WriteString(tw, e.body)
		}
	}
	tw.Close()
	return buf.Bytes()
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// fuzzEnv is the unpack root and what a layer aims at next to it:
//
//	base/rootfs        the root (dst)
//	base/sentinel/keep a file in a directory beside it
//	base/outside       a file beside it
//	base/chain<N>      the snapshots of layers 1..N, built as the cache does
type fuzzEnv struct {
	testEnv
	passwd string // the host's /etc/passwd, described
}

func newFuzzEnv(t *testing.T) *fuzzEnv {
	return &fuzzEnv{testEnv: newTestEnv(t), passwd: hostFile(t, "/etc/passwd")}
}

// raw unpacks prog as one layer: plain, or as the pull reads a blob.
func (e *fuzzEnv) raw(t *testing.T, prog []byte, decompress bool) {
	ls := stream(prog)
	if decompress {
		if bytes.HasPrefix(prog, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			return // zstd: a few bytes can expand without bound; not this target's
		}
		if len(prog) > 4096 {
			return // gzip expands up to ~1000 times: keep an input fast
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(prog)), nil })
		if err != nil {
			return // the pull refuses such a blob before unpacking
		}
		d, err := l.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		ls = LayerStream{DiffID: d.String(), Open: l.Uncompressed}
	}
	budget := Budget{Bytes: 1 << 20, Entries: 1000}
	before := e.state(t)
	st, err := Unpack(e.dst, []LayerStream{ls}, budget)
	e.checkAfter(t, before, st, err, budget)
}

// state describes everything in base but dst and the snapshots being
// built: type, mode, owner, size, links, inode, time, content, target.
// In a finished snapshot, the link count is left out: a later snapshot's
// files are more names of the same inodes.
func (e *fuzzEnv) state(t *testing.T, building ...string) []string {
	t.Helper()
	var out []string
	fuzzWalk(t, e.base, func(rel string, st *unix.Stat_t, content []byte, target string) bool {
		top, _, _ := strings.Cut(rel, "/")
		if top == "rootfs" || slices.Contains(building, top) {
			return false
		}
		nlink := fmt.Sprint(st.Nlink)
		if strings.HasPrefix(top, "chain") {
			nlink = "-"
		}
		out = append(out, fmt.Sprintf("%q %o %d:%d size=%d nlink=%s ino=%d mtime=%d sha=%x -> %q",
			rel, st.Mode, st.Uid, st.Gid, st.Size, nlink, st.Ino, st.Mtim.Nano(), sha256.Sum256(content), target))
		return true
	})
	slices.Sort(out)
	return out
}

// checkAfter checks what must hold after any Unpack.
func (e *fuzzEnv) checkAfter(t *testing.T, before []string, st Stats, err error, budget Budget) {
	t.Helper()
	if after := e.state(t); !slices.Equal(before, after) {
		t.Errorf("outside the root changed:\n%s", lineDiff(before, after))
	}
	if got := hostFile(t, "/etc/passwd"); got != e.passwd {
		t.Errorf("the host's /etc/passwd changed: %s, was %s", got, e.passwd)
	}
	if c := errClass(err); c != "ok" && c != "hostile" && c != "toolarge" {
		t.Errorf("Unpack: %v: neither ErrHostileLayer nor ErrTooLarge", err)
	}
	var root unix.Stat_t
	if err := unix.Lstat(e.dst, &root); err != nil || root.Mode != unix.S_IFDIR|0o755 {
		t.Errorf("the root is now %o (%v), want the caller's directory, 0755", root.Mode, err)
	}
	if st.Bytes > budget.Bytes {
		t.Errorf("Stats.Bytes %d, over the budget's %d", st.Bytes, budget.Bytes)
	}
	seen := map[uint64]bool{}
	total := int64(0)
	fuzzWalk(t, e.dst, func(rel string, st *unix.Stat_t, _ []byte, _ string) bool {
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if !seen[st.Ino] {
				total += st.Size
			}
			seen[st.Ino] = true
		case unix.S_IFDIR, unix.S_IFLNK:
		default:
			t.Errorf("%q: a %o in the root: Unpack makes no device, FIFO or socket", rel, st.Mode)
		}
		return true
	})
	if total > budget.Bytes {
		t.Errorf("%d bytes of files in the root, over the budget's %d", total, budget.Bytes)
	}
}

// chain builds the layers as the cache does: layer 1 into chain1, then for
// each further layer a hard-linked copy of the last snapshot with the
// layer applied; every finished snapshot must stay as it was. It returns
// the first error and the last snapshot's tree.
func (e *fuzzEnv) chain(t *testing.T, ls []LayerStream, budget Budget) (error, []string) {
	t.Helper()
	big := Budget{Bytes: budget.Bytes, Entries: 1 << 20}
	var last string
	for i, l := range ls {
		dst := filepath.Join(e.base, fmt.Sprintf("chain%d", i+1))
		before := e.state(t, filepath.Base(dst))
		var err error
		if i == 0 {
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			_, err = unpack(dst, []LayerStream{l}, big, 0, len(ls), true)
		} else {
			if _, lerr := linkTree(last, dst, big.Entries); lerr != nil {
				return fmt.Errorf("linkTree: %w", lerr), nil
			}
			_, err = applyLayer(dst, l, big, i+1, len(ls))
		}
		if after := e.state(t, filepath.Base(dst)); !slices.Equal(before, after) {
			t.Errorf("layer %d changed what is outside its snapshot:\n%s", i+1, lineDiff(before, after))
		}
		last = dst
		if err != nil {
			return err, fuzzTree(t, dst)
		}
	}
	if last == "" {
		return nil, nil
	}
	return nil, fuzzTree(t, last)
}

func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrHostileLayer):
		return "hostile"
	case errors.Is(err, ErrTooLarge):
		return "toolarge"
	}
	return "other"
}

// fuzzWalk visits every entry below dir (not dir itself), descriptor by
// descriptor (paths can be longer than PATH_MAX), with a regular file's
// content and a symlink's target; visit returns false to skip a
// directory's content.
func fuzzWalk(t *testing.T, dir string, visit func(rel string, st *unix.Stat_t, content []byte, target string) bool) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fuzzWalkFD(t, fd, "", visit)
}

func fuzzWalkFD(t *testing.T, fd int, rel string, visit func(string, *unix.Stat_t, []byte, string) bool) {
	f := os.NewFile(uintptr(fd), "dir")
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	defer f.Close()
	sort.Strings(names)
	for _, name := range names {
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		var content []byte
		var target string
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			cf := os.NewFile(uintptr(cfd), name)
			content, err = io.ReadAll(io.LimitReader(cf, 2<<20))
			cf.Close()
			if err != nil {
				t.Fatal(err)
			}
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				t.Fatal(err)
			}
			target = string(buf[:n])
		}
		if !visit(p, &st, content, target) || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fuzzWalkFD(t, sub, p, visit)
	}
}

// fuzzTree lists a root as sorted lines: path, type, mode, owner, and a
// file's time, content and link group (names of one inode share a group,
// numbered in path order) or a symlink's target.
func fuzzTree(t *testing.T, dir string) []string {
	t.Helper()
	type ent struct {
		rel, line string
		ino       uint64
		file      bool
	}
	var ents []ent
	fuzzWalk(t, dir, func(rel string, st *unix.Stat_t, content []byte, target string) bool {
		line := fmt.Sprintf("%q %o %d:%d", rel, st.Mode, st.Uid, st.Gid)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			line += fmt.Sprintf(" mtime=%d sha=%x", st.Mtim.Sec, sha256.Sum256(content))
		case unix.S_IFLNK:
			line += fmt.Sprintf(" -> %q", target)
		}
		ents = append(ents, ent{rel, line, st.Ino, st.Mode&unix.S_IFMT != unix.S_IFDIR})
		return true
	})
	return groupLines(len(ents), func(i int) (string, string, any, bool) {
		return ents[i].rel, ents[i].line, ents[i].ino, ents[i].file
	})
}

// groupLines sorts entries by path and appends to each non-directory's
// line the number of its inode, counted in path order.
func groupLines(n int, at func(i int) (rel, line string, inode any, file bool)) []string {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		ra, _, _, _ := at(idx[a])
		rb, _, _, _ := at(idx[b])
		return ra < rb
	})
	groups := map[any]int{}
	var out []string
	for _, i := range idx {
		_, line, ino, file := at(i)
		if file {
			g, ok := groups[ino]
			if !ok {
				g = len(groups)
				groups[ino] = g
			}
			line += fmt.Sprintf(" inode#%d", g)
		}
		out = append(out, line)
	}
	return out
}

var mtimeField = regexp.MustCompile(` mtime=[0-9]+`)

// withoutTimes is fuzzTree's lines without the files' times.
func withoutTimes(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = mtimeField.ReplaceAllString(l, "")
	}
	return out
}

func lineDiff(want, got []string) string {
	var b strings.Builder
	for _, l := range want {
		if !slices.Contains(got, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// The ops of a tar program: a byte (mod gOps), then its arguments.
const (
	gReg       = iota // name, size, body..., mode (2 bytes), owner, time
	gDir              // name, mode (2 bytes), owner, time
	gSymlink          // name, target
	gHardlink         // name, target
	gWhiteout         // name (.wh. goes before its last component)
	gOpaque           // name (a directory: .wh..wh..opq goes in it)
	gNode             // name, kind (char, block, FIFO)
	gLayer            // the next layer begins
	gGlobal           // a PAX global header
	gOdd              // name, type (unknown, contiguous), by tar.Writer
	gTruncated        // name, declared size, body: the layer ends inside the body
	gSparse           // name, size, blocks (offset gap, length, data...)
	gBadPax           // a PAX path with a NUL: not a valid tar
	gTrailing         // size: bytes after the tar's end; the layer ends
	gCorrupt          // the layer's diff id is not its digest
	gOps
)

// gItem is what the tar reader will hand the unpacker, as tarGen meant
// it: an entry (hdr as read, content as read), a stream that breaks
// (bad), bytes after the end (trailing).
type gItem struct {
	hdr      tar.Header
	content  []byte // nil for a sparse file over the budget
	dataErr  bool   // its body ends before its size
	bad      bool
	trailing int64 // bytes after the tar's end, when isTrail
	isTrail  bool
}

type gLayerT struct {
	buf     bytes.Buffer
	tw      *tar.Writer
	items   []gItem
	ended   bool
	corrupt bool
}

// tarGen writes tar layers from a program.
type tarGen struct {
	r       *reader
	names   []string
	targets []string
	layers  []*gLayerT
}

type reader = fuzzinput.Reader

var fuzzTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

func newTarGen(e *fuzzEnv, prog []byte) *tarGen {
	g := &tarGen{r: fuzzinput.New(prog)}
	g.names = []string{
		"a", "a/b", "a/b/c", "b", "c", "d/", "d/e", "d/e/f", "./a", "/a", // 0-9
		".", "./", "/", "a/../b", "lnk", "lnk/x", "lnk/keep", "../x", "a/../../x", "a//b/", // 10-19
		".wh.a", "a/.wh.b", ".wh..wh..opq", "a/.wh..wh..opq", ".wh..wh.plnk", ".wh.", ".wh..", ".wh...", "x\ny", "\xff\xfe", // 20-29
		strings.Repeat("n", 255), strings.Repeat("n", 256), strings.Repeat("d/", 64) + "f", // 30-32
		"etc/passwd", "/etc/passwd", e.outside, e.sentinel + "/keep", // 33-36
		"lnk/" + strings.TrimPrefix(e.sentinel, "/") + "/keep", "lnk/../sentinel/keep", strings.Repeat(strings.Repeat("n", 254)+"/", 16) + "f", // 37-39: 4,081 bytes
	}
	g.targets = []string{
		"/", "..", "../..", "../sentinel", "../outside", e.sentinel, e.outside, "a", "a/b", ".",
		"lnk", "/a", "b/../..", "d", "../rootfs/a", e.dst,
	}
	g.run()
	return g
}

func (g *tarGen) name() string {
	c := g.r.Byte()
	if c < 0xf0 {
		return g.names[int(c)%len(g.names)]
	}
	return string(g.r.Bytes(int(g.r.Byte())%64 + 1))
}

// short is a name for a ustar header written by hand (at most 89 bytes,
// no NUL: "PaxHeaders/" goes before it).
func (g *tarGen) short() string {
	n := g.name()
	if len(n) > 89 || strings.IndexByte(n, 0) >= 0 || n == "" {
		return "a"
	}
	return n
}

func (g *tarGen) layer() *gLayerT {
	if len(g.layers) == 0 || g.layers[len(g.layers)-1].ended {
		l := &gLayerT{}
		l.tw = tar.NewWriter(&l.buf)
		g.layers = append(g.layers, l)
	}
	return g.layers[len(g.layers)-1]
}

var fuzzOwners = []int{0, 0, 1000, 65534, 42, 1<<32 - 2, 1<<32 - 1, 1 << 40}

func (g *tarGen) header(typ byte, name string) tar.Header {
	return tar.Header{Typeflag: typ, Name: name, ModTime: fuzzTime}
}

// attrs reads mode, owner and time into h.
func (g *tarGen) attrs(h *tar.Header) {
	h.Mode = int64(uint16(g.r.Byte())<<8|uint16(g.r.Byte())) & 0o7777
	c := g.r.Byte()
	h.Uid, h.Gid = fuzzOwners[int(c)%len(fuzzOwners)], fuzzOwners[int(c>>4)%len(fuzzOwners)]
	h.ModTime = fuzzTime.Add(time.Duration(g.r.Byte()) * time.Hour)
}

// add writes an entry with tar.Writer; one it refuses is left out.
func (g *tarGen) add(h tar.Header, body []byte) {
	l := g.layer()
	hw := h
	if l.tw.WriteHeader(&hw) != nil {
		return
	}
	if _, err := l.tw.Write(body); err != nil {
		panic(err)
	}
	l.items = append(l.items, gItem{hdr: h, content: body})
}

// raw writes bytes (whole blocks) into the layer as they are.
func (g *tarGen) raw(b []byte, it gItem, end bool) {
	l := g.layer()
	if err := l.tw.Flush(); err != nil {
		panic(err)
	}
	l.buf.Write(b)
	l.items = append(l.items, it)
	l.ended = end
}

func (g *tarGen) run() {
	for ops := 0; g.r.Len() > 0 && ops < 64; ops++ {
		op := g.r.Byte() % gOps
		switch op {
		case gReg:
			name := g.name()
			n := int(g.r.Byte())
			var body []byte
			if n < 200 {
				body = append(body, g.r.Bytes(n)...)
				body = append(body, make([]byte, n-len(body))...)
			} else {
				body = bytes.Repeat([]byte{g.r.Byte()}, (n-199)*512)
			}
			h := g.header(tar.TypeReg, name)
			h.Size = int64(len(body))
			g.attrs(&h)
			g.add(h, body)
		case gDir:
			h := g.header(tar.TypeDir, g.name())
			g.attrs(&h)
			g.add(h, nil)
		case gSymlink:
			h := g.header(tar.TypeSymlink, g.name())
			c := g.r.Byte()
			h.Linkname = g.targets[int(c)%len(g.targets)]
			if c >= 0xf0 {
				h.Linkname = string(g.r.Bytes(int(g.r.Byte())%64 + 1))
			}
			g.add(h, nil)
		case gHardlink:
			h := g.header(tar.TypeLink, g.name())
			h.Linkname = g.name()
			g.add(h, nil)
		case gWhiteout, gOpaque:
			n := strings.TrimRight(g.name(), "/")
			if n == "" {
				n = "."
			}
			dir, base := path.Split(n)
			name := dir + ".wh." + base
			if op == gOpaque {
				name = n + "/.wh..wh..opq"
			}
			g.add(g.header(tar.TypeReg, name), nil)
		case gNode:
			h := g.header(tar.TypeChar, g.name())
			h.Typeflag = []byte{tar.TypeChar, tar.TypeBlock, tar.TypeFifo}[int(g.r.Byte())%3]
			h.Devmajor, h.Devminor, h.Mode = 1, 3, 0o666
			g.add(h, nil)
		case gLayer:
			l := g.layer()
			if err := l.tw.Close(); err != nil {
				panic(err)
			}
			l.ended = true
		case gGlobal:
			h := tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "g", PAXRecords: map[string]string{"comment": strings.Repeat("c", int(g.r.Byte()))}}
			g.add(h, nil)
		case gOdd:
			name := g.name()
			typ := []byte{'Z', tar.TypeCont, 'Q'}[int(g.r.Byte())%3]
			body := g.r.Bytes(int(g.r.Byte() % 16))
			h := g.header(typ, name)
			h.Mode, h.Size = 0o644, int64(len(body))
			g.add(h, body)
		case gTruncated:
			name := g.short()
			c := g.r.Byte()
			body := g.r.Bytes(int(g.r.Byte()))
			declared := int64(len(body)) + 1 + min(int64(c)<<(c%33), 1<<32)
			h := tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: declared, ModTime: fuzzTime}
			g.raw(append(rawHeader(name, tar.TypeReg, declared), body...), gItem{hdr: h, dataErr: true}, true)
		case gSparse:
			name := g.short()
			c := g.r.Byte()
			blocks := int(g.r.Byte() % 8)
			var sp []string
			var phys []byte
			var chunks [][2]int64
			off := int64(0)
			for range blocks {
				off += int64(g.r.Byte()) * 1000
				data := g.r.Bytes(int(g.r.Byte() % 32))
				sp = append(sp, strconv.FormatInt(off, 10), strconv.Itoa(len(data)))
				chunks = append(chunks, [2]int64{off, int64(len(data))})
				phys = append(phys, data...)
				off += int64(len(data))
			}
			size := off + int64(c)*100
			if c >= 250 {
				size = off + int64(1)<<(c-210) // up to 2^45: a sparse bomb
			}
			h := tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: fuzzTime}
			it := gItem{hdr: h}
			if blocks == 0 {
				// No map: archive/tar does not take it for a sparse
				// file, but for the empty file its header says.
				it.hdr.Size, it.content = 0, []byte{}
			} else if size <= 4<<20 {
				it.content = make([]byte, size)
				p := phys
				for _, ch := range chunks {
					copy(it.content[ch[0]:], p[:ch[1]])
					p = p[ch[1]:]
				}
			}
			pe := paxE(name, tar.TypeReg, phys,
				[2]string{"GNU.sparse.size", strconv.FormatInt(size, 10)},
				[2]string{"GNU.sparse.numblocks", strconv.Itoa(blocks)},
				[2]string{"GNU.sparse.map", strings.Join(sp, ",")})
			g.raw(pe.raw, it, false)
		case gBadPax:
			pe := paxE("nul", tar.TypeReg, []byte("x"), [2]string{"path", "a\x00/../../escape"})
			g.raw(pe.raw, gItem{bad: true}, true)
		case gTrailing:
			l := g.layer()
			if err := l.tw.Close(); err != nil {
				panic(err)
			}
			n := int64(g.r.Byte()) * 41
			l.buf.Write(bytes.Repeat([]byte{0x5a}, int(n)))
			l.items = append(l.items, gItem{trailing: n, isTrail: true})
			l.ended = true
		case gCorrupt:
			g.layer().corrupt = true
		}
	}
	if len(g.layers) == 0 {
		g.layer()
	}
	for _, l := range g.layers {
		if !l.ended {
			if err := l.tw.Close(); err != nil {
				panic(err)
			}
			l.ended = true
		}
	}
}

// streams are the layers as Unpack takes them: plain, or gzipped and read
// back through the pull's tarball.LayerFromOpener.
func (g *tarGen) streams(t *testing.T, gz bool) []LayerStream {
	var out []LayerStream
	for _, l := range g.layers {
		b := l.buf.Bytes()
		ls := stream(b)
		if gz {
			z := gzipped(b)
			tl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(z)), nil })
			if err != nil {
				t.Fatal(err)
			}
			if d, err := tl.DiffID(); err != nil || d.String() != ls.DiffID {
				t.Fatalf("the gzipped layer's diff id: %v %v, want %s", d, err, ls.DiffID)
			}
			ls.Open = tl.Uncompressed
		}
		if l.corrupt {
			sum := sha256.Sum256(append(b, 'x'))
			ls.DiffID = "sha256:" + hex.EncodeToString(sum[:])
		}
		out = append(out, ls)
	}
	return out
}

// modelResult is what the model says Unpack does.
type modelResult struct {
	class string // as errClass
	tree  []string
	stats Stats
}

// The model's file system: entries by clean path ("." the root); the
// names of one file share its *mInode.
type mInode struct {
	data     []byte
	mode     int64
	uid, gid int
	mtime    int64
}

type mEnt struct {
	dir      bool
	mode     int64 // a directory's
	uid, gid int   // a directory's
	ino      *mInode
}

type tarModel struct {
	ents    map[string]*mEnt
	umask   int64
	budget  Budget
	spent   int64
	read    int64
	stats   Stats
	touched map[string]uint8
}

// runModel applies the layers' items as the OCI layer rules and
// Unpack's documentation say; false where it does not know (a layer
// holds a symlink: what follows then depends on where it points).
func runModel(layers []*gLayerT, budget Budget, umask int) (modelResult, bool) {
	for _, l := range layers {
		for _, it := range l.items {
			if it.hdr.Typeflag == tar.TypeSymlink {
				return modelResult{}, false
			}
		}
	}
	m := &tarModel{ents: map[string]*mEnt{".": {dir: true, mode: 0o755}}, umask: int64(umask), budget: budget}
	for _, l := range layers {
		m.touched = map[string]uint8{}
		for _, it := range l.items {
			if c := m.item(it); c != "" {
				return modelResult{class: c}, true
			}
		}
		if l.corrupt {
			return modelResult{class: "hostile"}, true
		}
	}
	return modelResult{class: "ok", tree: m.tree(), stats: m.stats}, true
}

func (m *tarModel) item(it gItem) string {
	switch {
	case it.bad:
		return "hostile"
	case it.isTrail:
		if it.trailing > m.budget.Bytes-m.spent {
			return "toolarge"
		}
		m.spent += it.trailing
		return ""
	}
	if m.read++; m.read > m.budget.Entries {
		return "toolarge"
	}
	h := it.hdr
	if h.Typeflag == tar.TypeXGlobalHeader {
		return ""
	}
	name, ok := modelClean(h.Name)
	if !ok || h.Uid < 0 || h.Gid < 0 || h.Uid > 1<<32-2 || h.Gid > 1<<32-2 {
		return "hostile"
	}
	if strings.HasPrefix(path.Base(name), ".wh.") {
		if c := m.whiteout(name); c != "" || !it.dataErr {
			return c
		}
		return "hostile" // its body is skipped, and ends early
	}
	if name == "." && h.Typeflag != tar.TypeDir {
		return "hostile"
	}
	switch h.Typeflag {
	case tar.TypeReg:
		if h.Size > m.budget.Bytes-m.spent {
			return "toolarge"
		}
		if !m.mkdirAll(path.Dir(name)) {
			return "hostile"
		}
		m.removeAll(name)
		if it.dataErr {
			return "hostile"
		}
		m.ents[name] = &mEnt{ino: &mInode{data: it.content, mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, mtime: h.ModTime.Unix()}}
		m.spent += h.Size
		m.stats.Bytes += h.Size
		m.stats.Files++
		m.touch(name)
	case tar.TypeDir:
		if name != "." {
			if !m.mkdirAll(path.Dir(name)) {
				return "hostile"
			}
			e := m.ents[name]
			if e == nil || !e.dir {
				m.removeAll(name)
				e = &mEnt{dir: true}
				m.ents[name] = e
			}
			e.mode, e.uid, e.gid = h.Mode&0o7777, h.Uid, h.Gid
		}
		m.stats.Dirs++
		m.touch(name)
	case tar.TypeLink:
		target, ok := modelClean(h.Linkname)
		if !ok || target == name {
			return "hostile"
		}
		if e, state := m.lookup(target); state != "ok" || e.dir {
			return "hostile"
		}
		if !m.mkdirAll(path.Dir(name)) {
			return "hostile"
		}
		m.removeAll(name)
		e := m.ents[target]
		if e == nil {
			return "hostile" // it was below name
		}
		m.ents[name] = &mEnt{ino: e.ino}
		m.stats.HardLinks++
		m.touch(name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !m.mkdirAll(path.Dir(name)) {
			return "hostile"
		}
		m.removeAll(name)
		m.stats.Skipped++
	default:
		return "hostile"
	}
	return ""
}

// modelClean is the name rule: relative to the root, cleaned, refused
// with a NUL, past PATH_MAX or NAME_MAX, or climbing above the root.
func modelClean(raw string) (string, bool) {
	if raw == "" || strings.IndexByte(raw, 0) >= 0 || len(raw) > 4096 {
		return "", false
	}
	var stack []string
	for _, c := range strings.Split(raw, "/") {
		switch {
		case c == "" || c == ".":
		case c == "..":
			if len(stack) == 0 {
				return "", false
			}
			stack = stack[:len(stack)-1]
		case len(c) > 255:
			return "", false
		default:
			stack = append(stack, c)
		}
	}
	if len(stack) == 0 {
		return ".", true
	}
	return strings.Join(stack, "/"), true
}

// lookup finds p: "ok", "absent", or "notdir" (a parent is not a
// directory).
func (m *tarModel) lookup(p string) (*mEnt, string) {
	if p == "." {
		return m.ents["."], "ok"
	}
	comps := strings.Split(p, "/")
	for i := 1; i < len(comps); i++ {
		e := m.ents[strings.Join(comps[:i], "/")]
		if e == nil {
			return nil, "absent"
		}
		if !e.dir {
			return nil, "notdir"
		}
	}
	if e := m.ents[p]; e != nil {
		return e, "ok"
	}
	return nil, "absent"
}

// mkdirAll makes the missing directories of dir, 0755 less the umask,
// owned by root, or by a set-gid parent's group (and set-gid).
func (m *tarModel) mkdirAll(dir string) bool {
	if dir == "." {
		return true
	}
	comps := strings.Split(dir, "/")
	for i := 1; i <= len(comps); i++ {
		p := strings.Join(comps[:i], "/")
		e := m.ents[p]
		if e == nil {
			parent := m.ents[path.Dir(p)]
			e = &mEnt{dir: true, mode: 0o755 &^ m.umask}
			if parent.mode&0o2000 != 0 {
				e.gid = parent.gid
				e.mode |= 0o2000
			}
			m.ents[p] = e
		} else if !e.dir {
			return false
		}
	}
	return true
}

func (m *tarModel) removeAll(p string) {
	delete(m.ents, p)
	for k := range m.ents {
		if strings.HasPrefix(k, p+"/") {
			delete(m.ents, k)
		}
	}
}

func (m *tarModel) touch(name string) {
	m.touched[name] |= touchedEntry
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		m.touched[p] |= touchedBelow
	}
}

// whiteout: .wh.NAME removes NAME; .wh..wh..opq hides what lower layers
// put in its directory; other .wh..wh. names are skipped.
func (m *tarModel) whiteout(name string) string {
	dir, base := path.Dir(name), path.Base(name)
	switch {
	case base == ".wh..wh..opq":
		e, state := m.lookup(dir)
		switch {
		case state == "notdir" || state == "ok" && !e.dir:
			return "hostile"
		case state == "ok":
			m.opaque(dir)
		}
		m.stats.Whiteouts++
	case strings.HasPrefix(base, ".wh..wh."):
		m.stats.Skipped++
	default:
		victim := strings.TrimPrefix(base, ".wh.")
		if victim == "" || victim == "." || victim == ".." {
			return "hostile"
		}
		target := path.Join(dir, victim)
		if _, state := m.lookup(target); state == "notdir" {
			return "hostile"
		}
		m.removeAll(target)
		m.stats.Whiteouts++
	}
	return ""
}

// opaque removes below dir what this layer did not write.
func (m *tarModel) opaque(dir string) {
	stack := []string{dir}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		var children []string
		for k := range m.ents {
			if k != "." && path.Dir(k) == d {
				children = append(children, k)
			}
		}
		for _, p := range children {
			t := m.touched[p]
			switch {
			case t != 0 && m.ents[p] != nil && m.ents[p].dir:
				stack = append(stack, p)
			case t&touchedEntry != 0:
			default:
				m.removeAll(p)
			}
		}
	}
}

// tree lists the model as fuzzTree lists a root.
func (m *tarModel) tree() []string {
	type ent struct {
		rel, line string
		ino       *mInode
	}
	var ents []ent
	for p, e := range m.ents {
		if p == "." {
			continue
		}
		if e.dir {
			ents = append(ents, ent{p, fmt.Sprintf("%q %o %d:%d", p, unix.S_IFDIR|e.mode, e.uid, e.gid), nil})
			continue
		}
		i := e.ino
		ents = append(ents, ent{p, fmt.Sprintf("%q %o %d:%d mtime=%d sha=%x", p, unix.S_IFREG|i.mode, i.uid, i.gid, i.mtime, sha256.Sum256(i.data)), i})
	}
	return groupLines(len(ents), func(i int) (string, string, any, bool) {
		return ents[i].rel, ents[i].line, ents[i].ino, ents[i].ino != nil
	})
}
