package hook

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
)

// The runner runs as root (index.js), so what it makes for a job is
// root's: the checkout directory, its temp directory, the tool cache,
// the GitHub home, and before each step the files of the step's file
// commands ($GITHUB_OUTPUT and the others). Docker runs a container job
// as its image's user, root, which can write them; airlock runs it as an
// unprivileged user unless the policy says otherwise (sandbox.user). So
// the hook hands these to the job's user: the directories at prepare_job,
// each step's file-command files before the step. cleanup_job hands back
// what the job's user owns (runner.Session.Close: workspace.Tidy).
//
// Nothing here follows a symlink: an earlier job on a persistent runner
// can have left the tree full of them. A file with other hard links is
// left alone (its other names may be anywhere on the host).

// fileCommandVars name the files of a step's file commands.
var fileCommandVars = []string{"GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_STEP_SUMMARY"}

// handOverDirs gives the job's user what the runner made in these
// directories (host paths below work) for the job, when the runner's work
// directory is someone else's (root's). The runner's response directory
// stays the runner's.
func handOverDirs(work string, user gvisor.User, dirs []string) error {
	owner, ok := ownerOf(work)
	if !ok || owner.UID == user.UID {
		return nil
	}
	for _, dir := range dirs {
		f, err := files.OpenDirBeneath(work, dir)
		if err != nil {
			continue // not there (yet): nothing of the runner's to hand over
		}
		// "/." resolves the descriptor's link to the directory itself,
		// which the walk then enters (it would not enter a symlink).
		root := files.FDPath(f) + "/."
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && d.Name() == responsesDir {
				return filepath.SkipDir
			}
			return chownIfTheirs(p, owner, user)
		})
		f.Close()
		if err != nil {
			return fmt.Errorf("hand %s to the job's user: %w", dir, err)
		}
	}
	return nil
}

// handOverFileCommands gives the job's user the files of a step's file
// commands, which the runner has just created, empty, as root. env is
// the step's environment; host maps its paths to the host's.
func handOverFileCommands(work string, user gvisor.User, env map[string]string, host func(string) (string, bool)) {
	owner, ok := ownerOf(work)
	if !ok || owner.UID == user.UID {
		return
	}
	for _, v := range fileCommandVars {
		p, ok := host(env[v])
		if env[v] == "" || !ok || !path.IsAbs(env[v]) {
			continue
		}
		f, err := files.OpenBeneath(work, p)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 && st.Uid == owner.UID {
			unix.Fchownat(int(f.Fd()), "", int(user.UID), int(user.GID), unix.AT_EMPTY_PATH)
		}
		f.Close()
	}
}

// chownIfTheirs gives p (not followed) to user when owner owns it, unless
// it is a regular file with other names.
func chownIfTheirs(p string, owner, user gvisor.User) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != owner.UID || (fi.Mode().IsRegular() && st.Nlink > 1) {
		return nil
	}
	return os.Lchown(p, int(user.UID), int(user.GID))
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
