package policies

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo builds a real repository; each commit writes the given files
// (a value starting with "->" makes a symlink) and returns its id.
type gitRepo struct {
	t   *testing.T
	dir string
}

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	r := &gitRepo{t: t, dir: t.TempDir()}
	r.run("init", "-q", "-b", "main")
	return r
}

func (r *gitRepo) run(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", r.dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r *gitRepo) commit(files map[string]string) string {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(r.dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.Remove(p)
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			r.t.Fatal(err)
		}
	}
	r.run("add", "-A")
	r.run("commit", "-q", "--allow-empty", "-m", "c")
	return r.run("rev-parse", "HEAD")
}

// The policy comes from the base commit's objects: the head's loosening
// and the agent's working tree are ignored, and the head's edit is
// reported.
func TestPolicyFromBaseCommit(t *testing.T) {
	r := newGitRepo(t)
	base := r.commit(map[string]string{RepoPolicyPath: "sandbox: limits: pids: 256\n", "main.go": "package main\n"})
	head := r.commit(map[string]string{RepoPolicyPath: "sandbox: limits: pids: 2048\negress: allow: [{host: \"evil.example\"}]\n"})
	// The agent also edits the working tree.
	os.WriteFile(filepath.Join(r.dir, RepoPolicyPath), []byte("egress: default: \"allow\"\n"), 0o644)

	src, err := FromCommit(context.Background(), r.dir, base)
	if err != nil {
		t.Fatal(err)
	}
	if src == nil || src.Commit != base || !strings.Contains(string(src.Data), "pids: 256") {
		t.Fatalf("source = %+v", src)
	}
	eff, err := Load(context.Background(), append(org(t), *src))
	if err != nil {
		t.Fatal(err)
	}
	if eff.Policy.Sandbox.Limits.Pids != 256 || len(eff.Policy.Egress.Allow) != 0 || eff.Policy.Egress.Default != "deny" {
		t.Errorf("effective policy took the head or the working tree: %+v %+v", eff.Policy.Sandbox.Limits, eff.Policy.Egress)
	}
	if eff.Sources[len(eff.Sources)-1].SHA256 == "" {
		t.Error("repository source has no digest")
	}
	change, err := CompareCommits(context.Background(), r.dir, base, head)
	if err != nil {
		t.Fatal(err)
	}
	if !change.Changed {
		t.Errorf("the head's edit of the policy was not reported: %+v", change)
	}
	same, err := CompareCommits(context.Background(), r.dir, base, base)
	if err != nil || same.Changed {
		t.Errorf("unchanged policy reported as changed: %+v %v", same, err)
	}
}

func TestPolicyFromCommitEdgeCases(t *testing.T) {
	r := newGitRepo(t)
	none := r.commit(map[string]string{"README": "x\n"})
	link := r.commit(map[string]string{RepoPolicyPath: "->/etc/passwd"})
	big := r.commit(map[string]string{RepoPolicyPath: strings.Repeat("// padding\n", MaxFileSize/10)})
	for _, tc := range []struct {
		name, rev, wantErr string
		wantNil            bool
	}{
		{name: "no policy in base", rev: none, wantNil: true},
		{name: "symlink in base", rev: link, wantErr: "not a regular file"},
		{name: "oversized", rev: big, wantErr: "at most"},
		{name: "unknown revision", rev: "no-such-branch", wantErr: "resolve no-such-branch"},
		{name: "option-like revision", rev: "--output=/tmp/x", wantErr: "give a commit id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := FromCommit(context.Background(), r.dir, tc.rev)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case tc.wantNil && src != nil:
				t.Errorf("source = %+v, want none", src)
			}
		})
	}
}

// A repository config planted by the agent must not run anything when
// airlock reads the policy.
func TestGitIgnoresPlantedConfig(t *testing.T) {
	r := newGitRepo(t)
	base := r.commit(map[string]string{RepoPolicyPath: "sandbox: limits: pids: 100\n"})
	marker := filepath.Join(t.TempDir(), "ran")
	r.run("config", "core.fsmonitor", "touch "+marker)
	r.run("config", "core.pager", "touch "+marker)
	os.WriteFile(filepath.Join(r.dir, ".git", "hooks", "post-checkout"), []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755)
	if _, err := FromCommit(context.Background(), r.dir, base); err != nil {
		t.Fatal(err)
	}
	if _, err := CompareCommits(context.Background(), r.dir, base, base); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("reading the policy ran code from the repository's config")
	}
}
