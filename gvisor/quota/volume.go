// Package quota bounds what a job can write into its workspace, in bytes
// and in files, with the kernel as the enforcer.
//
// For the job's life the workspace directory is covered, on the host, by
// an overlay: the workspace's own contents are its lower layer, and its
// upper layer (everything the job writes, and every file it changes,
// copied up) lives on an ext4 filesystem of exactly the limit's size, in
// a sparse image file on a loop device. A write past the limit fails with
// ENOSPC, in the sandbox as on the host; ext4 has one inode per 16 KiB of
// the limit (its default ratio), so many small files run out the same
// way. The overlay is mounted over the workspace path itself, so the
// runner and airlock see what the job writes as it writes it (the
// runner's hashFiles, its temporary files and file commands, a trust
// diff).
//
// Where the host has no loop devices (a Kubernetes pod's container gets
// none), the upper layer is a tmpfs of the limit's size instead, with as
// many inodes: the same bound and the same ENOSPC, but in memory, which
// the pod's memory limit counts (Volume.Medium says which).
//
// Release, when the sandbox is gone, unmounts the overlay, merges its
// upper layer into the workspace (see merge.go: sparse files stay sparse,
// hard links stay links, nothing is followed) and removes the image. The
// volume's directory records the workspace, and marks when its merge
// began, so that Abandon (gvisor.Reap) can release the leftover of a
// killed airlock: the job's writes whole or none of them. Killed during
// its merge, the job had ended, and the merge is finished; killed
// before, the job never ended, and what it wrote is discarded.
//
// Layer 1: imports nothing of airlock's.
package quota

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// BytesPerInode is how much of the limit buys one file: ext4's default
// ratio.
const BytesPerInode = 16 << 10

// MinBytes is the smallest limit: below it ext4 has hardly room for its
// own metadata.
const MinBytes = 8 << 20

// Limit bounds one job's workspace.
type Limit struct {
	// Bytes is the most the job may add to the workspace, copied-up
	// files included.
	Bytes int64 `json:"bytes"`
	// Keep are directories of the workspace (relative paths) that stay
	// on the host's disk, outside the limit: the runner's own, which the
	// job never writes (the hook masks or replaces them in the
	// sandbox), so that the runner can still answer and clean up after
	// a job that filled its workspace.
	Keep []string `json:"keep,omitempty"`
}

// Inodes is the most files (and directories) the job may create.
func (l Limit) Inodes() int64 { return l.Bytes / BytesPerInode }

// Volume is one job's bounded workspace while it is mounted.
type Volume struct {
	dir string
	rec record
	// room and files are what a job can use of the empty filesystem:
	// Usage counts from them.
	room, files int64
}

// record is what the volume's directory says about it, for Release.
type record struct {
	Workspace string `json:"workspace"`
	Bytes     int64  `json:"bytes"`
	// Medium is MediumExt4 (also when empty: older records) or
	// MediumTmpfs.
	Medium string `json:"medium,omitempty"`
}

// The media of a volume's upper layer.
const (
	// MediumExt4 is an ext4 filesystem in a sparse image on a loop
	// device: on the disk.
	MediumExt4 = "ext4"
	// MediumTmpfs is a tmpfs, where there are no loop devices: in
	// memory.
	MediumTmpfs = "tmpfs"
)

