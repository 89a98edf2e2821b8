package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/testhost"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

// BenchmarkWholeProcess times what a user sees: whole processes, side by
// side and interleaved in each iteration, as medians over the
// iterations; each ratio is the median of the iterations' own ratios
// (timings.ratio), with its spread.
//
//	cold     `airlock run -- true` against the embedded runsc's own
//	         `runsc do true`, and both against `runsc do true` of
//	         runsc built alone (the same gVisor, without airlock's
//	         packages: what a stock runsc costs); and airlock without
//	         its runsc sidecar beside it (cold-airlock-self: the gofer
//	         and sandbox start from airlock itself)
//	warm     a syscall-heavy step with a warm Go build cache (go vet and
//	         go test of testdata/sample-pr): airlock run against runsc
//	         do, and natively; and in policy mode, as the hook runs a
//	         step (an organisation policy: the egress gateway, and the
//	         repository's git hooks and config read-only in the sandbox,
//	         so its opens traced for the writes refused there)
//
// Targets (BENCHMARKS.md, issue 38): cold ≤ runsc do + 30 ms or 1.15x,
// whichever is larger; warm ≤ 1.05x runsc do; warm against native ≤ 4x
// where KVM cannot run. The airlock binary is the one make build makes,
// with its runsc sidecar (testhost.MadeBinaries); runsc do is the same
// airlock binary as runsc.
//
// With AIRLOCK_BENCH_BASE naming another airlock binary (a build of the
// base commit: `git worktree add /tmp/base BASE && cd /tmp/base &&
// CGO_ENABLED=0 go build -o /tmp/airlock-base ./cmd/airlock`), its three
// airlock runs are interleaved too, as "...-base", and head/base ratios
// reported: base and head in one run on one host.
func BenchmarkWholeProcess(b *testing.B) {
	w := newWarmStep(b)
	empty := workspace(b) // for cold: a workspace the job's tidy-up walks in no time
	policy := orgPolicy(b, `egress: default: "deny"`+"\n")
	runs := []timedRun{
		{"cold-airlock", w.airlock(empty, "--", "true")},
		{"cold-airlock-self", w.alone().airlock(empty, "--", "true")},
		{"cold-runsc-do", w.runscDo(empty, "true")},
		{"cold-runsc-alone-do", w.runscDoWith(runscAlone(b), empty, "true")},
		{"warm-airlock", w.airlockStep()},
		{"warm-airlock-policy", w.airlockStep("--org", policy)},
		{"warm-runsc-do", w.runscDoStep()},
		{"warm-native", w.native},
	}
	base := os.Getenv("AIRLOCK_BENCH_BASE")
	if base != "" {
		bw := *w
		bw.exe = base
		if err := bw.airlockStep("--org", policy)(); err != nil {
			b.Fatalf("the base binary %s: %v", base, err)
		}
		runs = append(runs,
			timedRun{"cold-airlock-base", bw.airlock(empty, "--", "true")},
			timedRun{"warm-airlock-base", bw.airlockStep()},
			timedRun{"warm-airlock-policy-base", bw.airlockStep("--org", policy)})
	}
	t := interleave(b, runs)
	t.ratio(b, "cold-airlock", "cold-runsc-do", "cold-airlock/runsc-do")
	t.ratio(b, "cold-runsc-do", "cold-runsc-alone-do", "cold-runsc-do/runsc-alone-do")
	t.ratio(b, "cold-airlock", "cold-runsc-alone-do", "cold-airlock/runsc-alone-do")
	t.ratio(b, "cold-airlock", "cold-airlock-self", "cold-airlock/airlock-self")
	b.ReportMetric(t.median("cold-airlock")-t.median("cold-runsc-do"), "cold-airlock-minus-runsc-do-ms")
	t.ratio(b, "warm-airlock", "warm-runsc-do", "warm-airlock/runsc-do")
	t.ratio(b, "warm-airlock", "warm-native", "warm-airlock/native")
	t.ratio(b, "warm-airlock-policy", "warm-runsc-do", "warm-airlock-policy/runsc-do")
	if base != "" {
		for _, r := range []string{"cold-airlock", "warm-airlock", "warm-airlock-policy"} {
			t.ratio(b, r, r+"-base", r+"/base")
		}
		t.ratio(b, "warm-airlock-policy-base", "warm-runsc-do", "warm-airlock-policy-base/runsc-do")
	}
}

