package sample

import (
	"reflect"
	"testing"
)

func TestTopWords(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		n    int
		want []Count
	}{
		{"empty", "", 3, []Count{}},
		{"ties sorted", "b a b a c", 2, []Count{{"a", 2}, {"b", 2}}},
		{"case and punctuation", "Go, go! GO? stop.", 5, []Count{{"go", 3}, {"stop", 1}}},
		{"all", "x y", -1, []Count{{"x", 1}, {"y", 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TopWords(tc.text, tc.n); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("TopWords(%q, %d) = %v, want %v", tc.text, tc.n, got, tc.want)
			}
		})
	}
}