// loopDevices reports whether the host has loop devices to attach.
func loopDevices() bool {
	fi, err := os.Stat("/dev/loop-control")
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// ErrUnsupported is returned when the host lacks what a bounded
// workspace needs (loop devices, ext4, overlayfs, mkfs.ext4).
var ErrUnsupported = errors.New("the host cannot bound the workspace")

// ErrNotMerged is matched by a Release that kept what the job wrote out
// of the workspace because it could not be read back whole (its disk
// filled): the job's output is lost, and the job must not pass.
var ErrNotMerged = errors.New("what the job wrote is lost")

// Mount covers workspace with an overlay whose writable layer is an ext4
// filesystem of limit's size, kept in dir (created; it must not exist and
// must lie outside the workspace). templates, when not empty, is a
// directory on the same disk where empty images are kept, one per size,
// so that a job copies one (a few MiB of metadata) instead of running
// mkfs. On error nothing is left mounted.
func Mount(dir, templates, workspace string, limit Limit) (_ *Volume, err error) {
	if limit.Bytes < MinBytes {
		return nil, fmt.Errorf("workspace limit %d bytes: at least %d MiB", limit.Bytes, MinBytes>>20)
	}
	ws, err := os.Lstat(workspace)
	if err != nil || !ws.IsDir() {
		return nil, fmt.Errorf("bound the workspace %s: not a directory (%v)", workspace, err)
	}
	if m, ok := mountAt(workspace); ok && m.fstype == "overlay" {
		return nil, fmt.Errorf("bound the workspace %s: an overlay (%s) is mounted there already, a leftover of another job? run airlock's cleanup or unmount it", workspace, m.source)
	}
	medium, mkfs := MediumTmpfs, ""
	if loopDevices() {
		medium = MediumExt4
		if mkfs, err = findMkfs(); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the workspace volume's directory: %w", err)
	}
	v := &Volume{dir: dir, rec: record{Workspace: workspace, Bytes: limit.Bytes, Medium: medium}}
	defer func() {
		if err != nil {
			v.discard()
		}
	}()
	// The record comes first: whatever happens next, Release can find
	// the workspace to unmount.
	if err := writeRecord(dir, v.rec); err != nil {
		return nil, err
	}
	st := ws.Sys().(*syscall.Stat_t)
	if medium == MediumTmpfs {
		if err := mountTmpfs(v.fs(), limit); err != nil {
			return nil, err
		}
	} else {
		if err := roomForImage(dir); err != nil {
			return nil, err
		}
		if err := makeImage(mkfs, v.image(), templates, limit); err != nil {
			return nil, err
		}
		if err := mountImage(v.image(), v.fs()); err != nil {
			return nil, err
		}
	}
	if err := makeLayerDirs(v.fs(), st); err != nil {
		return nil, err
	}
	var s unix.Statfs_t
	if err := unix.Statfs(v.fs(), &s); err != nil {
		return nil, fmt.Errorf("statfs the workspace volume: %w", err)
	}
	v.room, v.files = int64(s.Bavail)*s.Bsize, int64(s.Ffree)
	if err := mountOverlay(v.source(), workspace, v.upper(), filepath.Join(v.fs(), "work"), limit.Keep); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *Volume) image() string  { return filepath.Join(v.dir, "image") }
func (v *Volume) fs() string     { return filepath.Join(v.dir, "fs") }
func (v *Volume) upper() string  { return filepath.Join(v.fs(), "upper") }
func (v *Volume) source() string { return "airlock-workspace:" + v.dir }

// mergingMark exists once the volume's merge into the workspace began.
func (v *Volume) mergingMark() string { return filepath.Join(v.dir, "merging") }

// Limit is the volume's limit.
func (v *Volume) Limit() Limit { return Limit{Bytes: v.rec.Bytes} }

// Medium is where the upper layer is: MediumExt4 or MediumTmpfs.
func (v *Volume) Medium() string {
	if v.rec.Medium == "" {
		return MediumExt4
	}
	return v.rec.Medium
}

// Usage is how much of its limit a job has used.
type Usage struct {
	Bytes      int64 `json:"bytes"`
	Files      int64 `json:"files"`
	LimitBytes int64 `json:"limitBytes"`
	LimitFiles int64 `json:"limitFiles"`
}

// Full reports whether the job ran out of room or of files: less than
// 1 MiB or 1% left, or no inode.
func (u Usage) Full() bool {
	free := u.LimitBytes - u.Bytes
	return u.LimitBytes > 0 && (free < 1<<20 || free*100 < u.LimitBytes || u.Files >= u.LimitFiles)
}

// Usage reads the upper layer's filesystem: what the job has used of
// what it could use when the volume was made (ext4's own metadata left
// out).
func (v *Volume) Usage() (Usage, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(v.fs(), &s); err != nil {
		return Usage{}, fmt.Errorf("statfs the workspace volume: %w", err)
	}
	avail := max(int64(s.Bavail)*s.Bsize, 0)
	return Usage{Bytes: v.room - avail, Files: v.files - int64(s.Ffree), LimitBytes: v.room, LimitFiles: v.files}, nil
}

// Release ends the volume: see the package doc.
func (v *Volume) Release() (Merged, error) { return Release(v.dir) }

// Release unmounts the overlay that the volume in dir put over its
// workspace, merges what the job wrote into the workspace, and removes
// the volume. A volume whose overlay or filesystem is no longer mounted
// (a reboot) is mounted again to be merged. No directory: nothing to do.
//
// Before the first byte moves, Release marks the volume as merging: a
// merge that is killed is then finished by Abandon, never left half
// done nor thrown away half done. Without the mark it does not merge.
func Release(dir string) (Merged, error) {
	rec, err := readRecord(dir)
	if errors.Is(err, os.ErrNotExist) {
		return Merged{}, os.RemoveAll(dir)
	}
	if err != nil {
		return Merged{}, err
	}
	v := &Volume{dir: dir, rec: rec}
	// The mark holds the merge's tag: a resumed merge removes its own
	// temporary names, and no file of the workspace's.
	tag, markErr := os.ReadFile(v.mergingMark())
	resume := markErr == nil
	if err := v.unmountOverlay(); err != nil {
		return Merged{}, err // the workspace is still covered: keep everything
	}
	var merged Merged
	if _, mounted := mountAt(v.fs()); !mounted && v.Medium() == MediumTmpfs {
		err := fmt.Errorf("the workspace volume of %s was in memory (tmpfs) and is gone (a reboot, or the pod restarted): what the job wrote is lost", rec.Workspace)
		return merged, errors.Join(err, v.discard())
	} else if !mounted {
		if _, err := os.Stat(v.image()); err == nil {
			if err := mountImage(v.image(), v.fs()); err != nil {
				err = fmt.Errorf("mount the workspace volume again to merge it: %w; what the job wrote is lost", err)
				return merged, errors.Join(err, v.discard())
			}
		}
	}
	if _, err := os.Stat(v.upper()); err != nil {
		return merged, v.discard()
	}
	if !resume {
		// What cannot be read back whole is not merged: a half-written
		// file must not reach the workspace as if the job wrote it so.
		if err := v.intact(); err != nil {
			err = fmt.Errorf("%w; %w: not merged into %s", err, ErrNotMerged, rec.Workspace)
			return merged, errors.Join(err, v.discard())
		}
		tag = []byte(randomTag())
		if err := markMerging(v.mergingMark(), tag); err != nil {
			err = fmt.Errorf("mark the workspace volume as merging: %w; what the job wrote is not merged into %s", err, rec.Workspace)
			return merged, errors.Join(err, v.discard())
		}
	}
	merged, err = merge(v.upper(), rec.Workspace, string(tag), resume, func() { trim(v.fs()) })
	if err != nil {
		err = fmt.Errorf("merge what the job wrote into %s: %w", rec.Workspace, err)
	}
	return merged, errors.Join(err, v.discard())
}

// minFreeForImage is the least free space that the disk under the
// volumes must have for a job to start: a sparse image takes its blocks
// as the job writes, so a disk with less is full for any job.
const minFreeForImage = 2 * MinBytes

// roomForImage refuses to start a job whose volume's disk is full.
func roomForImage(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs the workspace volume's disk: %w", err)
	}
	if free := int64(st.Bavail) * st.Bsize; free < minFreeForImage {
		return fmt.Errorf("the disk of the workspace volumes (%s) has %d KiB free, less than the %d MiB a job needs to start: %w", filepath.Dir(dir), free>>10, minFreeForImage>>20, unix.ENOSPC)
	}
	return nil
}

