package shlex

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The splitting is shlex.js's (npm shlex 3.0.0, what the reference hooks
// use): its own test table, then what the runner sends.
func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		// From shlex 3.0.0's test/test_split.js.
		// posix
		{"x", []string{"x"}},
		{"foo bar", []string{"foo", "bar"}},
		{" foo bar", []string{"foo", "bar"}},
		{" foo bar ", []string{"foo", "bar"}},
		{"foo   bar    bla     fasel", []string{"foo", "bar", "bla", "fasel"}},
		{"x y  z              xxxx", []string{"x", "y", "z", "xxxx"}},
		{"\\x bar", []string{"x", "bar"}},
		{"\\ x bar", []string{" x", "bar"}},
		{"\\ bar", []string{" bar"}},
		{"foo \\x bar", []string{"foo", "x", "bar"}},
		{"foo \\ x bar", []string{"foo", " x", "bar"}},
		{"foo \\ bar", []string{"foo", " bar"}},
		{"foo \"bar\" bla", []string{"foo", "bar", "bla"}},
		{"\"foo\" \"bar\" \"bla\"", []string{"foo", "bar", "bla"}},
		{"\"foo\" bar \"bla\"", []string{"foo", "bar", "bla"}},
		{"\"foo\" bar bla", []string{"foo", "bar", "bla"}},
		{"foo 'bar' bla", []string{"foo", "bar", "bla"}},
		{"'foo' 'bar' 'bla'", []string{"foo", "bar", "bla"}},
		{"'foo' bar 'bla'", []string{"foo", "bar", "bla"}},
		{"'foo' bar bla", []string{"foo", "bar", "bla"}},
		{"blurb foo\"bar\"bar\"fasel\" baz", []string{"blurb", "foobarbarfasel", "baz"}},
		{"blurb foo'bar'bar'fasel' baz", []string{"blurb", "foobarbarfasel", "baz"}},
		{"\"\"", []string{""}},
		{"''", []string{""}},
		{"foo \"\" bar", []string{"foo", "", "bar"}},
		{"foo '' bar", []string{"foo", "", "bar"}},
		{"foo \"\" \"\" \"\" bar", []string{"foo", "", "", "", "bar"}},
		{"foo '' '' '' bar", []string{"foo", "", "", "", "bar"}},
		{"\\\"", []string{"\""}},
		{"\"\\\"\"", []string{"\""}},
		{"\"foo\\ bar\"", []string{"foo\\ bar"}},
		{"\"foo\\\\ bar\"", []string{"foo\\ bar"}},
		{"\"foo\\\\ bar\\\"\"", []string{"foo\\ bar\""}},
		{"\"foo\\\\\" bar\\\"", []string{"foo\\", "bar\""}},
		{"\"foo\\\\ bar\\\" dfadf\"", []string{"foo\\ bar\" dfadf"}},
		{"\"foo\\\\\\ bar\\\" dfadf\"", []string{"foo\\\\ bar\" dfadf"}},
		{"\"foo\\\\\\x bar\\\" dfadf\"", []string{"foo\\\\x bar\" dfadf"}},
		{"\"foo\\x bar\\\" dfadf\"", []string{"foo\\x bar\" dfadf"}},
		{"\\'", []string{"'"}},
		{"'foo\\ bar'", []string{"foo\\ bar"}},
		{"'foo\\\\ bar'", []string{"foo\\\\ bar"}},
		{"\"foo\\\\\\x bar\\\" df'a\\ 'df\"", []string{"foo\\\\x bar\" df'a\\ 'df"}},
		{"\\\"foo", []string{"\"foo"}},
		{"\\\"foo\\x", []string{"\"foox"}},
		{"\"foo\\x\"", []string{"foo\\x"}},
		{"\"foo\\ \"", []string{"foo\\ "}},
		{"foo\\ xx", []string{"foo xx"}},
		{"foo\\ x\\x", []string{"foo xx"}},
		{"foo\\ x\\x\\\"", []string{"foo xx\""}},
		{"\"foo\\ x\\x\"", []string{"foo\\ x\\x"}},
		{"\"foo\\ x\\x\\\\\"", []string{"foo\\ x\\x\\"}},
		{"\"foo\\ x\\x\\\\\"\"foobar\"", []string{"foo\\ x\\x\\foobar"}},
		{"\"foo\\ x\\x\\\\\"\\'\"foobar\"", []string{"foo\\ x\\x\\'foobar"}},
		{"\"foo\\ x\\x\\\\\"\\'\"fo'obar\"", []string{"foo\\ x\\x\\'fo'obar"}},
		{"\"foo\\ x\\x\\\\\"\\'\"fo'obar\" 'don'\\''t'", []string{"foo\\ x\\x\\'fo'obar", "don't"}},
		{"\"foo\\ x\\x\\\\\"\\'\"fo'obar\" 'don'\\''t' \\\\", []string{"foo\\ x\\x\\'fo'obar", "don't", "\\"}},
		{"'foo\\ bar'", []string{"foo\\ bar"}},
		{"'foo\\\\ bar'", []string{"foo\\\\ bar"}},
		{"foo\\ bar", []string{"foo bar"}},
		{":-) ;-)", []string{":-)", ";-)"}},
		{"áéíóú", []string{"áéíóú"}},
		{"hello \\\n world", []string{"hello", "world"}},
		// ansiC
		{"$'x'", []string{"x"}},
		{"$'\\a'", []string{"\u0007"}},
		{"$'\\b'", []string{"\b"}},
		{"$'\\e'", []string{"\u001b"}},
		{"$'\\E'", []string{"\u001b"}},
		{"$'\\f'", []string{"\f"}},
		{"$'\\n'", []string{"\n"}},
		{"$'\\r'", []string{"\r"}},
		{"$'\\t'", []string{"\t"}},
		{"$'\\v'", []string{"\u000b"}},
		{"$'\\\\'", []string{"\\"}},
		{"$'\\''", []string{"'"}},
		{"$'\\\"'", []string{"\""}},
		{"$'\\?'", []string{"?"}},
		{"$'\\79'", []string{"\u00079"}},
		{"$'\\07'", []string{"\u0007"}},
		{"$'\\xfx'", []string{"\u000fx"}},
		{"$'\\xffx'", []string{"ÿx"}},
		{"$'\\xxx'", []string{"\\xxx"}},
		{"$'\\u2603'", []string{"☃"}},
		{"$'\\U2603'", []string{"☃"}},
		{"$'\\ca'", []string{"\u0001"}},
		{"$'\\cA'", []string{"\u0001"}},
		{"$'\\c@'", []string{"\u0000"}},
		{"$'\\c?'", []string{""}},
		{"$'\\\\x30'", []string{"\\x30"}},
		{"x$'y'z", []string{"xyz"}},
		{"\"x\"$'y'\"z\"", []string{"xyz"}},
		{"$'x'\"y\"$'z'", []string{"xyz"}},
		{"x\"$'y'\"z", []string{"x$'y'z"}},
		// locale
		{"$\"x\"", []string{"x"}},
		{"$\"\\\"\"", []string{"\""}},
		{"$\"\\\\\"", []string{"\\"}},
		{"$\"\\x33\"", []string{"\\x33"}},
		{"x$\"y\"z", []string{"xyz"}},
		{"\"x\"$\"y\"\"z\"", []string{"xyz"}},
		{"$\"x\"\"y\"$\"z\"", []string{"xyz"}},
		{"x\"$\"y\"\"z", []string{"x$yz"}},
	} {
		got, err := Split(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Split(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`"open`, `'open`, `trailing\`, `$'open`} {
		if got, err := Split(bad); err == nil {
			t.Errorf("Split(%q) = %q, want an error", bad, got)
		}
	}
}

// Whatever a job writes into its step's arguments, splitting never
// panics, and words quoted the POSIX way come back as they were.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{`"Mona the Octocat"`, `$'\x41\c?'`, `'don'\''t'`, `a\`, `"`, "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		Split(s)
		quoted := "'" + strings.ReplaceAll(s, "'", `'\''`) + "' x"
		got, err := Split(quoted)
		if utf8.ValidString(s) && (err != nil || len(got) != 2 || got[0] != s) {
			t.Errorf("%q: quoted %q splits to %q, %v", s, quoted, got, err)
		}
	})
}
