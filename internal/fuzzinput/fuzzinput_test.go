package fuzzinput

import (
	"bytes"
	"testing"
)

func TestReader(t *testing.T) {
	in := []byte{1, 2, 3, 4}
	r := New(in)
	if b := r.Byte(); b != 1 {
		t.Fatalf("Byte = %d", b)
	}
	got := r.Bytes(2)
	if !bytes.Equal(got, []byte{2, 3}) || r.Len() != 1 {
		t.Fatalf("Bytes(2) = %v, %d left", got, r.Len())
	}
	_ = append(got, 9) // must not write into the input
	if in[3] != 4 {
		t.Fatal("appending to Bytes' result wrote into the input")
	}
	for _, tc := range []struct {
		n    int
		want []byte
	}{{5, []byte{4}}, {3, []byte{}}, {-1, []byte{}}} {
		if got := r.Bytes(tc.n); !bytes.Equal(got, tc.want) {
			t.Errorf("Bytes(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if r.Byte() != 0 || r.Len() != 0 {
		t.Error("a used-up input does not give zeros")
	}
}
