package gvisor

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/gvisor/monitor"
)

// Every process airlock starts in the sandbox (a step's, the statfs
// helper) is started through the exec shim: runsc's control API creates
// the shim's process, and the shim execve(2)s the program, so that the
// program's start passes the sentry's execve trace point like every
// other exec: its binary, argv, uid and the sha256 of the file that
// actually ran (the sentry hashes the file it opened, not a path airlock
// could re-read after the job swapped it) are in the record. A process
// the control API created directly would not be (no trace point sees
// it).
//
// On amd64 the shim is the machine code of testdata/execshim.S (an
// execvp: FILE with a '/' as it is, else each PATH element of the
// environment it was given; exit 127 "command not found in the
// sandbox", 126 "cannot be executed", on stderr as a shell says it),
// built with:
//
//	as -o execshim.o testdata/execshim.S && objcopy -O binary -j .text execshim.o execshim_amd64.bin
//
// TestExecShimIsItsSource checks the bytes against the source. Elsewhere
// the airlock binary does the same ("exec" of sandboxHelper), at a Go
// start's cost.

// execShimPath is where the shim is mounted inside the sandbox and in
// each of its containers.
const execShimPath = monitor.ExecShimPath

//go:embed execshim_amd64.bin
var execShimCode []byte

// execShimELF is the shim as an executable for this machine, or nil
// where the airlock binary is the shim.
func execShimELF() []byte {
	if runtime.GOARCH != "amd64" {
		return nil
	}
	return tinyELF(execShimCode)
}

// viaShim is argv as the control API must start it: the shim first.
func (s *Sandbox) viaShim(argv []string) []string {
	if s.cfg.unrecorded {
		return argv
	}
	return viaShim(argv)
}

// viaShim is argv started through the shim of this machine.
func viaShim(argv []string) []string {
	shim := []string{execShimPath}
	if runtime.GOARCH != "amd64" {
		shim = []string{initPath, "exec"}
	}
	return append(shim, argv...)
}

// What the shim says of a program it cannot start (as the machine code
// says it).
const (
	notFound    = "command not found in the sandbox"
	notRunnable = "cannot be executed (permission denied or not a program)"
)

// execProgram is the shim where there is no machine code for it: the
// sandbox helper execve(2)s argv, looked up in the PATH of its
// environment, or says why not as the shim does.
func execProgram(argv []string) int {
	if len(argv) == 0 {
		return 127
	}
	file := argv[0]
	if !strings.Contains(file, "/") {
		p, err := exec.LookPath(file)
		if err != nil {
			code, what := 127, notFound
			if errors.Is(err, os.ErrPermission) {
				code, what = 126, notRunnable
			}
			fmt.Fprintf(os.Stderr, "airlock: %s: %s\n", file, what)
			return code
		}
		file = p
	}
	err := unix.Exec(file, argv, os.Environ())
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		fmt.Fprintf(os.Stderr, "airlock: %s: %s\n", argv[0], notFound)
		return 127
	}
	fmt.Fprintf(os.Stderr, "airlock: %s: %s\n", argv[0], notRunnable)
	return 126
}
