package testhost

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The blob store is an in-memory Azure block blob service, as much of it
// as the Actions clients use through @azure/storage-blob 12.x
// (BlockBlobClient's uploadStream, uploadFile, stageBlock,
// commitBlockList and upload; BlobClient's download, downloadToBuffer
// and getProperties; dist/commonjs/Clients.js in testdata/clients) and
// as Azure's REST reference describes: Put Block, Put Block List, Put
// Blob, Get Blob (with a range) and Get Blob Properties. Every request
// needs a URL the fake signed (sas.go); a write needs a URL that grants
// it. Refusals are Azure's: the status, an x-ms-error-code header and an
// XML <Error> body, which the SDK turns into a RestError with that code.
//
// Memory is bounded: the store holds at most limit bytes of blocks (the
// bodies being read count), and refuses more with 413.
const (
	blobStoreLimit       = 1 << 30
	maxBlockListBytes    = 8 << 20
	maxCommittedBlocks   = 50000
	maxUncommittedBlocks = 100000
	maxBlockIDBytes      = 64
	// defaultBlobVersion answers a request that names no x-ms-version
	// (the SDK names its own, 2026-04-06 in 12.32).
	defaultBlobVersion = "2026-04-06"
)

// blobStore holds the blobs by path (unescaped, with the container:
// "/artifacts/…", "/caches/…"). Block data is never changed once
// stored, so readers copy the block list under mu and read the bytes
// without it.
type blobStore struct {
	mu    sync.Mutex
	limit int64
	used  int64 // bytes held in blocks, and reserved for bodies being read
	blobs map[string]*blob
	seq   uint64 // for ETags
}

type block struct {
	id   string // the base64 id as sent; "" for Put Blob's content
	data []byte
}

type blob struct {
	committed   []*block
	uncommitted map[string]*block
	idLen       int  // the decoded length of this blob's block ids, 0 before any
	exists      bool // a version was committed (Put Blob or Put Block List)
	contentType string
	etag        string
	created     time.Time
	modified    time.Time
}

// forget drops the blob at path and what it held.
func (s *blobStore) forget(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.blobs[path]; b != nil {
		s.used -= b.held()
		delete(s.blobs, path)
	}
}

func newBlobStore(limit int64) *blobStore {
	return &blobStore{limit: limit, blobs: map[string]*blob{}}
}

// held is what b's blocks take, each block once.
func (b *blob) held() int64 {
	var n int64
	seen := map[*block]bool{}
	for _, bl := range b.committed {
		if !seen[bl] {
			seen[bl] = true
			n += int64(len(bl.data))
		}
	}
	for _, bl := range b.uncommitted {
		if !seen[bl] {
			n += int64(len(bl.data))
		}
	}
	return n
}

func (b *blob) size() int64 {
	var n int64
	for _, bl := range b.committed {
		n += int64(len(bl.data))
	}
	return n
}

// blobOp is one of the operations the store speaks.
type blobOp int

const (
	opPutBlock blobOp = iota
	opPutBlockList
	opPutBlob
	opGetBlob
	opGetProperties
)

func (op blobOp) writes() bool { return op <= opPutBlob }

// classify names r's operation (Azure tells them by method and comp).
func classify(r *http.Request) (blobOp, *azureError) {
	comp := r.URL.Query().Get("comp")
	switch {
	case r.Method == http.MethodPut && comp == "block":
		return opPutBlock, nil
	case r.Method == http.MethodPut && comp == "blocklist":
		return opPutBlockList, nil
	case r.Method == http.MethodPut && comp == "":
		return opPutBlob, nil
	case r.Method == http.MethodGet && comp == "":
		return opGetBlob, nil
	case r.Method == http.MethodHead && comp == "":
		return opGetProperties, nil
	case comp != "":
		return 0, &azureError{status: http.StatusBadRequest, code: "InvalidQueryParameterValue", message: "Value for one of the query parameters specified in the request URI is invalid.", detail: "comp=" + comp + " is not spoken by the fake"}
	}
	return 0, &azureError{status: http.StatusMethodNotAllowed, code: "UnsupportedHttpVerb", message: "The resource doesn't support specified Http Verb."}
}

