package hook

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
)

// The runner runs as root (index.js), so what it makes for a job is
// root's: the checkout's directory, the temp directory, the GitHub home.
// Docker runs a container job as its image's user, root, which can write
// them; airlock runs it as an unprivileged user unless the organisation
// says otherwise (sandbox.user). So prepare_job hands these to the job's
// user, and cleanup_job hands back what the job's user owns
// (runner.Session.Close: workspace.Tidy).
//
// What the runner itself reads back after a step is never handed over:
// its file commands go through a directory of the job's own
// (filecommands.go), its hook responses are masked, and the temp
// directory is a mount of its own in the sandbox, which the job cannot
// move or replace. The tool cache is the job's own too (job.go).
//
// The walk goes through an os.Root on the directory, opened without
// following symlinks: every step of every path stays inside it, so a
// symlink (or a directory swapped for one by a process an earlier job
// left running) never leads the chown out. A file with other hard links
// is left alone (its other names may be anywhere on the host).

// handOverDirs gives the job's user what the runner made in these
// directories (host paths below work) for the job, when the runner's work
// directory is someone else's (root's). skip are names of directories
// that stay the runner's wherever they are.
func handOverDirs(work string, user gvisor.User, dirs []string, skip ...string) error {
	owner, ok := ownerOf(work)
	if !ok || owner.UID == user.UID {
		return nil
	}
	for _, dir := range dirs {
		root, err := files.OpenRootBeneath(work, dir)
		if err != nil {
			continue // not there (yet): nothing of the runner's to hand over
		}
		err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && p != "." && slices.Contains(skip, d.Name()) {
				return fs.SkipDir
			}
			fi, err := root.Lstat(p)
			if err != nil {
				return nil
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok || st.Uid != owner.UID || (fi.Mode().IsRegular() && st.Nlink > 1) {
				return nil
			}
			return root.Lchown(p, int(user.UID), int(user.GID))
		})
		root.Close()
		if err != nil {
			return fmt.Errorf("hand %s to the job's user: %w", dir, err)
		}
	}
	return nil
}

// ownerOf is the owner of a directory.
func ownerOf(dir string) (gvisor.User, bool) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return gvisor.User{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return gvisor.User{}, false
	}
	return gvisor.User{UID: st.Uid, GID: st.Gid}, true
}

// ownDir makes a directory of the job's own (below the job's directory,
// which the job never sees), owned by its user.
func ownDir(dir string, user gvisor.User) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Lchown(dir, int(user.UID), int(user.GID))
}
