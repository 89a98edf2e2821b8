package testhost

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// twirp is a call of a results service method with the runtime token.
func twirp(g *GitHub, method, body string) request {
	return request{method: "POST", url: GitHubResults + "twirp/github.actions.results.api.v1." + method, body: body,
		header: map[string]string{"Authorization": "Bearer " + g.Runtime, "Content-Type": "application/json"}}
}

const (
	scope    = `"workflow_run_backend_id":"run-1","workflow_job_run_backend_id":"job-1"`
	artifact = `{` + scope + `,"name":"logs","version":4}`
)

// The results service's answers and refusals, each as twirp has them
// (a status and {"code","msg"}), the way the clients read them.
func TestResultsService(t *testing.T) {
	for _, c := range []struct {
		name   string
		setup  []string // method and body, "|"-separated; each must succeed
		upload bool     // commit a blob at the first signed upload URL
		method string
		body   string
		status int
		want   string // in the answer
	}{
		{"create artifact", nil, false, "ArtifactService/CreateArtifact", artifact, 200,
			`{"ok":true,"signed_upload_url":"https://blob.github.test/artifacts/run-1/job-1/logs.zip?sig=`},
		{"another run's artifact", nil, false, "ArtifactService/CreateArtifact", `{"workflow_run_backend_id":"run-2","workflow_job_run_backend_id":"job-1","name":"x"}`, 403, `"code":"permission_denied"`},
		{"no backend ids", nil, false, "ArtifactService/CreateArtifact", `{}`, 403, `"code":"permission_denied"`},
		{"a name with a slash", nil, false, "ArtifactService/CreateArtifact", `{` + scope + `,"name":"a/b"}`, 400, `"code":"invalid_argument"`},
		{"not JSON", nil, false, "ArtifactService/CreateArtifact", `{`, 400, `"code":"malformed"`},
		{"finalize with no blob", []string{"ArtifactService/CreateArtifact|" + artifact}, false, "ArtifactService/FinalizeArtifact", `{` + scope + `,"name":"logs","size":"3"}`, 412, `"code":"failed_precondition"`},
		{"finalize an artifact never created", nil, false, "ArtifactService/FinalizeArtifact", `{` + scope + `,"name":"logs","size":"3"}`, 404, `"code":"not_found"`},
		{"finalize", []string{"ArtifactService/CreateArtifact|" + artifact}, true, "ArtifactService/FinalizeArtifact", `{` + scope + `,"name":"logs","size":"3","hash":"sha256:00"}`, 200, `{"ok":true,"artifact_id":"1001"}`},
		{"the same name again", []string{"ArtifactService/CreateArtifact|" + artifact, "ArtifactService/FinalizeArtifact|{" + scope + `,"name":"logs","size":"3"}`}, true,
			"ArtifactService/CreateArtifact", artifact, 409, `{"code":"already_exists","msg":"an artifact with this name already exists on the workflow run"}`},
		{"list", []string{"ArtifactService/CreateArtifact|" + artifact, "ArtifactService/FinalizeArtifact|{" + scope + `,"name":"logs","size":"3","hash":"sha256:ab"}`}, true,
			"ArtifactService/ListArtifacts", `{` + scope + `,"id_filter":"1001"}`, 200, `"database_id":"1001","name":"logs","size":"3","created_at":"`},
		{"list by another name", []string{"ArtifactService/CreateArtifact|" + artifact, "ArtifactService/FinalizeArtifact|{" + scope + `,"name":"logs","size":"3"}`}, true,
			"ArtifactService/ListArtifacts", `{` + scope + `,"name_filter":"other"}`, 200, `{"artifacts":[]}`},
		{"download URL", []string{"ArtifactService/CreateArtifact|" + artifact, "ArtifactService/FinalizeArtifact|{" + scope + `,"name":"logs","size":"3"}`}, true,
			"ArtifactService/GetSignedArtifactURL", `{` + scope + `,"name":"logs"}`, 200, `&sp=r"}`},
		{"download URL of an unfinalized artifact", []string{"ArtifactService/CreateArtifact|" + artifact}, true,
			"ArtifactService/GetSignedArtifactURL", `{` + scope + `,"name":"logs"}`, 404, `"code":"not_found"`},
		{"cache miss", nil, false, "CacheService/GetCacheEntryDownloadURL", `{"key":"k","restore_keys":["k-"],"version":"v"}`, 200, `{"ok":false,"signed_download_url":"","matched_key":""}`},
		{"cache lookup with no key", nil, false, "CacheService/GetCacheEntryDownloadURL", `{}`, 200, `{"ok":false,`},
		{"cache reservation", nil, false, "CacheService/CreateCacheEntry", `{"key":"k","version":"v"}`, 200, `{"ok":true,"signed_upload_url":"https://blob.github.test/caches/`},
		{"cache reservation with no version", nil, false, "CacheService/CreateCacheEntry", `{"key":"k"}`, 400, `"code":"invalid_argument"`},
		{"cache reserved twice", []string{`CacheService/CreateCacheEntry|{"key":"k","version":"v"}`}, false, "CacheService/CreateCacheEntry", `{"key":"k","version":"v"}`, 409,
			`{"code":"already_exists","msg":"cache entry with the same key, version, and scope already exists"}`},
		{"cache finalized with no blob", []string{`CacheService/CreateCacheEntry|{"key":"k","version":"v"}`}, false, "CacheService/FinalizeCacheEntryUpload", `{"key":"k","version":"v","size_bytes":"3"}`, 412, `"code":"failed_precondition"`},
		{"cache finalized", []string{`CacheService/CreateCacheEntry|{"key":"k","version":"v"}`}, true, "CacheService/FinalizeCacheEntryUpload", `{"key":"k","version":"v","size_bytes":"3"}`, 200, `{"ok":true,"entry_id":"1001","message":""}`},
		{"cache hit", []string{`CacheService/CreateCacheEntry|{"key":"k","version":"v"}`, `CacheService/FinalizeCacheEntryUpload|{"key":"k","version":"v","size_bytes":"3"}`}, true,
			"CacheService/GetCacheEntryDownloadURL", `{"key":"k","version":"v"}`, 200, `&sp=r","matched_key":"k"}`},
		{"cache hit by a prefix of the key", []string{`CacheService/CreateCacheEntry|{"key":"k-1","version":"v"}`, `CacheService/FinalizeCacheEntryUpload|{"key":"k-1","version":"v","size_bytes":"3"}`}, true,
			"CacheService/GetCacheEntryDownloadURL", `{"key":"k-","version":"v"}`, 200, `"matched_key":"k-1"}`},
		{"cache hit by a restore key", []string{`CacheService/CreateCacheEntry|{"key":"deps-1","version":"v"}`, `CacheService/FinalizeCacheEntryUpload|{"key":"deps-1","version":"v","size_bytes":"3"}`}, true,
			"CacheService/GetCacheEntryDownloadURL", `{"key":"deps-2","restore_keys":["other-","deps-"],"version":"v"}`, 200, `"matched_key":"deps-1"}`},
		{"cache of another version", []string{`CacheService/CreateCacheEntry|{"key":"k","version":"v"}`, `CacheService/FinalizeCacheEntryUpload|{"key":"k","version":"v","size_bytes":"3"}`}, true,
			"CacheService/GetCacheEntryDownloadURL", `{"key":"k","version":"w"}`, 200, `{"ok":false,`},
		{"GET", nil, false, "GET CacheService/GetCacheEntryDownloadURL", `{}`, 404, `"code":"bad_route"`},
		{"another method: the generic answer", nil, false, "ArtifactService/DeleteArtifact", `{}`, 200, `"signed_upload_url":"https://blob.github.test/upload"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, h := newFake(t)
			for _, s := range c.setup {
				m, body, _ := strings.Cut(s, "|")
				w := twirp(g, m, body).do(h)
				if w.Code != 200 {
					t.Fatalf("setup %s: %d %s", m, w.Code, w.Body)
				}
				var resp struct {
					URL string `json:"signed_upload_url"`
				}
				json.Unmarshal(w.Body.Bytes(), &resp)
				if c.upload && resp.URL != "" {
					if w := (request{method: "PUT", url: resp.URL, header: blockBlob, body: "abc"}).do(h); w.Code != 201 {
						t.Fatalf("upload: %d %s", w.Code, w.Body)
					}
				}
			}
			req := twirp(g, c.method, c.body)
			if m, ok := strings.CutPrefix(c.method, "GET "); ok {
				req = twirp(g, m, c.body)
				req.method = "GET"
			}
			w := req.do(h)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.want) {
				t.Errorf("%d %s, want %d with %s", w.Code, w.Body, c.status, c.want)
			}
		})
	}
}

// The service needs the runtime token; what it holds is in the
// accessors.
func TestResultsServiceRecords(t *testing.T) {
	g, h := newFake(t)
	noToken := twirp(g, "ArtifactService/CreateArtifact", artifact)
	delete(noToken.header, "Authorization")
	if w := noToken.do(h); w.Code != 401 {
		t.Fatalf("without the runtime token: %d", w.Code)
	}
	w := twirp(g, "ArtifactService/CreateArtifact", `{`+scope+`,"name":"logs","version":4,"expires_at":"2030-01-02T03:04:05Z"}`).do(h)
	var resp struct {
		URL string `json:"signed_upload_url"`
	}
	json.Unmarshal(w.Body.Bytes(), &resp)
	if w := (request{method: "PUT", url: resp.URL, header: blockBlob, body: "abc"}).do(h); w.Code != 201 {
		t.Fatalf("upload: %d %s", w.Code, w.Body)
	}
	if got := g.Artifacts(); len(got) != 1 || got[0].Finalized || got[0].BlobSize != 3 {
		t.Fatalf("before finalizing: %+v", got)
	}
	twirp(g, "ArtifactService/FinalizeArtifact", `{`+scope+`,"name":"logs","size":"3","hash":"sha256:claimed"}`).do(h)
	got := g.Artifacts()
	want := FakeArtifact{ID: 1001, Name: "logs", RunID: "run-1", JobID: "job-1", Finalized: true, Size: 3, Claimed: "sha256:claimed",
		SHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", BlobSize: 3, ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	if len(got) != 1 {
		t.Fatalf("artifacts: %+v", got)
	}
	want.Created = got[0].Created
	if got[0] != want {
		t.Errorf("artifact\n%+v, want\n%+v", got[0], want)
	}
	if string(g.Blob("logs")) != "abc" || g.Blob("other") != nil {
		t.Errorf("blobs: %q %q", g.Blob("logs"), g.Blob("other"))
	}
}
