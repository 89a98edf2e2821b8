package hook

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/runner"
)

// The actions a step runs are found in its arguments and
// GITHUB_ACTION_PATH, each at the directory the runner's download mark
// names (a ref with a slash, a sub-path action), recorded once per job
// with the digest of its tree, or the reason there is none.
func TestRecordActions(t *testing.T) {
	work := t.TempDir()
	actions := filepath.Join(work, "_actions")
	for dir, file := range map[string]string{
		"actions/checkout/v4":         "dist/index.js",
		"acme/tools/release/v2":       "lint/action.yml",
		"acme/nomark/main":            "index.js",
		"acme/linked/v1-target/inner": "index.js",
		"acme/nested/v3":              "action.yml",
	} {
		os.MkdirAll(filepath.Join(actions, dir, filepath.Dir(file)), 0o755)
		os.WriteFile(filepath.Join(actions, dir, file), []byte("code of "+dir), 0o644)
	}
	os.MkdirAll(filepath.Join(work, "repo/repo/.github/actions/local"), 0o755)
	os.WriteFile(filepath.Join(work, "repo/repo/.github/actions/local/action.yml"), []byte("runs: {using: composite}"), 0o644)
	// A file of an action's own named like a mark is no action.
	os.WriteFile(filepath.Join(actions, "actions/checkout/v4/dist.completed"), nil, 0o644)
	for _, mark := range []string{"actions/checkout/v4", "acme/tools/release/v2", "acme/linked/v1", "acme/nested/v3"} {
		os.WriteFile(filepath.Join(actions, mark+".completed"), []byte("2026-12-01"), 0o644)
	}
	// The runner's action cache, linked in place of the directory.
	os.Symlink(filepath.Join(actions, "acme/linked/v1-target"), filepath.Join(actions, "acme/linked/v1"))

	d := &job{mounts: Mounts{{Source: work, Target: containerWork}}, githubServer: "https://ghe.example.com/"}
	steps := []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"/__w/_actions/actions/checkout/v4/dist/index.js"}, nil},
		{[]string{"-e", "/__w/_temp/x.sh"}, map[string]string{"GITHUB_ACTION_PATH": "/__w/_actions/acme/tools/release/v2/lint"}},
		{[]string{"/__w/_actions/actions/checkout/v4/dist/post.js"}, nil}, // the same action again
		{[]string{"'/__w/_actions/acme/nomark/main/index.js'"}, nil},
		{[]string{"/__w/_actions/acme/linked/v1/inner/index.js"}, nil},
		{[]string{"/__w/_actions/../../etc/passwd", "/__w/_actions/x"}, nil},
		{[]string{"-e", "/__w/_temp/y.sh"}, map[string]string{"GITHUB_WORKSPACE": "/__w/repo/repo", "GITHUB_ACTION_PATH": "/__w/repo/repo/.github/actions/local"}},
		{[]string{"-e", "/__w/_temp/z.sh"}, map[string]string{"GITHUB_WORKSPACE": "/__w/repo/repo", "GITHUB_ACTION_PATH": "/__w/repo/repo/../../_actions/acme/nomark/main"}},
	}
	for _, s := range steps {
		d.recordActions(s.args, s.env, io.Discard)
	}
	var names []string
	for _, a := range d.attest.Actions {
		names = append(names, a.Name)
	}
	// The downloaded ones at the first step, in path order (a nested
	// composite action's too, which no step names), then as named.
	want := []string{"acme/linked@v1", "acme/nested@v3", "acme/tools@release/v2", "actions/checkout@v4", "acme/nomark@main", "./.github/actions/local"}
	if !slices.Equal(names, want) {
		t.Fatalf("actions %q, want %q", names, want)
	}
	byName := map[string]attest.Descriptor{}
	for _, a := range d.attest.Actions {
		byName[a.Name] = a
	}
	root, _ := os.OpenRoot(filepath.Join(actions, "actions/checkout/v4"))
	defer root.Close()
	sum, _ := files.TreeDigest(root)
	a := []attest.Descriptor{byName["actions/checkout@v4"], byName["acme/tools@release/v2"], byName["acme/nomark@main"], byName["acme/linked@v1"]}
	if a[0].Digest["airlockTreeV1"] != sum || a[0].URI != "git+https://ghe.example.com/actions/checkout@v4" || a[0].Annotations["path"] != "/__w/_actions/actions/checkout/v4" {
		t.Errorf("checkout: %+v (digest want %s)", a[0], sum)
	}
	if a[1].Annotations["path"] != "/__w/_actions/acme/tools/release/v2" || len(a[1].Digest) != 1 {
		t.Errorf("a ref with a slash: %+v", a[1])
	}
	if len(a[3].Digest) != 0 || !strings.Contains(a[3].Annotations["digest"], "not taken") {
		t.Errorf("a symlinked action directory was digested: %+v", a[3])
	}
	if l := byName["./.github/actions/local"]; len(l.Digest) != 1 || l.Annotations["path"] != "/__w/repo/repo/.github/actions/local" {
		t.Errorf("a local action: %+v", l)
	}
	// What ran is the mapped directory, not digested: the reference's
	// digest is an annotation, not the dependency's.
	var err error
	if d.images, err = runner.NewImageSource(map[string]string{"alpine@sha256:" + strings.Repeat("ab", 32): "/srv/images/alpine"}, nil, nil, false); err != nil {
		t.Fatal(err)
	}
	d.recordImage("docker://alpine@sha256:" + strings.Repeat("ab", 32))
	d.recordImage("alpine@sha256:" + strings.Repeat("ab", 32))
	n := len(d.attest.Actions)
	if img := d.attest.Actions[n-1]; n != len(want)+1 || len(img.Digest) != 0 || img.Annotations["referenceDigest"] != "sha256:"+strings.Repeat("ab", 32) || img.URI != "file:///srv/images/alpine" || img.Name != "docker://alpine@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image: %+v", d.attest.Actions[n-1])
	}
}
