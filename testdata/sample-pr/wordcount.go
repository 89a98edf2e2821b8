// Package sample is a small project standing in for a repository that a
// coding agent changed in a pull request. airlock runs its CI inside the
// sandbox: see ci.yaml.
package sample

import (
	"sort"
	"strings"
	"unicode"
)

// Count is one word and how often it occurs.
type Count struct {
	Word string
	N    int
}

// TopWords returns the n most frequent words of text, most frequent first,
// ties in alphabetical order. Words are lower-cased runs of letters and
// digits.
func TopWords(text string, n int) []Count {
	counts := map[string]int{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		counts[w]++
	}
	out := make([]Count, 0, len(counts))
	for w, c := range counts {
		out = append(out, Count{w, c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Word < out[j].Word
	})
	if n >= 0 && n < len(out) {
		out = out[:n]
	}
	return out
}
