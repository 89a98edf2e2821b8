package doclinks

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// This file reads Markdown as far as the link check needs: where the
// links are, and which anchors a page's headings have. Not a Markdown
// parser: CommonMark's rules for fences, code spans, inline links,
// reference definitions and headings, and GitHub's for anchors.

// A link is a link's or image's target, or a reference definition's, as
// written, and the line (from 1) it is on.
type link struct {
	line   int
	target string
}

// fence opens or closes a fenced code block: up to three spaces, then
// three or more backticks or tildes.
var fence = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")

// blankFences returns src with every line of its fenced code blocks
// (fences included) made empty, so that offsets move but lines do not:
// nothing in a code block is a link or a heading. A block left open runs
// to the end, as in CommonMark.
func blankFences(src string) string {
	lines := strings.Split(src, "\n")
	open := ""
	for i, l := range lines {
		m := fence.FindStringSubmatch(l)
		switch {
		// A backtick fence's info string holds no backtick.
		case open == "" && m != nil && !(m[1][0] == '`' && strings.Contains(l[len(m[0]):], "`")):
			open = m[1]
		// It closes with the same character, at least as many, and nothing after.
		case open != "" && m != nil && m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(l[len(m[0]):]) == "":
			open = ""
		case open == "":
			continue
		}
		lines[i] = ""
	}
	return strings.Join(lines, "\n")
}

// paragraphBreak ends a code span's search: a span never holds a blank
// line.
var paragraphBreak = regexp.MustCompile(`\n[ \t]*\n`)

// blankCodeSpans returns src with every code span replaced by spaces,
// newlines kept: a span opens with a run of backticks and closes with the
// next run of the same length, also on a later line of the paragraph. A
// run that none closes is literal text.
func blankCodeSpans(src string) string {
	b := []byte(src)
	for i := 0; i < len(b); {
		if b[i] != '`' || (i > 0 && b[i-1] == '\\') {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		end := -1
		rest := string(b[i+n:])
		if p := paragraphBreak.FindStringIndex(rest); p != nil {
			rest = rest[:p[0]]
		}
		for j := 0; j < len(rest); {
			if rest[j] != '`' {
				j++
				continue
			}
			k := j
			for k < len(rest) && rest[k] == '`' {
				k++
			}
			if k-j == n {
				end = i + n + k
				break
			}
			j = k
		}
		if end < 0 {
			i += n
			continue
		}
		for ; i < end; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	return string(b)
}

// refDefinition is a reference definition, "[id]: target": up to three
// spaces before it, and not a footnote ("[^1]: ...").
var refDefinition = regexp.MustCompile(`(?m)^ {0,3}\[([^\]^][^\]]*)\]:[ \t]*(<[^>\n]*>|\S+)`)

// links returns the targets of src's inline links and images and of its
// reference definitions, in order, leaving out what is in fenced code
// blocks and code spans.
func links(src string) []link {
	s := blankCodeSpans(blankFences(src))
	lineAt := func(off int) int { return strings.Count(s[:off], "\n") + 1 }
	var out []link
	for _, m := range refDefinition.FindAllStringSubmatchIndex(s, -1) {
		out = append(out, link{lineAt(m[4]), strings.Trim(s[m[4]:m[5]], "<>")})
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '[' || (i > 0 && s[i-1] == '\\') {
			continue
		}
		end := closingBracket(s, i)
		if end < 0 || end+1 >= len(s) || s[end+1] != '(' {
			continue
		}
		if target, at, ok := destination(s, end+2); ok {
			out = append(out, link{lineAt(at), target})
		}
	}
	slices.SortStableFunc(out, func(a, b link) int { return a.line - b.line })
	return out
}

// closingBracket is the offset of the ']' that closes the '[' at open
// (brackets nest; a backslash escapes one), or -1 when none does before
// a blank line.
func closingBracket(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '[':
			depth++
		case ']':
			if depth--; depth == 0 {
				return i
			}
		case '\n':
			next, _, _ := strings.Cut(s[i+1:], "\n")
			if strings.TrimSpace(next) == "" {
				return -1
			}
		}
	}
	return -1
}

