package uploads

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-ci/airlock/internal/paths"
)

// The artifact service's RPCs the recorder reads (actions/toolkit,
// packages/artifact/src/internal/upload/upload-artifact.ts), in lower
// case as the credentials vault matches them.
const (
	rpcCreate   = "createartifact"
	rpcFinalize = "finalizeartifact"
)

// Bounds on what the recorder reads or keeps.
const (
	// maxMessage bounds a twirp message it parses (the artifact
	// service's are a few hundred bytes); maxBlockList a block list
	// (about 100 bytes a block).
	maxMessage   = 64 << 10
	maxBlockList = 1 << 20
	// maxUploads bounds the artifacts of one job.
	maxUploads = 1000
	// DefaultMaxSpool bounds the staged blocks kept on disk at once.
	DefaultMaxSpool = 16 << 30
)

// Recorder watches one job's artifact uploads. Its methods are safe for
// concurrent use: the gateway serves each request on its own goroutine.
type Recorder struct {
	dir      string
	maxSpool int64
	now      func() time.Time

	mu      sync.Mutex
	arts    []*artifact
	byBlob  map[string]*artifact // "host/path" of the signed upload URL
	hosts   map[string]bool
	spooled int64
	closed  bool
	// onWatch is told of each host that starts holding an artifact's
	// blob (SetOnWatch).
	onWatch func(host string)
	// hashing counts the goroutines hashing ahead, for Close.
	hashing sync.WaitGroup
}

// artifact is one CreateArtifact and what followed it.
type artifact struct {
	rec      Upload
	run, job string
	host     string
	path     string
	// blocks are the staged blocks (Put Block) by id, in spool files;
	// staging counts the Put Blocks of each id on their way.
	blocks  map[string]*block
	staging map[string]int
	// committed is the blob's digest as last committed (Put Block List,
	// Put Blob); nil before.
	committed *digest
	// uncertain: a commit ended without the storage's answer seen
	// whole, so what the blob holds is not known (until the next).
	uncertain bool
	// writes counts the writes to the blob on their way; finalizing is
	// set while FinalizeArtifact is.
	writes     int
	finalizing bool
	finalized  bool
	// committing is set while a Put Block List or Put Blob is on its way
	// (at most one is: each needs no other write on its way).
	committing bool
	// ahead is the digest of the staged blocks hashed ahead of the
	// block list (hashAhead).
	ahead ahead
}

// block is a staged block's bytes, in a spool file.
type block struct {
	file string
	size int64
}

// digest is a blob's sha256 and length.
type digest struct {
	sha256 string
	size   int64
}

// New returns a recorder that spools staged blocks in dir (created when
// needed; removed by Close), at most maxSpool bytes at once (0:
// DefaultMaxSpool).
func New(dir string, maxSpool int64) *Recorder {
	if maxSpool <= 0 {
		maxSpool = DefaultMaxSpool
	}
	return &Recorder{dir: dir, maxSpool: maxSpool, now: time.Now, byBlob: map[string]*artifact{}, hosts: map[string]bool{}}
}

// Host reports whether name holds a signed upload URL the recorder
// learned: the gateway must read its requests (terminate TLS) to hash
// what the job writes there.
func (r *Recorder) Host(name string) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hosts[strings.ToLower(name)]
}

// Uploads are the artifacts so far, in the order they were created.
func (r *Recorder) Uploads() []Upload {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Upload, 0, len(r.arts))
	for _, a := range r.arts {
		u := a.rec
		if a.committed != nil && u.SHA256 == "" {
			u.SHA256, u.Size = a.committed.sha256, a.committed.size
		}
		out = append(out, u)
	}
	return out
}

// SetOnWatch has f told of each host when it starts holding an
// artifact's blob, before any request to it is watched: the gateway then
// ends the connections to it that it passes unread (a job could
// otherwise have opened one before, to write the blob past the record).
func (r *Recorder) SetOnWatch(f func(host string)) {
	r.mu.Lock()
	r.onWatch = f
	r.mu.Unlock()
}