// BenchmarkGVisorSettings is gVisor's own tax on the warm step (issue
// 38, item 4): the step through airlock as it ships, and with one of the
// runsc settings airlock controls changed at a time, against runsc do
// and native, interleaved in each iteration. The settings:
//
//	shared-mounts     --file-access-mounts=shared: the workspace
//	                  mount's dentries and attributes revalidated with
//	                  the host at each lookup, as the runner hook's
//	                  jobs have them (airlock run's are exclusive:
//	                  gvisor.Config.ExclusiveMounts)
//	overlay-memory    --overlay2=root:memory: the root overlay's upper
//	                  layer in memory instead of a file of the job's
//	                  directory
//	no-directfs       --directfs=false: every file operation through the
//	                  gofer instead of host FDs in the sentry
//	workspace-unbounded  --workspace-size 0: no bounded workspace
//	no-fast-path      --systrap-disable-fast-path: systrap's stubs and
//	                  the sentry wait in the kernel instead of spinning
//	                  on shared memory for each other (the platform's
//	                  spinning)
//	gomaxprocs-1      GOMAXPROCS=1 in the step: the Go programs in the
//	                  sandbox run one P, so no idle P spins looking for
//	                  work (the guest runtime's spinning; a setting of the
//	                  job's, not airlock's, measured for comparison)
//	host-thp          the host's transparent huge pages as gVisor
//	                  recommends them (runsc's host-settings check):
//	                  shmem_enabled advise, so the sentry's memory file
//	                  may use huge pages, and defrag never (no direct
//	                  compaction in a page fault); set for this run only
//	                  and put back after it (a setting of the host's)
//
// It reports each median and its ratio to airlock as it ships.
func BenchmarkGVisorSettings(b *testing.B) {
	w := newWarmStep(b)
	settings := []struct {
		name  string
		flags []string          // airlock run's
		host  map[string]string // the host's kernel settings for the run
	}{
		{name: "shared-mounts", flags: []string{"--runsc-flag=--file-access-mounts=shared"}},
		{name: "overlay-memory", flags: []string{"--runsc-flag=--overlay2=root:memory"}},
		{name: "no-directfs", flags: []string{"--runsc-flag=--directfs=false"}},
		{name: "workspace-unbounded", flags: []string{"--workspace-size=0"}},
		{name: "no-fast-path", flags: []string{"--runsc-flag=--systrap-disable-fast-path"}},
		{name: "gomaxprocs-1", flags: []string{"--env=GOMAXPROCS=1"}},
		{name: "host-thp", host: map[string]string{"/sys/kernel/mm/transparent_hugepage/shmem_enabled": "advise", "/sys/kernel/mm/transparent_hugepage/defrag": "never"}},
	}
	runs := []timedRun{{"native", w.native}, {"runsc-do", w.runscDoStep()}, {"airlock", w.airlockStep()}}
	for _, s := range settings {
		run := w.airlockStep(s.flags...)
		if s.host != nil {
			run = withHostSettings(b, s.host, run)
		}
		runs = append(runs, timedRun{s.name, run})
	}
	t := interleave(b, runs)
	t.ratio(b, "airlock", "runsc-do", "airlock/runsc-do")
	t.ratio(b, "runsc-do", "native", "runsc-do/native")
	for _, s := range settings {
		t.ratio(b, s.name, "airlock", s.name+"/airlock")
	}
}

