package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/leakcheck"
	"github.com/airlock-ci/airlock/internal/podlike"
	"github.com/airlock-ci/airlock/internal/testhost"
)

// cliEnv makes the test binary behave as the airlock binary, so tests can
// run it as a separate process (signals, other users).
const cliEnv = "AIRLOCK_CLI_TEST"

func TestMain(m *testing.M) {
	dispatchRoles()
	if err := podlike.Enter(); err != nil {
		panic(err)
	}
	if os.Getenv(cliEnv) != "" {
		os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
	}
	leakcheck.Run(m, cliStateBase, "")
}

// cliStateBase holds the state directories of these tests' jobs.
const cliStateBase = "/run/airlock-test-cli"

func workspace(t testing.TB) string { return testhost.Workspace(t) }

// orgPolicy writes an organisation policy directory holding org.cue
// with body after its package clause.
func orgPolicy(t testing.TB, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "org.cue"), []byte("package airlock\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// repoWorkspace is a workspace holding a git repository with one commit
// on main, owned by the sandbox's user, and a function that runs git in
// it (its output, trimmed).
func repoWorkspace(t *testing.T) (string, func(args ...string) string) {
	t.Helper()
	ws := workspace(t)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", ws, "-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(ws, "README"), []byte("a repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "-A")
	git("commit", "-q", "-m", "base")
	exec.Command("chown", "-R", "1000:1000", ws).Run()
	return ws, git
}
func stateDir(t testing.TB) string { return testhost.StateDir(t, cliStateBase) }

func TestExitCodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ws := workspace(t)
	state := stateDir(t)
	badSteps := filepath.Join(t.TempDir(), "steps.yaml")
	os.WriteFile(badSteps, []byte("steps:\n  - name: x\n"), 0o644)
	goodSteps := filepath.Join(t.TempDir(), "ok.yaml")
	os.WriteFile(goodSteps, []byte("steps:\n  - {name: one, run: echo one}\n  - {name: two, run: exit 5}\n"), 0o644)
	for _, tc := range []struct {
		name      string
		args      []string
		code      int
		stderrHas string
		stdoutHas string
	}{
		{"version", []string{"version"}, 0, "", "gVisor v0.0.0-"},
		{"nothing to run", []string{"run", "-w", ws}, exitUsage, "nothing to run", ""},
		{"unknown flag", []string{"run", "--bogus"}, exitUsage, "unknown flag", ""},
		{"bad size", []string{"run", "-w", ws, "--memory", "lots", "--", "true"}, exitUsage, "--memory", ""},
		{"bad user", []string{"run", "-w", ws, "--user", "root", "--", "true"}, exitUsage, "numeric UID", ""},
		{"steps and command", []string{"run", "-w", ws, "--steps", goodSteps, "--", "true"}, exitUsage, "give one of", ""},
		{"bad steps file", []string{"run", "-w", ws, "--steps", badSteps}, exitUsage, "`run` is empty", ""},
		{"missing workspace", []string{"run", "-w", "/nonexistent/ws", "--", "true"}, exitNoInput, "does not exist", ""},
		{"bad mount point", []string{"run", "-w", ws, "--workspace-mount", "/proc/x", "--", "true"}, exitUsage, "replaced inside the sandbox", ""},
		{"bad platform", []string{"run", "-w", ws, "--state-dir", state, "--platform", "ptrace", "--", "true"}, exitUsage, "use auto, systrap or kvm", ""},
		{"command not in the sandbox", []string{"run", "-w", ws, "--state-dir", state, "--", "no-such-command"}, 127, "command not found in the sandbox", ""},
		{"passing command", []string{"run", "-w", ws, "--state-dir", state, "--", "echo", "hello world"}, 0, "passed", "hello world\n"},
		{"failing command", []string{"run", "-w", ws, "--state-dir", state, "--", "sh", "-c", "exit 7"}, 7, "failed", ""},
		{"failing step", []string{"run", "-w", ws, "--state-dir", state, "--steps", goodSteps}, 5, "two   failed", "[one] one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := execute(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.stderrHas) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.stderrHas)
			}
			if !strings.Contains(out.String(), tc.stdoutHas) {
				t.Errorf("stdout %q lacks %q", out.String(), tc.stdoutHas)
			}
		})
	}
}

func TestRunJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var out, errb bytes.Buffer
	code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--json", "--", "echo", "hi"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res struct {
		Passed bool `json:"passed"`
		Steps  []struct {
			Status      string `json:"status"`
			StdoutBytes int    `json:"stdoutBytes"`
		} `json:"steps"`
		Sandbox struct {
			ID, Runtime string
		} `json:"sandbox"`
		Processes struct {
			Execs []any `json:"execs"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out.String())
	}
	if !res.Passed || len(res.Steps) != 1 || res.Steps[0].StdoutBytes != 3 || res.Sandbox.ID == "" || !strings.Contains(res.Sandbox.Runtime, "gVisor") {
		t.Errorf("result = %+v", res)
	}
	if !strings.Contains(errb.String(), "hi\n") {
		t.Errorf("step output should go to stderr with --json: %q", errb.String())
	}
}

// The step's own process is on the record (issue 24): `airlock run --
// true` records /bin/true itself, with the digest of the host's file (the
// sandbox's root is the host's), its uid, and as airlock's; the step
// counts it.
func TestRunRecordsTheStepsOwnProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var out, errb bytes.Buffer
	if code := execute([]string{"run", "-w", workspace(t), "--state-dir", stateDir(t), "--json", "--", "true"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res struct {
		Steps     []struct{ Processes int } `json:"steps"`
		Processes struct {
			Execs []struct {
				Binary, SHA256, Source string
				UID                    uint32
				Argv                   []string
			} `json:"execs"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out.String())
	}
	host, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	found := false
	for _, e := range res.Processes.Execs {
		if e.Source == "airlock" && strings.Join(e.Argv, " ") == "true" {
			found = e.SHA256 == hex.EncodeToString(sum[:]) && e.UID == 1000
		}
	}
	if !found || len(res.Steps) != 1 || res.Steps[0].Processes < 1 {
		t.Errorf("want true's own exec (sha256 of %s, uid 1000, source airlock) counted in its step: %+v", host, res)
	}
}

// A hostile swap at the door: while `airlock run -- ./prog` runs again and
// again, the host side of the workspace swaps ./prog between pwd and id.
// Each run's record of its own process has the digest of the program
// whose output the run printed, however the swap fell between airlock's
// exec request and the exec.
func TestRunRecordsWhatRanWhileSwapped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ws, state := workspace(t), stateDir(t)
	progs, digests := map[string][]byte{}, map[string]string{}
	for name, host := range map[string]string{"A": "/bin/pwd", "B": "/usr/bin/id"} {
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		progs[name], digests[name] = b, hex.EncodeToString(sum[:])
	}
	prog := filepath.Join(ws, "prog")
	if err := os.WriteFile(prog, progs["A"], 0o755); err != nil {
		t.Fatal(err)
	}
	stop, swapped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(swapped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(ws, ".next")
			os.WriteFile(tmp, progs[[]string{"A", "B"}[i%2]], 0o755)
			os.Rename(tmp, prog)
			time.Sleep(time.Duration(i%7) * time.Millisecond)
		}
	}()
	defer func() { close(stop); <-swapped }()
	seen := map[string]int{}
	for i := 0; i < 12; i++ {
		var out, errb bytes.Buffer
		execute([]string{"run", "-w", ws, "--state-dir", state, "--json", "--", "./prog"}, &out, &errb)
		var res struct {
			Processes struct {
				Execs []struct{ Binary, SHA256, Source string } `json:"execs"`
			} `json:"processes"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, errb.String())
		}
		ran := ""
		switch {
		case strings.Contains(errb.String(), "\n/workspace\n") || strings.HasPrefix(errb.String(), "/workspace\n"):
			ran = "A"
		case strings.Contains(errb.String(), "uid="):
			ran = "B"
		default:
			continue // the swap left no program at the exec: a failed start
		}
		var own []string
		for _, e := range res.Processes.Execs {
			if e.Source == "airlock" && e.Binary != "/.airlock/reaper" { // the job's init is airlock's too
				own = append(own, e.SHA256)
			}
		}
		if len(own) != 1 || own[0] != digests[ran] {
			t.Fatalf("run %d ran %s (sha256 %s), recorded %v", i, ran, digests[ran], own)
		}
		seen[ran]++
	}
	t.Logf("runs of each program: %v", seen)
	if seen["A"]+seen["B"] < 6 {
		t.Fatalf("too few runs started: %v", seen)
	}
}

// cli starts the test binary as the airlock CLI in its own process.
func cli(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = "airlock"
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	return cmd
}

// SIGTERM (or SIGINT) during a step cancels the job: the sandbox is
// destroyed and airlock exits 130, leaving nothing behind.
func TestSignalCancelsAndCleansUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			state := stateDir(t)
			ws := workspace(t)
			cmd := cli(t, "run", "-w", ws, "--state-dir", state, "--", "sh", "-c", "touch started; exec sleep 600")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			startAndWaitFor(t, cmd, filepath.Join(ws, "started"))
			start := time.Now()
			cmd.Process.Signal(sig)
			err := cmd.Wait()
			if cmd.ProcessState.ExitCode() != exitInterrupted {
				t.Errorf("exit %v, want %d; stderr %s", err, exitInterrupted, errb.String())
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("took %s to stop", took)
			}
			if processNamed(state) {
				t.Error("sandbox processes survive cancellation")
			}
			if jobs, _ := filepath.Glob(filepath.Join(state, "jobs", "*")); len(jobs) != 0 {
				t.Errorf("job state survives cancellation: %v", jobs)
			}
		})
	}
}

