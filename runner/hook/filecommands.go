package hook

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"github.com/airlock-ci/airlock/internal/files"
)

// A step's file commands ($GITHUB_OUTPUT, $GITHUB_ENV, $GITHUB_PATH,
// $GITHUB_STATE, $GITHUB_STEP_SUMMARY) are files the runner creates in
// _temp/_runner_file_commands before the step and reads after it, as
// root, following symlinks. A job that could reach that directory could
// swap a file for a symlink to any host file and have the runner read it
// into its outputs, or into the next step's PATH. So the job never sees
// it: in its place (at /__w/_temp/_runner_file_commands, and as a Docker
// action's /github/file_commands) it has a directory of its own, where
// the hook makes an empty file for each of the step's file commands; when
// the step is over, the hook copies what the step wrote into the
// runner's file, reading the job's file and writing the runner's without
// following any symlink, before the runner reads it.

// fileCommandVars name the files of a step's file commands.
var fileCommandVars = []string{"GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_STEP_SUMMARY"}

// Where the job sees its file commands: the runner's directory as the
// job container mounts it, and as a Docker action's volume.
const (
	fileCommandsInJob    = "/__w/_temp/_runner_file_commands"
	fileCommandsInAction = "/github/file_commands"
	fileCommandsDir      = "_runner_file_commands"
)

// maxFileCommand bounds what a step's file command carries back (the
// runner itself takes at most 1 MiB of a step summary).
const maxFileCommand = 16 << 20

// stagedFile is one file command of a step: the job's file and the
// runner's.
type stagedFile struct {
	name   string // the file's name, the same in both directories
	runner string // the runner's file, on the host
}

// stageFileCommands makes, in the job's own file-command directory, an
// empty file (the job user's) for each file command of the step whose
// file is in dir (where the step sees the directory), and returns them.
func (d *job) stageFileCommands(env map[string]string, dir string) []stagedFile {
	var out []stagedFile
	for _, v := range fileCommandVars {
		p := env[v]
		if p == "" || path.Dir(path.Clean(p)) != dir {
			continue
		}
		name := path.Base(p)
		// Made afresh: never through whatever an earlier step left
		// under that name (a FIFO would block the hook).
		staged := filepath.Join(d.fileCommands, name)
		os.Remove(staged)
		f, err := os.OpenFile(staged, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
		if err != nil {
			continue
		}
		err = f.Chown(int(d.user.UID), int(d.user.GID))
		f.Close()
		if err != nil {
			continue
		}
		out = append(out, stagedFile{name: name, runner: filepath.Join(d.runnerFileCommands, name)})
	}
	return out
}

// copyBack writes what the step wrote in each staged file into the
// runner's, and removes the staged file. Problems are said on w and
// never fail the step (the runner finds its file as it made it).
func (d *job) copyBack(staged []stagedFile, w io.Writer) {
	work, _ := d.mounts.Host(containerWork)
	for _, s := range staged {
		if err := copyFileCommand(d.fileCommands, s.name, work, s.runner); err != nil {
			fmt.Fprintf(w, "airlock: the step's file command %s was not passed to the runner: %v\n", s.name, err)
		}
		os.Remove(filepath.Join(d.fileCommands, s.name))
	}
}

// copyFileCommand copies the job's file name in dir over the runner's
// file runner, which must exist below work: each opened without
// following symlinks, and only if it is a regular file with one link (a
// FIFO would block the hook, another name could be anywhere), at most
// maxFileCommand bytes.
func copyFileCommand(dir, name, work, runner string) error {
	src, err := files.OpenRegularBeneath(dir, filepath.Join(dir, name), os.O_RDONLY)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := files.OpenRegularBeneath(work, runner, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	defer dst.Close()
	if _, err := io.Copy(dst, io.LimitReader(src, maxFileCommand)); err != nil {
		return err
	}
	if n, _ := src.Read(make([]byte, 1)); n > 0 {
		return fmt.Errorf("larger than %d bytes: cut there", maxFileCommand)
	}
	return nil
}
