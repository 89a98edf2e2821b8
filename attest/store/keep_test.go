package store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

// jobOnDisk writes a job's signed attestation of about size bytes where
// the doors write it, and returns the Keeper's bundle for it.
func jobOnDisk(t testing.TB, dir string, key testKey, jobID string, execs int) (Bundle, []byte) {
	t.Helper()
	commit := commitOf(jobID)
	b := signedBundle(t, key, commit, execs, true)
	file := jobID + ".sigstore.json"
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return Bundle{File: file, Labels: labels(KindAttestation, 12, commit, jobID, 1)}, b
}

// Every fault leaves the job pending with an error that says what to
// do, never a credential; once the fault is gone, the next job's retry
// stores it.
func TestKeepFaults(t *testing.T) {
	key := newTestKey(t)
	const password = "s3cret-push-pass"
	type setup struct {
		ref    storeref.Ref
		opts   Options
		heal   func()         // takes the fault away
		healed func() Options // the options after healing (default: opts)
		log    func() string
	}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) setup
		want  string
	}{
		{"registry down", func(t *testing.T) setup {
			port := testregistry.FreePort(t)
			ref := ociRef(t, fmt.Sprintf("127.0.0.1:%d", port))
			var srv *testregistry.Server
			return setup{ref: ref, opts: fastOptions(""), heal: func() {
				srv = testregistry.Distribution(t, testregistry.Options{Port: port, User: "airlock", Password: password})
			}, healed: func() Options { return fastOptions(srv.AuthFile(t, "", "")) }}
		}, "connection refused"},
		{"5xx", func(t *testing.T) setup {
			srv := testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: password})
			srv.SetFault(func(w http.ResponseWriter, r *http.Request) bool {
				http.Error(w, `{"errors":[{"code":"UNAVAILABLE","message":"maintenance"}]}`, http.StatusServiceUnavailable)
				return true
			})
			return setup{ref: ociRef(t, srv.Host), opts: fastOptions(srv.AuthFile(t, "", "")), heal: func() { srv.SetFault(nil) }}
		}, "failed (503) after 3 tries"},
		{"a hang past the deadline", func(t *testing.T) setup {
			srv := testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: password})
			release := make(chan struct{})
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			srv.SetFault(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/manifests/") {
					return false
				}
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return true
			})
			o := fastOptions(srv.AuthFile(t, "", ""))
			o.AttemptTimeout, o.Deadline = 300*time.Millisecond, 1500*time.Millisecond
			return setup{ref: ociRef(t, srv.Host), opts: o, heal: func() { srv.SetFault(nil); once.Do(func() { close(release) }) }, healed: func() Options { return fastOptions(srv.AuthFile(t, "", "")) }}
		}, "no answer"},
		{"401: wrong credentials", func(t *testing.T) setup {
			srv := testregistry.Distribution(t, testregistry.Options{User: "airlock", Password: password})
			return setup{ref: ociRef(t, srv.Host), opts: fastOptions(srv.AuthFile(t, "airlock", "wrong-"+password)), heal: func() {},
				healed: func() Options { return fastOptions(srv.AuthFile(t, "", "")) }}
		}, "refused the credentials (401)"},
		{"403: no push rights", func(t *testing.T) setup {
			srv := testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: password})
			srv.SetFault(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method == http.MethodGet || r.Method == http.MethodHead {
					return false
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, `{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}`)
				return true
			})
			return setup{ref: ociRef(t, srv.Host), opts: fastOptions(srv.AuthFile(t, "", "")), heal: func() { srv.SetFault(nil) }}
		}, "forbids it (403)"},
		{"a full disk on the registry", func(t *testing.T) setup {
			if os.Getuid() != 0 {
				t.Skip("mounts a small tmpfs for the registry's storage: needs root")
			}
			root := t.TempDir()
			if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=64k"); err != nil {
				t.Fatalf("mount a 64k tmpfs: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(root, syscall.MNT_DETACH) })
			srv := testregistry.Distribution(t, testregistry.Options{User: "airlock", Password: password, Root: root})
			return setup{ref: ociRef(t, srv.Host), opts: fastOptions(srv.AuthFile(t, "", "")), log: func() string { return srv.Log(t) }, heal: func() {
				if err := syscall.Mount("tmpfs", root, "tmpfs", syscall.MS_REMOUNT, "size=16m"); err != nil {
					t.Fatalf("grow the tmpfs: %v", err)
				}
			}}
		}, "the registry failed (500)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			dir := t.TempDir()
			b, bundle := jobOnDisk(t, dir, key, "job-00000000fa17", 1500) // about 400 KB
			k := Keeper{Stores: []storeref.Ref{s.ref}, Options: s.opts, Dir: dir}
			out := k.Keep(context.Background(), "job-00000000fa17", []Bundle{b})
			if len(out) != 1 || !out[0].Required || !strings.Contains(out[0].Error, tc.want) {
				if s.log != nil {
					t.Logf("registry log:\n%s", s.log())
				}
				t.Fatalf("Keep: %+v\nwant a required store's error with %q", out, tc.want)
			}
			if strings.Contains(out[0].Error, password) {
				t.Fatalf("the error holds the password: %s", out[0].Error)
			}
			if len(Failed(out)) != 1 || !PendingJobs(dir)["job-00000000fa17"] {
				t.Fatalf("the job is not pending after a failed push (Failed %v, pending %v)", Failed(out), PendingJobs(dir))
			}
			if _, err := os.Stat(filepath.Join(dir, b.File)); err != nil {
				t.Fatalf("the bundle left the disk: %v", err)
			}
			s.heal()
			if s.healed != nil {
				k.Options = s.healed()
			}
			var log strings.Builder
			pending, kept := k.RetryPending(context.Background(), &log)
			if pending != 1 || kept != 1 || len(PendingJobs(dir)) != 0 {
				t.Fatalf("RetryPending = %d, %d (pending now %v); log:\n%s", pending, kept, PendingJobs(dir), log.String())
			}
			if !strings.Contains(log.String(), "now stored: ") || strings.Contains(log.String(), password) {
				t.Fatalf("RetryPending's log:\n%s", log.String())
			}
			st, _ := Open(s.ref, k.Options)
			got, err := st.List(context.Background(), Query{})
			if err != nil || len(got) != 1 {
				t.Fatalf("List after the retry: %+v, %v", got, err)
			}
			if back, err := st.Fetch(context.Background(), got[0]); err != nil || string(back) != string(bundle) {
				t.Fatalf("Fetch after the retry: %v", err)
			}
		})
	}
}

