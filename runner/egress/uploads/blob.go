package uploads

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strings"
)

// The writes to an artifact's blob the recorder follows (Azure Blob
// Storage's REST API, as @azure/storage-blob's BlockBlobClient sends
// them for @actions/artifact: uploadStream stages 8 MiB blocks, several
// at once, then commits their list): Put Block (comp=block), Put Block
// List (comp=blocklist) and Put Blob (no comp). Setting properties or
// metadata changes no content. Anything else that writes (a copy from
// a URL, append or page blobs, snapshots, deletes) is refused: no
// honest upload sends it, and its bytes would not pass the gateway.
var harmlessComps = map[string]bool{"properties": true, "metadata": true}

// query reads the blob request's query names without regard to case
// (Azure's are not case-sensitive), refusing a name given twice.
func query(req *http.Request) (map[string]string, error) {
	out := map[string]string{}
	for k, vs := range req.URL.Query() {
		k = strings.ToLower(k)
		if _, dup := out[k]; dup || len(vs) != 1 {
			return nil, fmt.Errorf("the query names %q more than once", k)
		}
		out[k] = vs[0]
	}
	return out, nil
}

func (r *Recorder) beginBlob(a *artifact, req *http.Request) (*Exchange, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions {
		return nil, nil
	}
	name := a.rec.Name
	r.mu.Lock()
	finalized := a.finalized
	r.mu.Unlock()
	if finalized {
		return refuse("artifact %q is finalized: a %s to its blob now would change what was recorded", name, req.Method)
	}
	q, err := query(req)
	if err != nil {
		return refuse("artifact %q's blob: %v", name, err)
	}
	if req.Method != http.MethodPut {
		return refuse("artifact %q's blob: %s is not part of an upload airlock records (Put Block, Put Block List, Put Blob)", name, req.Method)
	}
	if req.Header.Get("X-Ms-Copy-Source") != "" {
		return refuse("artifact %q's blob: a copy from a URL (x-ms-copy-source) would write bytes that never pass the gateway", name)
	}
	switch comp := strings.ToLower(q["comp"]); {
	case comp == "block":
		if q["blockid"] == "" {
			return refuse("artifact %q: Put Block without a blockid", name)
		}
		return r.stageBlock(a, q["blockid"], req)
	case comp == "blocklist":
		return r.commitBlocks(a, req)
	case comp == "":
		if !strings.EqualFold(req.Header.Get("X-Ms-Blob-Type"), "BlockBlob") {
			return refuse("artifact %q's blob: a Put Blob of type %q (airlock records block blobs)", name, req.Header.Get("X-Ms-Blob-Type"))
		}
		return r.putBlob(a, req), nil
	case harmlessComps[comp]:
		return nil, nil
	default:
		return refuse("artifact %q's blob: comp=%s is not part of an upload airlock records", name, comp)
	}
}

// created reports a blob write the storage accepted.
func created(resp *http.Response) bool { return resp.StatusCode == http.StatusCreated }

// stageBlock spools the block's bytes as they pass, and keeps them once
// the storage has staged the block.
func (r *Recorder) stageBlock(a *artifact, id string, req *http.Request) (*Exchange, error) {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("upload spool: %w", err)
	}
	f, err := os.CreateTemp(r.dir, "block-")
	if err != nil {
		return nil, fmt.Errorf("upload spool: %w", err)
	}
	sp := &spool{r: r, f: f}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &teeBody{src: req.Body, w: sp}
	}
	r.mu.Lock()
	a.staging[id]++
	r.mu.Unlock()
	kept := false
	return &Exchange{r: r,
		respond: func(resp *http.Response) error {
			if !created(resp) || sp.err != nil {
				return nil
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("upload spool: %w", err)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if old := a.blocks[id]; old != nil {
				os.Remove(old.file)
				r.spooled -= old.size
			}
			a.blocks[id] = &block{file: f.Name(), size: sp.n}
			kept = true
			return nil
		},
		done: func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if a.staging[id]--; a.staging[id] <= 0 {
				delete(a.staging, id)
			}
			if !kept {
				f.Close()
				os.Remove(f.Name())
				r.spooled -= sp.n
			}
			r.hashAheadLocked(a)
		}}, nil
}

