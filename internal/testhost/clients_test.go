package testhost

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/internal/testtool"
)

// nodeClients runs the real Actions client packages (testdata/clients,
// from npm) with node against a fake GitHub on a loopback address. The
// node process gets an environment built from nothing (no proxy), and a
// preload that resolves the names under github.test to the fake's
// address and no other name at all: it reaches nothing but loopback.
type nodeClients struct {
	node, modules string
	g             *GitHub
	ws, temp      string
}

// newNodeClients starts the fake for the clients. Without root (the
// fake listens on port 443) the test is skipped; without node or the
// packages (make test installs them) it is skipped too, or fails when
// AIRLOCK_REQUIRE_NODE or AIRLOCK_REQUIRE_CLIENTS is set (testtool).
func newNodeClients(t *testing.T) *nodeClients {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the fake GitHub listens on port 443")
	}
	why := "the fake GitHub's artifact, cache and blob storage services are checked against the real Actions client packages"
	node := testtool.Path(t, testtool.Node, why+", which run on node")
	modules := filepath.Join(testtool.Clients(t, why), "node_modules")
	return &nodeClients{node: node, modules: modules, g: loopbackGitHub(t), ws: t.TempDir(), temp: t.TempDir()}
}

// loopbackGitHub starts the fake on a free address 127.0.0.<2..250>
// (not the .77 to .79 other packages' tests use).
func loopbackGitHub(t *testing.T) *GitHub {
	t.Helper()
	origin, git := NewRepo(t)
	git("init", "-q")
	git("commit", "-q", "--allow-empty", "-m", "base")
	for range 20 {
		n, _ := rand.Int(rand.Reader, big.NewInt(249))
		last := 2 + n.Int64()
		if last >= 77 && last <= 79 {
			continue
		}
		addr := fmt.Sprintf("127.0.0.%d", last)
		if ln, err := net.Listen("tcp", net.JoinHostPort(addr, "443")); err == nil {
			ln.Close()
			return NewGitHub(t, addr, origin)
		}
	}
	t.Fatal("no loopback address with port 443 free")
	return nil
}

// run runs testdata/clients.js in mode with input, decodes what the
// clients returned into result and returns their log.
func (n *nodeClients) run(t *testing.T, mode string, input, result any) string {
	t.Helper()
	dir := t.TempDir()
	in, res := filepath.Join(dir, "input.json"), filepath.Join(dir, "result.json")
	raw, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	preload, _ := filepath.Abs("testdata/preload.js")
	script, _ := filepath.Abs("testdata/clients.js")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.node, "--require", preload, script, mode, in)
	cmd.Dir = n.ws
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "NODE_PATH=" + n.modules,
		"FAKE_GITHUB_ADDR=" + n.g.Addr, "NODE_EXTRA_CA_CERTS=" + n.g.CAFile, "RESULT=" + res,
		"ACTIONS_RUNTIME_TOKEN=" + n.g.Runtime, "ACTIONS_RESULTS_URL=" + GitHubResults, "ACTIONS_CACHE_SERVICE_V2=true",
		"GITHUB_WORKSPACE=" + n.ws, "RUNNER_TEMP=" + n.temp,
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node clients.js %s: %v\n%s", mode, err, out)
	}
	raw, err = os.ReadFile(res)
	if err != nil {
		t.Fatalf("clients.js %s left no result: %v\n%s", mode, err, out)
	}
	if err := json.Unmarshal(raw, result); err != nil {
		t.Fatalf("clients.js %s result %s: %v", mode, raw, err)
	}
	if strings.Contains(string(out), "::warning::") || strings.Contains(string(out), "::error::") {
		t.Errorf("the clients warned:\n%s", out)
	}
	return string(out)
}

// blobRequests counts the fake's answered Put Block, Put Block List and
// Put Blob requests to path.
func (n *nodeClients) blobRequests(path string) (blocks, lists, blobs int) {
	for _, s := range n.g.Requests() {
		if s.Host != blobHost || s.Method != "PUT" || s.Path != path || s.Status != 201 {
			continue
		}
		q, _ := url.ParseQuery(s.Query)
		switch q.Get("comp") {
		case "block":
			blocks++
		case "blocklist":
			lists++
		case "":
			blobs++
		}
	}
	return blocks, lists, blobs
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// writeFiles writes files (relative name → content) below root and
// returns their paths.
func writeFiles(t *testing.T, root string, files map[string][]byte) []string {
	t.Helper()
	var paths []string
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// checkFiles checks that root holds files as written.
func checkFiles(t *testing.T, what, root string, files map[string][]byte) {
	t.Helper()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %s: %d bytes (%v), want %d", what, name, len(got), err, len(want))
		}
	}
}