// destination reads an inline link's "(target "title")" from just after
// its '(' at i: the target (without angle brackets), where it starts, and
// whether what follows the target closes the link.
func destination(s string, i int) (target string, at int, ok bool) {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	at = i
	if i < len(s) && s[i] == '<' {
		end := strings.IndexAny(s[i+1:], ">\n")
		if end < 0 || s[i+1+end] != '>' {
			return "", 0, false
		}
		target, i = s[i+1:i+1+end], i+end+2
	} else {
		depth := 0
	scan:
		for ; i < len(s); i++ {
			switch c := s[i]; {
			case c == '\\':
				i++
			case c == '(':
				depth++
			case c == ')' && depth == 0, c <= ' ':
				break scan
			case c == ')':
				depth--
			}
		}
		target = s[at:min(i, len(s))]
	}
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	if i < len(s) && strings.IndexByte(`"'(`, s[i]) >= 0 {
		closer := map[byte]byte{'"': '"', '\'': '\'', '(': ')'}[s[i]]
		end := strings.IndexByte(s[i+1:], closer)
		if end < 0 {
			return "", 0, false
		}
		i += end + 2
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
			i++
		}
	}
	return target, at, i < len(s) && s[i] == ')'
}

var (
	// atxHeading is "# text", up to six '#', up to three spaces before.
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*))?$`)
	// closingHashes is an ATX heading's optional closing sequence.
	closingHashes = regexp.MustCompile(`(?:^|[ \t]+)#+[ \t]*$`)
	// setextUnderline makes the line above it a heading.
	setextUnderline = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	// notParagraph starts a line that cannot be a setext heading's text:
	// a list item, a quote, a table row, an ATX heading, indented code.
	notParagraph = regexp.MustCompile(`^(?: {0,3}(?:[-*+][ \t]|\d+[.)][ \t]|>|\||#)| {4}|\t)`)
)

// headings returns the text of src's headings (ATX and setext), in
// order, leaving out what is in fenced code blocks.
func headings(src string) []string {
	var out []string
	lines := strings.Split(blankFences(src), "\n")
	for i, l := range lines {
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			out = append(out, strings.TrimSpace(closingHashes.ReplaceAllString(m[1], "")))
			continue
		}
		if !setextUnderline.MatchString(l) {
			continue
		}
		// The paragraph above, if there is one, is the heading's text.
		start := i
		for start > 0 && strings.TrimSpace(lines[start-1]) != "" {
			start--
		}
		para := slices.Clone(lines[start:i])
		if len(para) > 0 && !slices.ContainsFunc(para, func(p string) bool {
			return notParagraph.MatchString(p) || setextUnderline.MatchString(p)
		}) {
			for j := range para {
				para[j] = strings.TrimSpace(para[j])
			}
			out = append(out, strings.Join(para, " "))
		}
	}
	return out
}

var (
	// inlineLink is a link or image in a heading: its text stays.
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// htmlTag is dropped from a heading's text.
	htmlTag = regexp.MustCompile(`<[^>]*>`)
)

// plain is a heading's text as GitHub renders it, before the slug: links
// and images give their text, code spans their content, backslash
// escapes their character, HTML tags nothing.
func plain(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.ReplaceAll(text, "`", "")
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		if text[i] == '\\' && i+1 < len(text) && unicode.IsPunct(rune(text[i+1])) {
			i++
		}
		b.WriteByte(text[i])
	}
	return b.String()
}