// Close removes the spool, once no goroutine hashes from it. What was
// recorded stays readable; nothing more is recorded.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.hashing.Wait()
	return os.RemoveAll(r.dir)
}

// Refusal is a request the recorder will not let pass: why, and what
// to do instead, for the gateway's refusal.
type Refusal struct{ Reason, Suggest string }

func (e *Refusal) Error() string { return e.Reason }

// asSent is what most refusals suggest.
const asSent = "upload artifacts with actions/upload-artifact (v4), as it sends them"

func refuse(format string, args ...any) (*Exchange, error) {
	return nil, &Refusal{Reason: fmt.Sprintf(format, args...), Suggest: asSent}
}

// Exchange is one request the recorder watches on its way upstream and
// back. Respond sees the response; Done ends it however it went.
type Exchange struct {
	r       *Recorder
	respond func(*http.Response) error
	done    func()
}

// Respond hands the exchange the upstream's response (before the
// client sees it).
func (x *Exchange) Respond(resp *http.Response) error {
	if x == nil || x.respond == nil {
		return nil
	}
	return x.respond(resp)
}

// Done ends the exchange: what it spooled and did not keep is removed.
func (x *Exchange) Done() {
	if x != nil && x.done != nil {
		x.done()
	}
}

// Begin looks at a request before the gateway forwards it: route is the
// credentials vault's route for it ("artifacts" for the artifact
// service), host its name. It returns nil for a request the recorder
// does not watch, an Exchange for one it does (having replaced
// req.Body as needed), or a *Refusal.
func (r *Recorder) Begin(route, host string, req *http.Request) (*Exchange, error) {
	if r == nil {
		return nil, nil
	}
	if route == "artifacts" {
		switch rpcOf(req.URL.Path) {
		case rpcCreate:
			return r.beginCreate(req)
		case rpcFinalize:
			return r.beginFinalize(req)
		}
		return nil, nil
	}
	r.mu.Lock()
	watched := r.hosts[strings.ToLower(host)]
	a := r.byBlob[blobKey(host, req.URL.Path)]
	r.mu.Unlock()
	if watched && req.Method != http.MethodGet && req.Method != http.MethodHead && (!paths.PlainURLPath(req.URL.Path, req.URL.EscapedPath()) || dotEnded(req.URL.Path)) {
		// The storage might take a doubled slash, a dot segment or a
		// segment's trailing dot for an artifact's blob, which the
		// recorder would not.
		return refuse("a %s to %s, which holds artifact uploads, at a path not in plain form (%q): airlock will not tell which blob it writes", req.Method, host, req.URL.EscapedPath())
	}
	if a == nil {
		return nil, nil
	}
	return r.beginBlob(a, req)
}

// dotEnded reports a path with a segment that ends in a dot: Azure drops
// such dots ("a.zip." names the blob "a.zip"; its naming rules say no
// segment should end in one), so the storage would write another blob
// than the one the recorder looks up.
func dotEnded(p string) bool {
	return strings.HasSuffix(p, ".") || strings.Contains(p, "./")
}

// rpcOf is a twirp path's method name, in lower case.
func rpcOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	return strings.ToLower(p[i+1:])
}

// blobKey is how a blob URL is looked up: its host and its path.
func blobKey(host, path string) string { return strings.ToLower(host) + path }

// readBody reads a request's small body whole (at most limit bytes)
// and puts the bytes back for the upstream.
func readBody(req *http.Request, limit int) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	b, err := readAllBounded(req.Body, limit)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.ContentLength = int64(len(b))
	return b, nil
}

// readResponse does the same for a response.
func readResponse(resp *http.Response) ([]byte, error) {
	b, err := readAllBounded(resp.Body, maxMessage)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Del("Content-Length")
	return b, nil
}

// readAllBounded reads and closes r, refusing more than limit bytes.
func readAllBounded(r io.ReadCloser, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	r.Close()
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("more than %d bytes", limit)
	}
	return b, nil
}

