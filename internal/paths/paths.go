// Package paths answers two questions lexically. Is this path inside that
// directory? Mount sources, masks, read-only trust paths and submodules
// are all decided by a path's place in a tree, and they differ only in
// whether the directory itself counts: Within says yes, Below says no.
// And is this URL path in plain form (PlainURLPath), the one check that
// egress rules and the credential vault both rely on?
//
// Nothing here touches the file system. A caller that must not be fooled
// by a symlink opens what it decided on with internal/files.
//
// Layer 0: imports nothing of airlock's.
package paths

import (
	pathpkg "path"
	"path/filepath"
	"strings"
)

// Within reports whether p is dir itself or lies below it. Both are
// cleaned first; both must be absolute, or both relative. An empty dir
// contains nothing.
func Within(p, dir string) bool {
	if dir == "" {
		return false
	}
	return filepath.Clean(p) == filepath.Clean(dir) || Below(p, dir)
}

// Below reports whether p lies strictly below dir: dir itself is not
// below dir. Both are cleaned first, as for Within.
func Below(p, dir string) bool {
	if dir == "" {
		return false
	}
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	switch dir {
	case "/":
		return p != "/" && strings.HasPrefix(p, "/")
	case ".":
		return p != "." && !filepath.IsAbs(p) && p != ".." && !strings.HasPrefix(p, "../")
	}
	return strings.HasPrefix(p, dir+"/")
}

// WithinAny reports whether p is within one of dirs (see Within).
func WithinAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if Within(p, d) {
			return true
		}
	}
	return false
}

// BelowAny reports whether p is below one of dirs (see Below).
func BelowAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if Below(p, d) {
			return true
		}
	}
	return false
}

// PlainURLPath reports whether a URL path is in plain form, so that it
// means the same to every server: no doubled slash, no dot segment, no
// encoded dot, slash or backslash, no backslash. path is the decoded
// path, escaped its escaped form (url.URL's Path and EscapedPath()).
// Servers normalise other forms in ways of their own: a path a rule or
// the credential vault took for one place could reach another. The
// empty path (a URL with none) is plain.
func PlainURLPath(path, escaped string) bool {
	if path == "" && escaped == "" {
		return true
	}
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "\\") {
		return false
	}
	if clean := pathpkg.Clean(path); clean != path && clean+"/" != path {
		return false
	}
	low := strings.ToLower(escaped)
	for _, bad := range []string{"//", "/./", "/../", "%2e", "%2f", "%5c", "\\"} {
		if strings.Contains(low, bad) {
			return false
		}
	}
	return !strings.HasSuffix(escaped, "/.") && !strings.HasSuffix(escaped, "/..")
}