// serve answers one request to the store whose URL signer signed.
func (s *blobStore) serve(w http.ResponseWriter, r *http.Request, signer urlSigner) {
	setBlobHeaders(w, r)
	err := s.dispatch(w, r, signer)
	if err != nil {
		err.write(w, r)
	}
}

func (s *blobStore) dispatch(w http.ResponseWriter, r *http.Request, signer urlSigner) *azureError {
	perm, err := signer.verify(r)
	if err != nil {
		return err
	}
	op, err := classify(r)
	if err != nil {
		return err
	}
	if err := s.authorize(op, perm, r.URL.Path); err != nil {
		return err
	}
	if r.Header.Get("x-ms-structured-body") != "" {
		return &azureError{status: http.StatusBadRequest, code: "UnsupportedHeader", message: "One of the headers specified in the request is not supported.", detail: "x-ms-structured-body (CRC64 structured messages) is not spoken by the fake"}
	}
	switch op {
	case opPutBlock:
		return s.putBlock(w, r)
	case opPutBlockList:
		return s.putBlockList(w, r)
	case opPutBlob:
		return s.putBlob(w, r)
	}
	return s.getBlob(w, r, op == opGetProperties)
}

// authorize checks that perm (a URL's sp) grants op: r to read; w to
// write, or c to write a blob that has no committed version yet.
func (s *blobStore) authorize(op blobOp, perm, path string) *azureError {
	granted := strings.Contains(perm, "r")
	if op.writes() {
		s.mu.Lock()
		b := s.blobs[path]
		s.mu.Unlock()
		granted = strings.Contains(perm, "w") || strings.Contains(perm, "c") && (b == nil || !b.exists)
	}
	if !granted {
		return &azureError{status: http.StatusForbidden, code: "AuthorizationPermissionMismatch", message: "This request is not authorized to perform this operation using this permission.", detail: "the URL grants sp=" + perm}
	}
	return nil
}

// blobFor is the blob at path, created (with nothing committed) if
// there is none. s.mu is held.
func (s *blobStore) blobFor(path string) *blob {
	b := s.blobs[path]
	if b == nil {
		b = &blob{uncommitted: map[string]*block{}, created: time.Now()}
		s.blobs[path] = b
	}
	return b
}

// commit makes b's new version current. s.mu is held.
func (s *blobStore) commit(b *blob, contentType string) {
	s.seq++
	b.uncommitted = map[string]*block{}
	b.exists = true
	b.contentType = contentType
	b.modified = time.Now()
	b.etag = fmt.Sprintf(`"0x%X%04X"`, b.modified.UnixNano(), s.seq)
}

// account books what an operation changed: reserved bytes (for a body
// read) become part of held. s.mu is held.
func (s *blobStore) account(reserved, before, after int64) {
	s.used += after - before - reserved
}

func (s *blobStore) release(n int64) {
	s.mu.Lock()
	s.used -= n
	s.mu.Unlock()
}

// readBody reads r's body within the store's budget, checking a
// Content-MD5 when there is one. The bytes stay reserved: the caller
// books them with account or gives them back with release.
func (s *blobStore) readBody(r *http.Request) ([]byte, *azureError) {
	n := r.ContentLength
	if n < 0 {
		return nil, &azureError{status: http.StatusLengthRequired, code: "MissingContentLengthHeader", message: "Content-Length HTTP header is missing."}
	}
	s.mu.Lock()
	if s.used+n > s.limit {
		s.mu.Unlock()
		return nil, &azureError{status: http.StatusRequestEntityTooLarge, code: "RequestBodyTooLarge", message: "The request body is too large and exceeds the maximum permissible limit.",
			detail: fmt.Sprintf("the fake blob store holds at most %d bytes; %d held, %d more asked", s.limit, s.used, n)}
	}
	s.used += n
	s.mu.Unlock()
	data := make([]byte, n)
	if _, err := io.ReadFull(r.Body, data); err != nil {
		s.release(n)
		return nil, &azureError{status: http.StatusBadRequest, code: "InvalidInput", message: "One of the request inputs is not valid.", detail: "reading the body: " + err.Error()}
	}
	if want := r.Header.Get("Content-MD5"); want != "" {
		if sum := md5.Sum(data); base64.StdEncoding.EncodeToString(sum[:]) != want {
			s.release(n)
			return nil, &azureError{status: http.StatusBadRequest, code: "Md5Mismatch", message: "The MD5 value specified in the request did not match with the MD5 value calculated by the server."}
		}
	}
	return data, nil
}

