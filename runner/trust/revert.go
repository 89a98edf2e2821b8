package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"syscall"
)

// Revert restores, in the workspace ws, every run-time finding whose
// action is revert or readonly to its state in before: files the job
// created are removed, changed or deleted ones get their bytes, mode,
// owner or symlink target back. Nothing is followed through a symlink
// (the path is removed and recreated). Each finding's Outcome says what
// happened.
func Revert(ws string, before *Snapshot, findings []Finding) error {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return fmt.Errorf("trust: open workspace: %w", err)
	}
	defer root.Close()
	var errs []error
	// One restore per path, whatever number of findings (of categories
	// with other actions, too) it has; each of them says what happened.
	outcome := map[string]string{}
	for i := range findings {
		f := &findings[i]
		if f.Phase != Runtime || (f.Action != ActionRevert && f.Action != ActionReadonly) {
			continue
		}
		if _, done := outcome[f.Path]; done {
			continue
		}
		outcome[f.Path] = "reverted"
		if err := restore(root, f.Path, before.Entries[f.Path]); err != nil {
			outcome[f.Path] = "could not revert: " + err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", f.Path, err))
		}
	}
	for i := range findings {
		if o, ok := outcome[findings[i].Path]; ok && findings[i].Phase == Runtime {
			findings[i].Outcome = o
		}
	}
	return errors.Join(errs...)
}

// restore puts path p back to e (nil: it did not exist). What cannot be
// put back is left as the job made it, never removed.
func restore(root *os.Root, p string, e *Entry) error {
	if e != nil && e.Mode.IsRegular() && !e.kept {
		return fmt.Errorf("the pre-job copy was too large to keep")
	}
	if e != nil && e.Mode&fs.ModeSymlink != 0 && e.Link == "" {
		return fmt.Errorf("the pre-job link target is not known")
	}
	if e != nil && e.Mode&fs.ModeSymlink == 0 && !e.Mode.IsRegular() {
		return fmt.Errorf("was a %v, not restored", e.Mode.Type())
	}
	if err := root.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if e == nil {
		return nil
	}
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch {
	case e.Mode&fs.ModeSymlink != 0:
		if err := root.Symlink(e.Link, p); err != nil {
			return err
		}
	case e.Mode.IsRegular():
		if !e.kept {
			return fmt.Errorf("the pre-job copy was too large to keep")
		}
		f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, e.Mode.Perm())
		if err != nil {
			return err
		}
		_, werr := f.Write(e.data)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
		if err := root.Chmod(p, e.Mode.Perm()); err != nil {
			return err
		}
	default:
		return fmt.Errorf("was a %v, not restored", e.Mode.Type())
	}
	return root.Lchown(p, e.UID, e.GID)
}

// ReadonlyPaths are the workspace-relative paths to mount read-only into
// the sandbox for the categories whose run-time action is readonly: the
// hooks directory and the git config for git-hooks and git-config, and the
// existing files of other categories. Symlinks are never mounted (the
// revert after the job covers them).
func ReadonlyPaths(snap *Snapshot, set *Set, ws string) []string {
	ro := map[Category]bool{}
	for _, c := range set.ReadonlyCategories() {
		ro[c] = true
	}
	var out []string
	add := func(p string) {
		fi, err := os.Lstat(path.Join(ws, p))
		if err == nil && fi.Mode()&fs.ModeSymlink == 0 && (fi.IsDir() || fi.Mode().IsRegular()) {
			out = append(out, p)
		}
	}
	if ro[GitHooks] {
		if fi, err := os.Lstat(path.Join(ws, ".git")); err == nil && fi.IsDir() {
			add(".git/hooks")
		}
	}
	if ro[GitConfig] {
		if fi, err := os.Lstat(path.Join(ws, ".git")); err == nil && fi.IsDir() {
			add(".git/config")
		}
	}
	for _, p := range slices.Sorted(maps.Keys(snap.Entries)) {
		c := snap.Entries[p].Category
		if ro[c] && c != GitHooks && c != GitConfig {
			add(p)
		}
	}
	return out
}
