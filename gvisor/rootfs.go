package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/runsc/cli/maincli"
)

// rootHelperArg0 is argv[0] of the helper that builds the root skeleton
// and then becomes runsc. See buildRootSkeleton.
const rootHelperArg0 = "airlock-rootfs"

// freshTopDirs are top-level directories gVisor mounts anew (proc, sysfs,
// devices, tmpfs); the skeleton only needs empty directories for them.
var freshTopDirs = map[string]bool{"proc": true, "sys": true, "dev": true, "tmp": true, "run": true}

// Why a skeleton: runsc's gofer creates missing mount points (the
// workspace, /.airlock/init) inside the rootfs directory on the host, and
// with the host's "/" as rootfs it also loses every bind mount (it
// self-binds "/" and then mounts beneath it). So the rootfs handed to runsc
// is a small tmpfs at <job>/rootfs holding one read-only bind mount per
// top-level entry of the real root, plus empty directories for the mount
// points. All of this happens in a private mount namespace of the process
// that then becomes runsc (run --detach): the sandbox and gofer inherit it, and the
// kernel drops every one of these mounts when the last of them exits, even
// after a SIGKILL of airlock. Nothing is mounted in the host's namespace
// and nothing is created in the host's root.

// rootPlan is what the helper builds, written by Create to the job
// directory as JSON.
type rootPlan struct {
	// Source is the real root (the host's "/" or an image directory);
	// Target is the job's skeleton directory.
	Source string `json:"source"`
	Target string `json:"target"`
	// Dirs and Files are mount points to create, relative to the root.
	Dirs  []string `json:"dirs"`
	Files []string `json:"files"`
	// MaskDirs and MaskFiles are hidden behind an empty, mode-0 tmpfs or
	// the (empty, mode-0) EmptyFile. Done here, on the host side, they cost
	// the sandbox nothing: it just sees an empty directory or file.
	MaskDirs  []string `json:"maskDirs"`
	MaskFiles []string `json:"maskFiles"`
	EmptyFile string   `json:"emptyFile"`
	// Overlays are files bound read-only over existing regular files of
	// the root (Config.Files).
	Overlays []overlay `json:"overlays"`
}

// overlay is one Config.File placed in the skeleton.
type overlay struct {
	Path   string `json:"path"`
	Source string `json:"source"`
}

// rootHelper runs as argv[0] rootHelperArg0 in a fresh mount namespace (the
// caller sets CLONE_NEWNS; Go makes "/" private first), then carries on as
// runsc (normally "run --detach"). args are PLAN.json -- RUNSC-ARGS...
func rootHelper(args []string) int {
	if len(args) < 2 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "airlock rootfs helper: usage: PLAN.json -- RUNSC-ARGS...")
		return 2
	}
	var plan rootPlan
	b, err := os.ReadFile(args[0])
	if err == nil {
		err = json.Unmarshal(b, &plan)
	}
	if err == nil {
		err = buildRootSkeleton(plan)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: prepare root filesystem: %v\n", err)
		return 125
	}
	// Become runsc in this same process: the namespace and its mounts are
	// already in place, and one exec of a large binary fewer is a
	// noticeable part of a sandbox's start-up.
	os.Args = append([]string{"runsc"}, args[2:]...)
	maincli.Main()
	return 0
}

// buildRootSkeleton mounts a tmpfs at the target and binds every top-level
// entry of the source into it read-only, creates the mount points and
// applies the masks.
func buildRootSkeleton(p rootPlan) error {
	src, dst := p.Source, p.Target
	if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1048576"); err != nil {
		return fmt.Errorf("mount skeleton tmpfs on %s: %w", dst, err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	for _, e := range ents {
		name := e.Name()
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		switch {
		case freshTopDirs[name]:
			err = os.Mkdir(to, 0o755)
		case e.Type()&fs.ModeSymlink != 0:
			var target string
			if target, err = os.Readlink(from); err == nil {
				err = os.Symlink(target, to)
			}
		case e.IsDir():
			if err = os.Mkdir(to, 0o755); err == nil {
				err = bindReadOnly(from, to)
			}
		default:
			if err = touch(to); err == nil {
				err = bindReadOnly(from, to)
			}
		}
		if err != nil {
			return fmt.Errorf("skeleton entry %s: %w", name, err)
		}
	}
	for name := range freshTopDirs {
		if err := os.MkdirAll(filepath.Join(dst, name), 0o755); err != nil {
			return err
		}
	}
	for _, d := range p.Dirs {
		if err := os.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", d, err)
		}
	}
	for _, f := range p.Files {
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", f, err)
		}
		if err := touch(filepath.Join(dst, f)); err != nil {
			return fmt.Errorf("mount point %s: %w", f, err)
		}
	}
	// Masks go last: they sit on top of the binds. The paths were checked
	// inside the root by maskPlan; the kernel resolves them here again,
	// below dst only, because every absolute symlink in the skeleton
	// points into a bind of the same root.
	for _, d := range p.MaskDirs {
		if err := unix.Mount("tmpfs", filepath.Join(dst, d), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=000,size=4096"); err != nil {
			return fmt.Errorf("mask %s: %w", d, err)
		}
	}
	for _, f := range p.MaskFiles {
		if err := bindReadOnly(p.EmptyFile, filepath.Join(dst, f)); err != nil {
			return fmt.Errorf("mask %s: %w", f, err)
		}
	}
	for _, o := range p.Overlays {
		if err := bindReadOnly(o.Source, filepath.Join(dst, o.Path)); err != nil {
			return fmt.Errorf("file %s: %w", o.Path, err)
		}
	}
	// The skeleton itself is read-only too: the gofer has nothing to write.
	return unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}

