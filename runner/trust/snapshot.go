package trust

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Bounds of a snapshot: a hostile workspace can be huge, deep, or full
// of large files; none of that may make airlock slow or large.
const (
	maxWalkEntries = 200000   // directory entries visited
	maxWalkDepth   = 24       // directory depth
	maxKeep        = 1 << 20  // largest file kept for revert and diffs
	maxKeepTotal   = 64 << 20 // all kept files together
	maxHashRead    = 64 << 20 // largest file hashed in full
	maxReadTotal   = 1 << 30  // all files hashed together (sparse files are cheap to make)
)

// skipDirs are not walked: dependency trees the job fills (their build
// scripts ran already) and the git directory, inspected on its own.
var skipDirs = map[string]bool{"node_modules": true, "vendor": true, ".git": true, "__pycache__": true}

// Entry is one trust-set path in a snapshot.
type Entry struct {
	Category Category    `json:"category"`
	Mode     fs.FileMode `json:"mode"`
	Size     int64       `json:"size"`
	SHA256   string      `json:"sha256,omitempty"`
	// GitSHA1 is the file's git blob id (of a symlink: of its target),
	// to compare with a commit's tree; empty when not hashed in full.
	GitSHA1 string `json:"-"`
	Link    string `json:"link,omitempty"`
	// Links is the hard-link count: a file with several is not shown in
	// diffs (it may be a host file linked into the workspace).
	Links uint64 `json:"links,omitempty"`
	UID   int    `json:"-"`
	GID   int    `json:"-"`
	// Facts are what matters of a file whose bytes matter less: the
	// lifecycle scripts of package.json, the driver lines of
	// .gitattributes, the code-executing keys of a git config.
	Facts []string `json:"facts,omitempty"`
	data  []byte   // kept for revert and diffs (small files only)
	kept  bool
	// config is a git config's keys (configLines), shown instead of its
	// bytes, which may carry a credential.
	config []string
}

// Snapshot is the trust set of a workspace at one moment.
type Snapshot struct {
	Entries map[string]*Entry
	// Notes say what could not be inspected and why.
	Notes []string
	// Truncated is set when a bound stopped the walk.
	Truncated bool
	kept      int
	read      int64
}

// Take snapshots the trust set of the workspace ws.
func Take(ws string, set *Set) (*Snapshot, error) {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, fmt.Errorf("trust: open workspace: %w", err)
	}
	defer root.Close()
	s := &Snapshot{Entries: map[string]*Entry{}}
	s.walkTree(root, set)
	s.gitDir(root, set)
	s.addScripts(root, set)
	return s, nil
}

// TakeBaseline takes the snapshot before a job: Take's, and the files
// that the agent tool configs in it run (toolScripts). It returns the set
// widened by those files, which the snapshot after the job and the
// comparison must use. Only files that are there before the job count,
// outside the dependency trees the walk skips (node_modules: the job's
// own install fills it, and a developer's machine has its own): a build
// output or an install that creates a file a config names is no finding.
func TakeBaseline(ws string, set *Set) (*Snapshot, *Set, error) {
	s, err := Take(ws, set)
	if err != nil {
		return nil, set, err
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, set, fmt.Errorf("trust: open workspace: %w", err)
	}
	defer root.Close()
	scripts := map[string]string{}
	for _, p := range slices.Sorted(maps.Keys(s.Entries)) {
		e := s.Entries[p]
		if !runsTools(e.Category, p) {
			continue
		}
		if !e.kept {
			if e.Mode.IsRegular() {
				s.note("%s: not kept (too large), so the files it runs are not watched", p)
			}
			continue
		}
		for f, why := range toolScripts(p, e.data) {
			if _, ok := scripts[f]; ok || underSkipped(f) {
				continue
			}
			fi, err := root.Lstat(f)
			if err != nil || fi.IsDir() {
				continue
			}
			scripts[f] = why
			// A symlink's target inside the workspace is what runs.
			if t, err := root.Readlink(f); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				target := path.Join(path.Dir(f), t)
				if _, ok := scripts[target]; !ok && !path.IsAbs(t) && filepath.IsLocal(target) && !underSkipped(target) {
					if ti, err := root.Lstat(target); err == nil && !ti.IsDir() {
						scripts[target] = why + " through the symlink " + f
					}
				}
			}
		}
	}
	wide := set.WithToolScripts(scripts)
	if wide == set {
		return s, set, nil
	}
	s.addScripts(root, wide)
	return s, wide, nil
}

