package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// fakeGitHubAddr is the loopback address of these tests' fake GitHub.
const fakeGitHubAddr = "127.0.0.78"

// actions/checkout ran on the host before `airlock run` and persisted
// the job's token: v4 and v5 in .git/config, v6 in a credentials file of
// $RUNNER_TEMP that .git/config includes. The sandbox sees the
// repository's git config with a placeholder, read-only, and git fetch
// still works: the gateway puts the real token back for the GitHub
// server, which sees it. The host's files are left as they were and the
// view is gone after the run.
func TestRunCheckoutToken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, version := range []string{"v4", "v6"} {
		t.Run(version, func(t *testing.T) {
			ws := workspace(t)
			git := func(args ...string) {
				t.Helper()
				cmd := exec.Command("git", append([]string{"-C", ws, "-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("git %v: %v %s", args, err, out)
				}
			}
			git("init", "-q", "-b", "main")
			os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644)
			git("add", "-A")
			git("commit", "-q", "-m", "base")
			gh := testhost.NewGitHub(t, fakeGitHubAddr, ws)
			basic := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + gh.Token))
			header := "AUTHORIZATION: basic " + basic
			var hostFiles []string
			runnerTemp := t.TempDir()
			switch version {
			case "v4":
				git("config", "http.https://github.test/.extraheader", header)
				// A submodule's config, as checkout with submodules: writes it.
				os.MkdirAll(filepath.Join(ws, ".git", "modules", "sub"), 0o755)
				sub := filepath.Join(ws, ".git", "modules", "sub", "config")
				os.WriteFile(sub, []byte("[core]\n\tbare = false\n[http \"https://github.test/\"]\n\textraheader = "+header+"\n"), 0o644)
				hostFiles = append(hostFiles, sub)
			case "v6":
				creds := filepath.Join(runnerTemp, "git-credentials-3f2a1b7c-0d4e-4f5a-9b8c-7d6e5f4a3b2c.config")
				os.WriteFile(creds, []byte("[http \"https://github.test/\"]\n\textraheader = "+header+"\n"), 0o600)
				git("config", "includeIf.gitdir:"+ws+"/.git.path", creds)
				git("config", "includeIf.gitdir:/github/workspace/.git.path", "/github/runner_temp/"+filepath.Base(creds))
				hostFiles = append(hostFiles, creds)
			}
			exec.Command("chown", "-R", "1000:1000", ws).Run()
			hostFiles = append(hostFiles, filepath.Join(ws, ".git", "config"))
			before := map[string][]byte{}
			for _, f := range hostFiles {
				before[f], _ = os.ReadFile(f)
			}
			org := fakeGitHubOrg(t, "github.test")
			state := stateDir(t)
			cmd := cli(t, "run", "-w", ws, "--state-dir", state, "--org", org, "--", "sh", "-c",
				`cat .git/config .git/modules/*/config 2>/dev/null; git fetch -q https://github.test/acme/app.git HEAD && echo fetch=ok; git config user.name agent 2>&1 || echo config-read-only`)
			cmd.Env = append(cmd.Env, "RUNNER_TEMP="+runnerTemp, "SSL_CERT_FILE="+gh.CAFile, "GITHUB_SERVER_URL="+testhost.GitHubServerURL, "GITHUB_API_URL="+testhost.GitHubAPIURL)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("airlock run: %v\n%s", err, out.String())
			}
			got := out.String()
			if strings.Contains(got, gh.Token) || strings.Contains(got, basic) {
				t.Fatalf("the token reached the sandbox:\n%s", got)
			}
			for _, want := range []string{"extraheader = AUTHORIZATION: basic ", "fetch=ok", "config-read-only", "holds the job's token: the sandbox sees it with a placeholder"} {
				if !strings.Contains(got, want) {
					t.Errorf("the run's output lacks %q:\n%s", want, got)
				}
			}
			fetched := false
			for _, s := range gh.Requests() {
				if strings.HasSuffix(s.Path, "git-upload-pack") && s.Authorization == "Basic "+basic && s.Status == 200 {
					fetched = true
				}
			}
			if !fetched {
				t.Errorf("the GitHub server never saw the real token on a fetch: %+v", gh.Requests())
			}
			for f, b := range before {
				if now, _ := os.ReadFile(f); !bytes.Equal(now, b) {
					t.Errorf("the host's %s changed:\n%s", f, now)
				}
			}
			if views, _ := filepath.Glob(filepath.Join(state, "views", "*")); len(views) != 0 {
				t.Errorf("views left behind: %v", views)
			}
		})
	}
}

// fakeGitHubOrg writes an organisation policy that resolves the fake
// GitHub's names to its loopback address and allows host on 443.
func fakeGitHubOrg(t *testing.T, host string) string {
	t.Helper()
	resolve := ""
	for _, n := range testhost.GitHubHosts {
		resolve += fmt.Sprintf("%q: %q\n", n, fakeGitHubAddr)
	}
	return orgPolicy(t, `egress: allow: [{host: "`+host+`", ports: [443]}]
egress: allowCIDRs: ["`+fakeGitHubAddr+`/32"]
egress: resolve: {
`+resolve+`}
`)
}

// A token airlock run passes to the job (--env) is a placeholder in every
// step, the same one each time, and the gateway puts the real token back
// on each step's request to the API: the job's variables are withheld
// again at every step, and a placeholder is never taken for a credential
// of its own (which would send the server a placeholder).
func TestRunTokenEveryStep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	testtool.InSandbox(t, testtool.Curl, gvisor.DefaultPath, "each step calls the fake GitHub's API with curl")
	ws := workspace(t)
	origin, git := testhost.NewRepo(t) // what the fake GitHub serves
	git("init", "-q")
	git("commit", "-q", "--allow-empty", "-m", "base")
	gh := testhost.NewGitHub(t, fakeGitHubAddr, origin)
	steps := filepath.Join(t.TempDir(), "steps.yaml")
	call := `echo "token=$GITHUB_TOKEN"; curl -fsS -H "Authorization: token $GITHUB_TOKEN" https://api.github.test/repos/acme/app`
	os.WriteFile(steps, []byte("steps:\n  - {name: one, run: '"+call+"'}\n  - {name: two, run: '"+call+"'}\n"), 0o644)
	cmd := cli(t, "run", "-w", ws, "--state-dir", stateDir(t), "--org", fakeGitHubOrg(t, "api.github.test"), "--steps", steps, "--env", "GITHUB_TOKEN")
	cmd.Env = append(cmd.Env, "GITHUB_TOKEN="+gh.Token, "SSL_CERT_FILE="+gh.CAFile, "GITHUB_SERVER_URL="+testhost.GitHubServerURL, "GITHUB_API_URL="+testhost.GitHubAPIURL)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("airlock run: %v\n%s", err, out.String())
	}
	got := out.String()
	if strings.Contains(got, gh.Token) {
		t.Fatalf("the token reached the sandbox:\n%s", got)
	}
	placeholders := map[string]bool{}
	for _, line := range strings.Split(got, "\n") {
		if _, ph, ok := strings.Cut(line, "token="); ok {
			placeholders[ph] = true
		}
	}
	if len(placeholders) != 1 || strings.Count(got, `"full_name":"acme/app"`) != 2 {
		t.Errorf("want one placeholder and two answers from the API, got %v:\n%s", placeholders, got)
	}
	real := 0
	for _, s := range gh.Requests() {
		if s.Host == "api.github.test" && s.Authorization == "token "+gh.Token && s.Status == 200 {
			real++
		}
	}
	if real != 2 {
		t.Errorf("the API saw the real token on %d of 2 requests: %+v", real, gh.Requests())
	}
}
