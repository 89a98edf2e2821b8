// Package paths answers one question lexically: is this path inside that
// directory? Mount sources, masks, read-only trust paths and submodules
// are all decided by a path's place in a tree, and they differ only in
// whether the directory itself counts: Within says yes, Below says no.
//
// Nothing here touches the file system. A caller that must not be fooled
// by a symlink opens what it decided on with internal/files. This package
// imports nothing of airlock's.
package paths

import (
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
