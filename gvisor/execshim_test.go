package gvisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/internal/testtool"
)

// The shim's bytes are what its source assembles to.
func TestExecShimIsItsSource(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the machine-code shim is amd64's; elsewhere the airlock binary is the shim")
	}
	for _, tool := range []testtool.Tool{testtool.As, testtool.Objcopy} {
		testtool.Path(t, tool, "testdata/execshim.S is assembled to compare with the shim's bytes")
	}
	dir := t.TempDir()
	obj, bin := filepath.Join(dir, "execshim.o"), filepath.Join(dir, "execshim.bin")
	for _, cmd := range [][]string{{"as", "-o", obj, "testdata/execshim.S"}, {"objcopy", "-O", "binary", "-j", ".text", obj, bin}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(execShimCode, want) {
		t.Errorf("execshim_amd64.bin (%d bytes) is not what testdata/execshim.S assembles to (%d bytes): rebuild it (execshim.go says how)", len(execShimCode), len(want))
	}
}

// A step's own process is on the record, from the sentry's execve trace
// point with the digest of what ran, marked as airlock's: also a step
// that execs nothing more (a builtin-only shell, /bin/true), and a
// command looked up in PATH. A command that is not there, or not
// executable, fails as a shell says it.
func TestStepsOwnProcessIsRecorded(t *testing.T) {
	sb := newTestSandbox(t, nil)
	for name, mode := range map[string]os.FileMode{"data.txt": 0o644, "noshebang": 0o755} {
		if err := os.WriteFile(filepath.Join(sb.cfg.Workspace, name), []byte("echo not run\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		args     []string
		binary   string // host path of what runs (the sandbox's root is the host's)
		exitCode int
		stderr   string
	}{
		{"looked up in PATH", []string{"true"}, "", 0, ""},
		{"a path", []string{"/bin/echo", "hello"}, "/bin/echo", 0, ""},
		{"a shell running builtins only", []string{"/bin/sh", "-c", "echo x > /tmp/f; true"}, "/bin/sh", 0, ""},
		{"not there", []string{"no-such-command-here"}, "", 127, "airlock: no-such-command-here: " + notFound + "\n"},
		{"not executable", []string{"./data.txt"}, "", 126, "airlock: ./data.txt: " + notRunnable + "\n"},
		{"not a program", []string{"./noshebang"}, "", 126, "airlock: ./noshebang: " + notRunnable + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sb.ExecCount()
			var errb bytes.Buffer
			res, err := sb.Exec(context.Background(), Step{Args: tc.args, Stderr: &errb})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.exitCode || errb.String() != tc.stderr {
				t.Fatalf("exit %d, stderr %q; want %d, %q", res.ExitCode, errb.String(), tc.exitCode, tc.stderr)
			}
			own := airlockExecs(waitExecs(t, sb, before, tc.exitCode == 0))
			if tc.exitCode != 0 {
				if len(own) != 0 {
					t.Errorf("a command that did not run is recorded: %+v", own)
				}
				return
			}
			if len(own) != 1 {
				t.Fatalf("want the step's own process once, as airlock's: %+v", own)
			}
			e := own[0]
			bin := tc.binary
			if bin == "" {
				bin, _ = exec.LookPath(tc.args[0])
			}
			if want := fileDigest(t, bin); e.SHA256 != want || strings.Join(e.Argv, " ") != strings.Join(tc.args, " ") || e.UID != 1000 {
				t.Errorf("record %+v; want argv %q, uid 1000, sha256 %s (of %s)", e, tc.args, want, bin)
			}
		})
	}
}

// The sandbox's init starts through the shim too: it is on record as
// airlock's, pid 1, with the digest the sentry took of the reaper it
// exec'd (where there is a reaper; elsewhere the airlock binary is the
// init, started as it is, without a digest).
func TestInitIsRecordedWithItsDigest(t *testing.T) {
	elf := reaperELF()
	if elf == nil {
		t.Skip("no machine-code reaper and shim on " + runtime.GOARCH)
	}
	sb := newTestSandbox(t, nil)
	sum := sha256.Sum256(elf)
	want := hex.EncodeToString(sum[:])
	var inits []monitor.Exec
	for end := time.Now().Add(5 * time.Second); len(inits) == 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, e := range sb.Record().Execs {
			if e.PID == 1 {
				inits = append(inits, e)
			}
		}
	}
	if len(inits) != 1 {
		t.Fatalf("want the init recorded once: %+v", inits)
	}
	if e := inits[0]; e.Binary != reaperPath || e.SHA256 != want || e.Source != monitor.SourceAirlock {
		t.Errorf("init recorded as %+v; want %s, sha256 %s, source %s", e, reaperPath, want, monitor.SourceAirlock)
	}
}

