// Package textsafe makes text from a job safe to show on a log line or a
// terminal: no control character (a newline would start a line the runner
// reads as a workflow command, an escape would rewrite the terminal) and
// no bidirectional override (it would reorder what a reviewer reads).
//
// Layer: the bottom (see internal/layers); imports nothing of airlock's.
package textsafe

import "strings"

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