// isJSON reports a twirp request in JSON, the only encoding the
// recorder reads (the toolkit's clients send JSON; protobuf would hide
// the claimed hash from it).
func isJSON(h http.Header) bool {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(ct), "application/json")
}

// watchRPC prepares an artifact RPC for the recorder: JSON only, and
// its answer unencoded, so that the recorder reads what the service
// says (a compressed answer would be one it cannot).
func watchRPC(rpc string, req *http.Request) ([]byte, error) {
	if !isJSON(req.Header) {
		return nil, &Refusal{Reason: fmt.Sprintf("%s in %q: airlock records artifact uploads and reads only twirp's JSON encoding, as actions/toolkit sends it", rpc, req.Header.Get("Content-Type")), Suggest: asSent}
	}
	req.Header.Set("Accept-Encoding", "identity")
	body, err := readBody(req, maxMessage)
	if err != nil {
		return nil, &Refusal{Reason: fmt.Sprintf("%s: the request cannot be read: %v", rpc, err), Suggest: asSent}
	}
	return body, nil
}

// beginCreate watches CreateArtifact: its answer names the blob URL.
func (r *Recorder) beginCreate(req *http.Request) (*Exchange, error) {
	body, err := watchRPC("CreateArtifact", req)
	if err != nil {
		return nil, err
	}
	m, err := parseMessage(body, "workflow_run_backend_id", "workflow_job_run_backend_id", "name")
	if err != nil {
		return refuse("CreateArtifact: %v", err)
	}
	if m["name"] == "" {
		return refuse("CreateArtifact without an artifact name")
	}
	return &Exchange{r: r, respond: func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK {
			return nil
		}
		b, err := readResponse(resp)
		if err != nil {
			return fmt.Errorf("CreateArtifact's response: %w", err)
		}
		out, err := parseMessage(b, "signed_upload_url", "ok")
		switch {
		case err != nil:
			// An answer the recorder cannot read must not let an
			// artifact be created unwatched.
			return fmt.Errorf("CreateArtifact's response is not twirp's JSON: %w", err)
		case out["ok"] != "true" || out["signed_upload_url"] == "":
			return nil // not created: nothing to watch
		}
		return r.created(m, out["signed_upload_url"])
	}}, nil
}

