package testhost

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The results service's twirp methods, as the real clients call them:
// POST /twirp/<service>/<method>, a JSON body with the proto field names
// (toJson with useProtoFieldName), int64 as strings. Shapes are from
// @actions/artifact 2.3.2 (lib/generated/results/api/v1/artifact.js,
// lib/internal/upload/upload-artifact.js,
// lib/internal/download/download-artifact.js,
// lib/internal/shared/artifact-twirp-client.js) and @actions/cache 4.1.0
// (lib/generated/results/api/v1/cache.js, lib/cache.js,
// lib/internal/shared/cacheTwirpClient.js). Answers carry every field,
// defaults included, as twirp's protojson does; errors are twirp's
// {"code","msg"} with its HTTP status, which the clients do not retry
// but for 429 and 5xx.
const (
	twirpPrefix = "/twirp/github.actions.results.api.v1."
	// maxTwirpBody bounds a request's body.
	maxTwirpBody = 1 << 20
	// signedURLLifetime is how long a signed URL the service hands out
	// stays good.
	signedURLLifetime = time.Hour
)

// results is the state of the fake's artifact (v4) and cache (v2)
// services. Lock order: results.mu, then blobStore.mu.
type results struct {
	run, job string // the backend ids the runtime token's scope names
	sign     urlSigner
	blobs    *blobStore

	mu        sync.Mutex
	nextID    int64
	artifacts []*artifactRecord // in creation order
	caches    []*cacheRecord    // in creation order
}

type artifactRecord struct {
	id        int64
	run, job  string
	name      string
	path      string // of the blob in the store
	created   time.Time
	expires   time.Time
	finalized bool
	size      int64  // FinalizeArtifact's size
	hash      string // FinalizeArtifact's hash, as sent
}

type cacheRecord struct {
	id           int64
	key, version string
	path         string
	created      time.Time
	finalized    bool
	size         int64 // FinalizeCacheEntryUpload's size_bytes
}

// twirpError is a twirp error: its code names the HTTP status.
type twirpError struct {
	status int
	Code   string `json:"code"`
	Msg    string `json:"msg"`
}

func twirpErr(code, format string, args ...any) *twirpError {
	status := map[string]int{"invalid_argument": 400, "malformed": 400, "not_found": 404, "bad_route": 404,
		"already_exists": 409, "permission_denied": 403, "failed_precondition": 412}[code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	return &twirpError{status: status, Code: code, Msg: fmt.Sprintf(format, args...)}
}

type twirpMethod func(s *results, body []byte) (any, *twirpError)

// method is the twirp method at path, nil for any other path (which the
// fake answers as before, with its generic JSON).
func (s *results) method(path string) twirpMethod {
	rest, ok := strings.CutPrefix(path, twirpPrefix)
	if !ok {
		return nil
	}
	return map[string]twirpMethod{
		"ArtifactService/CreateArtifact":        (*results).createArtifact,
		"ArtifactService/FinalizeArtifact":      (*results).finalizeArtifact,
		"ArtifactService/ListArtifacts":         (*results).listArtifacts,
		"ArtifactService/GetSignedArtifactURL":  (*results).getSignedArtifactURL,
		"CacheService/CreateCacheEntry":         (*results).createCacheEntry,
		"CacheService/FinalizeCacheEntryUpload": (*results).finalizeCacheEntry,
		"CacheService/GetCacheEntryDownloadURL": (*results).getCacheEntryDownloadURL,
	}[rest]
}

// serve answers one call of m.
func (s *results) serve(w http.ResponseWriter, r *http.Request, m twirpMethod) {
	resp, err := s.call(r, m)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // as protojson: a URL's & stays &
	if err != nil {
		w.WriteHeader(err.status)
		enc.Encode(err)
		return
	}
	enc.Encode(resp)
}

func (s *results) call(r *http.Request, m twirpMethod) (any, *twirpError) {
	if r.Method != http.MethodPost {
		return nil, twirpErr("bad_route", "unsupported method %q (only POST is allowed)", r.Method)
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/protobuf") {
		return nil, twirpErr("bad_route", "the fake speaks twirp's JSON only, not application/protobuf")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTwirpBody+1))
	if err != nil || len(body) > maxTwirpBody {
		return nil, twirpErr("malformed", "the request body could not be read (at most %d bytes): %v", maxTwirpBody, err)
	}
	return m(s, body)
}

func decode(body []byte, v any) *twirpError {
	if err := json.Unmarshal(body, v); err != nil {
		return twirpErr("malformed", "the json request could not be decoded: %v", err)
	}
	return nil
}

// int64JSON is an int64 as proto3 JSON has it: a string (a number is
// read too).
type int64JSON int64

func (n *int64JSON) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	v, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		return fmt.Errorf("int64 %s: %w", b, err)
	}
	*n = int64JSON(v)
	return nil
}

func (n int64JSON) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(n), 10) + `"`), nil
}

// protoTime is a google.protobuf.Timestamp in JSON: protobuf-ts reads
// only 0, 3, 6 or 9 digits of fraction.
func protoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func (s *results) newID() int64 {
	s.nextID++
	return 1000 + s.nextID
}