func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func bindReadOnly(from, to string) error {
	if err := unix.Mount(from, to, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", from, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	if err := unix.Mount("", to, "", flags, ""); err != nil {
		// A locked mount (inherited nosuid/nodev) needs those flags kept.
		if err2 := unix.Mount("", to, "", flags|unix.MS_NOSUID|unix.MS_NODEV, ""); err2 != nil {
			return fmt.Errorf("remount %s read-only: %w", to, err)
		}
	}
	return nil
}

// checkMountPoint makes sure a mount destination can be set up without
// writing to the real root: either it already exists there as a directory,
// or its first component does not exist (so it is created in the
// skeleton). It returns the directory to create in the skeleton, if any.
func checkMountPoint(root, dest string) (string, error) {
	rel := strings.TrimPrefix(filepath.Clean(dest), "/")
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", fmt.Errorf("open rootfs %s: %w", root, err)
	}
	defer r.Close()
	if fi, err := r.Stat(rel); err == nil {
		if !fi.IsDir() {
			return "", fmt.Errorf("%w: mount point %s exists in the rootfs but is not a directory", ErrInvalidConfig, dest)
		}
		return "", nil
	}
	top, _, _ := strings.Cut(rel, "/")
	if _, err := r.Lstat(top); errors.Is(err, fs.ErrNotExist) || freshTopDirs[top] {
		if freshTopDirs[top] {
			return "", fmt.Errorf("%w: mount point %s: /%s is replaced inside the sandbox; choose another path such as /workspace", ErrInvalidConfig, dest, top)
		}
		return rel, nil
	}
	return "", fmt.Errorf("%w: mount point %s does not exist in the rootfs and would have to be created inside its /%s; choose a path that exists or whose first component does not (such as /workspace)", ErrInvalidConfig, dest, top)
}

// placeFile decides how Config.File dest reaches the sandbox. A regular
// file of the root is covered in the skeleton (relPath); a symlink into a
// directory the sandbox gets fresh (/etc/resolv.conf -> /run/...) is
// followed and the file is mounted at its target inside the sandbox
// (sandboxPath), where runsc creates it in its own tmpfs. Anything else
// would need the host's root changed and is refused.
func placeFile(root, dest string) (relPath, sandboxPath string, err error) {
	rel := strings.TrimPrefix(filepath.Clean(dest), "/")
	r, err := os.OpenRoot(root)
	if err != nil {
		return "", "", fmt.Errorf("open rootfs %s: %w", root, err)
	}
	defer r.Close()
	fi, err := r.Lstat(rel)
	switch {
	case err == nil && fi.Mode().IsRegular():
		return rel, "", nil
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		target, err := r.Readlink(rel)
		if err != nil {
			return "", "", fmt.Errorf("%w: file %s: %v", ErrInvalidConfig, dest, err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join("/", filepath.Dir(rel), target)
		}
		target = filepath.Clean(target)
		top, _, _ := strings.Cut(strings.TrimPrefix(target, "/"), "/")
		if freshTopDirs[top] {
			return "", target, nil
		}
		return "", "", fmt.Errorf("%w: file %s is a symlink to %s in the rootfs; airlock can replace it only when it is a regular file or points into /run or /tmp", ErrInvalidConfig, dest, target)
	case errors.Is(err, fs.ErrNotExist):
		top, _, _ := strings.Cut(rel, "/")
		if freshTopDirs[top] {
			return "", "/" + rel, nil
		}
		return "", "", fmt.Errorf("%w: file %s does not exist in the rootfs; airlock does not create files in the host's root", ErrInvalidConfig, dest)
	case err != nil:
		return "", "", fmt.Errorf("%w: file %s: %v", ErrInvalidConfig, dest, err)
	}
	return "", "", fmt.Errorf("%w: file %s exists in the rootfs but is not a regular file", ErrInvalidConfig, dest)
}
