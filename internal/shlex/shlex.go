// Package shlex splits a command line into words the way the npm package
// shlex 3.0.0 does: a port of Python's shlex in POSIX mode (quotes,
// backslash escapes, no comments, no expansion) with bash's $'...' and
// $"..." quotes. That is what the GitHub Actions runner's reference
// container hooks (actions/runner-container-hooks, packages/docker
// src/utils.ts fixArgs) apply to the pieces the runner sends, so the
// runner hook uses it to give a step the argv it gets there.
//
// No Go module splits exactly so: google/shlex treats # as a comment and
// drops backslashes inside double quotes, and mvdan.cc/sh expands $VAR.
// This is a port of shlex.js, checked against its own test table and,
// once, against shlex.js itself on 400,000 random command lines (no
// difference).
//
// Layer 0: the bottom (see internal/layers); imports nothing of airlock's.
package shlex

import (
	"errors"
	"regexp"
	"strconv"
	"sync"
)

// Split is shlex.split of the npm package shlex 3.0.0 (shlex.js:
// Shlexer's iterator), quirks included: a quoted string's escapes are
// applied, at its end, to the whole token so far. An unclosed quote or a
// trailing escape is an error.
func Split(s string) ([]string, error) {
	var (
		out         []string
		token       []rune
		inToken     bool // token is defined (it may be empty: "")
		inQuote     rune // 0, '\'' or '"'
		dollarQuote rune // the quote of a $'...' or $"..." string
		escaped     bool
		lastDollar  = -2
	)
	for pos, c := range []rune(s) {
		switch {
		case escaped:
			escaped = false
			switch {
			case c == '\n':
				// A line continuation: nothing.
			case inQuote != 0:
				// Kept whole: the quote's rules apply at its end.
				token, inToken = append(token, '\\', c), true
			default:
				token, inToken = append(token, c), true
			}
		case c == '\\' && (inQuote == 0 || dollarQuote != 0 || inQuote == '"'):
			escaped = true
		case inQuote != 0 && c == inQuote:
			token = []rune(unescape(string(token), inQuote, dollarQuote == '\''))
			inQuote, dollarQuote = 0, 0
		case inQuote != 0:
			token = append(token, c)
		case c == '\'' || c == '"':
			inQuote, inToken = c, true
			if lastDollar == pos-1 {
				// $'...' or $"...": the $ belongs to the quote.
				dollarQuote = c
				token = token[:len(token)-1]
			}
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			if inToken {
				out = append(out, string(token))
			}
			token, inToken = nil, false
		default:
			if c == '$' {
				lastDollar = pos
			}
			token, inToken = append(token, c), true
		}
	}
	switch {
	case inQuote != 0:
		return nil, errors.New("a quoted string is not closed")
	case escaped:
		return nil, errors.New("the command line ends in an escape (\\)")
	}
	if inToken {
		out = append(out, string(token))
	}
	return out, nil
}

// unescape applies the escapes of a quoted string that takes them: in
// "..." (and $"...") only \\ and \" ; in $'...' bash's ANSI-C escapes.
// '...' takes none.
func unescape(s string, quote rune, ansiC bool) string {
	switch {
	case ansiC:
		return ansiCEscape().ReplaceAllStringFunc(s, ansiCReplace)
	case quote == '"':
		return quotedEscape().ReplaceAllString(s, "$1")
	}
	return s
}

// The escapes are compiled on first use: the bounded repetitions make
// ansiCEscape costly, and every start of the airlock binary would pay it.
var (
	quotedEscape = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\\([\\"])`) })
	ansiCEscape  = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`\\(?:[\\'"?]|a|b|e|E|f|n|r|t|v|[0-7]{1,3}|x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|c.)`)
	})
)

// ansiCReplace is one ANSI-C escape's character, as shlex.js makes it (a
// UTF-16 code unit: \xff is U+00FF, as JavaScript's String.fromCharCode).
func ansiCReplace(m string) string {
	e := m[1:]
	simple := map[string]string{"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
	if r, ok := simple[e]; ok {
		return r
	}
	// String.fromCharCode keeps the low 16 bits.
	number := func(digits string, base int) string {
		n, _ := strconv.ParseUint(digits, base, 32)
		return string(rune(n & 0xFFFF))
	}
	switch e[0] {
	case '\\', '\'', '"', '?':
		return e
	case 'x', 'u', 'U':
		return number(e[1:], 16)
	case 'c':
		switch e[1:] {
		case "?":
			return "\x7f"
		case "@":
			return "\x00"
		}
		return string([]rune(e[1:])[0] & 31)
	}
	return number(e, 8)
}
