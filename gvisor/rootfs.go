package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/paths"
)

// freshTopDirs are top-level directories gVisor mounts anew (proc, sysfs,
// devices, tmpfs); the skeleton only needs empty directories for them.
var freshTopDirs = map[string]bool{"proc": true, "sys": true, "dev": true, "tmp": true, "run": true}

// Why a skeleton: runsc's gofer creates missing mount points (the
// workspace, /.airlock/init) inside the rootfs directory on the host, and
// with the host's "/" as rootfs it also loses every bind mount (it
// self-binds "/" and then mounts beneath it). So the rootfs handed to runsc
// is a small tmpfs at <job>/rootfs holding one read-only bind mount per
// top-level entry of the real root, plus empty directories for the mount
// points. The gofer builds it itself, first thing, in the private mount
// namespace runsc starts it in (prepareGoferRoot in create.go), before
// runsc's gofer code serves that root to the sandbox: the kernel drops
// every one of these mounts when the gofer exits, even after a SIGKILL of
// airlock. Nothing is mounted in the host's namespace and nothing is
// created in the host's root.
//
// A sub-container (container.go) gets its skeleton the same way, at
// <job>/containers/<name>/rootfs, from its own gofer.

// rootPlan is what the gofer builds, handed to it in the container's
// spec (writeBundle).
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
	// Overlays are files bound read-only over regular files of the
	// skeleton (Config.Files).
	Overlays []overlay `json:"overlays"`
	// Pins are mount sources resolved in the gofer without following
	// symlinks (Mount.Beneath) and bound at a path of their own, which is
	// what runsc then mounts.
	Pins []pin `json:"pins"`
	// Expand are directories of the root, relative to it, that the
	// skeleton rebuilds one entry at a time (like the top level) instead
	// of binding them whole, so that a missing mount point or file can be
	// created inside them.
	Expand []string `json:"expand"`
}

// pin is one Mount.Beneath source: Base/Rel, resolved without following
// symlinks, bound at At (an empty directory of the job's).
type pin struct {
	Base string `json:"base"`
	Rel  string `json:"rel"`
	At   string `json:"at"`
}

// pinMounts returns mounts with each Beneath source replaced by the path
// the gofer will bind it at (a new empty directory below dir), and adds
// those pins to the plan.
func (p *rootPlan) pinMounts(mounts []Mount, dir string) ([]Mount, error) {
	out := append([]Mount(nil), mounts...)
	for i, m := range out {
		if m.Beneath == "" {
			continue
		}
		rel, err := filepath.Rel(m.Beneath, m.Source)
		if err != nil || !filepath.IsLocal(rel) {
			return nil, fmt.Errorf("%w: mount source %s is not below %s", ErrInvalidConfig, m.Source, m.Beneath)
		}
		at := filepath.Join(dir, "pins", fmt.Sprint(i))
		if err := os.MkdirAll(at, 0o700); err != nil {
			return nil, fmt.Errorf("create pin directory: %w", err)
		}
		p.Pins = append(p.Pins, pin{Base: m.Beneath, Rel: rel, At: at})
		out[i].Source, out[i].Beneath = at, ""
	}
	return out, nil
}

// bindPins binds each pinned source at its path, in the gofer's mount
// namespace, where runsc's gofer code then finds it: the descriptor is
// what gets bound, so nothing can swap the path in between.
func bindPins(pins []pin) error {
	for _, p := range pins {
		f, err := files.OpenDirBeneath(p.Base, filepath.Join(p.Base, p.Rel))
		if err != nil {
			return fmt.Errorf("mount source: %w", err)
		}
		// /proc/self, not files.FDPath: the gofer has a PID namespace of
		// its own, and the host's /proc knows it by another pid.
		// Recursive: the mounts below the source (a bounded workspace's
		// kept directories, quota.Limit.Keep) are locked in the gofer's
		// namespace, and the kernel refuses to bind a directory without
		// the locked mounts below it (EINVAL).
		err = unix.Mount(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), p.At, "", unix.MS_BIND|unix.MS_REC, "")
		f.Close()
		if err != nil {
			return fmt.Errorf("bind %s: %w", filepath.Join(p.Base, p.Rel), err)
		}
	}
	return nil
}

// overlay is one Config.File placed in the skeleton.
type overlay struct {
	Path   string `json:"path"`
	Source string `json:"source"`
}