// slug is GitHub's anchor for a heading's text, before duplicates are
// told apart: lowercase; every character that is not a letter, a digit,
// a mark, a space, a hyphen or an underscore removed; each space a
// hyphen.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(plain(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsNumber(r), unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of src's headings, in order, as GitHub
// makes them (github-slugger): a slug already taken gets "-1", "-2", ...
// after it, the first of those not taken.
func anchors(src string) []string {
	taken := map[string]int{}
	var out []string
	for _, h := range headings(src) {
		base := slug(h)
		s := base
		for _, ok := taken[s]; ok; _, ok = taken[s] {
			taken[base]++
			s = fmt.Sprintf("%s-%d", base, taken[base])
		}
		taken[s] = 0
		out = append(out, s)
	}
	return out
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Known limits", "known-limits"},
		{"`airlock run`: the manual", "airlock-run-the-manual"},
		{"JSON result (`--json`, `--result FILE`)", "json-result---json---result-file"},
		{"Per step, with action.yml", "per-step-with-actionyml"},
		{"Egress: the network gateway", "egress-the-network-gateway"},
		{"`internalParameters`: what the runner's side set", "internalparameters-what-the-runners-side-set"},
		{"runner/egress and gvisor/monitor", "runneregress-and-gvisormonitor"},
		{"Organisation ∧ repository", "organisation--repository"},
		{"snake_case stays, *emphasis* goes", "snake_case-stays-emphasis-goes"},
		{"See [the docs](docs/run.md) and ![logo](logo.png)", "see-the-docs-and-logo"},
		{"A <code>tag</code> and a \\# hash", "a-tag-and-a--hash"},
		{"1. Cold start: `airlock run -- true`", "1-cold-start-airlock-run----true"},
		{"Ünïcode Ärger", "ünïcode-ärger"},
		{"Emoji 🚀 go", "emoji--go"},
	} {
		if got := slug(c.heading); got != c.want {
			t.Errorf("slug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
}

func TestAnchors(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"levels and closing hashes", "# Title\n\ntext\n\n## Part one ##\n###### Six\n####### seven is not one\n", []string{"title", "part-one", "six"}},
		{"duplicates", "## Limits\n## Limits\n### Limits\n", []string{"limits", "limits-1", "limits-2"}},
		{"a duplicate's suffix already taken", "## Foo\n## Foo\n## Foo 1\n## Foo-1\n", []string{"foo", "foo-1", "foo-1-1", "foo-1-2"}},
		{"fenced code is no heading", "## Real\n\n```sh\n# a comment\n```\n~~~\n# another\n~~~\n## Real\n", []string{"real", "real-1"}},
		{"setext", "Title\n=====\n\nPart\n----\n\nTwo\nlines\n---\n\n- item\n---\n\n| a |\n|---|\n\n---\n", []string{"title", "part", "two-lines"}},
		{"indented four is not a heading", "    # code\n#hashtag\n", nil},
		{"empty heading", "#\n## \n", []string{"", "-1"}},
	} {
		if got := anchors(c.src); !slices.Equal(got, c.want) {
			t.Errorf("%s: anchors = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestLinks(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []link
	}{
		{"inline", "see [run](docs/run.md) and [egress](egress.md#dns).", []link{{1, "docs/run.md"}, {1, "egress.md#dns"}}},
		{"image", "![diagram](img/a.png)", []link{{1, "img/a.png"}}},
		{"title and angle brackets", "[a](x.md \"the title\") [b](<with space.md> 'quoted') [c](y.md (paren))", []link{{1, "x.md"}, {1, "with space.md"}, {1, "y.md"}}},
		{"parentheses in the target", "[w](https://en.wikipedia.org/wiki/Go_(language))", []link{{1, "https://en.wikipedia.org/wiki/Go_(language)"}}},
		{"image inside a link", "[![badge](badge.svg)](https://ci.example/x)", []link{{1, "https://ci.example/x"}, {1, "badge.svg"}}},
		{"nested brackets in the text", "[see [1]](notes.md)", []link{{1, "notes.md"}}},
		{"link text over two lines", "a [long\nname](far.md) b", []link{{2, "far.md"}}},
		{"reference definitions", "[x][id]\n\n[id]: docs/x.md\n   [other]: <https://example.com/a b> \"t\"\n[^1]: a footnote\n", []link{{3, "docs/x.md"}, {4, "https://example.com/a b"}}},
		{"code span", "`[no](a.md)` but [yes](b.md) and ``[no](`c`.md)``", []link{{1, "b.md"}}},
		{"code span across lines", "run `airlock trust diff --base REV\n[--head REV](x)` here; [yes](y.md)", []link{{2, "y.md"}}},
		{"unclosed backtick is text", "a ` tick and [yes](y.md)\n\npara", []link{{1, "y.md"}}},
		{"fenced code", "```md\n[no](a.md)\n```\n[yes](b.md)\n~~~~\n[no](c.md)\n~~~\n~~~~\n[yes](d.md)\n", []link{{4, "b.md"}, {9, "d.md"}}},
		{"a backtick fence with a backtick in its info string is no fence", "``` a ` b\n[yes](a.md)\n", []link{{2, "a.md"}}},
		{"not links", "\\[esc](a.md) [space] (b.md) [flag] [x]\n[unclosed](c.md\n", nil},
		{"line numbers", "one\n\n[a](a.md)\n\n\n[b](b.md)", []link{{3, "a.md"}, {6, "b.md"}}},
	} {
		if got := links(c.src); !slices.Equal(got, c.want) {
			t.Errorf("%s: links = %v, want %v", c.name, got, c.want)
		}
	}
}