// blockIDLen checks a block id (base64 of at most 64 bytes) and returns
// its decoded length.
func blockIDLen(id string) (int, *azureError) {
	raw, err := base64.StdEncoding.DecodeString(id)
	if id == "" || err != nil || len(raw) > maxBlockIDBytes {
		return 0, &azureError{status: http.StatusBadRequest, code: "InvalidQueryParameterValue", message: "Value for one of the query parameters specified in the request URI is invalid.",
			detail: fmt.Sprintf("blockid %q: a block id is the base64 of at most %d bytes", id, maxBlockIDBytes)}
	}
	return len(raw), nil
}

// putBlock stages a block (PUT ?comp=block&blockid=): 201, uncommitted
// until a block list names it. All of a blob's block ids have one length.
func (s *blobStore) putBlock(w http.ResponseWriter, r *http.Request) *azureError {
	id := r.URL.Query().Get("blockid")
	idLen, err := blockIDLen(id)
	if err != nil {
		return err
	}
	data, err := s.readBody(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobFor(r.URL.Path)
	if b.idLen != 0 && b.idLen != idLen {
		s.used -= int64(len(data))
		return &azureError{status: http.StatusBadRequest, code: "InvalidBlobOrBlock", message: "The specified blob or block content is invalid.", detail: fmt.Sprintf("block id %q decodes to %d bytes, the blob's others to %d", id, idLen, b.idLen)}
	}
	if _, ok := b.uncommitted[id]; !ok && len(b.uncommitted) >= maxUncommittedBlocks {
		s.used -= int64(len(data))
		return &azureError{status: http.StatusConflict, code: "BlockCountExceedsLimit", message: "The uncommitted block count cannot exceed the maximum limit of 100,000 blocks."}
	}
	before := b.held()
	b.uncommitted[id] = &block{id: id, data: data}
	b.idLen = idLen
	s.account(int64(len(data)), before, b.held())
	sum := md5.Sum(data)
	w.Header().Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	w.Header().Set("x-ms-request-server-encrypted", "true")
	w.WriteHeader(http.StatusCreated)
	return nil
}

// blockListXML is Put Block List's body: <BlockList> with <Latest>,
// <Committed> and <Uncommitted> ids, in the blob's order.
type blockListXML struct {
	XMLName xml.Name
	Items   []struct {
		XMLName xml.Name
		ID      string `xml:",chardata"`
	} `xml:",any"`
}

func parseBlockList(r *http.Request) (*blockListXML, *azureError) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBlockListBytes+1))
	var list blockListXML
	if err == nil && len(raw) <= maxBlockListBytes {
		err = xml.Unmarshal(raw, &list)
	}
	if err == nil && list.XMLName.Local != "BlockList" {
		err = fmt.Errorf("the root element is <%s>, not <BlockList>", list.XMLName.Local)
	}
	for _, it := range list.Items {
		if n := it.XMLName.Local; err == nil && n != "Latest" && n != "Committed" && n != "Uncommitted" {
			err = fmt.Errorf("<%s> is not <Latest>, <Committed> or <Uncommitted>", n)
		}
	}
	if err == nil && len(list.Items) > maxCommittedBlocks {
		return nil, &azureError{status: http.StatusBadRequest, code: "BlockListTooLong", message: "The block list may not contain more than 50,000 blocks."}
	}
	if err != nil || len(raw) > maxBlockListBytes {
		return nil, &azureError{status: http.StatusBadRequest, code: "InvalidXmlDocument", message: "XML specified is not syntactically valid.", detail: fmt.Sprint(err)}
	}
	return &list, nil
}