// intact checks that what the job wrote is on the volume whole: its
// filesystem flushed without a write error (the disk under the sparse
// image may have filled while the job wrote: the loop device then fails
// writes that the job saw succeed) and with no error recorded by ext4.
func (v *Volume) intact() error {
	if v.Medium() == MediumTmpfs {
		return nil // memory: no device to fail
	}
	fd, err := unix.Open(v.fs(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the workspace volume: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("the workspace volume could not be written to its disk (%s full?): %w", filepath.Dir(v.dir), err)
	}
	if m, ok := mountAt(v.fs()); ok {
		b, err := os.ReadFile(filepath.Join("/sys/fs/ext4", filepath.Base(m.source), "errors_count"))
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return fmt.Errorf("the workspace volume's filesystem recorded %d error(s) (its disk, %s, full?): %w", n, filepath.Dir(v.dir), unix.EIO)
		}
	}
	return nil
}

// Leftover says what Abandon did with the volume of a job whose airlock
// was killed.
type Leftover struct {
	Workspace string `json:"workspace"`
	// Resumed: the job had ended and its merge was under way; Abandon
	// finished it (Merged counts what the rest moved).
	Resumed bool   `json:"resumed"`
	Merged  Merged `json:"merged"`
	// Discarded: the job was killed before its merge began; nothing it
	// wrote reached the workspace.
	Discarded bool `json:"discarded"`
}