// spool writes a block to its file within the recorder's bound.
type spool struct {
	r   *Recorder
	f   *os.File
	n   int64
	err error
}

func (s *spool) Write(p []byte) (int, error) {
	s.r.mu.Lock()
	over := s.r.spooled+int64(len(p)) > s.r.maxSpool
	closed := s.r.closed
	if !over && !closed {
		s.r.spooled += int64(len(p))
	}
	s.r.mu.Unlock()
	switch {
	case closed:
		s.err = errClosed
	case over:
		s.err = fmt.Errorf("the job's staged artifact blocks pass the %d bytes airlock spools to digest them", s.r.maxSpool)
	}
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.f.Write(p)
	s.n += int64(n)
	if err != nil {
		s.err = fmt.Errorf("upload spool: %w", err)
	}
	return n, s.err
}

// teeBody passes a request body upstream and writes what passed to w;
// a failure of w fails the upload (the storage then never gets bytes
// airlock did not see).
type teeBody struct {
	src io.ReadCloser
	w   io.Writer
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.src.Read(p)
	if n > 0 {
		if _, werr := t.w.Write(p[:n]); werr != nil {
			return 0, werr
		}
	}
	return n, err
}

func (t *teeBody) Close() error { return t.src.Close() }

// blockList is a Put Block List body.
type blockList struct {
	XMLName xml.Name `xml:"BlockList"`
	Entries []struct {
		XMLName xml.Name
		ID      string `xml:",chardata"`
	} `xml:",any"`
}

// commitBlocks digests the blob the block list makes of the staged
// blocks, in the list's order, and records it once the storage has
// committed it.
func (r *Recorder) commitBlocks(a *artifact, req *http.Request) (*Exchange, error) {
	body, err := readBody(req)
	if err != nil {
		return refuse("artifact %q: the block list cannot be read: %v", a.rec.Name, err)
	}
	var list blockList
	if err := xml.Unmarshal(body, &list); err != nil {
		return refuse("artifact %q: the block list is not Azure's XML: %v", a.rec.Name, err)
	}
	r.mu.Lock()
	var files []*block
	var ids []string
	for _, e := range list.Entries {
		id := strings.TrimSpace(e.ID)
		b := a.blocks[id]
		if (e.XMLName.Local != "Latest" && e.XMLName.Local != "Uncommitted") || b == nil {
			r.mu.Unlock()
			return refuse("artifact %q: the block list names %s block %q, which was not staged through the gateway: its bytes are unknown", a.rec.Name, strings.ToLower(e.XMLName.Local), e.ID)
		}
		files, ids = append(files, b), append(ids, id)
	}
	// What was hashed ahead, if the list begins with it; the rest from
	// the spool.
	h, done, n := a.ahead.start(ids, files)
	r.mu.Unlock()
	d, err := digestBlocks(h, n, files[done:])
	if err != nil {
		return nil, err
	}
	return &Exchange{r: r, respond: func(resp *http.Response) error {
		if created(resp) {
			r.mu.Lock()
			a.committed = &d
			r.mu.Unlock()
		}
		return nil
	}}, nil
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
func (r *Recorder) putBlob(a *artifact, req *http.Request) *Exchange {
	h := &hashWriter{h: sha256.New()}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &teeBody{src: req.Body, w: h}
	}
	return &Exchange{r: r, respond: func(resp *http.Response) error {
		if created(resp) {
			r.mu.Lock()
			a.committed = &digest{sha256: hex.EncodeToString(h.h.Sum(nil)), size: h.n}
			r.mu.Unlock()
		}
		return nil
	}}
}

type hashWriter struct {
	h hash.Hash
	n int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return w.h.Write(p)
}