// withHostSettings runs run with the host's kernel settings (files of
// /sys or /proc) set to the values given, and puts the host's own back
// after it, and at the benchmark's end whatever happens.
func withHostSettings(b *testing.B, set map[string]string, run func() error) func() error {
	own := map[string]string{}
	for path := range set {
		v, err := os.ReadFile(path)
		if err != nil {
			b.Skipf("host setting %s: %v", path, err)
		}
		// A choice file reads "always [madvise] never": the bracketed one.
		cur := strings.TrimSpace(string(v))
		if _, after, ok := strings.Cut(cur, "["); ok {
			cur, _, _ = strings.Cut(after, "]")
		}
		own[path] = cur
	}
	write := func(values map[string]string) error {
		for path, v := range values {
			if err := os.WriteFile(path, []byte(v), 0); err != nil {
				return fmt.Errorf("host setting %s=%s: %w", path, v, err)
			}
		}
		return nil
	}
	b.Cleanup(func() { write(own) })
	return func() error {
		if err := write(set); err != nil {
			return err
		}
		defer write(own)
		return run()
	}
}

// warmStep is the warm step of the whole-process benchmarks: a copy of
// testdata/sample-pr with a Go build cache per runner (files one writes
// as root another could not use), warmed before the timing.
type warmStep struct {
	b                testing.TB
	ws, state, runsc string
	exe              string // the airlock binary
}

// The step: go vet and go test of the sample, with the Go toolchain of
// the host (the workspace is /workspace in airlock's sandbox, where
// /tmp is the sandbox's own).
const warmWork = "go vet ./... && go test -count=1 ./..."

func newWarmStep(b *testing.B) *warmStep {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		b.Skip("needs the Go toolchain at /usr/local/go")
	}
	w := &warmStep{b: b, ws: workspace(b), state: stateDir(b), runsc: b.TempDir(), exe: filepath.Join(testhost.MadeBinaries(b), "airlock")}
	if out, err := exec.Command("cp", "-R", "../../testdata/sample-pr/.", w.ws).CombinedOutput(); err != nil {
		b.Fatalf("%v %s", err, out)
	}
	// A repository, as a job's checkout is: its git hooks and config are
	// what policy mode makes read-only.
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "sample"}} {
		if out, err := exec.Command("git", append([]string{"-C", w.ws, "-c", "safe.directory=*"}, args...)...).CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	exec.Command("chown", "-R", "1000:1000", w.ws).Run()
	// runsc do keeps what its sandbox writes in memory, so its cache is
	// warmed natively, as root, as it runs; airlock's by a first step.
	warmDo := exec.Command("/bin/sh", "-c", warmWork)
	warmDo.Dir, warmDo.Env = w.ws, warmEnv(filepath.Join(w.ws, ".gocache-runsc-do"))
	for _, run := range []func() error{w.airlockStep(), func() error { return quiet(warmDo) }, w.runscDoStep(), w.native} {
		if err := run(); err != nil {
			b.Fatalf("warming up: %v", err)
		}
	}
	return w
}

func warmEnv(cache string) []string {
	return []string{"GOCACHE=" + cache, "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local", "HOME=/tmp", "PATH=/usr/local/go/bin:/usr/bin:/bin"}
}

// airlock runs airlock run in ws with args.
func (w *warmStep) airlock(ws string, args ...string) func() error {
	return func() error {
		return quiet(exec.Command(w.exe, append([]string{"run", "-w", ws, "--state-dir", w.state}, args...)...))
	}
}

// airlockStep runs the warm step through airlock run, with flags.
func (w *warmStep) airlockStep(flags ...string) func() error {
	args := slices.Clone(flags)
	for _, e := range warmEnv("/workspace/.gocache-airlock") {
		args = append(args, "-e", e)
	}
	return w.airlock(w.ws, append(args, "--", "sh", "-c", warmWork)...)
}

