// Package textsafe makes text from a job safe to show on a log line or a
// terminal: no control character (a newline would start a line the runner
// reads as a workflow command, an escape would rewrite the terminal) and
// no bidirectional override (it would reorder what a reviewer reads).
//
// Layer 0: the bottom (see internal/layers); imports nothing of airlock's.
package textsafe

import (
	"io"
	"strings"
	"unicode/utf8"
)

// Control reports a rune that must not reach a log or a terminal as is:
// C0 and C1 controls, DEL, line and paragraph separators, bidi overrides
// and isolates.
func Control(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// Line shows every Control rune of s as '?', so s stays one line.
func Line(s string) string {
	return strings.Map(func(r rune) rune {
		if Control(r) {
			return '?'
		}
		return r
	}, s)
}

// Lines is Line that keeps newlines and tabs, for multi-line output.
func Lines(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && Control(r) {
			return '?'
		}
		return r
	}, s)
}

// Clip bounds s to n bytes and marks the cut with mark (added after the
// kept bytes): the one place text is cut short. It never cuts a UTF-8
// character in half: a cut that would fall inside one falls before it.
// Bytes that are not UTF-8 are kept as they are (cut where they fall).
func Clip(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	i := n
	// s[n] continues a character that began at most three bytes before.
	for back := 0; i > 0 && back < utf8.UTFMax-1 && !utf8.RuneStart(s[i]); back++ {
		i--
	}
	if !utf8.RuneStart(s[i]) {
		i = n // no character begins near the cut: not UTF-8 there
	}
	return s[:i] + mark
}

// Writer returns a writer that writes through Lines: control characters
// (terminal escapes, bidi overrides) are replaced, newlines and tabs
// kept. For reports that show what a job wrote.
func Writer(w io.Writer) io.Writer { return linesWriter{w} }

type linesWriter struct{ w io.Writer }

func (s linesWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, Lines(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
