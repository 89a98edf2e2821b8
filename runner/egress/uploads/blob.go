package uploads

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
)

// The writes to an artifact's blob the recorder follows (Azure Blob
// Storage's REST API, as @azure/storage-blob's BlockBlobClient sends
// them for @actions/artifact: uploadStream stages 8 MiB blocks, several
// at once, then commits their list): Put Block (comp=block), Put Block
// List (comp=blocklist) and Put Blob (no comp). Setting properties or
// metadata changes no content. Anything else that writes (a copy from
// a URL, append or page blobs, snapshots, deletes) is refused: no
// honest upload sends it, and its bytes would not pass the gateway.
//
// The recorder must know what the storage holds, so it refuses what
// would leave that open: a write while the artifact is being finalized,
// a block list or a finalization while a write is on its way, a Put
// Block while a block list or a Put Blob is (the storage's order of the
// two is not the gateway's), a second Put Block of an id still being
// staged; and a write whose answer the gateway did not see whole (the
// client went away, the storage answered before the body ended) counts
// as unknown: its block is forgotten, its commit makes the blob's
// content unknown until the next one.
var harmlessComps = map[string]bool{"properties": true, "metadata": true}

// query reads the blob request's query as the storage would, refusing
// one Go's parser would read otherwise (a ';', a bad escape) and a name
// given twice in any case (Azure's names are not case-sensitive).
func query(req *http.Request) (map[string]string, error) {
	vals, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query does not parse: %w", err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		k = strings.ToLower(k)
		if _, dup := out[k]; dup || len(vs) != 1 {
			return nil, fmt.Errorf("the query names %q more than once", k)
		}
		out[k] = vs[0]
	}
	return out, nil
}

// canonicalID reports a block id in base64's one canonical spelling
// (Azure requires base64 ids; two spellings of the same bytes would be
// one block to the storage and two to the recorder).
func canonicalID(id string) bool {
	b, err := base64.StdEncoding.Strict().DecodeString(id)
	return err == nil && len(b) > 0 && len(b) <= 64 && base64.StdEncoding.EncodeToString(b) == id
}

// beginBlob watches a request to an artifact's blob URL.
func (r *Recorder) beginBlob(a *artifact, req *http.Request) (*Exchange, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions {
		return nil, nil
	}
	name := a.rec.Name
	q, err := query(req)
	if err != nil {
		return refuse("artifact %q's blob: %v", name, err)
	}
	if req.Method != http.MethodPut {
		return refuse("artifact %q's blob: %s is not part of an upload airlock records (Put Block, Put Block List, Put Blob)", name, req.Method)
	}
	if len(req.Header.Values("X-Ms-Copy-Source")) > 0 {
		return refuse("artifact %q's blob: a copy from a URL (x-ms-copy-source) would write bytes that never pass the gateway", name)
	}
	switch comp := strings.ToLower(q["comp"]); {
	case comp == "block":
		if !canonicalID(q["blockid"]) {
			return refuse("artifact %q: Put Block with a blockid %q that is not canonical base64 of at most 64 bytes", name, q["blockid"])
		}
		return r.stageBlock(a, q["blockid"], req)
	case comp == "blocklist":
		return r.commitBlocks(a, req)
	case comp == "":
		if !strings.EqualFold(req.Header.Get("X-Ms-Blob-Type"), "BlockBlob") {
			return refuse("artifact %q's blob: a Put Blob of type %q (airlock records block blobs)", name, req.Header.Get("X-Ms-Blob-Type"))
		}
		return r.putBlob(a, req)
	case harmlessComps[comp]:
		return nil, nil
	default:
		return refuse("artifact %q's blob: comp=%s is not part of an upload airlock records", name, comp)
	}
}

// startWriteLocked counts a write to a's blob, refusing it when the artifact
// is finalized or being finalized (r.mu held).
func (r *Recorder) startWriteLocked(a *artifact, method string) error {
	switch {
	case r.closed:
		return errClosed
	case a.finalized || a.finalizing:
		return &Refusal{Reason: fmt.Sprintf("artifact %q is finalized or being finalized: a %s to its blob now would change what was recorded", a.rec.Name, method), Suggest: asSent}
	}
	a.writes++
	return nil
}

