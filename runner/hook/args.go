package hook

import (
	"fmt"
	"strings"

	"github.com/airlock-ci/airlock/internal/shlex"
)

// The runner hands a command line over cut at single spaces: a step's
// arguments (ScriptStepArgs: arguments.Split(' '), empty pieces kept) and
// a container's command (HookContainer: the same, empty pieces dropped,
// a Docker action's args: written as ` "a" "b"` first). Quotes stay
// inside the pieces. The reference hooks join the pieces with spaces
// again and split the result shell-style (internal/shlex).

// maxArgs bounds a command line the hook splits (Linux takes at most
// 128 KiB in one argument).
const maxArgs = 256 << 10

// Args is the argv the runner meant by the pieces it sent.
func Args(pieces []string) ([]string, error) {
	line := strings.Join(pieces, " ")
	if len(line) > maxArgs {
		return nil, fmt.Errorf("longer than %d bytes", maxArgs)
	}
	return shlex.Split(line)
}