// alone is w with a link to its airlock binary in a directory of its
// own: without the runsc sidecar beside it, its jobs' gofers and
// sandboxes start from airlock itself.
func (w *warmStep) alone() *warmStep {
	self := *w
	self.exe = filepath.Join(w.b.TempDir(), "airlock")
	if os.Link(w.exe, self.exe) != nil {
		copyExe(w.b, w.exe, self.exe) // another file system
	}
	return &self
}

// runscDo runs the embedded runsc's runsc do (airlock's) in dir.
func (w *warmStep) runscDo(dir string, args ...string) func() error {
	return w.runscDoWith(w.exe, dir, args...)
}

// runscDoWith runs `runsc do` with the runsc binary exe (argv[0] runsc,
// which airlock needs to be runsc, and runsc's own ignores).
func (w *warmStep) runscDoWith(exe, dir string, args ...string) func() error {
	return func() error {
		cmd := exec.Command(exe, append([]string{"--root=" + w.runsc, "--network=none", "--host-settings=ignore", "do"}, args...)...)
		cmd.Args[0] = "runsc"
		cmd.Dir = dir
		return quiet(cmd)
	}
}

// runscAlone builds runsc by itself, of the gVisor that airlock embeds,
// for the cold start of `runsc do` without airlock's binary around it.
func runscAlone(b *testing.B) string {
	exe := filepath.Join(b.TempDir(), "runsc")
	cmd := exec.Command("go", "build", "-o", exe, "gvisor.dev/gvisor/runsc")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := quiet(cmd); err != nil {
		b.Fatalf("build runsc alone: %v", err)
	}
	return exe
}

// runscDoStep runs the warm step through runsc do.
func (w *warmStep) runscDoStep() func() error {
	return w.runscDo(w.ws, append(append([]string{"--", "env"}, warmEnv(filepath.Join(w.ws, ".gocache-runsc-do"))...), "sh", "-c", warmWork)...)
}

// native runs the warm step on the host.
func (w *warmStep) native() error {
	cmd := exec.Command("/bin/sh", "-c", warmWork)
	cmd.Dir, cmd.Env = w.ws, warmEnv(filepath.Join(w.ws, ".gocache-native"))
	return quiet(cmd)
}

// timedRun is one of the processes a benchmark interleaves.
type timedRun struct {
	name string
	run  func() error
}

// interleave runs each of runs once per iteration, starting each
// iteration one run further on (so that no run always follows the same
// one), and reports and returns their medians in milliseconds, with
// each run's spread: the interquartile range as a percentage of the
// median.
func interleave(b *testing.B, runs []timedRun) timings {
	times := timings{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range runs {
			r := runs[(i+j)%len(runs)]
			t := time.Now()
			if err := r.run(); err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
			times[r.name] = append(times[r.name], float64(time.Since(t).Microseconds())/1000)
		}
	}
	b.StopTimer()
	for name, ts := range times {
		med, iqr := quartiles(ts)
		b.ReportMetric(med, name+"-ms")
		b.ReportMetric(100*iqr/med, name+"-iqr-%")
	}
	return times
}

// timings are each run's times in milliseconds, in iteration order.
type timings map[string][]float64

// median is the median time of run name.
func (t timings) median(name string) float64 {
	med, _ := quartiles(t[name])
	return med
}

// ratio reports a/b as the median of the iterations' own ratios, and
// the spread of those ratios (their interquartile range, as a
// percentage of it). Each iteration runs a and b minutes apart at most,
// so a host that slows down for a while slows both: the paired ratio
// is steadier on these noisy VMs than the ratio of two medians taken
// over the whole run.
func (t timings) ratio(b *testing.B, a, base, unit string) {
	xs, ys := t[a], t[base]
	rs := make([]float64, 0, len(xs))
	for i := range min(len(xs), len(ys)) {
		rs = append(rs, xs[i]/ys[i])
	}
	med, iqr := quartiles(rs)
	b.ReportMetric(med, unit)
	b.ReportMetric(100*iqr/med, unit+"-iqr-%")
}

