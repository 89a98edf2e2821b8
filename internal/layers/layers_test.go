package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/airlock-ci/airlock/"

// layer of every package of the module (its directory).
var layer = map[string]int{
	"internal/files": 0, "internal/gitexec": 0, "internal/paths": 0, "internal/shlex": 0, "internal/textsafe": 0, "internal/leakcheck": 0, "internal/layers": 0, "internal/doclinks": 0, "internal/input": 0, "internal/buildinfo": 0, "internal/testtool": 0, "internal/testimage": 0, "internal/podlike": 0, "internal/runnersim": 0, "internal/fuzzinput": 0, "attest/storeref": 0,
	"gvisor/monitor": 1, "gvisor/platform": 1, "gvisor/cgroup": 1, "gvisor/quota": 1, "policies": 1, "attest": 1, "runner/github": 1, "runner/workspace": 1, "runner/egress/netns": 1, "runner/egress/refusal": 1, "runner/egress/uploads": 1, "internal/testregistry": 1,
	"gvisor": 2, "attest/store": 2, "internal/testattest": 2, "attest/review": 3, "runner/trust": 2, "runner/egress/rules": 2, "runner/credentials": 2,
	"runner/egress/dns": 3, "runner/egress/gateway": 3, "runner/doctor": 3, "runner/images": 3, "internal/testhost": 3, "runner/suggest": 3, "cmd/airlock-runsc": 3,
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

// docLayer is how a package doc says its layer: a paragraph that starts
// "Layer N:".
var docLayer = regexp.MustCompile(`(?m)^Layer (\d+):`)

// TestPackageDocsSayTheirLayer reads each package's doc comment: it says
// the layer the table gives, once.
func TestPackageDocsSayTheirLayer(t *testing.T) {
	for pkg, want := range layer {
		doc, err := packageDoc(filepath.Join("../..", pkg))
		if err != nil {
			t.Errorf("%s: %v", pkg, err)
			continue
		}
		m := docLayer.FindAllStringSubmatch(doc, -1)
		if len(m) != 1 || m[0][1] != strconv.Itoa(want) {
			t.Errorf("%s: its package doc must say \"Layer %d: ...\" once (internal/layers' table); it says %q", pkg, want, m)
		}
	}
}

// packageDoc is the doc comment of the package in dir (from whichever
// non-test file has one).
func packageDoc(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	doc := ""
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", err
		}
		if pf.Doc != nil {
			doc += pf.Doc.Text()
		}
	}
	if doc == "" {
		return "", fmt.Errorf("no package doc comment")
	}
	return doc, nil
}

// diagramEntry is a package line of the diagram in docs/architecture.md:
// " 5  runner   ..." starts a layer, "    runner/trust   ..." is another
// package of the same layer; description lines are indented further.
var diagramEntry = regexp.MustCompile(`^ ?(\d)?\s{2,3}([a-z][a-z0-9_/…-]*)(\s|$)`)

// TestArchitectureDiagramAgrees reads the package diagram of
// docs/architecture.md: every package is drawn at the table's layer
// (internal/… stands for the internal packages not drawn on their own),
// and the diagram draws no package the table lacks.
func TestArchitectureDiagramAgrees(t *testing.T) {
	b, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/architecture.md: no diagram (a ``` block)")
	}
	drawn := map[string]int{}
	current := -1
	for _, line := range strings.Split(block, "\n") {
		m := diagramEntry.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] != "" {
			current, _ = strconv.Atoi(m[1])
		}
		drawn[m[2]] = current
	}
	for pkg, want := range layer {
		got, ok := drawn[pkg]
		if !ok {
			for d, l := range drawn {
				if prefix, wild := strings.CutSuffix(d, "…"); wild && strings.HasPrefix(pkg, prefix) {
					got, ok = l, true
				}
			}
		}
		switch {
		case !ok:
			t.Errorf("docs/architecture.md does not draw %s (layer %d)", pkg, want)
		case got != want:
			t.Errorf("docs/architecture.md draws %s in layer %d; the table says %d", pkg, got, want)
		}
	}
	for d := range drawn {
		if _, ok := layer[d]; !ok && !strings.HasSuffix(d, "…") {
			t.Errorf("docs/architecture.md draws %s, which the table does not have", d)
		}
	}
}

// maxCmdLines bounds cmd/airlock's own code: flags, wiring and printing.
// What a command does belongs to a package below it.
const maxCmdLines = 1000

// TestCmdStaysThin counts the lines of cmd/airlock's non-test files.
func TestCmdStaysThin(t *testing.T) {
	files, err := filepath.Glob("../../cmd/airlock/*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(b), "\n")
	}
	if lines > maxCmdLines {
		t.Errorf("cmd/airlock has %d lines (at most %d): move what a command does into the package whose job it is", lines, maxCmdLines)
	}
}

// maxFuncLines bounds a function (style.md): a longer one is split into
// steps with names that say what each does.
const maxFuncLines = 100

// TestFunctionsStayShort finds every function of the module's non-test
// code that is longer than maxFuncLines.
func TestFunctionsStayShort(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "../.." && (d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines (at most %d): split it into steps that say what they do", strings.TrimPrefix(p, "../../"), fn.Name.Name, n, maxFuncLines)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// heavy are what the runsc sidecar must not link: airlock's policy,
// attestation and GitHub dependencies, whose initialisation each start
// of a sandbox's process would pay again.
var heavy = []string{"cuelang.org/", "github.com/sigstore/", "github.com/google/go-github/", "github.com/hashicorp/go-retryablehttp", "github.com/google/go-containerregistry/"}

// TestRunscSidecarStaysSlim lists what cmd/airlock-runsc links (go list
// -deps): gvisor and what it needs, never airlock's heavier packages,
// nor any of airlock's own outside gvisor and internal.
func TestRunscSidecarStaysSlim(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "../../cmd/airlock-runsc").Output()
	if err != nil {
		t.Fatalf("go list -deps cmd/airlock-runsc: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"gvisor") {
		t.Fatalf("cmd/airlock-runsc does not link gvisor: %v", deps)
	}
	for _, dep := range deps {
		own, ok := strings.CutPrefix(dep, module)
		if ok && own != "cmd/airlock-runsc" && own != "gvisor" && !strings.HasPrefix(own, "gvisor/") && !strings.HasPrefix(own, "internal/") {
			t.Errorf("cmd/airlock-runsc links %s: the sidecar holds gvisor and what it needs alone", dep)
		}
		for _, h := range heavy {
			if strings.HasPrefix(dep, h) {
				t.Errorf("cmd/airlock-runsc links %s: every gofer and sandbox would initialise it", dep)
			}
		}
	}
}
