package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The hostile layers are built here, in the test, with archive/tar (and
// by hand where archive/tar's Writer refuses to write what an attacker
// would: a NUL in a name, a PAX sparse header).

// tentry is one entry of a test layer: a header and its data, or raw
// bytes (whole 512-byte blocks) written as they are.
type tentry struct {
	hdr  tar.Header
	body string
	raw  []byte
}

var testTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)

func reg(name, body string) tentry { return regM(name, body, 0o644, 0, 0) }

func regM(name, body string, mode int64, uid, gid int) tentry {
	return tentry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Uid: uid, Gid: gid, Size: int64(len(body)), ModTime: testTime}, body: body}
}

func dirE(name string, mode int64) tentry {
	return tentry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode, ModTime: testTime}}
}

func symlinkE(name, target string) tentry {
	return tentry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777, ModTime: testTime}}
}

func hardlinkE(name, target string) tentry {
	return tentry{hdr: tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target, Mode: 0o644, ModTime: testTime}}
}

func nodeE(name string, typ byte) tentry {
	return tentry{hdr: tar.Header{Name: name, Typeflag: typ, Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: testTime}}
}

func typeE(name string, typ byte, body string) tentry {
	return tentry{hdr: tar.Header{Name: name, Typeflag: typ, Mode: 0o644, Size: int64(len(body)), ModTime: testTime}, body: body}
}