// addScripts records the set's tool scripts that the walk did not reach
// (deeper than it goes, say) and that are there and are not directories.
func (s *Snapshot) addScripts(root *os.Root, set *Set) {
	for _, p := range slices.Sorted(maps.Keys(set.scripts)) {
		if _, ok := s.Entries[p]; ok {
			continue
		}
		if fi, err := root.Lstat(p); err == nil && !fi.IsDir() {
			s.add(root, p, AgentTools)
		}
	}
}

func (s *Snapshot) note(format string, args ...any) {
	if len(s.Notes) < 100 {
		s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
	}
}

// walkTree visits the worktree (not .git), without following symlinks.
func (s *Snapshot) walkTree(root *os.Root, set *Set) {
	visited := 0
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			s.note("%s: %v", p, err)
			return nil
		}
		visited++
		if visited > maxWalkEntries {
			s.Truncated = true
			return fs.SkipAll
		}
		if d.IsDir() {
			if p == "." {
				return nil
			}
			if strings.Count(p, "/") >= maxWalkDepth {
				s.note("%s: deeper than %d levels, not inspected", p, maxWalkDepth)
				return fs.SkipDir
			}
			// Dependency trees are skipped, but nothing below .github.
			if skipDirs[d.Name()] && !strings.HasPrefix(p, ".github/") {
				return fs.SkipDir
			}
			return nil
		}
		if c := set.Category(p); c != "" && c != GitHooks {
			s.add(root, p, c)
		}
		return nil
	})
	if err != nil {
		s.note("walk: %v", err)
	}
}

// gitDir inspects the hooks and config of the workspace's git directory,
// when it is a real directory inside the workspace.
func (s *Snapshot) gitDir(root *os.Root, set *Set) {
	fi, err := root.Lstat(".git")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		s.note(".git: %v", err)
		return
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := root.Readlink(".git")
		s.note(".git is a symlink (to %q): not followed", target)
		s.add(root, ".git", GitConfig)
		return
	case !fi.IsDir():
		// A worktree or submodule: "gitdir: PATH". Its hooks and config
		// live in the main repository's git directory, usually outside
		// the workspace, where airlock does not look; the file itself is
		// recorded, so redirecting it is a finding.
		s.note(".git is a file (a linked worktree or submodule): its git directory is not inspected")
		s.add(root, ".git", GitConfig)
		return
	}
	for _, name := range []string{"config", "config.worktree"} {
		p := ".git/" + name
		if e := s.add(root, p, GitConfig); e != nil && e.kept {
			all, err := configKeys(context.Background(), e.data)
			if err != nil {
				s.note("%s: %v", p, err)
				e.Facts = []string{"unparseable: " + err.Error()}
				continue
			}
			e.config = configLines(all)
			keys := execKeys(all, set.keys)
			e.Facts = []string{}
			for _, k := range keys {
				e.Facts = append(e.Facts, k.Key+" = "+k.Value)
			}
			if hp := hooksPathOf(keys); hp != "" {
				s.walkHooks(root, hp)
			}
		}
	}
	s.walkHooks(root, ".git/hooks")
	s.walkGitFiles(root, set)
}

// gitSkip are the parts of .git that change with every commit or fetch
// and hold no configuration.
var gitSkip = map[string]bool{".git/objects": true, ".git/refs": true, ".git/logs": true, ".git/lfs": true, ".git/rr-cache": true}

