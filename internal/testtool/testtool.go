// Package testtool finds what a test needs beyond Go and a minimal
// Debian with git: a program (node, chromium, cosign, crane, curl, ...)
// or the npm client packages of testdata/clients. When it is missing the
// test is skipped with one message: what is missing, why the test needs
// it and the command that installs it. When the tool's AIRLOCK_REQUIRE_
// variable is set (CI sets those of what it installs) the test fails
// with that message instead, so that CI cannot pass by skipping.
//
// Root is not a tool: tests that need it skip on their own.
//
// Layer 0: the bottom, for tests only; imports nothing of airlock's.
package testtool

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// Tool is a program a test runs.
type Tool struct {
	// Names are what it may be called, the usual name first.
	Names []string
	// Install is the command that installs it.
	Install string
	// Require is the variable that turns its absence into a failure.
	Require string
}

// The tools the tests run that a minimal Debian with git lacks.
var (
	Node     = Tool{[]string{"node"}, "apt-get install nodejs", "AIRLOCK_REQUIRE_NODE"}
	NPM      = Tool{[]string{"npm"}, "apt-get install npm", "AIRLOCK_REQUIRE_NPM"}
	Chromium = Tool{[]string{"chromium", "chromium-browser"}, "apt-get install chromium", "AIRLOCK_REQUIRE_CHROMIUM"}
	Cosign   = Tool{[]string{"cosign"}, "GOBIN=/usr/local/bin go install github.com/sigstore/cosign/v3/cmd/cosign@v3.1.3", "AIRLOCK_REQUIRE_COSIGN"}
	Crane    = Tool{[]string{"crane"}, "GOBIN=/usr/local/bin go install github.com/google/go-containerregistry/cmd/crane@v0.22.1", "AIRLOCK_REQUIRE_CRANE"}
	Curl     = Tool{[]string{"curl"}, "apt-get install curl", "AIRLOCK_REQUIRE_CURL"}
	Python3  = Tool{[]string{"python3"}, "apt-get install python3", "AIRLOCK_REQUIRE_PYTHON3"}
	Pip      = Tool{[]string{"pip3"}, "apt-get install python3-pip", "AIRLOCK_REQUIRE_PIP"}
	As       = Tool{[]string{"as"}, "apt-get install binutils", "AIRLOCK_REQUIRE_BINUTILS"}
	Objcopy  = Tool{[]string{"objcopy"}, "apt-get install binutils", "AIRLOCK_REQUIRE_BINUTILS"}
	// containerd's CRI, as a kubelet drives it (deploy/arc's test).
	Containerd = Tool{[]string{"containerd"}, "apt-get install containerd runc containernetworking-plugins", "AIRLOCK_REQUIRE_CRI"}
	Ctr        = Tool{[]string{"ctr"}, "apt-get install containerd", "AIRLOCK_REQUIRE_CRI"}
	Runc       = Tool{[]string{"runc"}, "apt-get install runc", "AIRLOCK_REQUIRE_CRI"}
	Crictl     = Tool{[]string{"crictl"}, "CGO_ENABLED=0 GOBIN=/usr/local/bin go install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0", "AIRLOCK_REQUIRE_CRI"}
	Busybox    = Tool{[]string{"busybox"}, "apt-get install busybox-static", "AIRLOCK_REQUIRE_CRI"}
)

// sbin are the directories of system programs that a root shell's PATH
// may lack (runc is in /usr/sbin).
const sbin = "/usr/local/sbin:/usr/sbin:/sbin"

// ClientsRequire is the variable that turns the absence of the client
// packages (Clients) into a failure.
const ClientsRequire = "AIRLOCK_REQUIRE_CLIENTS"

// Path returns where the first of tool's names found on PATH is. Else it
// skips t, or fails it when tool.Require is set, saying why the test needs
// the tool (why) and how to install it.
func Path(t testing.TB, tool Tool, why string) string {
	t.Helper()
	if p := find(tool, os.Getenv("PATH")+":"+sbin); p != "" {
		return p
	}
	Missing(t, tool.Names[0]+" is not installed (not on PATH)", why, tool.Install, tool.Require)
	return ""
}

// InSandbox is Path for a program a test runs inside a sandbox, which
// sees the host's root: it looks in path, the PATH the sandbox's step has
// (gvisor.DefaultPath, or the step's own), not in the test's.
func InSandbox(t testing.TB, tool Tool, path, why string) string {
	t.Helper()
	if p := find(tool, path); p != "" {
		return p
	}
	Missing(t, fmt.Sprintf("%s is not installed (not in %s, the sandbox's PATH on the host's root)", tool.Names[0], path), why, tool.Install, tool.Require)
	return ""
}

// find returns the first of tool's names that is an executable file in a
// directory of path (a list, as PATH), or "".
func find(tool Tool, path string) string {
	for _, name := range tool.Names {
		for _, dir := range filepath.SplitList(path) {
			if dir == "" || !filepath.IsAbs(dir) {
				continue // as exec.LookPath: no file of the working directory
			}
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	return ""
}

// Clients returns the absolute path of testdata/clients, whose
// node_modules holds the real Actions client packages (npm ci from its
// lockfile, which make test runs). When a dependency of its package.json
// is not installed, it skips t, or fails it when AIRLOCK_REQUIRE_CLIENTS
// is set.
func Clients(t testing.TB, why string) string {
	t.Helper()
	dir, err := repoDir("testdata", "clients")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(raw, &pkg); err != nil || len(pkg.Dependencies) == 0 {
		t.Fatalf("testdata/clients/package.json: no dependencies (%v)", err)
	}
	names := make([]string, 0, len(pkg.Dependencies))
	for name := range pkg.Dependencies {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", name, "package.json")); err != nil {
			Missing(t, "the Actions client packages are not installed (no testdata/clients/node_modules/"+name+")", why,
				"make test, which runs npm ci --prefix testdata/clients --ignore-scripts first", ClientsRequire)
		}
	}
	return dir
}

// Missing skips t, or fails it when the variable require is set (and not
// "0"), with one message: what is missing, why the test needs it and the
// command that installs it.
func Missing(t testing.TB, what, why, install, require string) {
	t.Helper()
	msg := fmt.Sprintf("%s: %s; to install: %s", what, why, install)
	if v := os.Getenv(require); v != "" && v != "0" {
		t.Fatalf("%s=%s, so this test must run: %s", require, v, msg)
	}
	t.Skip(msg)
}

// repoDir is the path below the module's root (the directory of go.mod
// above the working directory, which is a package's during go test).
func repoDir(elem ...string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(append([]string{dir}, elem...)...), nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("testtool: no go.mod above the working directory")
		}
		dir = up
	}
}
