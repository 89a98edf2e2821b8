package github

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

const testToken = "ghp_s3cretTOKENvalue1234567890"

// fakeAPI is an httptest GitHub: handlers per "METHOD path", and a log
// of every request with its time and Authorization header.
type fakeAPI struct {
	t        *testing.T
	mu       sync.Mutex
	handlers map[string][]http.HandlerFunc // served in turn; the last repeats
	calls    []call
	srv      *httptest.Server
}

type call struct {
	key, auth string
	at        time.Time
	body      []byte
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t, handlers: map[string][]http.HandlerFunc{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := 0
		for _, c := range f.calls {
			if c.key == key {
				n++
			}
		}
		f.calls = append(f.calls, call{key, r.Header.Get("Authorization"), time.Now(), body})
		hs := f.handlers[key]
		f.mu.Unlock()
		if len(hs) == 0 {
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		hs[min(n, len(hs)-1)](w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) on(key string, hs ...http.HandlerFunc) { f.handlers[key] = hs }

func (f *fakeAPI) callsTo(key string) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

func status(code int, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
		fmt.Fprint(w, `{"message":"try later","documentation_url":"https://docs.github.com/rest"}`)
	}
}

func jsonBody(v any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}
}

// prPayload is the pull_request object of a real event payload.
func prPayload(t *testing.T) map[string]any {
	b, err := os.ReadFile("../../testdata/events/pr-opened-by-copilot.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	json.Unmarshal(b, &ev)
	return ev["pull_request"].(map[string]any)
}

func testClient(t *testing.T, f *fakeAPI, log *bytes.Buffer) *Client {
	o := Options{BaseURL: f.srv.URL, Token: testToken, RetryWaitMax: 3 * time.Second}
	if log != nil {
		o.Log = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// 502, then 429 with Retry-After, then 200: the call succeeds, after
// waiting as told; the token is sent and never logged.
func TestRetriesAndRetryAfter(t *testing.T) {
	f := newFakeAPI(t)
	pr := prPayload(t)
	f.on("GET /repos/acme/app/pulls/7", status(502), status(429, "Retry-After", "1"), jsonBody(pr))
	f.on("GET /repos/acme/app/pulls/7/files", jsonBody([]map[string]any{{"filename": ".github/workflows/ci.yml"}, {"filename": "main.go"}}))
	var log bytes.Buffer
	got, err := testClient(t, f, &log).GetPullRequest(context.Background(), "acme", "app", 7)
	if err != nil {
		t.Fatal(err)
	}
	calls := f.callsTo("GET /repos/acme/app/pulls/7")
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3", len(calls))
	}
	if gap := calls[2].at.Sub(calls[1].at); gap < 900*time.Millisecond {
		t.Errorf("Retry-After: 1 not honoured: retried after %v", gap)
	}
	if calls[0].auth != "Bearer "+testToken {
		t.Errorf("authorization %q", calls[0].auth)
	}
	if got.Author != "Copilot" || got.HeadSHA == "" || len(got.Files) != 2 {
		t.Errorf("pull request = %+v", got)
	}
	if strings.Contains(log.String(), testToken) || !strings.Contains(log.String(), "retrying") {
		t.Errorf("log: %s", log.String())
	}
}

// A secondary rate limit (403 with Retry-After) waits and retries; a
// plain 403 or 404 does not retry, and the error carries no token.
func TestRateLimitsAndPlainErrors(t *testing.T) {
	f := newFakeAPI(t)
	f.on("GET /repos/acme/app/pulls/8", status(403, "Retry-After", "1"), jsonBody(prPayload(t)))
	f.on("GET /repos/acme/app/pulls/8/files", jsonBody([]map[string]any{}))
	f.on("GET /repos/acme/app/pulls/9", status(403))
	c := testClient(t, f, nil)
	if _, err := c.GetPullRequest(context.Background(), "acme", "app", 8); err != nil {
		t.Fatal(err)
	}
	if n := len(f.callsTo("GET /repos/acme/app/pulls/8")); n != 2 {
		t.Errorf("secondary rate limit: %d calls, want 2", n)
	}
	_, err := c.GetPullRequest(context.Background(), "acme", "app", 9)
	if err == nil || strings.Contains(err.Error(), testToken) {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.callsTo("GET /repos/acme/app/pulls/9")); n != 1 {
		t.Errorf("plain 403 retried: %d calls", n)
	}
}

// 60 annotations go in two batches of at most 50, the first with the
// conclusion.
func TestCheckRunAnnotationBatches(t *testing.T) {
	f := newFakeAPI(t)
	f.on("POST /repos/acme/app/check-runs", jsonBody(map[string]any{"id": 99, "name": "airlock", "status": "in_progress"}))
	f.on("PATCH /repos/acme/app/check-runs/99", jsonBody(map[string]any{"id": 99, "status": "completed"}))
	c := testClient(t, f, nil)
	id, err := c.StartCheck(context.Background(), "acme", "app", strings.Repeat("a", 40))
	if err != nil || id != 99 {
		t.Fatalf("start: %d %v", id, err)
	}
	var anns []Annotation
	for i := 0; i < 60; i++ {
		anns = append(anns, Annotation{Path: fmt.Sprintf(".git/hooks/h%d", i), Line: i, Level: "warning", Title: "airlock trust", Message: "planted"})
	}
	if err := c.CompleteCheck(context.Background(), "acme", "app", id, Report{Conclusion: "failure", Title: "airlock: failed", Summary: "## summary", Annotations: anns}); err != nil {
		t.Fatal(err)
	}
	patches := f.callsTo("PATCH /repos/acme/app/check-runs/99")
	if len(patches) != 2 {
		t.Fatalf("%d updates, want 2", len(patches))
	}
	var sizes []int
	for i, p := range patches {
		var body struct {
			Conclusion string `json:"conclusion"`
			Output     struct {
				Annotations []map[string]any `json:"annotations"`
			} `json:"output"`
		}
		json.Unmarshal(p.body, &body)
		sizes = append(sizes, len(body.Output.Annotations))
		if (i == 0) != (body.Conclusion == "failure") {
			t.Errorf("update %d conclusion %q", i, body.Conclusion)
		}
	}
	if sizes[0] != 50 || sizes[1] != 10 {
		t.Errorf("batches %v, want [50 10]", sizes)
	}
}

// A GitHub App: the client signs a JWT with the app key, gets an
// installation token, uses it, and gets a new one when it is about to
// expire.
func TestAppInstallationTokens(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	f := newFakeAPI(t)
	var minted int
	var mu sync.Mutex
	f.on("POST /app/installations/42/access_tokens", func(w http.ResponseWriter, r *http.Request) {
		raw := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		tok, err := jwt.Parse(raw, func(*jwt.Token) (any, error) { return &key.PublicKey, nil })
		if err != nil || !tok.Valid || tok.Claims.(jwt.MapClaims)["iss"] != "7" {
			http.Error(w, `{"message":"bad jwt"}`, http.StatusUnauthorized)
			return
		}
		mu.Lock()
		minted++
		n := minted
		mu.Unlock()
		// Expires in 30 s: inside the refresh margin, so the next call
		// mints a new one.
		jsonBody(map[string]any{"token": fmt.Sprintf("ghs_installation%d", n), "expires_at": time.Now().Add(30 * time.Second).Format(time.RFC3339)})(w, r)
	})
	f.on("GET /repos/acme/app/contents/.github/airlock.cue", jsonBody(map[string]any{"type": "file", "encoding": "base64", "size": 5, "content": "ZWdy\nZXNz\n", "path": ".github/airlock.cue"}))
	c, err := New(Options{BaseURL: f.srv.URL, App: &App{ID: 7, InstallationID: 42, PrivateKey: keyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		b, err := c.FileAtRef(context.Background(), "acme", "app", ".github/airlock.cue", strings.Repeat("b", 40))
		if err != nil || string(b) != "egress" {
			t.Fatalf("file: %q %v", b, err)
		}
	}
	calls := f.callsTo("GET /repos/acme/app/contents/.github/airlock.cue")
	if minted != 2 || calls[0].auth != "token ghs_installation1" || calls[1].auth != "token ghs_installation2" {
		t.Errorf("minted %d, auth %q %q", minted, calls[0].auth, calls[1].auth)
	}
	if _, err := c.FileAtRef(context.Background(), "acme", "app", "missing.cue", "main"); err != nil {
		t.Errorf("a missing file is not an error: %v", err)
	}
}

// A GitHub API that fails and keeps failing (5xx every time, a
// connection reset, an answer that never comes) costs a bounded wait:
// the call gives up within its deadline, after its retries, with an
// error that says what the API did; nothing hangs.
func TestAPIFaultsAreBounded(t *testing.T) {
	reset := func(t *testing.T) string {
		// Accepts, reads the request, and resets the connection (linger 0).
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Read(make([]byte, 4096))
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}()
		return "http://" + l.Addr().String()
	}
	hang := func(t *testing.T) string {
		// Accepts and never answers.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var held []net.Conn
		var mu sync.Mutex
		t.Cleanup(func() {
			l.Close()
			mu.Lock()
			for _, c := range held {
				c.Close()
			}
			mu.Unlock()
		})
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			}
		}()
		return "http://" + l.Addr().String()
	}
	always503 := func(t *testing.T) string {
		f := newFakeAPI(t)
		f.on("GET /repos/acme/app/pulls/7", status(503), status(503), status(503), status(503), status(503), status(503))
		return f.srv.URL
	}
	for _, tc := range []struct {
		name   string
		server func(*testing.T) string
		want   string
	}{
		{"5xx every time", always503, "503"},
		{"connection reset", reset, "connection reset"},
		{"no answer", hang, "no answer within 3s, retries included"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const deadline = 3 * time.Second
			c, err := New(Options{BaseURL: tc.server(t), Token: testToken, RetryMax: 2, RetryWaitMax: 200 * time.Millisecond, CallTimeout: deadline})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = c.GetPullRequest(context.Background(), "acme", "app", 7)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), testToken) {
				t.Errorf("err = %v, want one naming %q (and no token)", err, tc.want)
			}
			// The bound holds (with room for a loaded machine), whatever
			// the API does.
			if took > deadline+5*time.Second {
				t.Errorf("the call took %s, past its %s deadline", took, deadline)
			}
			t.Logf("%s: %v after %s", tc.name, err, took.Round(time.Millisecond))
		})
	}
}
