package input

import (
	"errors"
	"fmt"
	"testing"
)

// A door spells the input an error is about, wrapped or not; an error
// about no input, or one the door has no name for, reads as it was.
func TestSay(t *testing.T) {
	spell := Spelling{RootFS: "--rootfs"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"spelled", Errorf(RootFS, "the policy sets it"), "--rootfs: the policy sets it"},
		{"wrapped", fmt.Errorf("plan: %w", Errorf(RootFS, "the policy sets it")), "plan: --rootfs: the policy sets it"},
		{"no name for it", Errorf(Memory, "too much"), "the memory limit: too much"},
		{"no input", Error{Err: errors.New("no job")}, "no job"},
		{"not an input error", errors.New("boom"), "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spell.Say(tc.err); got != tc.want {
				t.Errorf("Say = %q, want %q", got, tc.want)
			}
		})
	}
	if got := spell.Of(Memory); got != string(Memory) {
		t.Errorf("Of(Memory) = %q", got)
	}
}