// checkScope refuses backend ids other than the runtime token's (the
// client reads them from its scp claim: lib/internal/shared/util.js).
func (s *results) checkScope(run, job string) *twirpError {
	if run != s.run || job != s.job {
		return twirpErr("permission_denied", "the runtime token's scope is run %q job %q, not run %q job %q", s.run, s.job, run, job)
	}
	return nil
}

// invalidArtifactName are the characters the client refuses in a name
// (lib/internal/upload/path-and-artifact-name-validation.js).
const invalidArtifactName = "\":<>|*?\r\n\\/"

func (s *results) createArtifact(body []byte) (any, *twirpError) {
	var req struct {
		Run       string `json:"workflow_run_backend_id"`
		Job       string `json:"workflow_job_run_backend_id"`
		Name      string `json:"name"`
		ExpiresAt string `json:"expires_at"`
		Version   int32  `json:"version"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := s.checkScope(req.Run, req.Job); err != nil {
		return nil, err
	}
	if req.Name == "" || strings.ContainsAny(req.Name, invalidArtifactName) {
		return nil, twirpErr("invalid_argument", "the artifact name %q is not valid (empty, or one of %q)", req.Name, invalidArtifactName)
	}
	var expires time.Time
	if req.ExpiresAt != "" {
		var err error
		if expires, err = time.Parse(time.RFC3339, req.ExpiresAt); err != nil {
			return nil, twirpErr("invalid_argument", "expires_at %q: %v", req.ExpiresAt, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.artifact(req.Run, req.Name, false)
	if a != nil && a.finalized {
		return nil, twirpErr("already_exists", "an artifact with this name already exists on the workflow run")
	}
	if a == nil { // else a retry of an unfinalized upload: the same blob
		a = &artifactRecord{id: s.newID(), run: req.Run, name: req.Name, created: time.Now(),
			path: "/artifacts/" + req.Run + "/" + req.Job + "/" + req.Name + ".zip"}
		s.artifacts = append(s.artifacts, a)
	}
	a.job, a.expires = req.Job, expires
	return struct {
		OK              bool   `json:"ok"`
		SignedUploadURL string `json:"signed_upload_url"`
	}{true, s.sign.sign(a.path, "cw", time.Now().Add(signedURLLifetime))}, nil
}

// artifact is the newest artifact of run named name (finalized only, if
// finalized), nil when none. s.mu is held.
func (s *results) artifact(run, name string, finalized bool) *artifactRecord {
	for i := len(s.artifacts) - 1; i >= 0; i-- {
		if a := s.artifacts[i]; a.run == run && a.name == name && (a.finalized || !finalized) {
			return a
		}
	}
	return nil
}

func (s *results) finalizeArtifact(body []byte) (any, *twirpError) {
	var req struct {
		Run  string    `json:"workflow_run_backend_id"`
		Job  string    `json:"workflow_job_run_backend_id"`
		Name string    `json:"name"`
		Size int64JSON `json:"size"`
		Hash *string   `json:"hash"` // a google.protobuf.StringValue
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := s.checkScope(req.Run, req.Job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.artifact(req.Run, req.Name, false)
	switch {
	case a == nil:
		return nil, twirpErr("not_found", "no artifact %q was created on the workflow run", req.Name)
	case a.finalized:
		return nil, twirpErr("failed_precondition", "the artifact %q is already finalized", req.Name)
	}
	if _, ok := s.blobs.snapshot(a.path); !ok {
		return nil, twirpErr("failed_precondition", "no blob was uploaded for the artifact %q", req.Name)
	}
	a.finalized, a.size = true, int64(req.Size)
	if req.Hash != nil {
		a.hash = *req.Hash
	}
	return struct {
		OK         bool      `json:"ok"`
		ArtifactID int64JSON `json:"artifact_id"`
	}{true, int64JSON(a.id)}, nil
}

// monolithArtifact is ListArtifactsResponse.MonolithArtifact.
type monolithArtifact struct {
	Run       string    `json:"workflow_run_backend_id"`
	Job       string    `json:"workflow_job_run_backend_id"`
	ID        int64JSON `json:"database_id"`
	Name      string    `json:"name"`
	Size      int64JSON `json:"size"`
	CreatedAt string    `json:"created_at"`
	Digest    *string   `json:"digest"`
}

// listArtifacts lists the run's finalized artifacts, by name_filter and
// id_filter when given.
func (s *results) listArtifacts(body []byte) (any, *twirpError) {
	var req struct {
		Run        string     `json:"workflow_run_backend_id"`
		Job        string     `json:"workflow_job_run_backend_id"`
		NameFilter *string    `json:"name_filter"`
		IDFilter   *int64JSON `json:"id_filter"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := s.checkScope(req.Run, req.Job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := []monolithArtifact{}
	for _, a := range s.artifacts {
		if !a.finalized || a.run != req.Run || req.NameFilter != nil && *req.NameFilter != a.name || req.IDFilter != nil && int64(*req.IDFilter) != a.id {
			continue
		}
		m := monolithArtifact{Run: a.run, Job: a.job, ID: int64JSON(a.id), Name: a.name, Size: int64JSON(a.size), CreatedAt: protoTime(a.created)}
		if a.hash != "" {
			m.Digest = &a.hash
		}
		list = append(list, m)
	}
	return struct {
		Artifacts []monolithArtifact `json:"artifacts"`
	}{list}, nil
}

func (s *results) getSignedArtifactURL(body []byte) (any, *twirpError) {
	var req struct {
		Run  string `json:"workflow_run_backend_id"`
		Job  string `json:"workflow_job_run_backend_id"`
		Name string `json:"name"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := s.checkScope(req.Run, req.Job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.artifact(req.Run, req.Name, true)
	if a == nil {
		return nil, twirpErr("not_found", "no finalized artifact %q on the workflow run", req.Name)
	}
	return struct {
		SignedURL string `json:"signed_url"`
	}{s.sign.sign(a.path, "r", time.Now().Add(signedURLLifetime))}, nil
}

// maxCacheKey is the longest key the client sends (lib/cache.js,
// checkKey).
const maxCacheKey = 512

func (s *results) createCacheEntry(body []byte) (any, *twirpError) {
	var req struct {
		Key     string `json:"key"`
		Version string `json:"version"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.Key == "" || len(req.Key) > maxCacheKey || req.Version == "" {
		return nil, twirpErr("invalid_argument", "a cache entry needs a key (at most %d characters) and a version", maxCacheKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cacheEntry(req.Key, req.Version, false) != nil {
		// As GitHub answers (actions/cache#1541).
		return nil, twirpErr("already_exists", "cache entry with the same key, version, and scope already exists")
	}
	sum := sha256.Sum256([]byte(req.Version + "\x00" + req.Key))
	e := &cacheRecord{id: s.newID(), key: req.Key, version: req.Version, created: time.Now(), path: "/caches/" + hex.EncodeToString(sum[:16])}
	s.caches = append(s.caches, e)
	return struct {
		OK              bool   `json:"ok"`
		SignedUploadURL string `json:"signed_upload_url"`
		Message         string `json:"message"`
	}{true, s.sign.sign(e.path, "cw", time.Now().Add(signedURLLifetime)), ""}, nil
}

// cacheEntry is the entry of key and version (finalized only, if
// finalized), nil when none. s.mu is held.
func (s *results) cacheEntry(key, version string, finalized bool) *cacheRecord {
	for _, e := range s.caches {
		if e.key == key && e.version == version && (e.finalized || !finalized) {
			return e
		}
	}
	return nil
}

func (s *results) finalizeCacheEntry(body []byte) (any, *twirpError) {
	var req struct {
		Key     string    `json:"key"`
		Size    int64JSON `json:"size_bytes"`
		Version string    `json:"version"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.cacheEntry(req.Key, req.Version, false)
	switch {
	case e == nil:
		return nil, twirpErr("not_found", "no cache entry %q (version %q) was created", req.Key, req.Version)
	case e.finalized:
		return nil, twirpErr("failed_precondition", "the cache entry %q is already finalized", req.Key)
	}
	if _, ok := s.blobs.snapshot(e.path); !ok {
		return nil, twirpErr("failed_precondition", "no blob was uploaded for the cache entry %q", req.Key)
	}
	e.finalized, e.size = true, int64(req.Size)
	return struct {
		OK      bool      `json:"ok"`
		EntryID int64JSON `json:"entry_id"`
		Message string    `json:"message"`
	}{true, int64JSON(e.id), ""}, nil
}

// getCacheEntryDownloadURL finds a finalized entry of the version: the
// key itself, else the newest whose key it prefixes, else each restore
// key in turn as a prefix (newest first), as GitHub documents cache key
// matching. A miss is ok false, which the client takes for "not found"
// (lib/cache.js, restoreCacheV2); so is a request with no key.
func (s *results) getCacheEntryDownloadURL(body []byte) (any, *twirpError) {
	var req struct {
		Key         string   `json:"key"`
		RestoreKeys []string `json:"restore_keys"`
		Version     string   `json:"version"`
	}
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	type response struct {
		OK                bool   `json:"ok"`
		SignedDownloadURL string `json:"signed_download_url"`
		MatchedKey        string `json:"matched_key"`
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.matchCache(req.Key, req.RestoreKeys, req.Version)
	if e == nil {
		return response{}, nil
	}
	return response{true, s.sign.sign(e.path, "r", time.Now().Add(signedURLLifetime)), e.key}, nil
}

func (s *results) matchCache(key string, restore []string, version string) *cacheRecord {
	if key == "" {
		return nil
	}
	if e := s.cacheEntry(key, version, true); e != nil {
		return e
	}
	for _, prefix := range append([]string{key}, restore...) {
		for i := len(s.caches) - 1; i >= 0; i-- {
			if e := s.caches[i]; e.finalized && e.version == version && prefix != "" && strings.HasPrefix(e.key, prefix) {
				return e
			}
		}
	}
	return nil
}