// addMountPoints adds to the plan what the skeleton needs for mounts at
// dests (see addPath).
func (p *rootPlan) addMountPoints(dests ...string) error {
	for _, d := range dests {
		if err := p.addPath(d, false); err != nil {
			return err
		}
	}
	return nil
}

// addFiles writes the data of each file to dir and places it (see
// placeFile); it returns the mounts the sandbox must make for those it
// places itself.
func (p *rootPlan) addFiles(files []File, dir string) ([]specs.Mount, error) {
	var mounts []specs.Mount
	for i, f := range files {
		src := filepath.Join(dir, fmt.Sprintf("file-%d", i))
		if err := os.WriteFile(src, f.Data, 0o644); err != nil {
			return nil, fmt.Errorf("write file for %s: %w", f.Path, err)
		}
		inSandbox, err := p.placeFile(f.Path, src)
		if err != nil {
			return nil, err
		}
		if inSandbox != "" {
			// runsc's gofer binds it onto the skeleton before the sentry
			// mounts it over its own tmpfs: the skeleton needs the file.
			p.Files = append(p.Files, strings.TrimPrefix(inSandbox, "/"))
			mounts = append(mounts, specs.Mount{Destination: inSandbox, Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
	return mounts, nil
}

// writeBundle writes a container's OCI bundle (dir/bundle/config.json),
// its rootfs plan in the spec's planAnnotation for the gofer.
func writeBundle(dir string, plan rootPlan, spec *specs.Spec) error {
	b, err := json.Marshal(plan)
	if err != nil {
		return fmt.Errorf("encode the root plan: %w", err)
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[planAnnotation] = string(b)
	return writeJSON(filepath.Join(dir, "bundle", "config.json"), spec)
}

// buildRootSkeleton mounts a tmpfs at the target and binds every top-level
// entry of the source into it read-only (see mirrorDir), creates the mount
// points and applies the masks.
func buildRootSkeleton(p rootPlan) error {
	src, dst := p.Source, p.Target
	if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1048576"); err != nil {
		return fmt.Errorf("mount skeleton tmpfs on %s: %w", dst, err)
	}
	expand := map[string]bool{}
	for _, d := range p.Expand {
		expand[d] = true
	}
	if err := mirrorDir(src, dst, "", expand); err != nil {
		return err
	}
	for name := range freshTopDirs {
		if err := os.MkdirAll(filepath.Join(dst, name), 0o755); err != nil {
			return err
		}
	}
	// Created through the skeleton's root: the symlinks copied from the
	// source root are never followed out of it (to the host's files).
	skel, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer skel.Close()
	for _, d := range p.Dirs {
		if err := skel.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", d, err)
		}
	}
	for _, f := range p.Files {
		if err := skel.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", f, err)
		}
		t, err := skel.OpenFile(f, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("mount point %s: %w", f, err)
		}
		t.Close()
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

// mirrorDir fills the skeleton directory dst/rel with one read-only bind
// per entry of src/rel and a copy of each symlink; at the top, the
// directories of freshTopDirs are left empty. Directories named in expand
// are mirrored the same way, one level down, instead of bound whole.
func mirrorDir(src, dst, rel string, expand map[string]bool) error {
	ents, err := os.ReadDir(filepath.Join(src, rel))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(src, rel), err)
	}
	for _, e := range ents {
		name := filepath.Join(rel, e.Name())
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		switch {
		case rel == "" && freshTopDirs[name]:
			err = os.Mkdir(to, 0o755)
		case e.Type()&fs.ModeSymlink != 0:
			var target string
			if target, err = os.Readlink(from); err == nil {
				err = os.Symlink(target, to)
			}
		case e.IsDir() && expand[name]:
			if err = mkdirLike(from, to); err == nil {
				err = mirrorDir(src, dst, name, expand)
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
	return nil
}

// mkdirLike creates directory to with the mode and owner of from.
func mkdirLike(from, to string) error {
	fi, err := os.Stat(from)
	if err != nil {
		return err
	}
	if err := os.Mkdir(to, 0o700); err != nil {
		return err
	}
	st, _ := fi.Sys().(*unix.Stat_t)
	if st != nil {
		if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	return os.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid))
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

// addPath makes sure the skeleton will have dest, a directory or (file)
// an empty file to mount over, without writing to the real root. What
// exists is used as it is. What is missing is created in the skeleton:
// straight in its tmpfs when the first component is missing, otherwise
// inside the existing directories along the path, which the skeleton then
// rebuilds one entry at a time (Expand) instead of binding them whole.
// Symlinks along a missing path are not followed, and nothing is created
// below a mask.
func (p *rootPlan) addPath(dest string, file bool) error {
	what := "mount point"
	if file {
		what = "file"
	}
	rel := strings.TrimPrefix(filepath.Clean(dest), "/")
	parts := strings.Split(rel, "/")
	if freshTopDirs[parts[0]] {
		return fmt.Errorf("%w: %s %s: /%s is replaced inside the sandbox; choose another path such as /workspace", ErrInvalidConfig, what, dest, parts[0])
	}
	r, err := os.OpenRoot(p.Source)
	if err != nil {
		return fmt.Errorf("open rootfs %s: %w", p.Source, err)
	}
	defer r.Close()
	if fi, err := r.Stat(rel); err == nil {
		if file || !fi.IsDir() {
			return fmt.Errorf("%w: %s %s exists in the rootfs but is not a directory", ErrInvalidConfig, what, dest)
		}
		return nil
	}
	for _, m := range append(append([]string{}, p.MaskDirs...), p.MaskFiles...) {
		if paths.Within(rel, m) {
			return fmt.Errorf("%w: %s %s is inside /%s, which is masked", ErrInvalidConfig, what, dest, m)
		}
	}
	for i := range parts {
		at := strings.Join(parts[:i+1], "/")
		fi, err := r.Lstat(at)
		if errors.Is(err, fs.ErrNotExist) {
			for j := 1; j <= i; j++ {
				p.Expand = append(p.Expand, strings.Join(parts[:j], "/"))
			}
			if file {
				p.Files = append(p.Files, rel)
			} else {
				p.Dirs = append(p.Dirs, rel)
			}
			return nil
		}
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("%w: %s %s: /%s is not a directory in the rootfs (symlinks are not followed here); choose another path", ErrInvalidConfig, what, dest, at)
		}
	}
	return fmt.Errorf("%w: %s %s: cannot be created in the rootfs", ErrInvalidConfig, what, dest)
}

// placeFile decides how a Config.File at dest, whose data is in the host
// file src, reaches the sandbox. A regular file of the root is covered in
// the skeleton, and so is a missing one, created there (see addPath). A
// symlink into a directory the sandbox gets fresh (/etc/resolv.conf ->
// /run/...) is followed, and a path inside one taken as it is: the file
// is then mounted by the sandbox at the returned path, where runsc
// creates it in its own tmpfs. Anything else would need the root changed
// and is refused.
func (p *rootPlan) placeFile(dest, src string) (inSandbox string, err error) {
	rel := strings.TrimPrefix(filepath.Clean(dest), "/")
	top, _, _ := strings.Cut(rel, "/")
	r, err := os.OpenRoot(p.Source)
	if err != nil {
		return "", fmt.Errorf("open rootfs %s: %w", p.Source, err)
	}
	defer r.Close()
	fi, err := r.Lstat(rel)
	switch {
	case err == nil && fi.Mode().IsRegular():
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		target, err := r.Readlink(rel)
		if err != nil {
			return "", fmt.Errorf("%w: file %s: %v", ErrInvalidConfig, dest, err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join("/", filepath.Dir(rel), target)
		}
		target = filepath.Clean(target)
		ttop, _, _ := strings.Cut(strings.TrimPrefix(target, "/"), "/")
		if freshTopDirs[ttop] {
			return target, nil
		}
		return "", fmt.Errorf("%w: file %s is a symlink to %s in the rootfs; airlock can replace it only when it is a regular file or points into /run or /tmp", ErrInvalidConfig, dest, target)
	case errors.Is(err, fs.ErrNotExist) && freshTopDirs[top]:
		return "/" + rel, nil
	case errors.Is(err, fs.ErrNotExist):
		if err := p.addPath(dest, true); err != nil {
			return "", err
		}
	case err != nil:
		return "", fmt.Errorf("%w: file %s: %v", ErrInvalidConfig, dest, err)
	default:
		return "", fmt.Errorf("%w: file %s exists in the rootfs but is not a regular file", ErrInvalidConfig, dest)
	}
	p.Overlays = append(p.Overlays, overlay{Path: rel, Source: src})
	return "", nil
}
