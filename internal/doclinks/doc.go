// Package doclinks holds no code: its test checks the links of the
// documentation, README.md and every docs/*.md. Each relative link must
// name a file or directory of the repository, and each #anchor a heading
// of the page it points into, by GitHub's rule for heading anchors. External
// links are not fetched (the tests use no network): they must only be
// well-formed http, https or mailto URLs. Links inside fenced code blocks
// and code spans are not links.
//
// When a page moves or a heading is renamed, this test names every file,
// line and link that still points at the old place.
//
// Layer 0: the bottom, for tests only; imports nothing of airlock's.
package doclinks