// Abandon releases the volume in dir of a job whose airlock is gone
// (gvisor.Reap). A job killed while it ran (or between its steps) never
// ended: what it wrote stays out of the workspace, whole, rather than
// reach it without the checks that follow the end of a job (the trust
// diff and its reverts). A job killed during its merge had ended: the
// merge is finished, so the workspace holds all of the job's writes, as
// its airlock would have left them. No directory: nothing to do.
func Abandon(dir string) (Leftover, error) {
	rec, err := readRecord(dir)
	if errors.Is(err, os.ErrNotExist) {
		return Leftover{}, os.RemoveAll(dir)
	}
	if err != nil {
		return Leftover{}, err
	}
	v := &Volume{dir: dir, rec: rec}
	out := Leftover{Workspace: rec.Workspace}
	if _, err := os.Stat(v.mergingMark()); err == nil {
		out.Resumed = true
		out.Merged, err = Release(dir)
		return out, err
	}
	if err := v.unmountOverlay(); err != nil {
		return out, err // the workspace is still covered: keep everything
	}
	out.Discarded = true
	return out, v.discard()
}

// randomTag names one merge's temporary files.
func randomTag() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// markMerging creates the mark holding the merge's tag, and makes it
// durable before the merge moves anything: a crash of the host must not
// find a half-merged workspace without it.
func markMerging(file string, tag []byte) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(tag); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(file))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// trim gives the image's free blocks back to the host's disk (FITRIM: the
// loop device punches holes in the image file).
func trim(fs string) {
	f, err := os.Open(fs)
	if err != nil {
		return
	}
	defer f.Close()
	r := fstrimRange{Len: ^uint64(0)}
	unix.Syscall(unix.SYS_IOCTL, f.Fd(), fitrim, uintptr(unsafe.Pointer(&r)))
}

// fitrim is FITRIM, _IOWR('X', 121, struct fstrim_range), which
// golang.org/x/sys/unix does not name.
const fitrim = 0xc0185879

type fstrimRange struct{ Start, Len, MinLen uint64 }

// unmountOverlay takes the volume's overlay off the workspace, lazily if
// something on the host still uses it (the upper layer is read from the
// filesystem below, not through the overlay).
func (v *Volume) unmountOverlay() error {
	for try := 0; ; try++ {
		m, ok := mountAt(v.rec.Workspace)
		if !ok || m.source != v.source() {
			return nil
		}
		if try == 8 {
			return fmt.Errorf("unmount the workspace overlay from %s: still mounted after %d tries", v.rec.Workspace, try)
		}
		err := unix.Unmount(v.rec.Workspace, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(v.rec.Workspace, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount the workspace overlay from %s: %w", v.rec.Workspace, err)
		}
	}
}

// discard unmounts what is left of the volume and removes its directory
// (the loop device goes with the filesystem: it was attached with
// autoclear).
func (v *Volume) discard() error {
	if err := v.unmountOverlay(); err != nil {
		return err
	}
	for {
		if _, ok := mountAt(v.fs()); !ok {
			break
		}
		if err := unix.Unmount(v.fs(), unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount the workspace volume %s: %w", v.fs(), err)
		}
	}
	if err := os.RemoveAll(v.dir); err != nil {
		return fmt.Errorf("remove the workspace volume: %w", err)
	}
	return nil
}

func writeRecord(dir string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "volume.json"), b, 0o600); err != nil {
		return fmt.Errorf("write the workspace volume's record: %w", err)
	}
	return nil
}

func readRecord(dir string) (record, error) {
	var r record
	b, err := os.ReadFile(filepath.Join(dir, "volume.json"))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil || !filepath.IsAbs(r.Workspace) {
		return r, fmt.Errorf("the workspace volume's record %s is damaged: %q", filepath.Join(dir, "volume.json"), b)
	}
	return r, nil
}

// findMkfs finds e2fsprogs' mkfs.ext4, in PATH or the sbin directories
// that a non-login root shell may lack.
func findMkfs() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: mkfs.ext4 not found; install e2fsprogs", ErrUnsupported)
}