// endWriteLocked uncounts a write (r.mu held).
func (r *Recorder) endWriteLocked(a *artifact) { a.writes-- }

// created reports a blob write the storage accepted.
func created(resp *http.Response) bool { return resp.StatusCode == http.StatusCreated }

// stageBlock spools the block's bytes as they pass, and keeps them once
// the storage has staged the block and the whole body passed.
func (r *Recorder) stageBlock(a *artifact, id string, req *http.Request) (*Exchange, error) {
	r.mu.Lock()
	if a.staging[id] > 0 {
		r.mu.Unlock()
		return refuse("artifact %q: block %q is being staged already: a second Put Block of it at once would leave which one the storage keeps unknown", a.rec.Name, id)
	}
	if a.committing {
		// The list was digested from the blocks staged before it: a
		// block the storage stages before it commits would not be.
		r.mu.Unlock()
		return refuse("artifact %q: a Put Block while a block list or a Put Blob is on its way: which the storage takes first is not known", a.rec.Name)
	}
	if err := r.startWriteLocked(a, "Put Block"); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	f, err := r.spoolFileLocked()
	if err != nil {
		r.endWriteLocked(a)
		r.mu.Unlock()
		return nil, err
	}
	a.staging[id]++
	r.mu.Unlock()
	tee := newTee(req, &spool{r: r, f: f})
	answered, kept := false, false
	return &Exchange{r: r,
		respond: func(resp *http.Response) error {
			answered = true
			n, whole := tee.result()
			if !created(resp) {
				return nil
			}
			if !whole {
				// Staged, though not with bytes the gateway saw whole (the
				// storage answered before their end): what it holds for
				// the id is unknown, so the block staged before is
				// forgotten too.
				r.mu.Lock()
				r.dropBlockLocked(a, id)
				r.mu.Unlock()
				return nil
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("upload spool: %w", err)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.dropBlockLocked(a, id)
			a.blocks[id] = &block{file: f.Name(), size: n}
			kept = true
			return nil
		},
		done: func() {
			n := tee.stop()
			r.mu.Lock()
			defer r.mu.Unlock()
			if a.staging[id]--; a.staging[id] <= 0 {
				delete(a.staging, id)
			}
			r.endWriteLocked(a)
			if !kept {
				f.Close()
				os.Remove(f.Name())
				r.spooled -= n
				if !answered {
					// The storage may have staged it: its bytes are
					// not known for sure.
					r.dropBlockLocked(a, id)
				}
			}
			r.hashAheadLocked(a)
		}}, nil
}

// spoolFileLocked makes a file for a block in the spool (r.mu held).
func (r *Recorder) spoolFileLocked() (*os.File, error) {
	if r.closed {
		return nil, errClosed
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("upload spool: %w", err)
	}
	f, err := os.CreateTemp(r.dir, "block-")
	if err != nil {
		return nil, fmt.Errorf("upload spool: %w", err)
	}
	return f, nil
}

// dropBlockLocked forgets a staged block (r.mu held).
func (r *Recorder) dropBlockLocked(a *artifact, id string) {
	if b := a.blocks[id]; b != nil {
		os.Remove(b.file)
		r.spooled -= b.size
		delete(a.blocks, id)
	}
}

// spool writes a block to its file within the recorder's bound.
type spool struct {
	r *Recorder
	f *os.File
}

func (s *spool) Write(p []byte) (int, error) {
	s.r.mu.Lock()
	over := s.r.spooled+int64(len(p)) > s.r.maxSpool
	if !over {
		s.r.spooled += int64(len(p))
	}
	s.r.mu.Unlock()
	if over {
		return 0, fmt.Errorf("the job's staged artifact blocks pass the %d bytes airlock spools to digest them", s.r.maxSpool)
	}
	n, err := s.f.Write(p)
	if err != nil {
		s.r.mu.Lock()
		s.r.spooled -= int64(len(p) - n)
		s.r.mu.Unlock()
		return n, fmt.Errorf("upload spool: %w", err)
	}
	return n, nil
}

// teeBody passes a request body upstream and writes what passed to w;
// a failure of w fails the upload (the storage then never gets bytes
// airlock did not see). The proxy's transport reads it on a goroutine
// of its own, so what it found is kept under a lock; after stop, it
// passes nothing more.
type teeBody struct {
	src io.ReadCloser
	w   io.Writer

	mu      sync.Mutex
	n       int64
	eof     bool
	err     error
	stopped bool
}

// newTee puts a teeBody in place of req's body. An empty body has
// passed whole already (the proxy sends none).
func newTee(req *http.Request, w io.Writer) *teeBody {
	t := &teeBody{src: req.Body, w: w}
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		t.eof = true
	}
	req.Body = t
	return t
}

