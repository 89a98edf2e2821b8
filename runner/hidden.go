package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/policies"
)

// hiddenPaths are the host paths airlock itself uses for this job, found
// from its configuration, which the sandbox must show empty and
// unreadable (gvisor masks them, also from a job running as root): the
// signing key file and its password file, the key's directory when it is
// airlock's (its name says airlock), the organisation policy's
// directories, the shared state (the hook's directory) and the runner's
// installation directory. The state directory gvisor masks itself; a KMS
// key has no file. A path that holds where the workspace appears
// (mountAt) is not hidden: the mask would cover the workspace.
func hiddenPaths(eff *policies.Effective, in Inputs, a AttestConfig, mountAt string) []string {
	var out []string
	add := func(p string) {
		if p == "" {
			return
		}
		abs, err := filepath.Abs(p)
		if err != nil || abs == "/" || paths.WithinAny(abs, out) || (mountAt != "" && paths.Within(mountAt, abs)) {
			return
		}
		out = append(out, abs)
	}
	if k := a.Key; k != "" && !strings.Contains(k, "://") {
		if abs, err := filepath.Abs(k); err == nil && strings.Contains(strings.ToLower(filepath.Base(filepath.Dir(abs))), "airlock") {
			add(filepath.Dir(abs))
		}
		add(k)
	}
	add(a.PasswordFile)
	add(a.StoreAuth)
	if eff != nil {
		for _, s := range eff.Sources {
			if s.Kind == policies.KindOrg && s.Path != "" {
				add(filepath.Dir(s.Path))
			}
		}
	}
	add(in.SharedRoot)
	add(in.RunnerRoot)
	return out
}

// Runner processes whose installation directory holds the runner's
// secrets (.runner, .credentials, .credentials_rsaparams: the RSA key
// that authenticates it to GitHub).
var runnerProcesses = []string{"Runner.Worker", "Runner.Listener"}

// FindRunnerRoot is the installation directory of the GitHub Actions
// runner that pid runs under, found from the runner itself: the nearest
// ancestor of pid whose executable is <root>/bin/Runner.Worker (or
// Runner.Listener), where <root> holds the runner's .runner file. Empty
// when pid runs under no runner (airlock run on a host of its own).
func FindRunnerRoot(pid int) string {
	for depth := 0; pid > 1 && depth < 64; depth++ {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err == nil && slices.Contains(runnerProcesses, filepath.Base(exe)) && filepath.Base(filepath.Dir(exe)) == "bin" {
			root := filepath.Dir(filepath.Dir(exe))
			if fi, err := os.Lstat(filepath.Join(root, ".runner")); err == nil && fi.Mode().IsRegular() {
				return root
			}
		}
		if pid = parentPID(pid); pid <= 0 {
			break
		}
	}
	return ""
}

// parentPID reads the parent of pid from /proc/<pid>/stat (the field
// after the command's closing parenthesis: a command may hold spaces and
// parentheses).
func parentPID(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}