// makeImage creates a sparse file of the limit's size holding an empty
// ext4 filesystem: no journal (a job's scratch space needs no crash
// safety, and a journal would take room and time), nothing reserved for
// root, one inode per BytesPerInode, inode tables left to be initialised
// lazily so the image stays sparse.
func makeImage(mkfs, image, templates string, limit Limit) error {
	if templates == "" {
		return mkfsImage(mkfs, image, limit)
	}
	name := fmt.Sprintf("ext4-%s-%d-%d.img", imageFormat, limit.Bytes, inodesFor(limit.Bytes, limit))
	template := filepath.Join(templates, name)
	if _, err := os.Stat(template); err != nil {
		if err := os.MkdirAll(templates, 0o700); err != nil {
			return fmt.Errorf("create the workspace images' directory: %w", err)
		}
		// Made aside and renamed: a job running at the same time never
		// copies half a template.
		tmp := fmt.Sprintf("%s.%d", template, os.Getpid())
		os.Remove(tmp)
		if err := mkfsImage(mkfs, tmp, limit); err != nil {
			os.Remove(tmp)
			return err
		}
		if err := os.Rename(tmp, template); err != nil {
			return fmt.Errorf("keep the workspace image template: %w", err)
		}
	}
	return copyImage(template, image, limit.Bytes)
}

// imageFormat names mkfsImage's options in the templates' names: change
// it with them, and older templates are not used.
const imageFormat = "v1"

// mkfsImage makes the sparse image file and its filesystem.
func mkfsImage(mkfs, image string, limit Limit) error {
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create the workspace image: %w", err)
	}
	size := limit.Bytes
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return fmt.Errorf("size the workspace image: %w", err)
	}
	cmd := exec.Command(mkfs, "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-m", "0", "-b", "4096", "-I", "256",
		"-N", strconv.FormatInt(inodesFor(size, limit), 10), "-E", "lazy_itable_init=1,nodiscard", "-L", "airlock-ws", image)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s: %v: %s", ErrUnsupported, mkfs, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// copyImage copies the template's data (its metadata: the rest is hole)
// into a new sparse image of size bytes.
func copyImage(template, image string, size int64) error {
	src, err := unix.Open(template, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open the workspace image template: %w", err)
	}
	defer unix.Close(src)
	dst, err := unix.Open(image, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create the workspace image: %w", err)
	}
	defer unix.Close(dst)
	if _, err := (&merger{}).copySparse(dst, src, size); err != nil {
		return fmt.Errorf("copy the workspace image template: %w", err)
	}
	return nil
}

// inodesFor is the inode count to ask mkfs for so that it makes at most
// limit.Inodes(): mkfs spreads inodes over block groups (32768 blocks of
// 4 KiB each) and rounds each group's up to whole inode-table blocks (16
// inodes of 256 bytes), so ask for a multiple of that.
func inodesFor(size int64, limit Limit) int64 {
	groups := (size/4096 + 32767) / 32768
	per := limit.Inodes() / groups &^ 15
	return max(per, 16) * groups
}

// mountTmpfs mounts the volume's tmpfs at dir: the limit's size, one
// inode per BytesPerInode of it (as the ext4 image has), nosuid, nodev.
func mountTmpfs(dir string, limit Limit) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the workspace volume's mount point: %w", err)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700", limit.Bytes, max(limit.Inodes(), 16))
	if err := unix.Mount("airlock-ws", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, opts); err != nil {
		return fmt.Errorf("%w: mount the workspace volume (tmpfs, no loop devices here): %v", ErrUnsupported, err)
	}
	return nil
}

// mountImage attaches image to a free loop device and mounts its ext4 at
// dir: nosuid and nodev, noinit_itable (the kernel would otherwise zero
// the inode tables, filling the sparse image), and barrier=0 (nothing
// needs the scratch filesystem on disk in order, and each flush would go
// through the loop device to the host's disk). Not discard: without
// a journal ext4 would discard each freed extent at once, a hole punched
// in the image per deleted file (Release trims in batches instead, and
// while the job runs ext4 reuses what it freed). (No blocks are kept
// for root: the overlay writes with its mounter's credentials less
// CAP_SYS_RESOURCE, the runner's writes as the job's, so a reserve would
// serve nobody; the runner's own directories are kept instead, Limit.Keep.)
func mountImage(image, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the workspace volume's mount point: %w", err)
	}
	loop, err := attachLoop(image)
	if err != nil {
		return err
	}
	// The loop device is attached with autoclear: it goes away when its
	// last user does, the mount once it is made.
	defer loop.Close()
	// errors=remount-ro: when the host's disk under the sparse image
	// fills, the loop device fails writes; the filesystem then stops
	// taking more (the job's writes fail) instead of losing them quietly.
	err = unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable,barrier=0,errors=remount-ro")
	if err != nil {
		return fmt.Errorf("%w: mount the workspace image (%s) as ext4: %v", ErrUnsupported, loop.Name(), err)
	}
	return nil
}

