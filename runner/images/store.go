package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/files"
)

// DefaultStoreDir is where the runner keeps its image cache: on disk, so
// that it outlives a reboot (the state root is in memory).
const DefaultStoreDir = "/var/lib/airlock/images"

// DefaultCacheSize bounds the cache when the policy does not.
const DefaultCacheSize = 20 << 30

// Store is the runner's content-addressed image cache, shared by every
// job on the host:
//
//	blobs/sha256/<hex>     compressed layers, kept only once their sha256 matched
//	snapshots/<chain hex>/ the unpacked root of each prefix of an image's layers,
//	                       shared by every image with that prefix (snapshot.go)
//	roots/<hex>/image.json an image, by its manifest digest: its config and the chain
//	                       of snapshots its root is (Image); read-only to jobs
//	locks/                 a pull lock per image (one pull at a time), a use lock
//	                       (shared by the jobs on it; prune takes it exclusively)
//	                       and a lock per snapshot
//	tmp/                   pulls and unpacks on their way; renamed into place whole
//
// An image or a snapshot exists only once whole (renamed from tmp/), so a
// pull killed halfway leaves only tmp/ entries, which the next pull
// removes when no pull holds them.
type Store struct {
	dir string
	max int64
}

// OpenStore opens (making it) the cache in dir, bounded to max bytes.
// dir must belong to root and be writable by root alone.
func OpenStore(dir string, max int64) (*Store, error) {
	for _, d := range []string{dir, filepath.Join(dir, "blobs", "sha256"), filepath.Join(dir, "snapshots"), filepath.Join(dir, "roots"), filepath.Join(dir, "locks"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image cache: %w", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("image cache %s: must be a directory of airlock's user that nobody else may write (mode %#o, uid %d): fix its owner and mode, or give another", dir, st.Mode&0o777, st.Uid)
	}
	if max <= 0 {
		max = DefaultCacheSize
	}
	return &Store{dir: dir, max: max}, nil
}

// Dir is the cache's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) blobPath(h v1.Hash) string {
	return filepath.Join(s.dir, "blobs", h.Algorithm, h.Hex)
}

func (s *Store) rootDir(h v1.Hash) string { return filepath.Join(s.dir, "roots", h.Hex) }

// hasBlob reports whether the blob is kept (it was verified when kept).
func (s *Store) hasBlob(h v1.Hash) bool {
	fi, err := os.Lstat(s.blobPath(h))
	return err == nil && fi.Mode().IsRegular()
}

