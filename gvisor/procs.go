package gvisor

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/internal/paths"
)

// killProcessesUsing SIGKILLs every host process whose command line names
// dir: runsc's sandbox, gofer and exec processes carry --root=<dir>/runsc.
// It catches processes of a job whose runsc state was never written (an
// airlock killed in the middle of runsc create).
func killProcessesUsing(dir string) {
	needle := []byte(dir + "/")
	self := os.Getpid()
	for round := 0; round < 20; round++ {
		found := false
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil || !bytes.Contains(cmdline, needle) {
				continue
			}
			found = true
			unix.Kill(pid, unix.SIGKILL)
		}
		if !found {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unmountUnder lazily unmounts anything still mounted below dir, deepest
// first, so the directory can be removed.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && paths.Below(fields[4], dir) {
			mounts = append(mounts, fields[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		unix.Unmount(mounts[i], unix.MNT_DETACH)
	}
}