// A best-effort store's failure is reported and kept pending, but is
// not a failure of the job; a job held by every store leaves no marker.
func TestKeepSeveralStores(t *testing.T) {
	key := newTestKey(t)
	srv := testregistry.InProcess(t, testregistry.Options{Referrers: true})
	down := ociRef(t, fmt.Sprintf("127.0.0.1:%d", testregistry.FreePort(t)))
	down.Required = false
	file := fileRef(t)
	dir := t.TempDir()
	b, _ := jobOnDisk(t, dir, key, "job-0000000000a1", 10)
	k := Keeper{Stores: []storeref.Ref{ociRef(t, srv.Host), file, down}, Options: fastOptions(""), Dir: dir}
	out := k.Keep(context.Background(), "job-0000000000a1", []Bundle{b})
	if len(out) != 3 || out[0].Error != "" || out[1].Error != "" || out[2].Error == "" || len(Failed(out)) != 0 {
		t.Fatalf("Keep: %+v; want two stores holding it and the best-effort one failed, not a failure", out)
	}
	if !PendingJobs(dir)["job-0000000000a1"] {
		t.Fatal("a store that failed, even best-effort, leaves the job pending")
	}
	k.Stores = k.Stores[:2]
	b2, _ := jobOnDisk(t, dir, key, "job-0000000000a2", 10)
	if out := k.Keep(context.Background(), "job-0000000000a2", []Bundle{b2}); len(Failed(out)) != 0 || PendingJobs(dir)["job-0000000000a2"] {
		t.Fatalf("Keep to two working stores: %+v, pending %v", out, PendingJobs(dir))
	}
}