// tarOf writes entries as one tar stream.
func tarOf(t *testing.T, entries ...tentry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if e.raw != nil {
			if err := tw.Flush(); err != nil {
				t.Fatal(err)
			}
			buf.Write(e.raw)
			continue
		}
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// stream is a layer whose diff id is b's sha256, as a config would say.
func stream(b []byte) LayerStream {
	sum := sha256.Sum256(b)
	return LayerStream{DiffID: "sha256:" + hex.EncodeToString(sum[:]), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
}

// layers turns tar streams into LayerStreams.
func layers(streams ...[]byte) []LayerStream {
	var ls []LayerStream
	for _, b := range streams {
		ls = append(ls, stream(b))
	}
	return ls
}

// rawHeader is a ustar header block written byte by byte, so that it can
// hold what archive/tar's Writer refuses.
func rawHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], fmt.Sprintf("%011o\x00", testTime.Unix()))
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func padBlock(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// paxRecord is one "<length> key=value\n" record; the length counts itself.
func paxRecord(k, v string) string {
	body := " " + k + "=" + v + "\n"
	n := len(body)
	for len(strconv.Itoa(n))+len(body) != n {
		n = len(strconv.Itoa(n)) + len(body)
	}
	return strconv.Itoa(n) + body
}

// paxE is an entry preceded by a hand-made PAX extended header.
func paxE(name string, typ byte, data []byte, records ...[2]string) tentry {
	var rec string
	for _, kv := range records {
		rec += paxRecord(kv[0], kv[1])
	}
	var b []byte
	b = append(b, rawHeader("PaxHeaders/"+name, tar.TypeXHeader, int64(len(rec)))...)
	b = append(b, padBlock([]byte(rec))...)
	b = append(b, rawHeader(name, typ, int64(len(data)))...)
	b = append(b, padBlock(data)...)
	return tentry{raw: b}
}

// testEnv is dst and, next to it, what a hostile layer aims at: a
// sentinel directory with a file, and a file outside.
type testEnv struct {
	base, dst, sentinel, outside string
}

func newTestEnv(t *testing.T) testEnv {
	t.Helper()
	base := t.TempDir()
	e := testEnv{base: base, dst: filepath.Join(base, "rootfs"), sentinel: filepath.Join(base, "sentinel"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{e.dst, e.sentinel} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(e.sentinel, "keep"), []byte("sentinel"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.outside, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// outsideState describes everything in base except dst: type, mode,
// owner, size, links, inode, time and content, so any change shows.
func (e testEnv) outsideState(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(e.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == e.dst {
			return filepath.SkipDir
		}
		out = append(out, describe(t, p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func describe(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	s := fmt.Sprintf("%s %v %d:%d size=%d nlink=%d ino=%d mtime=%d", p, fi.Mode(), st.Uid, st.Gid, fi.Size(), st.Nlink, st.Ino, fi.ModTime().UnixNano())
	if fi.Mode().IsRegular() {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
	}
	return s
}

// tree lists dst as sorted "path mode uid:gid what" lines.
func tree(t *testing.T, dst string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dst {
			return nil
		}
		rel, _ := filepath.Rel(dst, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" nlink=%d %q", st.Nlink, b)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostFile is a fingerprint of a host file that a row aims at (the
// host's /etc/passwd), to check that it is untouched.
func hostFile(t *testing.T, p string) string {
	t.Helper()
	if _, err := os.Lstat(p); err != nil {
		return "absent"
	}
	return describe(t, p)
}

var testBudget = Budget{Bytes: 1 << 20, Entries: 1000}

// TestUnpackHostile runs one hostile (or merely odd) layer set per row and
// checks the exact outcome, and that nothing outside dst changed.
func TestUnpackHostile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (owners are set from the tar only as root; airlock's tests run as root): sudo go test ./runner/images/ -run Unpack")
	}
	// A host path that a symlink to "/" would lead to; it must stay absent.
	hostTmp := fmt.Sprintf("airlock-unpack-test-%d", os.Getpid())
	if _, err := os.Lstat(filepath.Join("/tmp", hostTmp)); err == nil {
		t.Fatalf("/tmp/%s exists before the test: remove it", hostTmp)
	}
	// The absolute-name rows name the host's /etc/passwd: be certain,
	// before anything runs, that such a name is made relative.
	if name, why := cleanName("/etc/passwd"); name != "etc/passwd" || why != "" {
		t.Fatalf("cleanName(/etc/passwd) = %q, %q: refusing to run rows that name the host's /etc/passwd", name, why)
	}
	deep := strings.Repeat("d/", 2000) + "f" // 4,001 bytes: within PATH_MAX
	tooDeep := strings.Repeat("d/", 4096) + "f"

	type row struct {
		name    string
		layers  func(t *testing.T, e testEnv) []LayerStream
		budget  Budget
		wantErr error  // nil: success
		wantSub string // in the error
		alsoIs  error  // another error the result must wrap
		check   func(t *testing.T, e testEnv, st Stats)
	}
	one := func(entries ...tentry) func(*testing.T, testEnv) []LayerStream {
		return func(t *testing.T, e testEnv) []LayerStream { return layers(tarOf(t, entries...)) }
	}
	exists := func(rel, content string) func(*testing.T, testEnv, Stats) {
		return func(t *testing.T, e testEnv, _ Stats) {
			if got := readFile(t, filepath.Join(e.dst, rel)); got != content {
				t.Errorf("%s holds %q, want %q", rel, got, content)
			}
		}
	}
	absent := func(rel string) func(*testing.T, testEnv, Stats) {
		return func(t *testing.T, e testEnv, _ Stats) {
			if _, err := os.Lstat(filepath.Join(e.dst, rel)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %v, want it absent", rel, err)
			}
		}
	}
	rows := []row{
		// Names (CVE-2018-15664's lesson: no path is trusted as text).
		{name: "dot-dot escape", layers: one(reg("../escape", "x")),
			wantErr: ErrHostileLayer, wantSub: `entry "../escape": its name climbs out of the image's root`},
		{name: "dot-dot after a component", layers: one(reg("a/../../escape", "x")),
			wantErr: ErrHostileLayer, wantSub: `entry "a/../../escape": its name climbs out`},
		{name: "dot-dot staying inside is cleaned", layers: one(reg("a/../b", "x")),
			check: exists("b", "x")},
		{name: "absolute /etc/passwd lands in dst", layers: one(reg("/etc/passwd", "pwned")),
			check: exists("etc/passwd", "pwned")},
		{name: "absolute name of a host file lands in dst", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(tarOf(t, reg(e.outside, "pwned")))
		}, check: func(t *testing.T, e testEnv, _ Stats) {
			if got := readFile(t, filepath.Join(e.dst, e.outside)); got != "pwned" {
				t.Errorf("dst%s holds %q", e.outside, got)
			}
		}},
		{name: "dot-slash name", layers: one(reg("./etc/x", "x"), reg(".//etc//y", "y")),
			check: exists("etc/y", "y")},
		{name: "NUL in a ustar name ends the name (archive/tar)", layers: one(tentry{raw: append(rawHeader("x\x00../../escape", tar.TypeReg, 1), padBlock([]byte("x"))...)}),
			check: exists("x", "x")},
		{name: "old regular-file type (TypeRegA)", layers: one(tentry{raw: append(rawHeader("old", 0, 3), padBlock([]byte("old"))...)}),
			check: exists("old", "old")},
		{name: "NUL in a PAX path", layers: one(reg("before", "b"), paxE("nul", tar.TypeReg, []byte("x"), [2]string{"path", "a\x00/../../escape"})),
			wantErr: ErrHostileLayer, wantSub: `not a valid tar after entry "before"`, alsoIs: tar.ErrHeader},
		{name: "name longer than PATH_MAX", layers: one(reg(tooDeep, "x")),
			wantErr: ErrHostileLayer, wantSub: "is 8193 bytes long, longer than Linux's PATH_MAX (4096)"},
		{name: "component longer than NAME_MAX", layers: one(reg("a/"+strings.Repeat("n", 256), "x")),
			wantErr: ErrHostileLayer, wantSub: "has a component 256 bytes long, longer than Linux's NAME_MAX (255)"},
		{name: "2000 components deep, no recursion", layers: one(reg(deep, "deep")),
			check: func(t *testing.T, e testEnv, st Stats) {
				r, err := os.OpenRoot(e.dst)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if b, err := r.ReadFile(deep); err != nil || string(b) != "deep" {
					t.Errorf("the deep file: %q, %v", b, err)
				}
			}},

		// Symlinks: written as they are, never followed out of dst
		// (CVE-2018-15664, CVE-2021-29136).
		{name: "symlink to / then a file through it", layers: one(symlinkE("lnk", "/"), reg("lnk/tmp/"+hostTmp, "pwned")),
			wantErr: ErrHostileLayer, wantSub: `entry "lnk/tmp/` + hostTmp + `": making its directory: `,
			check: func(t *testing.T, e testEnv, _ Stats) {
				if _, err := os.Lstat(filepath.Join("/tmp", hostTmp)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("/tmp/%s: %v: the host's /tmp was written", hostTmp, err)
				}
			}},
		{name: "absolute symlink to a host directory then a file through it", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(tarOf(t, symlinkE("lnk", e.sentinel), reg("lnk/keep", "pwned")))
		}, wantErr: ErrHostileLayer, wantSub: `entry "lnk/keep": making its directory: its path leaves the image's root`},
		{name: "symlink ../.. then a file through it", layers: one(symlinkE("lnk", "../.."), reg("lnk/x", "pwned")),
			wantErr: ErrHostileLayer, wantSub: `entry "lnk/x": making its directory: its path leaves the image's root`},
		{name: "symlink ../sentinel then overwrite its file", layers: one(symlinkE("lnk", "../sentinel"), reg("lnk/keep", "pwned")),
			wantErr: ErrHostileLayer, wantSub: `entry "lnk/keep": `},
		{name: "symlink chain through two layers", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(tarOf(t, symlinkE("a", "b")), tarOf(t, symlinkE("b", "../sentinel"), reg("a/keep", "pwned")))
		}, wantErr: ErrHostileLayer, wantSub: `layer 2 of 2, entry "a/keep": `},
		{name: "directory replaced by a symlink, then written through", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(tarOf(t, dirE("d/", 0o755), reg("d/f", "f")), tarOf(t, symlinkE("d", "../sentinel"), reg("d/keep", "pwned")))
		}, wantErr: ErrHostileLayer, wantSub: `layer 2 of 2, entry "d/keep": `},
		{name: "directory replaced by a symlink in the same layer, then written through", layers: one(dirE("d/", 0o755), reg("d/f", "f"), symlinkE("d", "../sentinel"), reg("d/keep", "pwned")),
			wantErr: ErrHostileLayer, wantSub: `layer 1 of 1, entry "d/keep": making its directory: its path leaves the image's root`},
		{name: "absolute symlink text is kept", layers: one(dirE("usr/bin/", 0o755), reg("usr/bin/python3.11", "py"), symlinkE("usr/bin/python", "/usr/bin/python3.11")),
			check: func(t *testing.T, e testEnv, _ Stats) {
				if target, err := os.Readlink(filepath.Join(e.dst, "usr/bin/python")); err != nil || target != "/usr/bin/python3.11" {
					t.Errorf("usr/bin/python -> %q, %v", target, err)
				}
			}},
		{name: "symlink inside dst is followed inside", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(tarOf(t, dirE("real/", 0o755), symlinkE("a", "real")), tarOf(t, reg("a/x", "x")))
		}, check: exists("real/x", "x")},
		{name: "symlink entry for / (umoci CVE-2021-29136)", layers: one(symlinkE("/", "../sentinel"), reg("keep", "pwned")),
			wantErr: ErrHostileLayer, wantSub: `entry "/": it would replace the image's root directory with a symlink`},
		{name: "symlink entry for ./ (umoci CVE-2021-29136)", layers: one(symlinkE("./", "../sentinel"), reg("keep", "pwned")),
			wantErr: ErrHostileLayer, wantSub: `entry "./": it would replace the image's root directory with a symlink`},

		// Hard links: only to what is already inside dst.
		{name: "hard link to /etc/passwd not in the image", layers: one(hardlinkE("h", "/etc/passwd")),
			wantErr: ErrHostileLayer, wantSub: `entry "h": its hard link target "/etc/passwd" is not in the image`},
		{name: "hard link to /etc/passwd in the image links dst's own", layers: one(reg("etc/passwd", "root:x:0:0::/root:/bin/sh\n"), hardlinkE("h", "/etc/passwd")),
			check: func(t *testing.T, e testEnv, _ Stats) {
				a, _ := os.Stat(filepath.Join(e.dst, "h"))
				b, _ := os.Stat(filepath.Join(e.dst, "etc/passwd"))
				if a == nil || b == nil || !os.SameFile(a, b) {
					t.Errorf("h is not dst's etc/passwd")
				}
			}},
		{name: "hard link climbing out", layers: one(hardlinkE("h", "../../outside")),
			wantErr: ErrHostileLayer, wantSub: `entry "h": its hard link target "../../outside" climbs out of the image's root`},
		{name: "hard link through a symlink dir pointing outside", layers: one(symlinkE("lnk", "../sentinel"), hardlinkE("h", "lnk/keep")),
			wantErr: ErrHostileLayer, wantSub: `entry "h": looking up its hard link target "lnk/keep": its path leaves the image's root`},
		{name: "hard link to a symlink pointing outside links the symlink", layers: one(symlinkE("lnk", "../outside"), hardlinkE("h", "lnk")),
			check: func(t *testing.T, e testEnv, _ Stats) {
				if target, err := os.Readlink(filepath.Join(e.dst, "h")); err != nil || target != "../outside" {
					t.Errorf("h -> %q, %v: want the symlink itself", target, err)
				}
			}},
		{name: "hard link to a directory", layers: one(dirE("d/", 0o755), hardlinkE("h", "d")),
			wantErr: ErrHostileLayer, wantSub: `entry "h": its hard link target "d" is a directory`},
		{name: "hard link to itself", layers: one(reg("f", "f"), hardlinkE("f", "f")),
			wantErr: ErrHostileLayer, wantSub: `entry "f": it is a hard link to itself`},

		// Whiteouts: only inside the entry's own directory, inside dst.
		{name: "whiteout of ..", layers: one(dirE("d/", 0o755), reg("d/.wh...", "")),
			wantErr: ErrHostileLayer, wantSub: `entry "d/.wh...": it is a whiteout of "..", which names no entry`},
		{name: "whiteout of .", layers: one(dirE("d/", 0o755), reg("d/.wh..", "")),
			wantErr: ErrHostileLayer, wantSub: `entry "d/.wh..": it is a whiteout of "."`},
		{name: "whiteout with no name", layers: one(reg(".wh.", "")),
			wantErr: ErrHostileLayer, wantSub: `entry ".wh.": it is a whiteout of ""`},
		{name: "whiteout through a symlink dir pointing outside", layers: one(symlinkE("lnk", "../sentinel"), reg("lnk/.wh.keep", "")),
			wantErr: ErrHostileLayer, wantSub: `entry "lnk/.wh.keep": removing "lnk/keep": `},
		{name: "whiteout of a symlink removes the link, not its target", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(tarOf(t, symlinkE("lnk", "../sentinel")), tarOf(t, reg(".wh.lnk", "")))
		}, check: absent("lnk")},
		{name: "opaque marker in a symlinked dir", layers: one(symlinkE("lnk", "../sentinel"), reg("lnk/.wh..wh..opq", "")),
			wantErr: ErrHostileLayer, wantSub: `entry "lnk/.wh..wh..opq": it is an opaque marker in "lnk", which is a symlink, not a directory`},
		{name: "opaque marker below a symlink climbing out", layers: one(symlinkE("lnk", "../.."), reg("lnk/sentinel/.wh..wh..opq", "")),
			wantErr: ErrHostileLayer, wantSub: `entry "lnk/sentinel/.wh..wh..opq": looking at its directory: `},
		{name: "aufs metadata is skipped", layers: one(reg(".wh..wh.plnk", "")),
			check: func(t *testing.T, e testEnv, st Stats) {
				if st.Skipped != 1 || st.Whiteouts != 0 {
					t.Errorf("stats %+v", st)
				}
			}},

		// Device nodes and FIFOs: never made; skipped and counted.
		{name: "char device, block device, fifo", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(tarOf(t, reg("dev/null", "lower")), tarOf(t, nodeE("dev/null", tar.TypeChar), nodeE("dev/sda", tar.TypeBlock), nodeE("run/fifo", tar.TypeFifo)))
		}, check: func(t *testing.T, e testEnv, st Stats) {
			if st.Skipped != 3 {
				t.Errorf("Skipped = %d, want 3", st.Skipped)
			}
			for _, p := range []string{"dev/null", "dev/sda", "run/fifo"} {
				absent(p)(t, e, st)
			}
		}},

		// Types and owners.
		{name: "unknown type", layers: one(typeE("weird", 'Z', "")),
			wantErr: ErrHostileLayer, wantSub: `entry "weird": its type 'Z' is not one airlock unpacks`},
		{name: "contiguous file type", layers: one(typeE("cont", tar.TypeCont, "x")),
			wantErr: ErrHostileLayer, wantSub: `entry "cont": its type '7' is not one airlock unpacks`},
		{name: "global header is ignored", layers: one(tentry{hdr: tar.Header{Name: "g", Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "hi"}}}, reg("f", "f")),
			check: exists("f", "f")},
		{name: "owner beyond 32 bits", layers: one(regM("f", "f", 0o644, 1<<40, 0)),
			wantErr: ErrHostileLayer, wantSub: `entry "f": its owner 1099511627776:0 is not a Linux user and group id`},

		// Digests.
		{name: "diff id mismatch, after applying", layers: func(t *testing.T, e testEnv) []LayerStream {
			l := stream(tarOf(t, reg("applied", "x")))
			l.DiffID = "sha256:" + strings.Repeat("ab", 32)
			return []LayerStream{l}
		}, wantErr: ErrHostileLayer, wantSub: "layer 1: its content is sha256:",
			check: exists("applied", "x")},
		{name: "diff id not sha256", layers: func(t *testing.T, e testEnv) []LayerStream {
			l := stream(tarOf(t, reg("f", "x")))
			l.DiffID = "sha512:abc"
			return []LayerStream{l}
		}, wantErr: ErrHostileLayer, wantSub: `layer 1 of 1: its diff id "sha512:abc" is not`},
		{name: "trailing padding is covered by the digest", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(append(tarOf(t, reg("f", "x")), make([]byte, 10240)...))
		}, check: exists("f", "x")},

		// Budget: tar bombs and inode bombs.
		{name: "sparse tar bomb (1 TiB in a few blocks)", layers: one(paxE("bomb", tar.TypeReg, []byte("x"),
			[2]string{"GNU.sparse.size", strconv.FormatInt(1<<40, 10)},
			[2]string{"GNU.sparse.numblocks", "1"},
			[2]string{"GNU.sparse.map", "0,1"})),
			wantErr: ErrTooLarge, wantSub: `entry "bomb": its 1099511627776 bytes exceed the 1048576 bytes left`,
			check: absent("bomb")},
		{name: "bytes over budget across layers", layers: func(t *testing.T, e testEnv) []LayerStream {
			big := strings.Repeat("z", 600<<10)
			return layers(tarOf(t, reg("one", big)), tarOf(t, reg("two", big)))
		}, wantErr: ErrTooLarge, wantSub: `layer 2 of 2, entry "two": its 614400 bytes exceed the 434176 bytes left`,
			check: absent("two")},
		{name: "trailing bytes over budget", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers(append(tarOf(t, reg("f", "x")), make([]byte, 2<<20)...))
		}, wantErr: ErrTooLarge, wantSub: "layer 1 of 1: more than 1048575 bytes follow the tar's end"},
		{name: "inode bomb", layers: func(t *testing.T, e testEnv) []LayerStream {
			var es []tentry
			for i := range 5000 {
				es = append(es, reg(fmt.Sprintf("f%d", i), ""))
			}
			return layers(tarOf(t, es...))
		}, wantErr: ErrTooLarge, wantSub: `entry "f1000": the image has more than 1000 entries`,
			check: func(t *testing.T, e testEnv, _ Stats) {
				if n := len(tree(t, e.dst)); n != 1000 {
					t.Errorf("%d files in dst, want 1000", n)
				}
			}},

		// Broken streams.
		{name: "truncated tar", layers: func(t *testing.T, e testEnv) []LayerStream {
			b := tarOf(t, reg("small", "s"), reg("big", strings.Repeat("b", 10000)))
			return layers(b[:512*3+4000])
		}, wantErr: ErrHostileLayer, wantSub: `entry "big": its data ends before its size (10000 bytes)`, alsoIs: io.ErrUnexpectedEOF},
		{name: "not a tar", layers: func(t *testing.T, e testEnv) []LayerStream {
			return layers([]byte(strings.Repeat("this is not a tar archive\n", 80)))
		}, wantErr: ErrHostileLayer, wantSub: "layer 1 of 1: not a valid tar at its start", alsoIs: tar.ErrHeader},
	}

	passwdBefore := hostFile(t, "/etc/passwd")
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			e := newTestEnv(t)
			before := e.outsideState(t)
			budget := r.budget
			if budget == (Budget{}) {
				budget = testBudget
			}
			st, err := Unpack(e.dst, r.layers(t, e), budget)
			// Outside first, and whatever the outcome: an escape must
			// show even when the error is also wrong.
			if after := e.outsideState(t); !slices.Equal(before, after) {
				t.Errorf("outside dst changed:\nbefore %q\nafter  %q", before, after)
			}
			if got := hostFile(t, "/etc/passwd"); got != passwdBefore {
				t.Errorf("the host's /etc/passwd changed: %s, was %s", got, passwdBefore)
			}
			switch {
			case r.wantErr == nil && err != nil:
				t.Fatalf("Unpack: %v", err)
			case r.wantErr != nil && !errors.Is(err, r.wantErr):
				t.Fatalf("Unpack: %v, want %v", err, r.wantErr)
			case r.wantErr != nil && !strings.Contains(err.Error(), r.wantSub):
				t.Errorf("Unpack: %v\nwant it to contain %q", err, r.wantSub)
			case r.alsoIs != nil && !errors.Is(err, r.alsoIs):
				t.Errorf("Unpack: %v, want it to wrap %v too", err, r.alsoIs)
			}
			if err != nil {
				t.Logf("refused as wanted: %v", err)
			}
			if r.check != nil {
				r.check(t, e, st)
			}
		})
	}
}