// A step whose program is swapped in the workspace while airlock asks
// for it to run is recorded with the digest of what actually ran: the
// program is now pwd, now id (the host's, copied in), each run's output
// says which ran, and the record's digest must be that one's, however
// the swaps fall. (Not scripts: an interpreter reopens its script by
// path, so what "ran" of a script is another question.)
func TestStepsOwnProcessRaceRecordsWhatRan(t *testing.T) {
	sb := newTestSandbox(t, nil)
	ws := sb.cfg.Workspace
	digests := map[string]string{}
	for name, host := range map[string]string{"A": "/bin/pwd", "B": "/usr/bin/id"} {
		if p, err := exec.LookPath(host); err == nil {
			host = p
		}
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(filepath.Join(ws, name), 1000, 1000)
		digests[name] = fileDigest(t, host)
	}
	// The swapper runs in the background of a step of its own, for the
	// rest of the sandbox's life.
	if _, _, res := sh(t, sb, "cp A prog; (while :; do cp A .a && mv -f .a prog; cp B .b && mv -f .b prog; done) >/dev/null 2>&1 &"); res.ExitCode != 0 {
		t.Fatalf("swapper: exit %d", res.ExitCode)
	}
	seen := map[string]int{}
	for i := 0; i < 40; i++ {
		before := sb.ExecCount()
		var out bytes.Buffer
		res, err := sb.Exec(context.Background(), Step{Args: []string{"./prog"}, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		ran := ""
		switch o := out.String(); {
		case strings.HasPrefix(o, "/"):
			ran = "A"
		case strings.HasPrefix(o, "uid="):
			ran = "B"
		}
		if res.ExitCode != 0 || ran == "" {
			// The swap fell between the shim's lookup and its execve (a
			// file half copied, or not there): a failed start.
			continue
		}
		own := airlockExecs(waitExecs(t, sb, before, true))
		if len(own) != 1 || own[0].SHA256 != digests[ran] {
			t.Fatalf("run %d ran %s (sha256 %s); its record: %+v", i, ran, digests[ran], own)
		}
		seen[ran]++
	}
	t.Logf("runs of each program: %v", seen)
	if seen["A"] == 0 || seen["B"] == 0 {
		t.Fatalf("the swaps did not fall both ways: %v", seen)
	}
}

// waitExecs returns the execs recorded after the first n, waiting a
// moment for the step's own exec event when one is due (the record is
// filled as the sentry's events arrive).
func waitExecs(t *testing.T, sb *Sandbox, n int, due bool) []monitor.Exec {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		execs := sb.Record().Execs[n:]
		if !due || len(airlockExecs(execs)) > 0 || time.Now().After(deadline) {
			return execs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// airlockExecs are the execs airlock started, but its own helper's
// (the statfs after a failed step) and the job's init.
func airlockExecs(execs []monitor.Exec) []monitor.Exec {
	var out []monitor.Exec
	for _, e := range execs {
		if e.Source == monitor.SourceAirlock && e.Binary != initPath && e.Binary != reaperPath {
			out = append(out, e)
		}
	}
	return out
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(fmt.Errorf("digest of %s: %w", path, err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A job cannot make the record name another program's digest: it swaps
// in a program of the same size and mtime at the same inode (the host
// reuses it), the key of the sentry's digest cache, which is therefore
// off. Each run's output says which program ran; its digest must be
// that one's.
func TestDigestCacheCannotBePoisoned(t *testing.T) {
	sb := newTestSandbox(t, nil)
	progs := map[string][]byte{}
	for name, host := range map[string]string{"A": "/bin/pwd", "B": "/usr/bin/id"} {
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		progs[name] = b
	}
	size := max(len(progs["A"]), len(progs["B"])) + 16
	digests := map[string]string{}
	for name, b := range progs {
		padded := append(b, make([]byte, size-len(b))...)
		if err := os.WriteFile(filepath.Join(sb.cfg.Workspace, name), padded, 0o755); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(padded)
		digests[name] = hex.EncodeToString(sum[:])
	}
	same := "touch -d '2020-01-01 00:00:00' p; stat -c '%i %s %Y' p >&2; ./p; rm p"
	before := sb.ExecCount()
	out, errs, res := sh(t, sb, "for i in 1 2 3; do cp A p; "+same+"; cp B p; "+same+"; done")
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, errs)
	}
	var ran []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "uid=") {
			ran = append(ran, "B")
		} else {
			ran = append(ran, "A")
		}
	}
	var recorded []string
	for _, e := range sb.Record().Execs[before:] {
		if e.Binary == sb.cfg.WorkspaceMount+"/p" {
			recorded = append(recorded, e.SHA256)
		}
	}
	if len(recorded) != len(ran) {
		t.Fatalf("%d runs, %d records", len(ran), len(recorded))
	}
	for i, name := range ran {
		if recorded[i] != digests[name] {
			t.Errorf("run %d was %s (sha256 %.12s), recorded as %.12s (keys: %s)", i, name, digests[name], recorded[i], strings.ReplaceAll(errs, "\n", "; "))
		}
	}
}
