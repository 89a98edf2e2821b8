package paths

import "testing"

func TestWithinAndBelow(t *testing.T) {
	for _, tc := range []struct {
		p, dir        string
		within, below bool
	}{
		{"/a/b", "/a", true, true},
		{"/a", "/a", true, false},
		{"/a/", "/a", true, false},
		{"/ab", "/a", false, false},
		{"/a/b/../../c", "/a", false, false},
		{"/a/./b", "/a/", true, true},
		{"/x", "/", true, true},
		{"/", "/", true, false},
		{"x", "/", false, false},
		{".git/hooks/pre-commit", ".git/hooks", true, true},
		{".git/hooksx", ".git/hooks", false, false},
		{".git/hooks/../config", ".git/hooks", false, false},
		{"a", ".", true, true},
		{"../a", ".", false, false},
		{".", ".", true, false},
		{"/a", "", false, false},
		{"/a", "a", false, false},
	} {
		if got := Within(tc.p, tc.dir); got != tc.within {
			t.Errorf("Within(%q, %q) = %v", tc.p, tc.dir, got)
		}
		if got := Below(tc.p, tc.dir); got != tc.below {
			t.Errorf("Below(%q, %q) = %v", tc.p, tc.dir, got)
		}
	}
	if !WithinAny("/a", []string{"/b", "/a"}) || WithinAny("/c", []string{"/b", "/a"}) {
		t.Error("WithinAny")
	}
	if !BelowAny("/a/x", []string{"/b", "/a"}) || BelowAny("/a", []string{"/a"}) {
		t.Error("BelowAny")
	}
}

// The path forms a server could read as another path are not plain.
func TestPlainURLPath(t *testing.T) {
	for _, tc := range []struct {
		path, escaped string
		plain         bool
	}{
		{"", "", true},
		{"/", "/", true},
		{"/repos/o/r/git/refs", "/repos/o/r/git/refs", true},
		{"/a/b/", "/a/b/", true},
		{"/a b", "/a%20b", true},
		{"//a", "//a", false},
		{"/a//b", "/a//b", false},
		{"/a/./b", "/a/./b", false},
		{"/a/../b", "/a/../b", false},
		{"/a/..", "/a/..", false},
		{"/a/.", "/a/.", false},
		{"/a/b", "/a%2fb", false},
		{"/a/.b", "/a/%2eb", false},
		{"/a\\b", "/a%5cb", false},
		{"/a\\b", "/a\\b", false},
		{"a/b", "a/b", false},
		{".", ".", false},
	} {
		if got := PlainURLPath(tc.path, tc.escaped); got != tc.plain {
			t.Errorf("PlainURLPath(%q, %q) = %v, want %v", tc.path, tc.escaped, got, tc.plain)
		}
	}
}
