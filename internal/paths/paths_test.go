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