func (t *teeBody) Read(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.stopped:
		return 0, errClosed
	case t.err != nil:
		return 0, t.err
	case t.src == nil || t.src == http.NoBody:
		t.eof = true
		return 0, io.EOF
	}
	n, err := t.src.Read(p)
	if n > 0 {
		m, werr := t.w.Write(p[:n])
		t.n += int64(m)
		if werr != nil {
			t.err = werr
			return 0, werr
		}
	}
	if errors.Is(err, io.EOF) {
		t.eof = true
	} else if err != nil {
		t.err = err
	}
	return n, err
}

func (t *teeBody) Close() error {
	if t.src == nil {
		return nil
	}
	return t.src.Close()
}

// result is how many bytes passed, and whether the body passed whole.
func (t *teeBody) result() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.eof && t.err == nil
}

// digest is the digest of what passed to a hashWriter, or nil when the
// body did not pass whole.
func (t *teeBody) digest() *digest {
	t.mu.Lock()
	defer t.mu.Unlock()
	hw, ok := t.w.(*hashWriter)
	if !ok || !t.eof || t.err != nil {
		return nil
	}
	return &digest{sha256: hex.EncodeToString(hw.h.Sum(nil)), size: t.n}
}

// stop lets nothing more pass, and says how many bytes did.
func (t *teeBody) stop() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	return t.n
}

// commitBlocks digests the blob the block list makes of the staged
// blocks, in the list's order, and records it once the storage has
// committed it.
func (r *Recorder) commitBlocks(a *artifact, req *http.Request) (*Exchange, error) {
	body, err := readBody(req, maxBlockList)
	if err != nil {
		return refuse("artifact %q: the block list cannot be read: %v", a.rec.Name, err)
	}
	ids, err := parseBlockList(body)
	if err != nil {
		return refuse("artifact %q: %v", a.rec.Name, err)
	}
	r.mu.Lock()
	if a.writes > 0 {
		r.mu.Unlock()
		return refuse("artifact %q: a block list while %d write(s) to the blob are still on their way: which the storage takes first is not known", a.rec.Name, a.writes)
	}
	var files []*block
	for _, e := range ids {
		b := a.blocks[e.id]
		if (e.kind != "Latest" && e.kind != "Uncommitted") || b == nil {
			r.mu.Unlock()
			return refuse("artifact %q: the block list names %s block %q, which was not staged through the gateway: its bytes are unknown", a.rec.Name, strings.ToLower(e.kind), e.id)
		}
		files = append(files, b)
	}
	if err := r.startWriteLocked(a, "Put Block List"); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	a.committing = true
	// What was hashed ahead, if the list begins with it; the rest from
	// the spool.
	h, done, n := a.ahead.start(blockIDs(ids), files)
	r.mu.Unlock()
	d, err := digestBlocks(h, n, files[done:])
	if err != nil {
		r.mu.Lock()
		r.endWriteLocked(a)
		a.committing = false
		r.mu.Unlock()
		return nil, err
	}
	return r.commitExchange(a, &d, nil), nil
}

