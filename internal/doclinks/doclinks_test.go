package doclinks

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// TestDocumentationLinks checks every link of README.md and docs/*.md.
func TestDocumentationLinks(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	c := newChecker(os.DirFS(root))
	checked := 0
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(src)) {
			checked++
			if problem := c.check(rel, l.target); problem != "" {
				t.Errorf("%s:%d: link %q: %s", rel, l.line, l.target, problem)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no links found in README.md and docs/*.md: is the repository root right?")
	}
}

// repoRoot is the directory above the test's that holds go.mod.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// checker checks link targets against a repository's files; it reads
// each Markdown page's anchors once.
type checker struct {
	repo    fs.FS
	anchors map[string][]string
}

func newChecker(repo fs.FS) *checker {
	return &checker{repo: repo, anchors: map[string][]string{}}
}

// scheme starts an absolute URL.
var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// lineAnchor is GitHub's anchor for a line (or lines) of a file that is
// not rendered as Markdown.
var lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)

// check says what is wrong with target, a link on the page at from (a
// slash-separated path from the repository root), or "" when nothing is.
func (c *checker) check(from, target string) string {
	if target == "" {
		return "empty target"
	}
	if scheme.MatchString(target) {
		return external(target)
	}
	rest, fragment, hasFragment := strings.Cut(target, "#")
	rest, _, _ = strings.Cut(rest, "?")
	file := from
	if rest != "" {
		p, err := url.PathUnescape(rest)
		if err != nil {
			return fmt.Sprintf("bad escape in the path: %v", err)
		}
		if strings.HasPrefix(p, "/") {
			file = path.Clean(strings.TrimPrefix(p, "/"))
		} else {
			file = path.Join(path.Dir(from), p)
		}
		if file == ".." || strings.HasPrefix(file, "../") {
			return "points outside the repository"
		}
	}
	info, err := fs.Stat(c.repo, file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("%s does not exist", file)
		}
		return err.Error()
	}
	if !hasFragment {
		return ""
	}
	if fragment, err = url.PathUnescape(fragment); err != nil {
		return fmt.Sprintf("bad escape in the anchor: %v", err)
	}
	switch {
	case info.IsDir():
		return fmt.Sprintf("%s is a directory, which has no anchor #%s", file, fragment)
	case !strings.HasSuffix(strings.ToLower(file), ".md"):
		if lineAnchor.MatchString(fragment) {
			return ""
		}
		return fmt.Sprintf("%s is not Markdown: its only anchors are lines (#L10, #L10-L20), not #%s", file, fragment)
	}
	have, ok := c.anchors[file]
	if !ok {
		src, err := fs.ReadFile(c.repo, file)
		if err != nil {
			return err.Error()
		}
		have = anchors(string(src))
		c.anchors[file] = have
	}
	if slices.Contains(have, fragment) {
		return ""
	}
	return fmt.Sprintf("%s has no heading whose anchor is #%s (its anchors: %s)", file, fragment, strings.Join(have, ", "))
}

// external checks a URL without fetching it: http and https need a host,
// mailto an address.
func external(target string) string {
	u, err := url.Parse(target)
	if err != nil {
		return fmt.Sprintf("not a well-formed URL: %v", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		if u.Host == "" || strings.ContainsAny(u.Host, " \t") {
			return "an http(s) URL without a host"
		}
	case "mailto":
		if !strings.Contains(u.Opaque, "@") {
			return "a mailto URL without an address"
		}
	default:
		return fmt.Sprintf("scheme %q: a link is a repository path or an http, https or mailto URL", u.Scheme)
	}
	return ""
}

// TestCheck checks the checker on a small repository of its own.
func TestCheck(t *testing.T) {
	repo := fstest.MapFS{}
	for name, text := range map[string]string{
		"README.md":           "# airlock\n\n## Try it\n\n## Try it\n",
		"docs/run.md":         "# `airlock run`: the manual\n\n## JSON result (`--json`, `--result FILE`)\n\n```\n# not a heading\n```\n",
		"docs/img/a b.png":    "",
		"policies/schema.cue": "package airlock\n",
	} {
		repo[name] = &fstest.MapFile{Data: []byte(text)}
	}
	c := newChecker(repo)
	for _, tc := range []struct {
		from, target, want string // want: "" or a part of the problem
	}{
		{"README.md", "docs/run.md", ""},
		{"README.md", "docs/run.md#json-result---json---result-file", ""},
		{"README.md", "docs/run.md#airlock-run-the-manual", ""},
		{"README.md", "#try-it-1", ""},
		{"README.md", "#try-it-2", "README.md has no heading whose anchor is #try-it-2 (its anchors: airlock, try-it, try-it-1)"},
		{"README.md", "docs/run.md#not-a-heading", "docs/run.md has no heading whose anchor is #not-a-heading"},
		{"README.md", "docs/", ""},
		{"README.md", "docs#x", "docs is a directory"},
		{"README.md", "docs/img/a%20b.png", ""},
		{"README.md", "/policies/schema.cue#L3", ""},
		{"README.md", "policies/schema.cue#fields", "policies/schema.cue is not Markdown"},
		{"README.md", "docs/gone.md", "docs/gone.md does not exist"},
		{"docs/run.md", "../README.md#try-it", ""},
		{"docs/run.md", "run.md", ""},
		{"docs/run.md", "#json-result---json---result-file", ""},
		{"docs/run.md", "#json-result", "docs/run.md has no heading whose anchor is #json-result"},
		{"docs/run.md", "../../etc/passwd", "points outside the repository"},
		{"docs/run.md", "README.md", "docs/README.md does not exist"},
		{"README.md", "https://github.com/airlock-ci/airlock/blob/main/docs/runner.md", ""},
		{"README.md", "mailto:security@example.com", ""},
		{"README.md", "https:///no-host", "without a host"},
		{"README.md", "mailto:nobody", "without an address"},
		{"README.md", "ftp://example.com/x", `scheme "ftp"`},
		{"README.md", "", "empty target"},
	} {
		got := c.check(tc.from, tc.target)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("check(%q, %q) = %q, want %q", tc.from, tc.target, got, tc.want)
		}
	}
}
