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