// putBlob keeps r's bytes as blob h, only if they are size bytes whose
// sha256 is h: through a temporary file, synced, renamed into place. It
// returns how many bytes it read (at most size+1).
func (s *Store) putBlob(h v1.Hash, r io.Reader, size int64) (int64, error) {
	if h.Algorithm != "sha256" || len(h.Hex) != 64 {
		return 0, fmt.Errorf("blob %s: only sha256 digests are kept", h)
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-"+h.Hex[:12]+"-")
	if err != nil {
		return 0, fmt.Errorf("image cache: %w", err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), io.LimitReader(r, size+1))
	if err == nil {
		err = f.Sync() // whole on disk before it is named: a crash leaves no short blob
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("blob %s: %w", h, err)
	}
	if n != size {
		return n, fmt.Errorf("%w: blob %s: %d bytes or more, where its manifest says %d", ErrDigestMismatch, h, n, size)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.Hex {
		return n, fmt.Errorf("%w: blob %s: its content is sha256:%s", ErrDigestMismatch, h, got)
	}
	if err := os.Rename(f.Name(), s.blobPath(h)); err != nil {
		return n, fmt.Errorf("image cache: %w", err)
	}
	return n, nil
}

// ErrDigestMismatch: bytes from the registry are not what their digest
// says.
var ErrDigestMismatch = errors.New("registry content does not match its digest")

// Image is an image in the cache: what the job runs on.
type Image struct {
	// Digest is the image manifest's digest, the cache's key.
	Digest string `json:"digest"`
	// Ref is the reference it was first pulled as (registry/repository
	// with its tag or digest), for a reader of the cache.
	Ref string `json:"ref,omitempty"`
	// Platform is os/architecture[/variant].
	Platform string `json:"platform"`
	// Layers are the compressed layers' digests, in order, and Chain the
	// chain ids (hex) of the snapshots of their prefixes: the last is the
	// image's root.
	Layers []string `json:"layers"`
	Chain  []string `json:"chain"`
	// Env, Entrypoint, Cmd, WorkingDir and User are the image config's.
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	// Size is what the unpacked root holds, in bytes (some of it shared
	// with other images of the same base).
	Size int64 `json:"size"`
	// RootFS is the unpacked root (not stored: where this cache keeps it).
	RootFS string `json:"-"`
}

// maxImageJSON bounds image.json.
const maxImageJSON = 1 << 20

// root returns the unpacked image h, if the cache holds it whole.
func (s *Store) root(h v1.Hash) (Image, bool) {
	dir := s.rootDir(h)
	b, err := files.ReadCapped(filepath.Join(dir, "image.json"), maxImageJSON)
	if err != nil {
		return Image{}, false
	}
	var img Image
	if json.Unmarshal(b, &img) != nil || img.Digest != h.String() || len(img.Chain) == 0 {
		return Image{}, false
	}
	last, err := v1.NewHash("sha256:" + img.Chain[len(img.Chain)-1])
	if err != nil {
		return Image{}, false
	}
	if _, ok := s.snapshotSize(last); !ok {
		return Image{}, false
	}
	img.RootFS = filepath.Join(s.snapDir(last), "rootfs")
	return img, true
}

// lockFile takes an flock on locks/<kind>-<hex>.lock: how is LOCK_SH or
// LOCK_EX, with LOCK_NB to fail at once (EWOULDBLOCK) when held.
func (s *Store) lockFile(kind string, h v1.Hash, how int) (*os.File, error) {
	f, err := files.Lock(s.lockPath(kind, h), how)
	if err != nil && err != unix.EWOULDBLOCK {
		err = fmt.Errorf("image cache: %w", err)
	}
	return f, err
}

func (s *Store) lockPath(kind string, h v1.Hash) string {
	return filepath.Join(s.dir, "locks", kind+"-"+h.Hex+".lock")
}

// lockWait is lockFile that waits, for as long as ctx lets it, for a
// lock another process holds: a job never waits past its own time for
// another job's pull.
func (s *Store) lockWait(ctx context.Context, kind string, h v1.Hash, how int) (*os.File, error) {
	f, err := files.LockWait(ctx, s.lockPath(kind, h), how)
	if err != nil {
		return nil, fmt.Errorf("image cache: waiting for another pull of the same image or base: %w", err)
	}
	return f, nil
}

// gcLock is the cache-wide lock: held shared by every pull and every
// lease being taken, exclusively by prune, so that prune never removes
// what a pull is building or a job is about to run on.
var gcLock = v1.Hash{Algorithm: "sha256", Hex: "gc"}

// Lease keeps an image in the cache while a job runs on it: prune
// removes no image, and no snapshot, that a lease holds.
type Lease struct {
	files []*os.File
}

// Close ends the lease.
func (l *Lease) Close() error {
	if l == nil {
		return nil
	}
	var err error
	for _, f := range l.files {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	l.files = nil
	return err
}

// use takes a lease on image h and on the snapshot its root is, and
// returns it with the image, or false when the cache does not hold it
// (any more). The caller holds the gc lock, shared.
func (s *Store) use(h v1.Hash) (Image, *Lease, bool, error) {
	f, err := s.lockFile("use", h, unix.LOCK_SH)
	if err != nil {
		return Image{}, nil, false, err
	}
	img, ok := s.root(h)
	if !ok {
		f.Close()
		return Image{}, nil, false, nil
	}
	last, _ := v1.NewHash("sha256:" + img.Chain[len(img.Chain)-1])
	snap, err := s.lockFile("snap", last, unix.LOCK_SH)
	if err != nil {
		f.Close()
		return Image{}, nil, false, err
	}
	now := time.Now()
	os.Chtimes(s.rootDir(h), now, now) // last used: what prune orders by
	return img, &Lease{files: []*os.File{f, snap}}, true, nil
}

// ErrCacheBusy is Prune's answer while a pull or another prune holds the
// cache.
var ErrCacheBusy = errors.New("the image cache is busy: a pull or another prune is under way (a pull prunes the cache when it is done)")

// Entry is one image the cache holds.
type Entry struct {
	Image
	// LastUsed is when a job last took it.
	LastUsed time.Time
	// InUse: a job runs on it now.
	InUse bool
}

// List returns the images the cache holds, the most recently used first.
func (s *Store) List() ([]Entry, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "roots"))
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	var out []Entry
	for _, e := range ents {
		h, err := v1.NewHash("sha256:" + e.Name())
		if err != nil {
			continue
		}
		img, ok := s.root(h)
		if !ok {
			continue
		}
		fi, err := os.Lstat(s.rootDir(h))
		if err != nil {
			continue
		}
		inUse := false
		if f, err := s.lockFile("use", h, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			inUse = true
		} else {
			f.Close()
		}
		out = append(out, Entry{Image: img, LastUsed: fi.ModTime(), InUse: inUse})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUsed.After(out[j].LastUsed) })
	return out, nil
}

