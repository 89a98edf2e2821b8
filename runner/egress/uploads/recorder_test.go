package uploads

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// storage is a minimal artifact service and block blob store for the
// recorder to watch: it answers as the real ones do
// (@actions/artifact's generated/results/api/v1/artifact.js for the
// twirp messages, Azure's REST API for Put Block, Put Block List and Put
// Blob), keeps what was committed, and lies when told to.
type storage struct {
	mu      sync.Mutex
	blocks  map[string][]byte
	blob    []byte
	host    string
	created int
}

func (s *storage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	switch {
	case strings.HasSuffix(r.URL.Path, "/CreateArtifact"):
		s.created++
		fmt.Fprintf(w, `{"ok":true,"signed_upload_url":"https://%s/artifacts/run/job/a.zip?sig=x&sp=cw"}`, s.host)
	case strings.HasSuffix(r.URL.Path, "/FinalizeArtifact"):
		fmt.Fprint(w, `{"ok":true,"artifact_id":"7"}`)
	case r.URL.Query().Get("comp") == "block":
		s.blocks[r.URL.Query().Get("blockid")] = body
		w.WriteHeader(http.StatusCreated)
	case r.URL.Query().Get("comp") == "blocklist":
		list, err := parseBlockList(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var blob []byte
		for _, e := range list {
			blob = append(blob, s.blocks[e.id]...)
		}
		s.blob = blob
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodPut:
		s.blob = body
		w.WriteHeader(http.StatusCreated)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// harness puts a recorder in front of the storage as the gateway does
// (gateway/http.go: Begin before the proxy, Respond in ModifyResponse,
// Done after), and returns the client's view: status and body.
type harness struct {
	t   *testing.T
	rec *Recorder
	st  *storage
	up  *httptest.Server
}

func newHarness(t *testing.T, maxSpool int64) *harness {
	st := &storage{blocks: map[string][]byte{}, host: "blob.example.test"}
	h := &harness{t: t, rec: New(filepath.Join(t.TempDir(), "spool"), maxSpool), st: st, up: httptest.NewServer(st)}
	t.Cleanup(h.up.Close)
	return h
}

func (h *harness) do(route, host, method, target, contentType string, body io.Reader) (int, string) {
	req := httptest.NewRequest(method, target, body)
	req.Host = host
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if strings.Contains(target, "comp=") || method == http.MethodPut {
		req.Header.Set("X-Ms-Blob-Type", "BlockBlob")
	}
	w := httptest.NewRecorder()
	ex, err := h.rec.Begin(route, host, req)
	var refusal *Refusal
	if errors.As(err, &refusal) {
		return http.StatusForbidden, refusal.Reason
	}
	if err != nil {
		h.t.Fatalf("Begin: %v", err)
	}
	defer ex.Done()
	upURL, _ := url.Parse(h.up.URL)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upURL)
			pr.Out.URL.Path = pr.In.URL.Path
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
		},
		ModifyResponse: ex.Respond,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

const twirp = "https://results.example.test/twirp/github.actions.results.api.v1.ArtifactService/"

func (h *harness) create() {
	code, body := h.do("artifacts", "results.example.test", "POST", twirp+"CreateArtifact", "application/json",
		strings.NewReader(`{"workflow_run_backend_id":"run","workflow_job_run_backend_id":"job","name":"a","version":4}`))
	if code != 200 {
		h.t.Fatalf("CreateArtifact: %d %s", code, body)
	}
}

func (h *harness) finalize(hash string) (int, string) {
	return h.do("artifacts", "results.example.test", "POST", twirp+"FinalizeArtifact", "application/json",
		strings.NewReader(`{"workflowRunBackendId":"run","workflowJobRunBackendId":"job","name":"a","size":"1","hash":"`+hash+`"}`))
}

const blobURL = "https://blob.example.test/artifacts/run/job/a.zip?sig=x&sp=cw"

func blockID(i int) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "prefix-%06d", i))
}

// stage stages parts as blocks, all at once, as uploadStream does with
// its concurrency.
func (h *harness) stage(parts [][]byte) {
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := h.do("", "blob.example.test", "PUT", blobURL+"&comp=block&blockid="+url.QueryEscape(blockID(i)), "", bytes.NewReader(p)); code != 201 {
				h.t.Errorf("Put Block %d: %d %s", i, code, body)
			}
		}()
	}
	wg.Wait()
}