// quartiles is the median of xs and its interquartile range.
func quartiles(xs []float64) (med, iqr float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(xs))
	q := func(k int) float64 { return s[(len(s)-1)*k/4] }
	return q(2), q(3) - q(1)
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

// BenchmarkIdleJobMemory is the host memory of one idle job as a runner
// host (or an ARC pod) carries it (issue 38, item 5): a whole `airlock
// run` in policy mode (the organisation policy, so the egress gateway
// too) whose step sleeps, measured once it has settled: the
// proportional set size (Pss) of airlock's process and of every process
// below it (the gofer, the sandbox's sentry and its systrap stubs, the
// step's exec shim), and their resident set size (Rss, shared pages
// counted in each). BENCHMARKS.md §3 has the sandbox's own share.
func BenchmarkIdleJobMemory(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	org := egressOrg(b, 443)
	var pss, rss, procs float64
	for i := 0; i < b.N; i++ {
		ws := workspace(b)
		cmd := cli(b, "run", "-w", ws, "--state-dir", stateDir(b), "--org", org, "--", "sh", "-c", "touch started; exec sleep 600")
		startAndWaitFor(b, cmd, filepath.Join(ws, "started"))
		time.Sleep(time.Second) // let it settle
		tree := processTree(cmd.Process.Pid)
		for _, pid := range tree {
			p, r := memoryOf(pid)
			pss, rss = pss+float64(p), rss+float64(r)
		}
		procs += float64(len(tree))
		cmd.Process.Signal(syscall.SIGTERM) // airlock ends the job and cleans up
		cmd.Wait()
	}
	n := float64(b.N)
	b.ReportMetric(pss/n/(1<<20), "pss-MiB")
	b.ReportMetric(rss/n/(1<<20), "rss-MiB")
	b.ReportMetric(procs/n, "processes")
}

// processTree is pid and every process below it.
func processTree(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and ")", so
		// the fields start after the last ")" (as runner's parentPID
		// reads them).
		i := strings.LastIndexByte(string(b), ')')
		var me, parent int
		fmt.Sscan(filepath.Base(filepath.Dir(f)), &me)
		if f := strings.Fields(string(b[i+1:])); i >= 0 && len(f) > 1 {
			fmt.Sscan(f[1], &parent)
			children[parent] = append(children[parent], me)
		}
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// memoryOf is a process's Pss and Rss in bytes (smaps_rollup).
func memoryOf(pid int) (pss, rss int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			pss = kb << 10
		case "Rss:":
			rss = kb << 10
		}
	}
	return pss, rss
}

// BenchmarkStorePush is what keeping the attestation in a store adds to
// a whole `airlock run -- true` (signed): the same job without a store,
// with a registry on loopback (Debian's distribution 2.8 with htpasswd)
// and with a file store, interleaved in every iteration. It reports the
// medians and, per iteration, the difference each store makes. The
// bundle of `true` is small; BenchmarkKeep (attest/store) times the push
// of a 400 KB one alone.
func BenchmarkStorePush(b *testing.B) {
	w := newWarmStep(b)
	empty := workspace(b)
	keys := b.TempDir()
	if err := attest.WriteKeyPair(filepath.Join(keys, "k"), nil); err != nil {
		b.Fatal(err)
	}
	srv := testregistry.Distribution(b, testregistry.Options{User: "airlock", Password: "bench-pass"})
	auth := srv.AuthFile(b, "", "")
	sign := []string{"--attest-key", filepath.Join(keys, "k.key")}
	oci := []string{"--attest-store", "oci://" + srv.Host + "/airlock/attestations", "--attest-store-auth", auth}
	runs := []timedRun{
		{"signed", w.airlock(empty, append(sign, "--", "true")...)},
		{"signed-store-oci", w.airlock(empty, slices.Concat(sign, oci, []string{"--", "true"})...)},
		{"signed-store-file", w.airlock(empty, append(sign, "--attest-store", "file://"+b.TempDir(), "--", "true")...)},
		{"signed-new-commit", newCommitEachRun(b, w, append(sign, "--", "true")...)},
		{"signed-store-oci-new-commit", newCommitEachRun(b, w, slices.Concat(sign, oci, []string{"--", "true"})...)},
	}
	t := interleave(b, runs)
	for _, r := range [][2]string{{"signed-store-oci", "signed"}, {"signed-store-file", "signed"}, {"signed-store-oci-new-commit", "signed-new-commit"}} {
		t.ratio(b, r[0], r[1], r[0]+"/"+r[1])
		b.ReportMetric(t.median(r[0])-t.median(r[1]), r[0]+"-minus-base-ms")
	}
}

