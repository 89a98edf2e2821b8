package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/storeref"
)

// fileStore is a directory on a mounted volume: TAG.sigstore.json holds
// a bundle byte for byte, TAG.json its entry (labels, digest, size),
// written after the bundle, so an entry always has its bundle. Files are
// made by link(2) from a synced temporary file: a name is never
// replaced, and a reader never sees part of a file.
type fileStore struct {
	ref storeref.Ref
	o   Options
}

// maxEntryFile bounds an entry's JSON read back.
const maxEntryFile = 64 << 10

const (
	bundleSuffix = ".sigstore.json"
	entrySuffix  = ".json"
)

func openFile(r storeref.Ref, o Options) (*fileStore, error) { return &fileStore{ref: r, o: o}, nil }

func (s *fileStore) Location() string { return s.ref.Location() }

// root opens the store's directory, which must exist: a volume that is
// not mounted must not turn into a directory on the runner's own disk.
func (s *fileStore) root() (*os.Root, error) {
	fi, err := os.Stat(s.ref.Path)
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w (the store's directory must exist: mount its volume there)", s.Location(), err)
	}
	return os.OpenRoot(s.ref.Path)
}

// Put stores r within the store's deadline: a volume that hangs (an NFS
// server gone) must not hold the job for ever. The write that hangs is
// abandoned, not waited for; the record stays pending.
func (s *fileStore) Put(ctx context.Context, r Record) (Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Deadline)
	defer cancel()
	type result struct {
		e   Entry
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := s.put(r)
		done <- result{e, err}
	}()
	select {
	case res := <-done:
		return res.e, res.err
	case <-ctx.Done():
		return Entry{}, fmt.Errorf("%s: no answer in time (a volume that hangs?): %w", s.Location(), ctx.Err())
	}
}

func (s *fileStore) put(r Record) (Entry, error) {
	if err := r.check(); err != nil {
		return Entry{}, err
	}
	root, err := s.root()
	if err != nil {
		return Entry{}, err
	}
	defer root.Close()
	tag := r.Tag()
	e := entryOf(r.Labels, tag, digestOf(r.Bundle), int64(len(r.Bundle)))
	e.Store, e.Ref = s.Location(), filepath.Join(s.ref.Path, tag+bundleSuffix)
	meta, err := json.Marshal(e)
	if err != nil {
		return Entry{}, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{tag + bundleSuffix, r.Bundle}, {tag + entrySuffix, meta}} {
		if err := createOnce(root, f.name, f.data); err != nil {
			return Entry{}, fmt.Errorf("%s: %s: %w", s.Location(), f.name, err)
		}
	}
	if d, err := root.Open("."); err == nil {
		d.Sync() // the names, on a volume that journals them
		d.Close()
	}
	return e, nil
}

// createOnce makes name hold data: through a synced temporary file
// linked to name. A name that holds data already is success (a retry);
// one that holds anything else is ErrConflict.
func createOnce(root *os.Root, name string, data []byte) error {
	tmp := fmt.Sprintf(".%s.%d.%d.tmp", name, os.Getpid(), rand.Uint64())
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer root.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	err = root.Link(tmp, name)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	have, rerr := readCapped(root, name, int64(len(data))+1)
	if rerr == nil && bytes.Equal(have, data) {
		return nil
	}
	return ErrConflict
}

func (s *fileStore) List(ctx context.Context, q Query) ([]Entry, error) {
	root, err := s.root()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	names, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Location(), err)
	}
	prefix := ""
	if q.Repository != "" {
		prefix = RepoPrefix(q.Repository) + tagSeparator
		if q.PullRequest != 0 {
			prefix = PullRequestPrefix(q.Repository, q.PullRequest)
		}
	}
	found := map[string]Entry{}
	for _, d := range names {
		tag, ok := strings.CutSuffix(d.Name(), entrySuffix)
		if !ok || strings.HasSuffix(tag, ".sigstore") || !d.Type().IsRegular() || !isJobTag(tag) || !strings.HasPrefix(tag, prefix) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e, err := s.entry(root, tag)
		if err != nil {
			return nil, err
		}
		if q.matches(e.Labels) {
			found[tag] = e
		}
	}
	return sortEntries(found), nil
}

// entry reads the entry of tag.
func (s *fileStore) entry(root *os.Root, tag string) (Entry, error) {
	b, err := readCapped(root, tag+entrySuffix, maxEntryFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, fmt.Errorf("%s: %s: %w", s.Location(), tag, ErrNotFound)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("%s: %s: %w", s.Location(), tag, err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil || e.Tag != tag || e.JobID == "" {
		return Entry{}, fmt.Errorf("%s: %s%s is not an airlock entry", s.Location(), tag, entrySuffix)
	}
	e.Store, e.Ref = s.Location(), filepath.Join(s.ref.Path, tag+bundleSuffix)
	return e, nil
}

// Resolve takes a tag, or the path of a bundle in the store.
func (s *fileStore) Resolve(ctx context.Context, ref string) (Entry, error) {
	tag := ref
	if rel, err := filepath.Rel(s.ref.Path, ref); err == nil && filepath.IsAbs(ref) && filepath.IsLocal(rel) {
		tag = strings.TrimSuffix(rel, bundleSuffix)
	}
	if !isJobTag(tag) {
		return Entry{}, fmt.Errorf("%q is neither a job's tag nor a bundle of the store %s", ref, s.Location())
	}
	root, err := s.root()
	if err != nil {
		return Entry{}, err
	}
	defer root.Close()
	return s.entry(root, tag)
}

func (s *fileStore) Fetch(ctx context.Context, e Entry) ([]byte, error) {
	root, err := s.root()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	b, err := readCapped(root, e.Tag+bundleSuffix, attest.MaxBundleSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.Location(), e.Tag, err)
	}
	if got := digestOf(b); e.Digest != "" && got != e.Digest {
		return nil, fmt.Errorf("%s: %s: the bundle hashes to %s, its entry says %s", s.Location(), e.Tag, got, e.Digest)
	}
	return b, nil
}

// readCapped reads name in root, refusing more than limit bytes, a
// symlink or anything but a regular file.
func readCapped(root *os.Root, name string, limit int64) ([]byte, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, at most %d", name, fi.Size(), limit)
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s: more than %d bytes", name, limit)
	}
	return b, err
}