func (h *harness) commit(ids ...string) (int, string) {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><BlockList>`)
	for _, id := range ids {
		b.WriteString("<Latest>" + id + "</Latest>")
	}
	b.WriteString("</BlockList>")
	return h.do("", "blob.example.test", "PUT", blobURL+"&comp=blocklist", "", strings.NewReader(b.String()))
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func randomParts(t *testing.T, n, size int) ([][]byte, []byte) {
	var parts [][]byte
	var all []byte
	for range n {
		p := make([]byte, size)
		rand.Read(p)
		parts = append(parts, p)
		all = append(all, p...)
	}
	return parts, all
}

// TestHonestUploadIsRecorded: blocks staged concurrently and committed
// in the list's order give the digest of the blob the storage holds.
func TestHonestUploadIsRecorded(t *testing.T) {
	h := newHarness(t, 0)
	h.create()
	if !h.rec.Host("BLOB.example.test") {
		t.Fatal("the upload URL's host is not watched")
	}
	parts, all := randomParts(t, 5, 300<<10)
	h.stage(parts)
	if code, body := h.commit(blockID(0), blockID(1), blockID(2), blockID(3), blockID(4)); code != 201 {
		t.Fatalf("Put Block List: %d %s", code, body)
	}
	if !bytes.Equal(h.st.blob, all) {
		t.Fatal("the storage's blob is not the parts in order")
	}
	if code, body := h.finalize("sha256:" + sum(all)); code != 200 {
		t.Fatalf("FinalizeArtifact: %d %s", code, body)
	}
	ups := h.rec.Uploads()
	if len(ups) != 1 || ups[0].Status != Finalized || ups[0].SHA256 != sum(all) || ups[0].Size != int64(len(all)) || ups[0].ID != "7" || ups[0].Name != "a" {
		t.Fatalf("uploads = %+v", ups)
	}
	if entries, _ := os.ReadDir(h.rec.dir); len(entries) != 0 {
		t.Errorf("the spool keeps %d files after finalization", len(entries))
	}
	if code, _ := h.do("", "blob.example.test", "PUT", blobURL+"&comp=block&blockid="+blockID(9), "", strings.NewReader("late")); code != 403 {
		t.Errorf("a write to the blob after finalization: %d, want 403", code)
	}
}

// TestUploadAttacks: what a job might try against the record, each
// refused (the client gets 403 with the reason) or recorded as it is.
func TestUploadAttacks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(h *harness, parts [][]byte, all []byte) (int, string)
		want   string // in the refusal; "" for no refusal
		status string // the upload's status afterwards
	}{
		{"claimed hash differs from the bytes", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts)
			h.commit(blockID(0), blockID(1))
			return h.finalize("sha256:" + sum([]byte("something else")))
		}, "but the blob the job committed through the gateway is sha256:", Refused},
		{"committed in another order than claimed", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts)
			h.commit(blockID(1), blockID(0))
			return h.finalize("sha256:" + sum(all))
		}, "FinalizeArtifact claimed", Refused},
		{"a block never staged through the gateway", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts[:1])
			return h.commit(blockID(0), blockID(1))
		}, "which was not staged through the gateway", NotFinalized},
		{"a committed block from before", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts)
			return h.do("", "blob.example.test", "PUT", blobURL+"&comp=blocklist", "", strings.NewReader("<BlockList><Committed>"+blockID(0)+"</Committed></BlockList>"))
		}, "committed block", NotFinalized},
		{"a copy from a URL", func(h *harness, parts [][]byte, all []byte) (int, string) {
			req := "&comp=block&blockid=" + blockID(0)
			return h.doWithHeader("X-Ms-Copy-Source", "https://evil.test/x", blobURL+req)
		}, "x-ms-copy-source", NotFinalized},
		{"comp given twice", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("", "blob.example.test", "PUT", blobURL+"&comp=block&COMP=blocklist&blockid=x", "", strings.NewReader("x"))
		}, "more than once", NotFinalized},
		{"an append block", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("", "blob.example.test", "PUT", blobURL+"&comp=appendblock", "", strings.NewReader("x"))
		}, "comp=appendblock", NotFinalized},
		{"a delete", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("", "blob.example.test", "DELETE", blobURL, "", nil)
		}, "DELETE is not part of an upload", NotFinalized},
		{"the blob by a doubled slash", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("", "blob.example.test", "PUT", "https://blob.example.test/artifacts//run/job/a.zip?sig=x", "", strings.NewReader("x"))
		}, "not in plain form", NotFinalized},
		{"the hash given twice", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("artifacts", "results.example.test", "POST", twirp+"FinalizeArtifact", "application/json",
				strings.NewReader(`{"workflow_run_backend_id":"run","workflow_job_run_backend_id":"job","name":"a","hash":"sha256:`+sum(all)+`","Hash":"x","hash":"sha256:00"}`))
		}, "given twice", NotFinalized},
		{"the hash in protobuf", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("artifacts", "results.example.test", "POST", twirp+"FinalizeArtifact", "application/protobuf", strings.NewReader("\x0a\x03run"))
		}, "reads only twirp's JSON", NotFinalized},
		{"a block id in non-canonical base64", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("", "blob.example.test", "PUT", blobURL+"&comp=block&blockid=QUF%3D", "", strings.NewReader("x"))
		}, "not canonical base64", NotFinalized},
		{"a comment inside a block id", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts)
			return h.do("", "blob.example.test", "PUT", blobURL+"&comp=blocklist", "", strings.NewReader("<BlockList><Latest>"+blockID(0)[:4]+"<!--c-->"+blockID(0)[4:]+"</Latest></BlockList>"))
		}, "comment", NotFinalized},
		{"a block named twice", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts)
			return h.commit(blockID(0), blockID(0))
		}, "named twice", NotFinalized},
		{"a query Go and the storage read apart", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.do("", "blob.example.test", "PUT", blobURL+"&comp=blocklist;comp=block&blockid="+blockID(0), "", strings.NewReader("x"))
		}, "does not parse", NotFinalized},
		{"a second copy-source header after an empty one", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.doWithHeader("X-Ms-Copy-Source", "", blobURL+"&comp=block&blockid="+blockID(0), "https://evil.test/x")
		}, "x-ms-copy-source", NotFinalized},
		{"a block whose answer never came", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts)
			// The job stages block 0 again and goes away before the
			// storage answers: what the storage holds for it is unknown.
			req := h.blobRequest("PUT", blobURL+"&comp=block&blockid="+url.QueryEscape(blockID(0)), []byte("other bytes"))
			ex, err := h.rec.Begin("", "blob.example.test", req)
			if err != nil {
				h.t.Fatal(err)
			}
			io.ReadAll(req.Body)
			ex.Done()
			return h.commit(blockID(0), blockID(1))
		}, "which was not staged through the gateway", NotFinalized},
		{"a block list while a block is on its way", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.stage(parts)
			ex, _ := h.rec.Begin("", "blob.example.test", h.blobRequest("PUT", blobURL+"&comp=block&blockid="+url.QueryEscape(blockID(2)), []byte("late")))
			defer ex.Done()
			return h.commit(blockID(0), blockID(1))
		}, "still on their way", NotFinalized},
		{"a finalization while a Put Blob is on its way", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.do("", "blob.example.test", "PUT", blobURL, "", bytes.NewReader(all))
			ex, _ := h.rec.Begin("", "blob.example.test", h.blobRequest("PUT", blobURL, []byte("other")))
			defer ex.Done()
			return h.finalize("sha256:" + sum(all))
		}, "still has 1 write(s)", NotFinalized},
		{"a write while the artifact is being finalized", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.do("", "blob.example.test", "PUT", blobURL, "", bytes.NewReader(all))
			req := httptest.NewRequest("POST", twirp+"FinalizeArtifact", strings.NewReader(`{"workflow_run_backend_id":"run","workflow_job_run_backend_id":"job","name":"a","hash":"sha256:`+sum(all)+`"}`))
			req.Header.Set("Content-Type", "application/json")
			ex, err := h.rec.Begin("artifacts", "results.example.test", req)
			if err != nil {
				h.t.Fatal(err)
			}
			defer ex.Done()
			return h.do("", "blob.example.test", "PUT", blobURL, "", strings.NewReader("swapped"))
		}, "being finalized", NotFinalized},
		{"finalized without a blob seen", func(h *harness, parts [][]byte, all []byte) (int, string) {
			return h.finalize("sha256:" + sum(all))
		}, "", Unobserved},
		{"one Put Blob", func(h *harness, parts [][]byte, all []byte) (int, string) {
			h.do("", "blob.example.test", "PUT", blobURL, "", bytes.NewReader(all))
			return h.finalize("sha256:" + sum(all))
		}, "", Finalized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 0)
			h.create()
			parts, all := randomParts(t, 2, 1000)
			code, body := tc.attack(h, parts, all)
			if tc.want == "" && code >= 300 || tc.want != "" && (code != 403 || !strings.Contains(body, tc.want)) {
				t.Errorf("got %d %q, want a refusal saying %q", code, body, tc.want)
			}
			if ups := h.rec.Uploads(); len(ups) != 1 || ups[0].Status != tc.status {
				t.Errorf("uploads = %+v, want status %q", ups, tc.status)
			}
		})
	}
}

func (h *harness) doWithHeader(k, v, target string, more ...string) (int, string) {
	req := httptest.NewRequest("PUT", target, strings.NewReader("x"))
	req.Header.Set(k, v)
	for _, m := range more {
		req.Header.Add(k, m)
	}
	_, err := h.rec.Begin("", "blob.example.test", req)
	var refusal *Refusal
	if errors.As(err, &refusal) {
		return 403, refusal.Reason
	}
	return 200, ""
}

// blobRequest is a write to the blob as the storage's client sends it.
func (h *harness) blobRequest(method, target string, body []byte) *http.Request {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	req.Host = "blob.example.test"
	req.Header.Set("X-Ms-Blob-Type", "BlockBlob")
	return req
}

// TestOnWatch: the gateway hears of a blob host before the first
// request to it is watched, once.
func TestOnWatch(t *testing.T) {
	h := newHarness(t, 0)
	var told []string
	h.rec.SetOnWatch(func(host string) { told = append(told, host) })
	h.create()
	h.create()
	if len(told) != 1 || told[0] != "blob.example.test" {
		t.Errorf("told %q, want blob.example.test once", told)
	}
}

// TestSpoolBound: staged blocks past the bound fail the upload, and
// nothing of them stays on disk.
func TestSpoolBound(t *testing.T) {
	h := newHarness(t, 64<<10)
	h.create()
	code, _ := h.do("", "blob.example.test", "PUT", blobURL+"&comp=block&blockid="+blockID(0), "", bytes.NewReader(make([]byte, 100<<10)))
	if code == 201 {
		t.Fatal("a block past the spool's bound was staged")
	}
	if entries, _ := os.ReadDir(h.rec.dir); len(entries) != 0 {
		t.Errorf("the spool keeps %d files", len(entries))
	}
	if h.rec.spooled != 0 {
		t.Errorf("spooled = %d after the failed block", h.rec.spooled)
	}
	if err := h.rec.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.rec.dir); !os.IsNotExist(err) {
		t.Errorf("Close left the spool: %v", err)
	}
}

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{`{"name":"a","size":"12","hash":"sha256:ab"}`, map[string]string{"name": "a", "size": "12", "hash": "sha256:ab"}, ""},
		{`{"workflowRunBackendId":"r","ok":true,"other":{"x":[1]}}`, map[string]string{"workflow_run_backend_id": "r", "ok": "true"}, ""},
		{`{"name":"a","NAME":"b"}`, map[string]string{"name": "a"}, ""},
		{`{"name":"a","name":"b"}`, nil, "given twice"},
		{`{"workflow_run_backend_id":"a","workflowRunBackendId":"b"}`, nil, "given twice"},
		{`{"name":["a"]}`, nil, "not a string"},
		{`{"name":"a"} {"name":"b"}`, nil, "more than one"},
		{`["name"]`, nil, "not a JSON object"},
	} {
		got, err := parseMessage([]byte(tc.in), "name", "size", "hash", "workflow_run_backend_id", "ok")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.in, got, err, tc.want)
		}
	}
}