// A runner killed in the middle of a push leaves the job pending, and
// the next job on the runner stores it: once, under its own tag.
func TestKeepKilledMidPush(t *testing.T) {
	if os.Getenv("AIRLOCK_STORE_CHILD") != "" {
		return // the child's work is in keepChild, run from TestMain
	}
	key := newTestKey(t)
	srv := testregistry.InProcess(t, testregistry.Options{})
	dir := t.TempDir()
	b, bundle := jobOnDisk(t, dir, key, "job-00000000dead", 1500)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv.SetFault(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/manifests/"+b.Labels.Tag()) {
			once.Do(func() { close(reached) })
			<-release
			return true
		}
		return false
	})
	defer close(release)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AIRLOCK_STORE_CHILD=1", "AIRLOCK_STORE_CHILD_HOST="+srv.Host, "AIRLOCK_STORE_CHILD_DIR="+dir,
		"AIRLOCK_STORE_CHILD_FILE="+b.File, "AIRLOCK_STORE_CHILD_COMMIT="+b.Labels.Commit)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child never reached the job's manifest")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !PendingJobs(dir)["job-00000000dead"] {
		t.Fatal("the killed push left no pending marker")
	}
	srv.SetFault(nil)
	var log strings.Builder
	k := Keeper{Stores: []storeref.Ref{ociRef(t, srv.Host)}, Options: fastOptions(""), Dir: dir}
	if pending, kept := k.RetryPending(context.Background(), &log); pending != 1 || kept != 1 {
		t.Fatalf("RetryPending = %d, %d; log:\n%s", pending, kept, log.String())
	}
	st, _ := Open(k.Stores[0], k.Options)
	got, err := st.List(context.Background(), Query{})
	if err != nil || len(got) != 1 || got[0].Tag != b.Labels.Tag() {
		t.Fatalf("List: %+v, %v; want the job once", got, err)
	}
	if back, err := st.Fetch(context.Background(), got[0]); err != nil || string(back) != string(bundle) {
		t.Fatalf("Fetch: %v", err)
	}
}

// keepChild is the runner that TestKeepKilledMidPush kills.
func keepChild() {
	ref, _ := storeref.Parse("oci://" + os.Getenv("AIRLOCK_STORE_CHILD_HOST") + "/airlock/attestations")
	k := Keeper{Stores: []storeref.Ref{ref}, Options: fastOptions(""), Dir: os.Getenv("AIRLOCK_STORE_CHILD_DIR")}
	b := Bundle{File: os.Getenv("AIRLOCK_STORE_CHILD_FILE"), Labels: labels(KindAttestation, 12, os.Getenv("AIRLOCK_STORE_CHILD_COMMIT"), "job-00000000dead", 1)}
	k.Options.Deadline = 5 * time.Minute
	k.Keep(context.Background(), "job-00000000dead", []Bundle{b})
	os.Exit(3) // never reached: the parent kills it mid-push
}

func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_STORE_CHILD") != "" {
		keepChild()
	}
	os.Exit(m.Run())
}