// created registers the artifact and the blob URL it is to be written to.
func (r *Recorder) created(m map[string]string, signed string) error {
	u, err := url.Parse(signed)
	if err != nil {
		return fmt.Errorf("CreateArtifact returned an upload URL airlock cannot read: %w", err)
	}
	if u.Host == "" {
		return fmt.Errorf("CreateArtifact returned an upload URL without a host: %q", signed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errClosed
	}
	if len(r.arts) >= maxUploads {
		return fmt.Errorf("more than %d artifacts in one job: airlock records no more", maxUploads)
	}
	a := &artifact{rec: Upload{Name: m["name"], Status: NotFinalized, Created: r.now().UTC()}, run: m["workflow_run_backend_id"], job: m["workflow_job_run_backend_id"],
		host: strings.ToLower(u.Hostname()), path: u.Path, blocks: map[string]*block{}, staging: map[string]int{}}
	if old := r.byBlob[blobKey(a.host, a.path)]; old != nil {
		old.dropBlocks(r)
	}
	r.arts = append(r.arts, a)
	r.byBlob[blobKey(a.host, a.path)] = a
	if !r.hosts[a.host] {
		r.hosts[a.host] = true
		if r.onWatch != nil {
			r.onWatch(a.host)
		}
	}
	return nil
}

// beginFinalize compares FinalizeArtifact's claim with the committed
// blob, and records the artifact once the service finalized it.
func (r *Recorder) beginFinalize(req *http.Request) (*Exchange, error) {
	body, err := watchRPC("FinalizeArtifact", req)
	if err != nil {
		return nil, err
	}
	m, err := parseMessage(body, "workflow_run_backend_id", "workflow_job_run_backend_id", "name", "size", "hash")
	if err != nil {
		return refuse("FinalizeArtifact: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.find(m)
	if a == nil {
		// Created where airlock did not see it: nothing it could vouch
		// for, and nothing to compare.
		return nil, nil
	}
	switch {
	case a.finalized || a.finalizing:
		return refuse("FinalizeArtifact: artifact %q is finalized already, or being finalized", a.rec.Name)
	case a.writes > 0:
		return refuse("FinalizeArtifact: artifact %q still has %d write(s) to its blob on their way: finalize once they are answered", a.rec.Name, a.writes)
	case a.uncertain:
		return refuse("FinalizeArtifact: artifact %q's last commit ended without the storage's answer, so what its blob holds is not known: commit the blob again", a.rec.Name)
	}
	a.rec.Claimed = m["hash"]
	if a.committed != nil && m["hash"] != "" && !strings.EqualFold(m["hash"], "sha256:"+a.committed.sha256) {
		a.rec.Status, a.rec.Reason = Refused, fmt.Sprintf("FinalizeArtifact claimed %s, but the blob the job committed through the gateway is sha256:%s (%d bytes)", m["hash"], a.committed.sha256, a.committed.size)
		return nil, &Refusal{Reason: fmt.Sprintf("artifact %q: %s: refused, so that no artifact is published under a digest its bytes do not have", a.rec.Name, a.rec.Reason),
			Suggest: "claim the sha256 of the bytes uploaded, as actions/upload-artifact does"}
	}
	// No write may start until the service answers: what is compared
	// now is what is recorded.
	a.finalizing = true
	compared := a.committed
	return &Exchange{r: r,
		respond: func(resp *http.Response) error {
			if resp.StatusCode != http.StatusOK {
				return nil
			}
			b, err := readResponse(resp)
			if err != nil {
				return fmt.Errorf("FinalizeArtifact's response: %w", err)
			}
			out, _ := parseMessage(b, "ok", "artifact_id")
			if out["ok"] != "true" {
				return nil
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.finalizedLocked(a, compared, out["artifact_id"])
			return nil
		},
		done: func() {
			r.mu.Lock()
			a.finalizing = false
			r.mu.Unlock()
		}}, nil
}

// finalizedLocked records that the service finalized a, whose blob was
// last committed as d (nil: not through the gateway) (r.mu held).
func (r *Recorder) finalizedLocked(a *artifact, d *digest, id string) {
	a.finalized = true
	a.rec.Finalized, a.rec.ID, a.rec.Reason = r.now().UTC(), id, ""
	if d == nil {
		a.rec.Status, a.rec.Reason = Unobserved, "finalized, but airlock saw no blob committed through the gateway: its digest is unknown, so it is no subject of the provenance"
		return
	}
	a.rec.Status, a.rec.SHA256, a.rec.Size = Finalized, d.sha256, d.size
	a.dropBlocks(r)
}

// find is the newest artifact of the run, job and name (r.mu held).
func (r *Recorder) find(m map[string]string) *artifact {
	for _, a := range slices.Backward(r.arts) {
		if a.rec.Name == m["name"] && a.run == m["workflow_run_backend_id"] && a.job == m["workflow_job_run_backend_id"] {
			return a
		}
	}
	return nil
}

// dropBlocks removes the artifact's spooled blocks (r.mu held).
func (a *artifact) dropBlocks(r *Recorder) {
	for id := range a.blocks {
		r.dropBlockLocked(a, id)
	}
}

var errClosed = errors.New("the job's upload record is closed")

// SpoolDir makes a job's spool directory below parent, named for this
// process ("p<pid>-…"), after removing those a killed airlock left (their
// process is gone).
func SpoolDir(parent string) (string, error) {
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("upload spool: %w", err)
	}
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		pid, _, ok := strings.Cut(strings.TrimPrefix(e.Name(), "p"), "-")
		if !ok || !e.IsDir() || !strings.HasPrefix(e.Name(), "p") {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", pid)); errors.Is(err, fs.ErrNotExist) {
			os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("p%d-", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("upload spool: %w", err)
	}
	return dir, nil
}