// resolve finds the blocks list names in b: Latest is the uncommitted
// block of that id if any, else the committed one.
func (b *blob) resolve(list *blockListXML) ([]*block, *azureError) {
	committed := map[string]*block{}
	for _, bl := range b.committed {
		committed[bl.id] = bl
	}
	blocks := make([]*block, 0, len(list.Items))
	for _, it := range list.Items {
		id := strings.TrimSpace(it.ID)
		var bl *block
		switch it.XMLName.Local {
		case "Latest":
			if bl = b.uncommitted[id]; bl == nil {
				bl = committed[id]
			}
		case "Committed":
			bl = committed[id]
		case "Uncommitted":
			bl = b.uncommitted[id]
		}
		if bl == nil || id == "" {
			return nil, &azureError{status: http.StatusBadRequest, code: "InvalidBlockList", message: "The specified block list is invalid.",
				detail: fmt.Sprintf("<%s>%s</%s> names no block the blob holds", it.XMLName.Local, id, it.XMLName.Local)}
		}
		blocks = append(blocks, bl)
	}
	return blocks, nil
}

// putBlockList commits a blob from its blocks (PUT ?comp=blocklist):
// 201; blocks it does not name are discarded.
func (s *blobStore) putBlockList(w http.ResponseWriter, r *http.Request) *azureError {
	list, err := parseBlockList(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobFor(r.URL.Path)
	if _, err := preconditions(r, b.currentETag(), true); err != nil {
		return err
	}
	blocks, err := b.resolve(list)
	if err != nil {
		return err
	}
	before := b.held()
	b.committed = blocks
	if len(blocks) == 0 {
		b.idLen = 0
	}
	s.commit(b, contentType(r, "x-ms-blob-content-type"))
	s.account(0, before, b.held())
	writeWritten(w, b)
	return nil
}

// putBlob writes a whole block blob in one request (PUT with
// x-ms-blob-type: BlockBlob): 201; staged blocks are discarded.
func (s *blobStore) putBlob(w http.ResponseWriter, r *http.Request) *azureError {
	switch t := r.Header.Get("x-ms-blob-type"); t {
	case "BlockBlob":
	case "":
		return &azureError{status: http.StatusBadRequest, code: "MissingRequiredHeader", message: "An HTTP header that's mandatory for this request is not specified.", detail: "x-ms-blob-type"}
	default:
		return &azureError{status: http.StatusBadRequest, code: "InvalidHeaderValue", message: "The value for one of the HTTP headers is not in the correct format.", detail: "x-ms-blob-type: " + t + " (the fake holds block blobs only)"}
	}
	data, err := s.readBody(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobFor(r.URL.Path)
	if _, err := preconditions(r, b.currentETag(), true); err != nil {
		s.used -= int64(len(data))
		return err
	}
	before := b.held()
	b.committed = []*block{{data: data}}
	b.idLen = 0
	s.commit(b, contentType(r, "x-ms-blob-content-type", "Content-Type"))
	s.account(int64(len(data)), before, b.held())
	sum := md5.Sum(data)
	w.Header().Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	writeWritten(w, b)
	return nil
}

func (b *blob) currentETag() string {
	if !b.exists {
		return ""
	}
	return b.etag
}

func contentType(r *http.Request, headers ...string) string {
	for _, h := range headers {
		if v := r.Header.Get(h); v != "" {
			return v
		}
	}
	return "application/octet-stream"
}

func writeWritten(w http.ResponseWriter, b *blob) {
	w.Header().Set("ETag", b.etag)
	w.Header().Set("Last-Modified", b.modified.UTC().Format(http.TimeFormat))
	w.Header().Set("x-ms-request-server-encrypted", "true")
	w.WriteHeader(http.StatusCreated)
}

// snapshot is a committed version of a blob, to read without the lock.
type snapshot struct {
	blocks            []*block
	size              int64
	etag, contentType string
	created, modified time.Time
}

// snapshot is the committed version at path, false when there is none.
func (s *blobStore) snapshot(path string) (snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobs[path]
	if b == nil || !b.exists {
		return snapshot{}, false
	}
	return snapshot{blocks: append([]*block(nil), b.committed...), size: b.size(), etag: b.etag, contentType: b.contentType, created: b.created, modified: b.modified}, true
}

// getBlob answers Get Blob (GET, whole or a range) and Get Blob
// Properties (HEAD) with the headers the SDK reads: it needs
// Content-Length and ETag, and re-asks a broken download's rest with
// If-Match on that ETag.
func (s *blobStore) getBlob(w http.ResponseWriter, r *http.Request, head bool) *azureError {
	snap, ok := s.snapshot(r.URL.Path)
	if !ok {
		return &azureError{status: http.StatusNotFound, code: "BlobNotFound", message: "The specified blob does not exist."}
	}
	notModified, err := preconditions(r, snap.etag, false)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("ETag", snap.etag)
	h.Set("Last-Modified", snap.modified.UTC().Format(http.TimeFormat))
	if notModified {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	h.Set("Content-Type", snap.contentType)
	h.Set("Accept-Ranges", "bytes")
	h.Set("x-ms-blob-type", "BlockBlob")
	h.Set("x-ms-creation-time", snap.created.UTC().Format(http.TimeFormat))
	h.Set("x-ms-lease-state", "available")
	h.Set("x-ms-lease-status", "unlocked")
	h.Set("x-ms-server-encrypted", "true")
	start, end, partial := int64(0), snap.size-1, false
	if !head {
		if start, end, partial, err = blobRange(r, snap.size); err != nil {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", snap.size))
			return err
		}
	}
	h.Set("Content-Length", strconv.FormatInt(end-start+1, 10))
	if !partial {
		w.WriteHeader(http.StatusOK)
	} else {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, snap.size))
		w.WriteHeader(http.StatusPartialContent)
	}
	if !head {
		writeRange(w, snap.blocks, start, end)
	}
	return nil
}

// blobRange is the range r asks of a blob of size bytes: x-ms-range,
// else Range ("bytes=a-b" or "bytes=a-"). A malformed Range is ignored
// (the whole blob), a malformed x-ms-range refused; a start at or past
// the end is 416 InvalidRange.
func blobRange(r *http.Request, size int64) (start, end int64, partial bool, err *azureError) {
	spec, strict := r.Header.Get("x-ms-range"), true
	if spec == "" {
		spec, strict = r.Header.Get("Range"), false
	}
	if spec == "" {
		return 0, size - 1, false, nil
	}
	from, to, ok := strings.Cut(strings.TrimPrefix(spec, "bytes="), "-")
	start, err1 := strconv.ParseInt(from, 10, 64)
	end, err2 := strconv.ParseInt(to, 10, 64)
	if to == "" {
		end, err2 = size-1, nil
	}
	if !strings.HasPrefix(spec, "bytes=") || !ok || err1 != nil || err2 != nil || start < 0 || end < start {
		if strict {
			return 0, 0, false, &azureError{status: http.StatusBadRequest, code: "InvalidHeaderValue", message: "The value for one of the HTTP headers is not in the correct format.", detail: "x-ms-range: " + spec}
		}
		return 0, size - 1, false, nil
	}
	if start >= size {
		return 0, 0, false, &azureError{status: http.StatusRequestedRangeNotSatisfiable, code: "InvalidRange", message: "The range specified is invalid for the current size of the resource."}
	}
	return start, min(end, size-1), true, nil
}

// writeRange writes bytes start..end (inclusive) of blocks to w.
func writeRange(w io.Writer, blocks []*block, start, end int64) {
	var off int64
	for _, bl := range blocks {
		n := int64(len(bl.data))
		if off+n > start && off <= end {
			from, to := max(start-off, 0), min(end-off+1, n)
			if _, err := w.Write(bl.data[from:to]); err != nil {
				return // the client went away
			}
		}
		off += n
	}
}

// preconditions answers If-Match and If-None-Match against etag ("" when
// there is no blob): a failed condition is 412 ConditionNotMet, but a
// read whose If-None-Match matches is "not modified".
func preconditions(r *http.Request, etag string, write bool) (notModified bool, err *azureError) {
	matches := func(list string) bool {
		for _, t := range strings.Split(list, ",") {
			if t = strings.TrimSpace(t); t == "*" && etag != "" || t != "" && t == etag {
				return true
			}
		}
		return false
	}
	failed := &azureError{status: http.StatusPreconditionFailed, code: "ConditionNotMet", message: "The condition specified using HTTP conditional header(s) is not met."}
	if m := r.Header.Get("If-Match"); m != "" && !matches(m) {
		return false, failed
	}
	if m := r.Header.Get("If-None-Match"); m != "" && matches(m) {
		if write {
			return false, failed
		}
		return true, nil
	}
	return false, nil
}

// content is the committed bytes at path (a copy), nil when none.
func (s *blobStore) content(path string) []byte {
	snap, ok := s.snapshot(path)
	if !ok {
		return nil
	}
	var buf bytes.Buffer
	buf.Grow(int(snap.size))
	writeRange(&buf, snap.blocks, 0, snap.size-1)
	return buf.Bytes()
}

// digest is the hex sha256 and the length of the committed blob at
// path, false when there is none.
func (s *blobStore) digest(path string) (string, int64, bool) {
	snap, ok := s.snapshot(path)
	if !ok {
		return "", 0, false
	}
	h := sha256.New()
	writeRange(h, snap.blocks, 0, snap.size-1)
	return hex.EncodeToString(h.Sum(nil)), snap.size, true
}

// setBlobHeaders sets what Azure sets on every answer.
func setBlobHeaders(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	id := make([]byte, 16)
	rand.Read(id)
	h.Set("x-ms-request-id", fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:]))
	v := r.Header.Get("x-ms-version")
	if v == "" {
		v = defaultBlobVersion
	}
	h.Set("x-ms-version", v)
	if c := r.Header.Get("x-ms-client-request-id"); c != "" {
		h.Set("x-ms-client-request-id", c)
	}
	h.Set("Server", "Windows-Azure-Blob/1.0 Microsoft-HTTPAPI/2.0")
}