// A registry that sends blobs to another host (as registries send them
// to their storage) works, and the credentials never follow: the other
// host gets no Authorization, on the upload or the download.
func TestRedirectKeepsCredentials(t *testing.T) {
	key := newTestKey(t)
	storage := testregistry.InProcess(t, testregistry.Options{}) // the storage host: it takes what it is sent
	front := testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: "s3cret-push-pass"})
	// The other host by another name: localhost, not 127.0.0.1.
	other := "localhost:" + storage.Host[strings.LastIndex(storage.Host, ":")+1:]
	front.SetFault(func(w http.ResponseWriter, r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		if !ok || u != "airlock" || p != "s3cret-push-pass" {
			return false // the front's own auth answers
		}
		switch {
		case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:"):
			http.Redirect(w, r, "http://"+other+r.URL.Path, http.StatusTemporaryRedirect)
			return true
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/blobs/uploads/"):
			// Start the upload on the storage host and send the client
			// there, as a registry with redirected uploads does.
			resp, err := http.Post("http://"+storage.Host+r.URL.Path, "application/octet-stream", nil)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return true
			}
			resp.Body.Close()
			loc := resp.Header.Get("Location")
			if !strings.HasPrefix(loc, "http") {
				loc = "http://" + other + loc
			} else {
				loc = strings.Replace(loc, storage.Host, other, 1)
			}
			w.Header().Set("Location", loc)
			w.Header().Set("Docker-Upload-UUID", resp.Header.Get("Docker-Upload-UUID"))
			w.Header().Set("Range", "0-0")
			w.WriteHeader(http.StatusAccepted)
			return true
		case strings.Contains(r.URL.Path, "/blobs/") || strings.Contains(r.URL.Path, "/manifests/") || strings.Contains(r.URL.Path, "/tags/") || strings.Contains(r.URL.Path, "/referrers/"):
			// The rest is the storage's content, served by the front.
			req, _ := http.NewRequestWithContext(r.Context(), r.Method, "http://"+storage.Host+r.URL.RequestURI(), r.Body)
			req.Header = r.Header.Clone()
			req.Header.Del("Authorization")
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				http.Error(w, err.Error(), 502)
				return true
			}
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			io.Copy(w, resp.Body)
			return true
		}
		return false
	})
	ref := ociRef(t, front.Host)
	st, err := Open(ref, fastOptions(front.AuthFile(t, "", "")))
	if err != nil {
		t.Fatal(err)
	}
	commit := commitOf("redirect")
	bundle := signedBundle(t, key, commit, 50, true)
	l := labels(KindAttestation, 3, commit, "job-0000000000be", 1)
	e, err := st.Put(context.Background(), Record{Labels: l, Bundle: bundle})
	if err != nil {
		t.Fatalf("Put through a redirecting registry: %v", err)
	}
	back, err := st.Fetch(context.Background(), e)
	if err != nil || string(back) != string(bundle) {
		t.Fatalf("Fetch through a redirecting registry: %v", err)
	}
	var toOther, withAuth int
	for _, r := range storage.Requests() {
		if r.Host == other {
			toOther++
			if r.Authorization {
				withAuth++
			}
		}
	}
	if toOther == 0 {
		t.Fatalf("no request reached the other host: the redirects were not exercised (%+v)", storage.Requests())
	}
	if withAuth != 0 {
		t.Fatalf("%d of %d requests to the other host carried credentials", withAuth, toOther)
	}
}

