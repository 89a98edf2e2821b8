package quota

import (
	"os"
	"testing"

	"github.com/airlock-ci/airlock/internal/podlike"
)

func TestMain(m *testing.M) {
	if err := podlike.Enter(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// Where there are no loop devices (a pod's container) the volume's upper
// layer is a tmpfs of the limit's size and as many inodes: the same
// tests pass, run again without loop devices.
func TestTmpfsMedium(t *testing.T) {
	requireRoot(t)
	if _, ok := podlike.Active(); ok {
		if loopDevices() {
			t.Fatal("loop devices are still seen")
		}
		t.Skip("the run's own")
	}
	podlike.Run(t, "^(TestWritePastTheLimitFails|TestFilesAreBounded|TestMediumIsTmpfs)$", podlike.Limits{NoLoopDevices: true},
		"TestWritePastTheLimitFails", "TestFilesAreBounded", "TestMediumIsTmpfs")
}

// The medium is what the host allows: ext4 on a loop device, tmpfs
// without one.
func TestMediumIsTmpfs(t *testing.T) {
	_, _, v := newVolume(t, 16<<20, nil)
	want := MediumExt4
	if l, _ := podlike.Active(); l.NoLoopDevices {
		want = MediumTmpfs
	}
	if v.Medium() != want {
		t.Fatalf("medium %q, want %q", v.Medium(), want)
	}
}