// azureError is a refusal as Azure storage words it.
type azureError struct {
	status        int
	code, message string
	detail        string // AuthenticationErrorDetail, or what the fake adds
}

// write answers with e: the x-ms-error-code header, and (but to a HEAD)
// the XML body, <Error><Code>…</Code><Message>…</Message>…</Error>.
func (e *azureError) write(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("x-ms-error-code", e.code)
	if r.Method == http.MethodHead {
		w.WriteHeader(e.status)
		return
	}
	body := struct {
		XMLName xml.Name `xml:"Error"`
		Code    string   `xml:"Code"`
		Message string   `xml:"Message"`
		Auth    string   `xml:"AuthenticationErrorDetail,omitempty"`
		Detail  string   `xml:"ExceptionDetails,omitempty"`
	}{Code: e.code, Message: e.message + "\nRequestId:" + h.Get("x-ms-request-id") + "\nTime:" + time.Now().UTC().Format("2006-01-02T15:04:05.0000000Z")}
	if e.code == "AuthenticationFailed" {
		body.Auth = e.detail
	} else {
		body.Detail = e.detail
	}
	out, _ := xml.Marshal(body)
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(xml.Header)+len(out)))
	w.WriteHeader(e.status)
	io.WriteString(w, xml.Header)
	w.Write(out)
}
