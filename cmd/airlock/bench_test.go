package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkWholeProcess times what a user sees: whole processes, side by
// side and interleaved in each iteration, as medians over the
// iterations.
//
//	cold     `airlock run -- true` against the embedded runsc's own
//	         `runsc do true`
//	warm     a syscall-heavy step with a warm Go build cache (go vet and
//	         go test of testdata/sample-pr): airlock run against runsc
//	         do, and natively
//
// Targets (BENCHMARKS.md): cold ≤ 1.25x runsc do, warm ≤ 1.10x runsc
// do; warm against native has none (it depends on the host's platform).
// The airlock binary is this test binary run as airlock (it holds the
// tests too, and starts alike); runsc do is the same binary as runsc.
func BenchmarkWholeProcess(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	goBin := "/usr/local/go/bin/go"
	if _, err := os.Stat(goBin); err != nil {
		b.Skip("needs the Go toolchain at /usr/local/go")
	}
	ws := workspace(b)
	if out, err := exec.Command("cp", "-R", "../../testdata/sample-pr/.", ws).CombinedOutput(); err != nil {
		b.Fatalf("%v %s", err, out)
	}
	exec.Command("chown", "-R", "1000:1000", ws).Run()
	state := stateDir(b)
	runscRoot := b.TempDir()
	// Each runner has a build cache of its own (files one writes as root
	// another could not use), warmed before the timing.
	// (The workspace is /workspace in airlock's sandbox, where /tmp is
	// the sandbox's own.)
	env := func(cache string) []string {
		return []string{"GOCACHE=" + cache, "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local", "HOME=/tmp", "PATH=/usr/local/go/bin:/usr/bin:/bin"}
	}
	const work = "go vet ./... && go test -count=1 ./..."
	empty := workspace(b) // for cold: a workspace the job's tidy-up walks in no time
	airlock := func(ws string, args ...string) func() error {
		return func() error {
			a := append([]string{"run", "-w", ws, "--state-dir", state}, args...)
			cmd := cli(b, a...)
			return quiet(cmd)
		}
	}
	var airlockWarm []string
	for _, e := range env("/workspace/.gocache-airlock") {
		airlockWarm = append(airlockWarm, "-e", e)
	}
	airlockWarm = append(airlockWarm, "--", "sh", "-c", work)
	runscDo := func(dir string, args ...string) func() error {
		return func() error {
			exe, _ := os.Executable()
			cmd := exec.Command(exe, append([]string{"--root=" + runscRoot, "--network=none", "--host-settings=ignore", "do"}, args...)...)
			cmd.Args[0] = "runsc"
			cmd.Dir = dir
			return quiet(cmd)
		}
	}
	native := func() error {
		cmd := exec.Command("/bin/sh", "-c", work)
		cmd.Dir, cmd.Env = ws, env(filepath.Join(ws, ".gocache-native"))
		return quiet(cmd)
	}
	runs := []struct {
		name string
		run  func() error
	}{
		{"cold-airlock", airlock(empty, "--", "true")},
		{"cold-runsc-do", runscDo(empty, "true")},
		{"warm-airlock", airlock(ws, airlockWarm...)},
		{"warm-runsc-do", runscDo(ws, append([]string{"--", "env"}, append(env(filepath.Join(ws, ".gocache-runsc-do")), "sh", "-c", work)...)...)},
		{"warm-native", native},
	}
	// Warm the build caches (and the page cache) once. runsc do keeps
	// what its sandbox writes in memory (--overlay2=all:memory), so its
	// cache is warmed natively, as root, as it runs.
	warmDo := exec.Command("/bin/sh", "-c", work)
	warmDo.Dir, warmDo.Env = ws, env(filepath.Join(ws, ".gocache-runsc-do"))
	for _, run := range []func() error{runs[2].run, func() error { return quiet(warmDo) }, runs[3].run, runs[4].run} {
		if err := run(); err != nil {
			b.Fatalf("warming up: %v", err)
		}
	}
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, r := range runs {
			t := time.Now()
			if err := r.run(); err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			times[r.name] = append(times[r.name], time.Since(t))
		}
	}
	b.StopTimer()
	med := map[string]float64{}
	for name, ts := range times {
		slices.Sort(ts)
		med[name] = float64(ts[len(ts)/2].Microseconds()) / 1000
		b.ReportMetric(med[name], name+"-ms")
	}
	b.ReportMetric(med["cold-airlock"]/med["cold-runsc-do"], "cold-airlock/runsc-do")
	b.ReportMetric(med["warm-airlock"]/med["warm-runsc-do"], "warm-airlock/runsc-do")
	b.ReportMetric(med["warm-airlock"]/med["warm-native"], "warm-airlock/native")
}

// quiet runs cmd with its output kept for the error only.
func quiet(cmd *exec.Cmd) error {
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, lastBytes(out, 600))
	}
	return nil
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
