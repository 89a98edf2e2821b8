package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/airlock-ci/airlock/"

// layer of every package of the module (its directory).
var layer = map[string]int{
	"internal/files": 0, "internal/gitexec": 0, "internal/paths": 0, "internal/shlex": 0, "internal/textsafe": 0, "internal/leakcheck": 0, "internal/layers": 0, "internal/input": 0, "internal/buildinfo": 0,
	"gvisor/monitor": 1, "policies": 1, "attest": 1, "runner/github": 1, "runner/workspace": 1, "runner/egress/netns": 1,
	"gvisor": 2, "runner/trust": 2, "runner/egress/rules": 2, "runner/credentials": 2,
	"runner/egress/dns": 3, "runner/egress/gateway": 3, "runner/doctor": 3, "internal/testhost": 3, "runner/suggest": 3,
	"runner/egress": 4,
	"runner":        5, "runner/report": 6,
	"runner/hook": 7,
	"cmd/airlock": 8,
}

// notFromCmd are what cmd/airlock reaches only through runner.
var notFromCmd = []string{"runner/egress", "runner/trust", "gvisor/monitor", "runner/workspace"}

// TestImportsGoDown parses every non-test Go file of the module and
// checks each import of another of its packages against the layers.
func TestImportsGoDown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		pkg := filepath.ToSlash(filepath.Dir(rel))
		seen[pkg] = true
		from, ok := layer[pkg]
		if !ok {
			t.Errorf("%s: package %s is in no layer: place it in internal/layers (and docs/architecture.md)", rel, pkg)
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			dep, ok := strings.CutPrefix(path, module)
			if !ok {
				continue
			}
			if to, known := layer[dep]; !known || to >= from {
				t.Errorf("%s imports %s: layer %d may import only lower layers (%s is in layer %d)", rel, dep, from, dep, to)
			}
			if pkg != "cmd/airlock" {
				continue
			}
			for _, banned := range notFromCmd {
				if dep == banned || strings.HasPrefix(dep, banned+"/") {
					t.Errorf("%s imports %s: cmd/airlock reaches it only through runner", rel, dep)
				}
			}
			if dep == "gvisor" && name != "main.go" {
				t.Errorf("%s imports gvisor: only main.go does, for gvisor.Dispatch", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range layer {
		if !seen[pkg] {
			if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
				t.Errorf("layer table names %s, which does not exist", pkg)
			}
		}
	}
}
