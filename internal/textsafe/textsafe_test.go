package textsafe

import "testing"

// Job-derived text cannot start a line of its own (a workflow command) or
// drive the terminal.
func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain path.yml":                      "plain path.yml",
		".github/x\n::stop-commands::t\n.yml": ".github/x?::stop-commands::t?.yml",
		"a\x1b[2Kb\rc":                        "a?[2Kb?c",
		"bidi\u202eevil":                      "bidi?evil",
		"tab\there":                           "tab?here",
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Lines("a\tb\nc\x1b[1Ad"); got != "a\tb\nc?[1Ad" {
		t.Errorf("Lines = %q", got)
	}
}

// Clip keeps at most n bytes and never half a character.
func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		mark string
		want string
	}{
		{"short", 10, "...", "short"},
		{"exactly", 7, "...", "exactly"},
		{"abcdef", 3, "...", "abc..."},
		{"abcdef", 3, "", "abc"},
		{"héllo", 2, "…", "h…"},                   // é is 2 bytes: not cut in half
		{"a😀b", 3, "", "a"},                       // a 4-byte character at the cut
		{"a😀b", 5, "", "a😀"},                      // the character fits
		{"ab\xff\xfe\xfdcd", 4, "", "ab\xff\xfe"}, // not UTF-8: a byte cut
		{"abc", -1, "!", "!"},
	} {
		if got := Clip(tc.s, tc.n, tc.mark); got != tc.want {
			t.Errorf("Clip(%q, %d, %q) = %q, want %q", tc.s, tc.n, tc.mark, got, tc.want)
		}
	}
}