// Prune removes the images used longest ago, never one in use, until the
// cache holds at most keep bytes; with them go the snapshots that no image
// left builds on and the blobs that no image left has. It returns the
// images it removed. While a pull or another prune is under way it does
// nothing and returns ErrCacheBusy (a pull prunes when it is done).
func (s *Store) Prune(keep int64) ([]Entry, error) {
	gc, err := s.lockFile("gc", gcLock, unix.LOCK_EX|unix.LOCK_NB)
	if err == unix.EWOULDBLOCK {
		return nil, ErrCacheBusy
	}
	if err != nil {
		return nil, err
	}
	defer gc.Close()
	list, err := s.List()
	if err != nil {
		return nil, err
	}
	var removed []Entry
	for i := len(list) - 1; i >= 0 && s.Size() > keep; i-- {
		e := list[i]
		h, _ := v1.NewHash(e.Digest)
		pull, err := s.lockFile("pull", h, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			continue // being pulled
		}
		use, err := s.lockFile("use", h, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			pull.Close()
			continue // a job runs on it
		}
		// Renamed out of roots/ first: the image is gone at once, whole.
		gone := filepath.Join(s.dir, "tmp", "gone-"+h.Hex)
		if err := os.Rename(s.rootDir(h), gone); err == nil {
			os.RemoveAll(gone)
			removed = append(removed, e)
		}
		use.Close()
		pull.Close()
		s.removeUnusedSnapshots()
		s.removeUnusedBlobs()
	}
	return removed, nil
}

// blobBytes is what the kept blobs hold.
func (s *Store) blobBytes() int64 {
	ents, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	n := int64(0)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// removeUnusedBlobs removes the blobs of no image in roots/, and returns
// the bytes freed. The caller holds the gc lock exclusively: no pull is
// adding blobs.
func (s *Store) removeUnusedBlobs() int64 {
	used := map[string]bool{}
	list, _ := s.List()
	for _, e := range list {
		for _, l := range e.Layers {
			used[strings.TrimPrefix(l, "sha256:")] = true
		}
	}
	ents, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	freed := int64(0)
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || used[e.Name()] {
			continue
		}
		if os.Remove(filepath.Join(s.dir, "blobs", "sha256", e.Name())) == nil {
			freed += fi.Size()
		}
	}
	return freed
}

// Size is what the cache holds now: blobs, and every file of the
// snapshots once.
func (s *Store) Size() int64 { return s.blobBytes() + s.snapshotBytes() }

// removeStaleTmp removes what killed pulls left in tmp/: an unpack whose
// image's pull lock is free (or is own's, whose lock the caller holds:
// one pull per image at a time), and blobs on their way for over an hour.
func (s *Store) removeStaleTmp(own v1.Hash) {
	ents, _ := os.ReadDir(filepath.Join(s.dir, "tmp"))
	for _, e := range ents {
		p := filepath.Join(s.dir, "tmp", e.Name())
		switch {
		case strings.HasPrefix(e.Name(), "pull-"):
			hexd, _, _ := strings.Cut(strings.TrimPrefix(e.Name(), "pull-"), "-")
			h, err := v1.NewHash("sha256:" + hexd)
			if err != nil {
				continue
			}
			if h == own {
				os.RemoveAll(p)
			} else if f, err := s.lockFile("pull", h, unix.LOCK_EX|unix.LOCK_NB); err == nil {
				os.RemoveAll(p)
				f.Close()
			}
		case strings.HasPrefix(e.Name(), "snap-"):
			hexd, _, _ := strings.Cut(strings.TrimPrefix(e.Name(), "snap-"), "-")
			c, err := v1.NewHash("sha256:" + hexd)
			if err != nil {
				continue
			}
			if f, err := s.lockFile("snap", c, unix.LOCK_EX|unix.LOCK_NB); err == nil {
				os.RemoveAll(p)
				f.Close()
			}
		case strings.HasPrefix(e.Name(), "gone-"):
			os.RemoveAll(p)
		default:
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(p)
			}
		}
	}
}

// removeBlobs removes the image's blobs (after its unpack failed: a blob
// that does not unpack is not kept for the next pull to trip on).
func (s *Store) removeBlobs(digests []string) {
	for _, d := range digests {
		if h, err := v1.NewHash(d); err == nil {
			os.Remove(s.blobPath(h))
		}
	}
}
