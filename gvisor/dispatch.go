package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/runsc/cli/maincli"

	"github.com/airlock-ci/airlock/gvisor/platform"
)

// Dispatch hands the process to runsc when argv[0] names a runsc role
// (runsc, runsc-sandbox, runsc-gofer, ...), or runs the in-sandbox init
// helper when argv[0] is its mount path, or the platform's background
// probe when argv[0] is platform.ProbeArgv0. A gofer of one of airlock's
// bundles first builds its root skeleton (prepareGoferRoot). It returns
// only when neither applies. Call it first thing in main, and in TestMain
// of any test binary that starts sandboxes.
func Dispatch() {
	if len(os.Args) == 0 {
		return
	}
	switch {
	// runsc names its re-executions runsc-sandbox, runsc-gofer, ...; its
	// /proc umounter keeps argv[0] as the path it executed.
	case strings.HasPrefix(filepath.Base(os.Args[0]), "runsc"), os.Args[0] == "/proc/self/exe":
		if os.Args[0] == "runsc-gofer" {
			if err := prepareGoferRoot(os.Args[1:]); err != nil {
				fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
				os.Exit(125)
			}
		}
		maincli.Main()
		os.Exit(0)
	case os.Args[0] == initPath:
		os.Exit(sandboxHelper(os.Args[1:]))
	case os.Args[0] == platform.ProbeArgv0 && len(os.Args) == 2:
		os.Exit(platform.RunBackground(os.Args[1], probeKVMIn, platform.KVMCPUIDGaps))
	}
	quietRunscLogs()
}

// sandboxHelper runs inside the sandbox. With no arguments it is the
// container's init: it reaps orphans forever (background processes of
// finished steps are re-parented to it). "statfs PATH..." prints the free
// space of filesystems as JSON, for disk-limit detection; the other
// commands are the small tools of tools.go.
func sandboxHelper(args []string) int {
	if len(args) > 0 && args[0] == "statfs" {
		return printStatfs(args[1:])
	}
	if len(args) > 0 && args[0] == "exec" {
		return execProgram(args[1:])
	}
	if len(args) > 0 {
		if code, ok := runTool(args[0], args[1:]); ok {
			return code
		}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD)
	// SIGCHLDs coalesce and one can arrive before Notify is in place: the
	// ticker makes sure no zombie waits long.
	tick := time.NewTicker(500 * time.Millisecond)
	for {
		select {
		case <-sigs:
		case <-tick.C:
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// fsUsage is what the statfs helper reports per path.
type fsUsage struct {
	Path  string `json:"path"`
	Total uint64 `json:"total"`
	Free  uint64 `json:"free"`
}

func printStatfs(paths []string) int {
	var out []fsUsage
	for _, p := range paths {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			continue
		}
		out = append(out, fsUsage{Path: p, Total: st.Blocks * uint64(st.Bsize), Free: st.Bavail * uint64(st.Bsize)})
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