// newCommitEachRun runs airlock run with args in a git repository of
// its own that gets a new commit before each run, so that each run is
// the first job of its commit. The commit is timed with the run, in the
// baseline as with a store.
func newCommitEachRun(b *testing.B, w *warmStep, args ...string) func() error {
	ws := workspace(b)
	git := func(a ...string) error {
		return quiet(exec.Command("git", append([]string{"-C", ws, "-c", "safe.directory=*", "-c", "user.name=b", "-c", "user.email=b@example.com"}, a...)...))
	}
	if err := git("init", "-q", "-b", "main"); err != nil {
		b.Fatal(err)
	}
	run := w.airlock(ws, args...)
	return func() error {
		if err := git("commit", "-q", "--allow-empty", "-m", "next"); err != nil {
			return err
		}
		return run()
	}
}

// BenchmarkColdPath is the cold path alone (issue 47), cheaper than
// BenchmarkWholeProcess: `airlock run -- true` against `runsc do true`
// of runsc built alone, interleaved, with what makes up the difference
// beside them: airlock without its bounded workspace (--workspace-size
// 0), and the start of each binary alone (--version: the Go runtime,
// package initialisation and page faults, nothing of a sandbox:
// `airlock version`, runsc's --version).
//
// Target (issue 47): cold ≤ runsc alone + 30 ms or 1.15x, whichever is
// larger.
func BenchmarkColdPath(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	w := &warmStep{b: b, ws: workspace(b), state: stateDir(b), runsc: b.TempDir(), exe: filepath.Join(testhost.MadeBinaries(b), "airlock")}
	alone := runscAlone(b)
	version := func(exe, arg0, flag string) func() error {
		return func() error {
			cmd := exec.Command(exe, flag)
			cmd.Args[0] = arg0
			return quiet(cmd)
		}
	}
	runs := []timedRun{
		{"cold-airlock", w.airlock(w.ws, "--", "true")},
		{"cold-airlock-unbounded", w.airlock(w.ws, "--workspace-size", "0", "--", "true")},
		{"cold-runsc-alone-do", w.runscDoWith(alone, w.ws, "true")},
		{"start-airlock", version(w.exe, "airlock", "version")},
		{"start-airlock-runsc", version(filepath.Join(filepath.Dir(w.exe), "airlock-runsc"), "runsc", "--version")},
		{"start-runsc-alone", version(alone, "runsc", "--version")},
	}
	for _, r := range runs { // the page cache warm for every binary
		if err := r.run(); err != nil {
			b.Fatalf("%s: %v", r.name, err)
		}
	}
	t := interleave(b, runs)
	t.ratio(b, "cold-airlock", "cold-runsc-alone-do", "cold-airlock/runsc-alone-do")
	t.ratio(b, "cold-airlock-unbounded", "cold-runsc-alone-do", "cold-airlock-unbounded/runsc-alone-do")
	b.ReportMetric(t.median("cold-airlock")-t.median("cold-runsc-alone-do"), "cold-airlock-minus-runsc-alone-ms")
	b.ReportMetric(t.median("start-airlock")-t.median("start-runsc-alone"), "start-airlock-minus-runsc-alone-ms")
	b.ReportMetric(t.median("start-airlock-runsc")-t.median("start-runsc-alone"), "start-sidecar-minus-runsc-alone-ms")
}
