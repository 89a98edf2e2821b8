package files

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// Bounds of a tree TreeDigest reads: an action's directory is a few
// hundred files; one past these is refused rather than hashed for long.
const (
	MaxTreeEntries = 100_000
	MaxTreeBytes   = 1 << 30
)

// Git's modes, which TreeDigest records instead of the permission bits:
// a tree unpacked under another umask digests the same.
const (
	treeModeDir     = "040000"
	treeModeFile    = "100644"
	treeModeExec    = "100755"
	treeModeSymlink = "120000"
)

// TreeDigest is the hex sha256 of the canonical listing of the tree
// below root (airlock's tree-v1 form, docs/provenance.md): one line per
// entry below the root, sorted by its slash-separated path as bytes,
//
//	path NUL mode NUL digest LF
//
// where mode is git's (040000 a directory, 100644 a file, 100755 a file
// with an execute bit, 120000 a symlink) and digest is the hex sha256 of
// a file's content or of a symlink's target, empty for a directory.
// Nothing is followed: a symlink is its target's text, wherever it
// points. A FIFO, device or socket, or a tree past MaxTreeEntries or
// MaxTreeBytes, is an error.
func TreeDigest(root *os.Root) (string, error) {
	var lines []string
	var total int64
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if len(lines) == MaxTreeEntries {
			return fmt.Errorf("more than %d entries", MaxTreeEntries)
		}
		mode, digest, n, err := treeEntry(root, p, d)
		if err != nil {
			return err
		}
		if total += n; total > MaxTreeBytes {
			return fmt.Errorf("more than %d bytes of files", int64(MaxTreeBytes))
		}
		lines = append(lines, p+"\x00"+mode+"\x00"+digest+"\n")
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("tree digest: %w", err)
	}
	slices.Sort(lines) // the path leads each line, and NUL sorts first
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return hex.EncodeToString(sum[:]), nil
}

// treeEntry is one entry's mode and digest, and the bytes it read.
func treeEntry(root *os.Root, p string, d fs.DirEntry) (mode, digest string, n int64, err error) {
	switch t := d.Type(); {
	case t.IsDir():
		return treeModeDir, "", 0, nil
	case t&fs.ModeSymlink != 0:
		target, err := root.Readlink(p)
		if err != nil {
			return "", "", 0, err
		}
		sum := sha256.Sum256([]byte(target))
		return treeModeSymlink, hex.EncodeToString(sum[:]), 0, nil
	case !t.IsRegular():
		return "", "", 0, fmt.Errorf("%s: a %v is not digested", p, t.Type())
	}
	// Opened without following a link, nor blocking on what replaced
	// the file since the directory was read.
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", "", 0, fmt.Errorf("%s: not a regular file", p)
	}
	h := sha256.New()
	if n, err = io.Copy(h, io.LimitReader(f, MaxTreeBytes+1)); err != nil {
		return "", "", 0, fmt.Errorf("%s: %w", p, err)
	}
	mode = treeModeFile
	if fi.Mode().Perm()&0o111 != 0 {
		mode = treeModeExec
	}
	return mode, hex.EncodeToString(h.Sum(nil)), n, nil
}