// A pending job that can never be stored (its bundle is gone, or its
// marker does not parse) is set aside with a loud line, not retried for
// ever ahead of the others: the job behind it is stored.
func TestRetryPendingSetsAside(t *testing.T) {
	key := newTestKey(t)
	srv := testregistry.InProcess(t, testregistry.Options{Referrers: true})
	down := ociRef(t, fmt.Sprintf("127.0.0.1:%d", testregistry.FreePort(t)))
	dir := t.TempDir()
	k := Keeper{Stores: []storeref.Ref{down}, Options: fastOptions(""), Dir: dir}
	var good Bundle
	for i, id := range []string{"job-0000000000c1", "job-0000000000c2", "job-0000000000c3"} {
		b, _ := jobOnDisk(t, dir, key, id, 5)
		if out := k.Keep(context.Background(), id, []Bundle{b}); len(Failed(out)) != 1 {
			t.Fatalf("Keep to a store that is down: %+v", out)
		}
		switch i {
		case 0:
			os.Remove(filepath.Join(dir, b.File)) // the bundle is gone
		case 1:
			os.WriteFile(k.markerPath(id), []byte("{garbled"), 0o600)
		case 2:
			good = b
		}
	}
	// The store's name in the markers is the down one: point them at the
	// working registry, as an administrator who moved it would not need
	// to (the marker names it); here it stands for a registry that is back.
	raw, _ := os.ReadFile(k.markerPath("job-0000000000c3"))
	os.WriteFile(k.markerPath("job-0000000000c3"), []byte(strings.ReplaceAll(string(raw), down.Registry, srv.Host)), 0o600)
	var log strings.Builder
	pending, kept := k.RetryPending(context.Background(), &log)
	if pending != 3 || kept != 1 || !strings.Contains(log.String(), "ATTESTATION LOST: job-0000000000c1.sigstore.json") || !strings.Contains(log.String(), "does not parse; set aside") {
		t.Fatalf("RetryPending = %d, %d; log:\n%s", pending, kept, log.String())
	}
	if p := PendingJobs(dir); len(p) != 0 {
		t.Fatalf("still pending: %v", p)
	}
	for _, f := range []string{"job-0000000000c1.json.lost", "job-0000000000c2.json.unreadable"} {
		if _, err := os.Stat(filepath.Join(dir, "pending", f)); err != nil {
			t.Errorf("%s not set aside: %v", f, err)
		}
	}
	st, _ := Open(ociRef(t, srv.Host), fastOptions(""))
	if got, err := st.List(context.Background(), Query{}); err != nil || len(got) != 1 || got[0].Tag != good.Labels.Tag() {
		t.Fatalf("List: %+v, %v", got, err)
	}
	if n, _ := filepath.Glob(filepath.Join(dir, "pending", "*.lock")); len(n) != 0 {
		t.Errorf("lock files left: %v", n)
	}
}

