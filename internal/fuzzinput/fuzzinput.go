// Package fuzzinput hands out a fuzz input's bytes to a target that
// decodes them as a program (what to build, which step to take next):
// one byte or n bytes at a time, zeros once the input is used up, so
// that every input decodes to some program.
//
// Layer 0: imports nothing of airlock's.
package fuzzinput

// Reader hands out b's bytes in order.
type Reader struct{ b []byte }

// New reads b.
func New(b []byte) *Reader { return &Reader{b: b} }

// Byte is the next byte, or 0 once the input is used up.
func (r *Reader) Byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// Bytes is the next n bytes, fewer when fewer are left; appending to
// what it returns never writes into the rest of the input.
func (r *Reader) Bytes(n int) []byte {
	n = max(0, min(n, len(r.b)))
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// Len is how many bytes are left.
func (r *Reader) Len() int { return len(r.b) }
