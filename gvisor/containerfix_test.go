package gvisor

import (
	"strings"
	"testing"
)

// The errors a pod's restrictions cause, as runsc wrote them in a pod on
// containerd's CRI, get the values that lift them; others get nothing.
func TestContainerFix(t *testing.T) {
	for _, tc := range []struct {
		err, want string
	}{
		{"sandbox failed to start: cannot create sandbox: cannot read client sync file: waiting for sandbox to start: EOF (error setting up chroot: pivot_root failed, make sure that the root mount has a parent: operation not permitted)", "forbids pivot_root"},
		{"creating container: cannot create gofer process: gofer: fork/exec /proc/self/exe: operation not permitted", "add CAP_SYS_ADMIN"},
		{"can't run sandbox process in minimal chroot since we don't have CAP_SYS_ADMIN", "add CAP_SYS_ADMIN"},
		{"error setting system registers: invalid argument", ""},
	} {
		got := ContainerFix(tc.err)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("ContainerFix(%q) = %q, want one saying %q", tc.err, got, tc.want)
		}
		if tc.want != "" && !strings.Contains(got, "deploy/arc/seccomp.json") {
			t.Errorf("ContainerFix(%q) = %q: it does not name the profile", tc.err, got)
		}
	}
}