// processNamed reports whether a process mentioning dir runs.
func processNamed(dir string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(dir+"/")) {
			return true
		}
	}
	return false
}

// Not root: one sentence and exit 77, before anything is created.
func TestNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to another user")
	}
	exe, _ := os.Executable()
	dir, err := os.MkdirTemp("", "airlock-notroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // reachable by uid 1000
	bin := filepath.Join(dir, "airlock")
	src, _ := os.Open(exe)
	dst, _ := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	io.Copy(dst, src)
	src.Close()
	dst.Close()
	cmd := exec.Command(bin, "run", "-w", workspace(t), "--", "true")
	cmd.Env = []string{cliEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Fatalf("could not start as uid 1000: %v", err)
	}
	if cmd.ProcessState.ExitCode() != exitNoPerm || !strings.Contains(string(out), "must run as root") {
		t.Errorf("exit %d, output %q; want %d and a clear sentence", cmd.ProcessState.ExitCode(), out, exitNoPerm)
	}
}

// SIGKILL leaves airlock no chance to clean up: the sandbox outlives it.
// The next airlock run with the same state directory removes it first,
// and keeps what the killed job wrote in its (bounded) workspace out of
// it: the job never ended, so none of its writes lands, and it says so.
func TestNextRunReapsAfterSIGKILL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	state := stateDir(t)
	ws := workspace(t)
	cmd := cli(t, "run", "-w", ws, "--state-dir", state, "--", "sh", "-c", "touch started; exec sleep 600")
	startAndWaitFor(t, cmd, filepath.Join(ws, "started"))
	cmd.Process.Kill()
	cmd.Wait()
	if !processNamed(state) {
		t.Fatal("expected the orphaned sandbox to outlive airlock")
	}
	var out, errb bytes.Buffer
	if code := execute([]string{"run", "-w", workspace(t), "--state-dir", state, "--", "true"}, &out, &errb); code != 0 {
		t.Fatalf("next run: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "cleaned up job") || !strings.Contains(errb.String(), "its workspace writes: discarded: the job never ended") {
		t.Errorf("next run did not report the cleanup and what became of the job's writes: %s", errb.String())
	}
	if _, err := os.Stat(filepath.Join(ws, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed job's write is in its workspace: %v", err)
	}
	if processNamed(state) {
		t.Error("orphaned sandbox survives the next run")
	}
	if jobs, _ := filepath.Glob(filepath.Join(state, "jobs", "*")); len(jobs) != 0 {
		t.Errorf("job state survives: %v", jobs)
	}
}

// The sandbox's own process or its gofer killed from the host during a
// step (an administrator, the OOM killer): the step fails, the result
// and the attestation say which process died and how, and nothing of
// the job is left.
func TestSandboxProcessKilledMidStep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tc := range []struct{ process, role string }{
		{"runsc-sandbox", "the sandbox's process"},
		{"runsc-gofer", "the gofer"},
	} {
		t.Run(tc.process, func(t *testing.T) {
			state, ws, att := stateDir(t), workspace(t), t.TempDir()
			cmd := cli(t, "run", "-w", ws, "--state-dir", state, "--attest-dir", att, "--", "sh", "-c", "touch started; exec sleep 600")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			startAndWaitFor(t, cmd, filepath.Join(ws, "started"))
			victim := 0
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				if b, _ := os.ReadFile(p); bytes.HasPrefix(b, []byte(tc.process+"\x00")) && bytes.Contains(b, []byte(state+"/")) {
					victim, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))
				}
			}
			if victim == 0 {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("no %s process of the job", tc.process)
			}
			syscall.Kill(victim, syscall.SIGKILL)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				cmd.Process.Kill()
				t.Fatal("airlock still runs 60s after its sandbox lost a process")
			}
			want := fmt.Sprintf("%s (pid %d) was killed by signal SIGKILL", tc.role, victim)
			if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(errb.String(), want) {
				t.Errorf("exit %d, stderr:\n%s\nwant a failure saying %q", cmd.ProcessState.ExitCode(), errb.String(), want)
			}
			stmts, _ := filepath.Glob(filepath.Join(att, "*.UNSIGNED.intoto.json"))
			if len(stmts) != 1 {
				t.Fatalf("statements %v", stmts)
			}
			if b, _ := os.ReadFile(stmts[0]); !strings.Contains(string(b), want) {
				t.Errorf("the attestation does not say %q", want)
			}
			if processNamed(state) {
				t.Error("a process of the job is left")
			}
			if jobs, _ := filepath.Glob(filepath.Join(state, "jobs", "*")); len(jobs) != 0 {
				t.Errorf("job state left: %v", jobs)
			}
		})
	}
}

// The sandbox never holds airlock's own stdout or stderr (the runner's
// pipe, say): after a SIGKILL of airlock mid-step, with its sandbox
// still running, whoever reads airlock's output sees it end.
func TestKilledAirlockReleasesItsOutput(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	state := stateDir(t)
	ws := workspace(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := cli(t, "run", "-w", ws, "--state-dir", state, "--", "sh", "-c", "touch started; exec sleep 600")
	cmd.Stdout, cmd.Stderr = w, w
	startAndWaitFor(t, cmd, filepath.Join(ws, "started"))
	w.Close()
	cmd.Process.Kill()
	cmd.Wait()
	t.Cleanup(func() { gvisor.Reap(context.Background(), state) })
	if !processNamed(state) {
		t.Fatal("the orphaned sandbox is gone: the check below would prove nothing")
	}
	got := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("airlock's output pipe is still open 10s after it was killed: the sandbox holds it")
	}
}

// startAndWaitFor starts an airlock process and waits until its step has
// created file, so a signal lands while the step runs.
func startAndWaitFor(t testing.TB, cmd *exec.Cmd, file string) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(file); err == nil {
			return
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("step never started (no %s)", file)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