// walkGitFiles records the other trust files inside .git: commondir,
// alternates, submodule and worktree configs and hooks.
func (s *Snapshot) walkGitFiles(root *os.Root, set *Set) {
	// objects/ is not walked; its one configuration file is looked up
	// (usually absent).
	if _, err := root.Lstat(".git/objects/info/alternates"); err == nil {
		s.add(root, ".git/objects/info/alternates", GitConfig)
	}
	visited := 0
	fs.WalkDir(root.FS(), ".git", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if visited++; visited > maxWalkEntries {
			s.Truncated = true
			return fs.SkipAll
		}
		if d.IsDir() {
			if gitSkip[p] || p == ".git/hooks" {
				return fs.SkipDir
			}
			return nil
		}
		if p == ".git/config" || p == ".git/config.worktree" {
			return nil
		}
		if c := set.Category(p); c != "" {
			s.add(root, p, c)
		}
		return nil
	})
}

// walkHooks records every file below dir as a hook; a symlinked dir is
// recorded, not followed.
func (s *Snapshot) walkHooks(root *os.Root, dir string) {
	fi, err := root.Lstat(dir)
	if err != nil {
		return
	}
	if !fi.IsDir() {
		s.add(root, dir, GitHooks)
		return
	}
	visited := 0
	fs.WalkDir(root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			s.note("%s: %v", p, err)
			return nil
		}
		if visited++; visited > 10000 {
			s.Truncated = true
			return fs.SkipAll
		}
		if !d.IsDir() {
			s.add(root, p, GitHooks)
		}
		return nil
	})
}

// add records path p (a file or symlink; not followed) under category c.
func (s *Snapshot) add(root *os.Root, p string, c Category) *Entry {
	fi, err := root.Lstat(p)
	if err != nil {
		// An absent file is what the snapshot records by leaving it out
		// (.git/config.worktree mostly is): not a note.
		if !errors.Is(err, fs.ErrNotExist) {
			s.note("%s: %v", p, err)
		}
		return nil
	}
	e := &Entry{Category: c, Mode: fi.Mode(), Size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Links, e.UID, e.GID = uint64(st.Nlink), int(st.Uid), int(st.Gid)
	}
	s.Entries[p] = e
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Link, _ = root.Readlink(p)
		e.GitSHA1 = gitBlobID([]byte(e.Link))
		return e
	case !fi.Mode().IsRegular():
		return e // a fifo or device: recorded by mode only, never opened
	}
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		s.note("%s: %v", p, err)
		return e
	}
	defer f.Close()
	if s.read+min(fi.Size(), maxHashRead) > maxReadTotal {
		s.note("%s: not hashed, the snapshot's read budget (%d bytes) is spent", p, maxReadTotal)
		s.Truncated = true
		return e
	}
	s.read += min(fi.Size(), maxHashRead)
	h := sha256.New()
	g := sha1.New()
	fmt.Fprintf(g, "blob %d\x00", fi.Size())
	keep := fi.Size() <= maxKeep && s.kept+int(fi.Size()) <= maxKeepTotal
	var buf strings.Builder
	w := io.MultiWriter(h, g)
	if keep {
		w = io.MultiWriter(h, g, &buf)
	}
	n, err := io.Copy(w, io.LimitReader(f, maxHashRead))
	if err != nil {
		s.note("%s: %v", p, err)
		return e
	}
	e.SHA256 = hex.EncodeToString(h.Sum(nil))
	if n == maxHashRead {
		e.SHA256 = "first-64MiB:" + e.SHA256
	} else if n == fi.Size() {
		e.GitSHA1 = hex.EncodeToString(g.Sum(nil))
	}
	if keep && int64(buf.Len()) <= maxKeep {
		e.data, e.kept = []byte(buf.String()), true
		s.kept += buf.Len()
		e.Facts = facts(p, e.data)
	}
	return e
}

// gitBlobID is git's object id of a blob.
func gitBlobID(data []byte) string {
	g := sha1.New()
	fmt.Fprintf(g, "blob %d\x00", len(data))
	g.Write(data)
	return hex.EncodeToString(g.Sum(nil))
}

// facts extracts what matters of the files whose bytes matter less.
func facts(p string, data []byte) []string {
	switch path.Base(p) {
	case "package.json":
		return lifecycleScripts(data)
	case ".gitattributes", "attributes":
		return attributeDrivers(data)
	}
	return nil
}