// checkZip checks that blob is a zip of files, and nothing else.
func checkZip(t *testing.T, blob []byte, files map[string][]byte) {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(blob), int64(len(blob)))
	if err != nil {
		t.Fatalf("the committed blob (%d bytes) is not a zip: %v", len(blob), err)
	}
	seen := 0
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatalf("zip %s: %v", f.Name, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if want, ok := files[f.Name]; err != nil || !ok || !bytes.Equal(got, want) {
			t.Errorf("zip entry %s: %d bytes (%v), want %d of the files", f.Name, len(got), err, len(want))
		}
		seen++
	}
	if seen != len(files) {
		t.Errorf("the zip holds %d files, want %d", seen, len(files))
	}
}

// @actions/artifact's uploadArtifact against the fake: the zip goes to
// the signed URL in 8 MiB blocks (uploadStream: up to 4 staged at once,
// as fast as the zip fills them; on loopback each block is staged before
// the next is full, so they come one by one), the client finalizes with
// the sha256 it computed, and the fake holds a
// finalized artifact whose committed blob has that digest and is a zip
// of the files. downloadArtifact by the returned id gets the files back
// (ListArtifacts, GetSignedArtifactURL, Get Blob) with the same digest.
func TestRealClientsArtifact(t *testing.T) {
	n := newNodeClients(t)
	for _, c := range []struct {
		name      string
		files     map[string][]byte
		retention int
		blocks    int // Put Block requests the upload makes
	}{
		{"one small file", map[string][]byte{"hello.txt": []byte("hello\n")}, 0, 1},
		{"several files, one of 20 MiB", map[string][]byte{
			"report.txt": []byte("report\n"), "logs/a.json": []byte(`{"a":1}`), "logs/big.bin": randomBytes(20 << 20),
		}, 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := strings.ReplaceAll(c.name, ",", "")
			root := filepath.Join(n.ws, "upload-"+strings.ReplaceAll(name, " ", "-"))
			download := filepath.Join(n.temp, "download-"+strings.ReplaceAll(name, " ", "-"))
			var got struct {
				ID             int64  `json:"id"`
				Size           int64  `json:"size"`
				Digest         string `json:"digest"`
				DigestMismatch bool   `json:"digestMismatch"`
			}
			start := time.Now()
			n.run(t, "artifact", map[string]any{"name": name, "root": root, "files": writeFiles(t, root, c.files), "retentionDays": c.retention, "download": download}, &got)
			t.Logf("upload and download: %v", time.Since(start).Round(time.Millisecond))
			var a *FakeArtifact
			for _, x := range n.g.Artifacts() {
				if x.Name == name {
					a = &x
				}
			}
			if a == nil {
				t.Fatalf("the fake holds no artifact %q: %+v", name, n.g.Artifacts())
			}
			if !a.Finalized || a.ID != got.ID || a.SHA256 != got.Digest || a.Claimed != "sha256:"+got.Digest || a.BlobSize != got.Size || a.Size != got.Size || got.Size == 0 {
				t.Errorf("the fake holds %+v; the client returned %+v", *a, got)
			}
			if a.ExpiresAt.IsZero() != (c.retention == 0) {
				t.Errorf("expires at %v with retention %d days", a.ExpiresAt, c.retention)
			}
			checkZip(t, n.g.Blob(name), c.files)
			if got.DigestMismatch {
				t.Errorf("the download's digest differs from the upload's")
			}
			checkFiles(t, "downloaded", download, c.files)
			blocks, lists, blobs := n.blobRequests("/artifacts/" + runtimeRun + "/" + runtimeJob + "/" + name + ".zip")
			if blocks != c.blocks || lists != 1 || blobs != 0 {
				t.Errorf("%d Put Block, %d Put Block List, %d Put Blob; want %d, 1, 0", blocks, lists, blobs, c.blocks)
			}
		})
	}
}