// commitExchange records a commit of d (or, when tee is set, of the
// bytes that pass it) once the storage answers 201; a commit whose
// answer the gateway did not see makes the blob's content unknown.
func (r *Recorder) commitExchange(a *artifact, d *digest, tee *teeBody) *Exchange {
	answered := false
	return &Exchange{r: r,
		respond: func(resp *http.Response) error {
			answered = true
			if !created(resp) {
				return nil // nothing committed
			}
			committed := d
			if tee != nil {
				committed = tee.digest() // nil: not passed whole
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			a.committed, a.uncertain = committed, committed == nil
			return nil
		},
		done: func() {
			if tee != nil {
				tee.stop()
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.endWriteLocked(a)
			a.committing = false
			if !answered {
				a.committed, a.uncertain = nil, true
			}
		}}
}

// listEntry is one block a block list names.
type listEntry struct{ kind, id string }

func blockIDs(es []listEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.id
	}
	return out
}

// parseBlockList reads a Put Block List body strictly: a BlockList root
// without a namespace, whose children are Latest, Uncommitted or
// Committed elements holding one canonical block id as text and nothing
// else, each id once. Anything else is refused (a comment or a nested
// element inside an id would be joined by a lax reader).
func parseBlockList(body []byte) ([]listEntry, error) {
	dec := xml.NewDecoder(bytes.NewReader(body))
	dec.Strict = true
	var out []listEntry
	seen := map[string]bool{}
	depth, roots := 0, 0
	var cur *listEntry
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("the block list is not Azure's XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			switch {
			case depth == 1 && roots == 0 && t.Name.Local == "BlockList" && t.Name.Space == "" && len(t.Attr) == 0:
				// One root: Go's decoder reads on past the first, where
				// an XML reader stops (or refuses the document).
				roots++
			case depth == 2 && t.Name.Space == "" && len(t.Attr) == 0 && (t.Name.Local == "Latest" || t.Name.Local == "Uncommitted" || t.Name.Local == "Committed"):
				cur = &listEntry{kind: t.Name.Local}
			default:
				return nil, fmt.Errorf("the block list holds an element <%s> where Azure's holds none", t.Name.Local)
			}
		case xml.EndElement:
			if depth == 2 {
				if !canonicalID(cur.id) || seen[cur.id] {
					return nil, fmt.Errorf("the block list names block %q, which is not canonical base64 or named twice", cur.id)
				}
				seen[cur.id] = true
				out = append(out, *cur)
				cur = nil
			}
			depth--
		case xml.CharData:
			switch {
			case depth == 2:
				cur.id += string(t)
			case len(bytes.TrimSpace(t)) > 0:
				return nil, fmt.Errorf("the block list holds text outside a block id")
			}
		case xml.Comment, xml.Directive:
			return nil, fmt.Errorf("the block list holds a comment or a directive")
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the block list names no block")
	}
	return out, nil
}

// digestBlocks is the digest of the blocks' bytes, one after another,
// added to h (which has n bytes already).
func digestBlocks(h hash.Hash, n int64, blocks []*block) (digest, error) {
	for _, b := range blocks {
		f, err := os.Open(b.file)
		if err != nil {
			return digest{}, fmt.Errorf("upload spool: %w", err)
		}
		m, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return digest{}, fmt.Errorf("upload spool: %w", err)
		}
		n += m
	}
	return digest{sha256: hex.EncodeToString(h.Sum(nil)), size: n}, nil
}

// putBlob hashes a whole blob written at once as it passes.
func (r *Recorder) putBlob(a *artifact, req *http.Request) (*Exchange, error) {
	r.mu.Lock()
	if a.writes > 0 {
		r.mu.Unlock()
		return refuse("artifact %q: a Put Blob while %d write(s) to the blob are still on their way", a.rec.Name, a.writes)
	}
	err := r.startWriteLocked(a, "Put Blob")
	if err == nil {
		a.committing = true
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	tee := newTee(req, &hashWriter{h: sha256.New()})
	return r.commitExchange(a, nil, tee), nil
}

// hashWriter hashes what is written to it (under its teeBody's lock;
// teeBody.digest reads it).
type hashWriter struct{ h hash.Hash }

func (w *hashWriter) Write(p []byte) (int, error) { return w.h.Write(p) }