// Prepare puts the commit's subject manifest while the job runs, so
// that Keep after the job writes only the job's own manifests; a store
// it cannot reach, or whose commit tag holds something else, is left to
// Keep, which says what is wrong.
func TestPrepare(t *testing.T) {
	key := newTestKey(t)
	for _, tc := range []struct {
		name string
		// setup returns the store, and how many subject PUTs the
		// registry had (-1: it cannot tell).
		setup     func(t *testing.T, commitTag string) (storeref.Ref, Options, func() int)
		wantError string // Keep's, after Prepare; empty: it stores the job
	}{
		{"distribution", func(t *testing.T, _ string) (storeref.Ref, Options, func() int) {
			r, o, _ := registries[0].start(t)
			return r, o, func() int { return -1 }
		}, ""},
		{"a registry that logs its requests", func(t *testing.T, commitTag string) (storeref.Ref, Options, func() int) {
			s := testregistry.InProcess(t, testregistry.Options{})
			return ociRef(t, s.Host), fastOptions(""), func() int {
				n := 0
				for _, r := range s.Requests() {
					if r.Method == http.MethodPut && strings.HasSuffix(r.Path, "/manifests/"+commitTag) {
						n++
					}
				}
				return n
			}
		}, ""},
		{"a registry that is down", func(t *testing.T, _ string) (storeref.Ref, Options, func() int) {
			return ociRef(t, fmt.Sprintf("127.0.0.1:%d", testregistry.FreePort(t))), fastOptions(""), func() int { return -1 }
		}, "connection refused"},
		{"a commit tag that holds another manifest", func(t *testing.T, commitTag string) (storeref.Ref, Options, func() int) {
			s := testregistry.InProcess(t, testregistry.Options{})
			r := ociRef(t, s.Host)
			st, err := Open(r, fastOptions(""))
			if err != nil {
				t.Fatal(err)
			}
			other, _ := commitManifest("https://github.com/someone/else", commitOf("else"))
			oci := st.(*ociStore)
			if err := oci.uploadEmpty(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := oci.pusher.Put(context.Background(), oci.repo.Tag(commitTag), other); err != nil {
				t.Fatal(err)
			}
			return r, fastOptions(""), func() int { return -1 }
		}, "already holds another record"},
		{"a file store (nothing per commit)", func(t *testing.T, _ string) (storeref.Ref, Options, func() int) {
			return fileRef(t), Options{}, func() int { return -1 }
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b, _ := jobOnDisk(t, dir, key, "job-0000000000f1", 10)
			commitTag := CommitTag(b.Labels.Repository, b.Labels.Commit)
			ref, opts, subjectPuts := tc.setup(t, commitTag)
			k := Keeper{Stores: []storeref.Ref{ref}, Options: opts, Dir: dir}
			k.Prepare(context.Background(), b.Labels.Repository, b.Labels.Commit)
			if st, err := Open(ref, opts); err == nil && ref.Kind == storeref.OCI && tc.wantError == "" {
				want, _ := commitManifest(b.Labels.Repository, b.Labels.Commit)
				if !st.(*ociStore).holds(context.Background(), commitTag, want) {
					t.Fatalf("after Prepare, %s does not hold the commit's subject manifest", commitTag)
				}
			}
			before := subjectPuts()
			out := k.Keep(context.Background(), "job-0000000000f1", []Bundle{b})
			switch {
			case tc.wantError == "" && len(Failed(out)) > 0:
				t.Fatalf("Keep after Prepare: %+v", out)
			case tc.wantError != "" && (len(out) != 1 || !strings.Contains(out[0].Error, tc.wantError)):
				t.Fatalf("Keep after Prepare: %+v; want an error saying %q", out, tc.wantError)
			case before >= 0 && subjectPuts() != before:
				t.Fatalf("Keep put the commit's subject again (%d PUTs, %d after Prepare): Prepare saved nothing", subjectPuts(), before)
			case before == 0:
				t.Fatal("Prepare put no subject manifest")
			}
		})
	}
}

// A Keeper with Sessions opens each store once: the push after the job
// reuses what the preparation opened (no second ping, no token
// exchange, no second look for the empty blob); without Sessions, the
// push opens the store anew.
func TestSessionsShareTheStore(t *testing.T) {
	key := newTestKey(t)
	for _, tc := range []struct {
		name     string
		sessions *Sessions
		reopens  bool // Keep pings the registry again
	}{
		{"with sessions", &Sessions{}, false},
		{"without", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: "s3cret-push-pass"})
			dir := t.TempDir()
			b, _ := jobOnDisk(t, dir, key, "job-0000000000e1", 10)
			k := Keeper{Stores: []storeref.Ref{ociRef(t, s.Host)}, Options: fastOptions(s.AuthFile(t, "", "")), Dir: dir, Sessions: tc.sessions}
			k.Prepare(context.Background(), b.Labels.Repository, b.Labels.Commit)
			before := len(s.Requests())
			if out := k.Keep(context.Background(), "job-0000000000e1", []Bundle{b}); len(Failed(out)) > 0 {
				t.Fatalf("Keep: %+v", out)
			}
			pings, emptyLooks := 0, 0
			for _, r := range s.Requests()[before:] {
				switch {
				case r.Path == "/v2/":
					pings++
				case strings.HasSuffix(r.Path, "/blobs/"+digestOf(emptyJSON)):
					emptyLooks++
				}
			}
			if (pings > 0) != tc.reopens || (!tc.reopens && emptyLooks != 0) {
				t.Fatalf("Keep after Prepare: %d pings (a ping again: %v), %d looks for the empty blob", pings, tc.reopens, emptyLooks)
			}
		})
	}
}
