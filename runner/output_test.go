package runner

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

func TestPrefixWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"whole lines", []string{"a\nb\n"}, "[s] a\n[s] b\n"},
		{"split line", []string{"he", "llo\nwor", "ld"}, "[s] hello\n[s] world\n"},
		{"empty lines", []string{"\n\n"}, "[s] \n[s] \n"},
		{"odd bytes", []string{"\x00\xff\x1b[31mred\n"}, "[s] \x00\xff\x1b[31mred\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			var mu sync.Mutex
			w := newPrefixWriter(&mu, &buf, "[s] ")
			for _, s := range tc.writes {
				w.Write([]byte(s))
			}
			w.Flush()
			if buf.String() != tc.want {
				t.Errorf("got %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

// A line with no newline cannot make the writer hold unbounded memory.
func TestPrefixWriterBoundsPartialLine(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := newPrefixWriter(&mu, &buf, "")
	w.Write([]byte(strings.Repeat("x", 3*maxHeldLine)))
	if len(w.buf) > maxHeldLine {
		t.Errorf("holding %d bytes of a partial line", len(w.buf))
	}
	w.Flush()
	if got := strings.Count(buf.String(), "x"); got != 3*maxHeldLine {
		t.Errorf("lost output: %d of %d bytes", got, 3*maxHeldLine)
	}
}