// attachLoop binds image to a free loop device and returns the device,
// open. Another process may take the free device first: try again.
func attachLoop(image string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: loop devices: %v", ErrUnsupported, err)
	}
	defer ctl.Close()
	backing, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open the workspace image: %w", err)
	}
	defer backing.Close()
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("%w: find a free loop device: %v", ErrUnsupported, err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: open loop device %d: %v", ErrUnsupported, n, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], "airlock-workspace")
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) || try == 20 {
			return nil, fmt.Errorf("%w: attach the workspace image to loop device %d: %v", ErrUnsupported, n, err)
		}
	}
}

// makeLayerDirs creates the overlay's upper and work directories; the
// upper one takes the workspace root's owner and mode, which the
// overlay's root then shows.
func makeLayerDirs(fs string, st *syscall.Stat_t) error {
	upper, work := filepath.Join(fs, "upper"), filepath.Join(fs, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("create the workspace overlay's layer: %w", err)
		}
	}
	if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("give the workspace overlay its owner: %w", err)
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return fmt.Errorf("give the workspace overlay its mode: %w", err)
	}
	return nil
}

// mountOverlay mounts the overlay over workspace, which is also its lower
// layer. The layers are named by descriptors, so no path needs escaping.
// Without redirect_dir, index, metacopy and xino the upper layer holds
// only plain files, directories, whiteouts and the opaque mark, which is
// all Merge reads; renaming a directory the job did not create fails
// with EXDEV, which tools answer by copying.
//
// The directories to keep are bound, from the workspace's own disk, over
// the overlay.
func mountOverlay(source, workspace, upper, work string, keep []string) error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, p := range []string{workspace, upper, work} {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s for the workspace overlay: %w", p, err)
		}
		fds = append(fds, fd)
	}
	fd := func(i int) string { return "/proc/self/fd/" + strconv.Itoa(fds[i]) }
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=off,index=off,metacopy=off,xino=off", fd(0), fd(1), fd(2))
	if err := unix.Mount(source, workspace, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("%w: mount the workspace overlay on %s: %v", ErrUnsupported, workspace, err)
	}
	for _, rel := range keep {
		if err := bindKept(fds[0], workspace, rel); err != nil {
			return err
		}
	}
	return nil
}

// bindKept binds the directory rel of the workspace's own disk (lower)
// over the same path of the overlay, neither resolved through a symlink.
// A directory that is not there is not kept.
func bindKept(lower int, workspace, rel string) error {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	src, err := unix.Openat2(lower, rel, how)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("keep %s of the workspace on the host's disk: %w", rel, err)
	}
	defer unix.Close(src)
	root, err := unix.Open(workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the workspace overlay: %w", err)
	}
	defer unix.Close(root)
	dst, err := unix.Openat2(root, rel, how)
	if err != nil {
		return fmt.Errorf("keep %s of the workspace on the host's disk: %w", rel, err)
	}
	defer unix.Close(dst)
	fd := func(n int) string { return "/proc/self/fd/" + strconv.Itoa(n) }
	if err := unix.Mount(fd(src), fd(dst), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("keep %s of the workspace on the host's disk: %w", rel, err)
	}
	return nil
}

// mount is a mount's type and source.
type mount struct{ fstype, source string }

// mountAt returns the topmost mount whose mount point is path (moby's
// mountinfo parser: it undoes the file's escapes).
func mountAt(path string) (mount, bool) {
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) { return i.Mountpoint != path, false })
	if err != nil || len(infos) == 0 {
		return mount{}, false
	}
	top := infos[len(infos)-1] // in mount order: the last is on top
	return mount{fstype: top.FSType, source: top.Source}, true
}