// @actions/cache's saveCache and restoreCache on the v2 service: the
// archive goes to the signed URL in one Put Blob up to 128 MiB, beyond
// in 64 MiB blocks staged all at once (uploadFile, 8 at a time), which
// arrive in any order; the fake finalizes the entry with
// the size the client claims, a restore by the key and by a restore key
// gets the files back (plain GET of the signed URL), a missing key is a
// miss.
func TestRealClientsCache(t *testing.T) {
	n := newNodeClients(t)
	for i, c := range []struct {
		name string
		size int
		long bool
	}{
		{"a small cache: one Put Blob", 1 << 20, false},
		{"over 128 MiB: 64 MiB blocks", 140 << 20, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.long && testing.Short() {
				t.Skip("uploads 140 MiB")
			}
			dir := fmt.Sprintf("cached-%d", i)
			files := map[string][]byte{"data.bin": randomBytes(c.size), "sub/small.txt": []byte("small\n")}
			writeFiles(t, filepath.Join(n.ws, dir), files)
			key, restoreKey := fmt.Sprintf("deps-%d-%x", i, randomBytes(4)), fmt.Sprintf("deps-%d-", i)
			var got struct {
				ID           int64   `json:"id"`
				Restored     *string `json:"restored"`
				Miss         *string `json:"miss"`
				ByRestoreKey *string `json:"byRestoreKey"`
			}
			start := time.Now()
			n.run(t, "cache", map[string]any{"paths": []string{dir}, "key": key, "missKey": fmt.Sprintf("none-%d", i), "restoreKey": restoreKey}, &got)
			t.Logf("save and three restores: %v", time.Since(start).Round(time.Millisecond))
			if got.Restored == nil || *got.Restored != key || got.Miss != nil || got.ByRestoreKey == nil || *got.ByRestoreKey != key {
				t.Errorf("restored %v, miss %v, by restore key %v; want %s, none, %s", deref(got.Restored), deref(got.Miss), deref(got.ByRestoreKey), key, key)
			}
			checkFiles(t, "restored", filepath.Join(n.ws, dir), files)
			checkCacheEntry(t, n, key, got.ID, c.size)
		})
	}
}

func checkCacheEntry(t *testing.T, n *nodeClients, key string, id int64, size int) {
	t.Helper()
	var e *FakeCacheEntry
	for _, x := range n.g.CacheEntries() {
		if x.Key == key {
			e = &x
		}
	}
	if e == nil {
		t.Fatalf("the fake holds no cache entry %q: %+v", key, n.g.CacheEntries())
	}
	blob := n.g.CacheBlob(key)
	sum := sha256.Sum256(blob)
	if !e.Finalized || e.ID != id || e.Size != e.BlobSize || e.BlobSize != int64(len(blob)) || e.SHA256 != hex.EncodeToString(sum[:]) || e.BlobSize < int64(size) {
		t.Errorf("the fake holds %+v (blob %d bytes); the client returned id %d", *e, len(blob), id)
	}
	blocks, lists, blobs := n.blobRequests(cachePath(n.g, key))
	const single, block = 128 << 20, 64 << 20
	want := [3]int{0, 0, 1}
	if e.BlobSize > single {
		want = [3]int{int((e.BlobSize + block - 1) / block), 1, 0}
	}
	if got := [3]int{blocks, lists, blobs}; got != want {
		t.Errorf("Put Block, Put Block List, Put Blob: %v, want %v", got, want)
	}
}

// cachePath is the blob path of the cache entry with key.
func cachePath(g *GitHub, key string) string {
	g.results.mu.Lock()
	defer g.results.mu.Unlock()
	for _, e := range g.results.caches {
		if e.key == key {
			return e.path
		}
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// What the blob store refuses, as @azure/storage-blob reports it to its
// caller: a RestError with Azure's status and error code.
func TestRealClientsRefused(t *testing.T) {
	n := newNodeClients(t)
	hour := time.Now().Add(time.Hour)
	const path = "/caches/refusals"
	up := n.g.sign.sign(path, "cw", hour)
	cases := []struct {
		name, op, url, block string
		status               int
		code                 string
	}{
		{"a tampered signature", "stageBlock", strings.Replace(up, "sig=", "sig=x", 1), blockID(0), 403, "AuthenticationFailed"},
		{"a block list naming a block never staged", "commitBlockList", up, blockID(7), 400, "InvalidBlockList"},
		{"a write with a download URL", "upload", n.g.sign.sign(path, "r", hour), "", 403, "AuthorizationPermissionMismatch"},
		{"an expired URL", "downloadToBuffer", n.g.sign.sign(path, "r", time.Now().Add(-time.Second)), "", 403, "AuthenticationFailed"},
		{"a blob never committed", "downloadToBuffer", n.g.sign.sign("/caches/none", "r", hour), "", 404, "BlobNotFound"},
	}
	var input []map[string]string
	for _, c := range cases {
		input = append(input, map[string]string{"op": c.op, "url": c.url, "block": c.block})
	}
	var got []struct {
		Status    int    `json:"status"`
		Code      string `json:"code"`      // from the XML body
		ErrorCode string `json:"errorCode"` // from x-ms-error-code
	}
	n.run(t, "refuse", input, &got)
	if len(got) != len(cases) {
		t.Fatalf("%d answers for %d cases: %+v", len(got), len(cases), got)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// downloadToBuffer asks Get Blob Properties first: a HEAD,
			// whose refusal has no body, only the header.
			head := c.op == "downloadToBuffer"
			if g := got[i]; g.Status != c.status || g.ErrorCode != c.code || !head && g.Code != c.code {
				t.Errorf("%s raised %+v, want %d %s", c.op, g, c.status, c.code)
			}
		})
	}
}
