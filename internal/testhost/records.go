package testhost

import "time"

// FakeArtifact is an artifact the fake's artifact service holds: what
// CreateArtifact and FinalizeArtifact said, and what the blob store
// holds at its signed URL now.
type FakeArtifact struct {
	ID           int64  // the artifact id FinalizeArtifact returns
	Name         string // CreateArtifact's name
	RunID, JobID string // the workflow run and job backend ids
	Finalized    bool
	// Size and Claimed are FinalizeArtifact's size and hash, as sent
	// ("sha256:<hex>"; "" when it sent none).
	Size    int64
	Claimed string
	// SHA256 is the hex sha256 of the committed blob, "" when none was
	// committed; BlobSize its length.
	SHA256   string
	BlobSize int64
	Created  time.Time
	// ExpiresAt is CreateArtifact's expires_at (zero when not sent).
	ExpiresAt time.Time
}

// FakeCacheEntry is a cache entry the fake's cache service holds.
type FakeCacheEntry struct {
	ID           int64 // the entry id FinalizeCacheEntryUpload returns
	Key, Version string
	Finalized    bool
	Size         int64  // FinalizeCacheEntryUpload's size_bytes
	SHA256       string // of the committed blob, "" when none
	BlobSize     int64
	Created      time.Time
}

// Artifacts are the artifacts created so far, in creation order.
func (g *GitHub) Artifacts() []FakeArtifact {
	s := g.results
	s.mu.Lock()
	var out []FakeArtifact
	var paths []string
	for _, a := range s.artifacts {
		out = append(out, FakeArtifact{ID: a.id, Name: a.name, RunID: a.run, JobID: a.job, Finalized: a.finalized,
			Size: a.size, Claimed: a.hash, Created: a.created, ExpiresAt: a.expires})
		paths = append(paths, a.path)
	}
	s.mu.Unlock()
	for i, p := range paths {
		out[i].SHA256, out[i].BlobSize, _ = g.blobs.digest(p)
	}
	return out
}

// Blob is the committed blob (a zip) of the newest artifact named name,
// nil when there is none.
func (g *GitHub) Blob(name string) []byte {
	path, ok := g.artifactPath(name)
	if !ok {
		return nil
	}
	return g.blobs.content(path)
}

// artifactPath is the blob path of the newest artifact named name.
func (g *GitHub) artifactPath(name string) (string, bool) {
	s := g.results
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.artifact(runtimeRun, name, false); a != nil {
		return a.path, true
	}
	return "", false
}

// ForgetBlob drops the committed blob of the newest artifact named name
// from the blob store, freeing what it held (as a storage's lifecycle
// rule deletes old blobs): for benchmarks that upload more than the
// store holds. The artifact's record stays; its blob reads as missing.
func (g *GitHub) ForgetBlob(name string) {
	if path, ok := g.artifactPath(name); ok {
		g.blobs.forget(path)
	}
}

// CacheEntries are the cache entries created so far, in creation order.
func (g *GitHub) CacheEntries() []FakeCacheEntry {
	s := g.results
	s.mu.Lock()
	var out []FakeCacheEntry
	var paths []string
	for _, e := range s.caches {
		out = append(out, FakeCacheEntry{ID: e.id, Key: e.key, Version: e.version, Finalized: e.finalized, Size: e.size, Created: e.created})
		paths = append(paths, e.path)
	}
	s.mu.Unlock()
	for i, p := range paths {
		out[i].SHA256, out[i].BlobSize, _ = g.blobs.digest(p)
	}
	return out
}

// CacheBlob is the committed blob (the archive) of the newest cache
// entry with key, nil when there is none.
func (g *GitHub) CacheBlob(key string) []byte {
	s := g.results
	s.mu.Lock()
	var path string
	for _, e := range s.caches {
		if e.key == key {
			path = e.path
		}
	}
	s.mu.Unlock()
	if path == "" {
		return nil
	}
	return g.blobs.content(path)
}
