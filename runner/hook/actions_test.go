package hook

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/internal/files"
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
	} {
		os.MkdirAll(filepath.Join(actions, dir, filepath.Dir(file)), 0o755)
		os.WriteFile(filepath.Join(actions, dir, file), []byte("code of "+dir), 0o644)
	}
	for _, mark := range []string{"actions/checkout/v4", "acme/tools/release/v2", "acme/linked/v1"} {
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
	}
	for _, s := range steps {
		d.recordActions(s.args, s.env, io.Discard)
	}
	var names []string
	for _, a := range d.attest.Actions {
		names = append(names, a.Name)
	}
	want := []string{"actions/checkout@v4", "acme/tools@release/v2", "acme/nomark@main", "acme/linked@v1"}
	if !slices.Equal(names, want) {
		t.Fatalf("actions %q, want %q", names, want)
	}
	root, _ := os.OpenRoot(filepath.Join(actions, "actions/checkout/v4"))
	defer root.Close()
	sum, _ := files.TreeDigest(root)
	a := d.attest.Actions
	if a[0].Digest["airlockTreeV1"] != sum || a[0].URI != "git+https://ghe.example.com/actions/checkout@v4" || a[0].Annotations["path"] != "/__w/_actions/actions/checkout/v4" {
		t.Errorf("checkout: %+v (digest want %s)", a[0], sum)
	}
	if a[1].Annotations["path"] != "/__w/_actions/acme/tools/release/v2" || len(a[1].Digest) != 1 {
		t.Errorf("a ref with a slash: %+v", a[1])
	}
	if len(a[3].Digest) != 0 || !strings.Contains(a[3].Annotations["digest"], "not taken") {
		t.Errorf("a symlinked action directory was digested: %+v", a[3])
	}
	d.recordImage("docker://alpine@sha256:" + strings.Repeat("ab", 32))
	d.recordImage("alpine@sha256:" + strings.Repeat("ab", 32))
	if img := d.attest.Actions[len(d.attest.Actions)-1]; len(d.attest.Actions) != 5 || img.Digest["sha256"] != strings.Repeat("ab", 32) || img.URI != "docker://alpine@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image: %+v", d.attest.Actions)
	}
}