// TestUnpackImage unpacks a normal two-layer image and checks the tree
// exactly: whiteout, opaque directory (marker after and before the
// layer's own entries), symlink replaced by a file, directory replaced by
// a file, hard link, kept directory content with a new mode, setuid and
// sticky bits, owners, times, and skipped nodes.
func TestUnpackImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (owners are set from the tar only as root; airlock's tests run as root): sudo go test ./runner/images/ -run Unpack")
	}
	e := newTestEnv(t)
	before := e.outsideState(t)
	l1 := tarOf(t,
		dirE("./", 0o755),
		dirE("etc/", 0o755),
		reg("etc/passwd", "root:x:0:0::/root:/bin/sh\n"),
		regM("etc/shadow", "root:*:", 0o640, 0, 42),
		symlinkE("etc/alt", "passwd"),
		dirE("usr/", 0o755),
		dirE("usr/bin/", 0o755),
		regM("usr/bin/python3.11", "ELF", 0o755, 0, 0),
		symlinkE("usr/bin/python", "/usr/bin/python3.11"),
		regM("usr/bin/sudo", "sudo", 0o4755, 0, 0),
		dirE("tmp/", 0o1777),
		reg("tmp/gone", "gone"),
		dirE("opt/", 0o755),
		reg("opt/a", "a"),
		dirE("opt/sub/", 0o755),
		reg("opt/sub/b", "b"),
		dirE("srv/", 0o755),
		dirE("srv/data/", 0o755),
		reg("srv/data/f", "f"),
		regM("home/user/notes", "notes", 0o600, 1000, 1000),
	)
	l2 := tarOf(t,
		dirE("etc/", 0o700),
		reg("etc/.wh.shadow", ""),
		regM("etc/alt", "replaced", 0o600, 0, 0),
		dirE("opt/", 0o755),
		reg("opt/new", "new"),
		dirE("opt/sub/", 0o750),
		reg("opt/sub/c", "c"),
		reg("opt/.wh..wh..opq", ""),
		reg("opt/late", "late"),
		hardlinkE("usr/bin/python3", "usr/bin/python3.11"),
		reg("tmp/.wh.gone", ""),
		reg("srv/data", "now a file"),
		nodeE("dev/null", tar.TypeChar),
		nodeE("run/initctl", tar.TypeFifo),
		reg(".wh..wh.plnk", ""),
	)
	st, err := Unpack(e.dst, layers(l1, l2), testBudget)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`dev drwxr-xr-x 0:0`,
		`etc drwx------ 0:0`,
		`etc/alt -rw------- 0:0 nlink=1 "replaced"`,
		`etc/passwd -rw-r--r-- 0:0 nlink=1 "root:x:0:0::/root:/bin/sh\n"`,
		`home drwxr-xr-x 0:0`,
		`home/user drwxr-xr-x 0:0`,
		`home/user/notes -rw------- 1000:1000 nlink=1 "notes"`,
		`opt drwxr-xr-x 0:0`,
		`opt/late -rw-r--r-- 0:0 nlink=1 "late"`,
		`opt/new -rw-r--r-- 0:0 nlink=1 "new"`,
		`opt/sub drwxr-x--- 0:0`,
		`opt/sub/c -rw-r--r-- 0:0 nlink=1 "c"`,
		`run drwxr-xr-x 0:0`,
		`srv drwxr-xr-x 0:0`,
		`srv/data -rw-r--r-- 0:0 nlink=1 "now a file"`,
		`tmp dtrwxrwxrwx 0:0`,
		`usr drwxr-xr-x 0:0`,
		`usr/bin drwxr-xr-x 0:0`,
		`usr/bin/python Lrwxrwxrwx 0:0 -> /usr/bin/python3.11`,
		`usr/bin/python3 -rwxr-xr-x 0:0 nlink=2 "ELF"`,
		`usr/bin/python3.11 -rwxr-xr-x 0:0 nlink=2 "ELF"`,
		`usr/bin/sudo urwxr-xr-x 0:0 nlink=1 "sudo"`,
	}
	if got := tree(t, e.dst); !slices.Equal(got, want) {
		t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	a, _ := os.Stat(filepath.Join(e.dst, "usr/bin/python3"))
	b, _ := os.Stat(filepath.Join(e.dst, "usr/bin/python3.11"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Error("usr/bin/python3 is not a hard link of usr/bin/python3.11")
	}
	// Times: a file's, and a directory's that no later entry touched.
	for _, p := range []string{"etc/passwd", "usr", "opt/sub/c"} {
		fi, err := os.Lstat(filepath.Join(e.dst, p))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(testTime) {
			t.Errorf("%s modified %v, want %v", p, fi.ModTime(), testTime)
		}
	}
	// dst itself stays as the caller made it.
	if fi, err := os.Stat(e.dst); err != nil || fi.Mode() != fs.ModeDir|0o755 {
		t.Errorf("dst: %v, %v", fi.Mode(), err)
	}
	wantBytes := int64(0)
	for _, l := range [][]byte{l1, l2} {
		tr := tar.NewReader(bytes.NewReader(l))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Typeflag == tar.TypeReg && !strings.Contains(h.Name, ".wh.") {
				wantBytes += h.Size
			}
		}
	}
	wantStats := Stats{Files: 14, Dirs: 12, Symlinks: 2, HardLinks: 1, Whiteouts: 3, Skipped: 3, Bytes: wantBytes}
	if st != wantStats {
		t.Errorf("stats %+v, want %+v", st, wantStats)
	}
	if after := e.outsideState(t); !slices.Equal(before, after) {
		t.Errorf("outside dst changed:\nbefore %q\nafter  %q", before, after)
	}
}

// TestUnpackArguments: what Unpack refuses before reading any layer.
func TestUnpackArguments(t *testing.T) {
	e := newTestEnv(t)
	if err := os.WriteFile(filepath.Join(e.dst, "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Unpack(e.dst, layers(tarOf(t, reg(".wh.old", ""))), testBudget)
	if err == nil || !strings.Contains(err.Error(), `it is not empty (it holds "old")`) {
		t.Errorf("non-empty dst: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(e.dst, "old")); err != nil {
		t.Errorf("the caller's file: %v", err)
	}
	e = newTestEnv(t)
	if _, err := Unpack(e.dst, nil, Budget{Bytes: 1}); err == nil || !strings.Contains(err.Error(), "must be positive") {
		t.Errorf("zero entries budget: %v", err)
	}
	openErr := errors.New("registry went away")
	_, err = Unpack(e.dst, []LayerStream{{DiffID: "sha256:" + strings.Repeat("0", 64), Open: func() (io.ReadCloser, error) { return nil, openErr }}}, testBudget)
	if !errors.Is(err, openErr) || errors.Is(err, ErrHostileLayer) {
		t.Errorf("open error: %v, want it wrapped and not blamed on the layer", err)
	}
}
