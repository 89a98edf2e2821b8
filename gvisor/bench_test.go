package gvisor

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/gvisor/platform"
)

// The benchmarks print ratios against baselines measured in the same run,
// iteration by iteration, so a noisy machine affects both sides alike.
// Run: CGO_ENABLED=0 go test -run XXX -bench . -benchtime 10x ./gvisor/
// (see BENCHMARKS.md).

// BenchmarkColdStart compares airlock's whole job cycle for `true` (reap,
// create, exec, destroy) with the embedded runsc's own `runsc do true` and
// with native `true`.
func BenchmarkColdStart(b *testing.B) {
	ws, state := coldStartState(b, "bench-cold")
	var native, runscDo, airlock time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		native += time.Since(t)

		runscDo += runscDoTrue(b)
		airlock += coldJob(b, Config{ID: testJobID(), Workspace: ws, StateRoot: state, Limits: DefaultLimits()})
	}
	n := float64(b.N)
	b.ReportMetric(float64(native.Microseconds())/n/1000, "native-ms")
	b.ReportMetric(float64(runscDo.Microseconds())/n/1000, "runsc-do-ms")
	b.ReportMetric(float64(airlock.Microseconds())/n/1000, "airlock-ms")
	b.ReportMetric(float64(airlock)/float64(runscDo), "airlock/runsc-do")
}

// BenchmarkWorkload compares a compile-heavy step, `go build -a` of the
// sample project with an empty build cache, natively and in airlock, under
// each candidate runsc setting.
func BenchmarkWorkload(b *testing.B) {
	requireRootB(b)
	goBin := "/usr/local/go/bin/go"
	if _, err := os.Stat(goBin); err != nil {
		b.Skip("needs the Go toolchain at /usr/local/go")
	}
	src, err := filepath.Abs("../testdata/sample-pr")
	if err != nil {
		b.Fatal(err)
	}
	build := "export GOCACHE=$(mktemp -d) GOFLAGS=-buildvcs=false GOTOOLCHAIN=local PATH=/usr/local/go/bin:$PATH; go build -a -o /dev/null ./cmd/wordcount; rm -rf $GOCACHE"
	for _, v := range []struct {
		name  string
		flags []string
	}{
		{"default", nil},
		{"overlay-memory", []string{"--overlay2=root:memory"}},
		{"no-directfs", []string{"--directfs=false"}},
		{"no-syscall-patching", []string{"--systrap-disable-syscall-patching=true"}},
	} {
		b.Run(v.name, func(b *testing.B) {
			var native, sandboxed time.Duration
			for i := 0; i < b.N; i++ {
				t := time.Now()
				cmd := exec.Command("/bin/sh", "-c", build)
				cmd.Dir = src
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("native build: %v %s", err, out)
				}
				native += time.Since(t)

				ctx := context.Background()
				sb, err := Create(ctx, Config{ID: testJobID(), Workspace: src, StateRoot: filepath.Join(testStateBase, "bench-work"), Limits: DefaultLimits(), RunscFlags: v.flags})
				if err != nil {
					b.Fatal(err)
				}
				t = time.Now()
				res, err := sb.Exec(ctx, Step{Args: []string{"/bin/sh", "-c", build}})
				sandboxed += time.Since(t)
				sb.Destroy(ctx)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("sandboxed build: %v %+v", err, res)
				}
			}
			n := float64(b.N)
			b.ReportMetric(native.Seconds()/n, "native-s")
			b.ReportMetric(sandboxed.Seconds()/n, "airlock-s")
			b.ReportMetric(float64(sandboxed)/float64(native), "airlock/native")
		})
	}
}

// BenchmarkIdleMemory reports the host memory of an idle job sandbox: the
// proportional set size of every host process in its cgroup (sentry,
// gofer, systrap stubs), and the cgroup's own usage.
func BenchmarkIdleMemory(b *testing.B) {
	requireRootB(b)
	ws := b.TempDir()
	os.Chown(ws, 1000, 1000)
	var pss, usage float64
	for i := 0; i < b.N; i++ {
		ctx := context.Background()
		sb, err := Create(ctx, Config{ID: testJobID(), Workspace: ws, StateRoot: filepath.Join(testStateBase, "bench-mem"), Limits: DefaultLimits()})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Exec(ctx, Step{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
		time.Sleep(time.Second) // let it settle
		mem := sb.cg.MemoryDir()
		pss += float64(cgroupPSS(mem))
		if v, err := os.ReadFile(filepath.Join(mem, "memory.usage_in_bytes")); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			usage += float64(n)
		}
		sb.Destroy(ctx)
	}
	n := float64(b.N)
	b.ReportMetric(pss/n/(1<<20), "pss-MiB")
	b.ReportMetric(usage/n/(1<<20), "cgroup-MiB")
	b.ReportMetric(pss/n/(64<<20), "pss/64MiB-target")
}

// cgroupPSS sums Pss over the processes in a cgroup directory.
func cgroupPSS(dir string) int64 {
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0
	}
	var total int64
	for _, pid := range strings.Fields(string(procs)) {
		f, err := os.Open(filepath.Join("/proc", pid, "smaps_rollup"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "Pss:" {
				kb, _ := strconv.ParseInt(fields[1], 10, 64)
				total += kb << 10
			}
		}
		f.Close()
	}
	return total
}

func requireRootB(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
}

// BenchmarkContainerStep: a step in a container of its own on an image
// (a Docker action under the hook: skeleton, gofer, start, wait, destroy)
// against an exec of the same program into the sandbox (a run: step).
// See BENCHMARKS.md.
func BenchmarkContainerStep(b *testing.B) {
	requireRootB(b)
	ws := b.TempDir()
	os.Chown(ws, 1000, 1000)
	ctx := context.Background()
	sb, err := Create(ctx, Config{ID: testJobID(), Workspace: ws, StateRoot: filepath.Join(testStateBase, "bench-container"), Limits: DefaultLimits()})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	img := newImage(b, map[string]string{"etc/hostname": "image\n"})
	var execd, contained time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if res, err := sb.Exec(ctx, Step{Args: []string{initPath, "exit", "0"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
		execd += time.Since(t)
		t = time.Now()
		c, err := sb.StartContainer(ctx, ContainerConfig{Name: fmt.Sprintf("step-%d", i), RootFS: img, Args: []string{initPath, "exit", "0"}, Mounts: []Mount{{Source: ws, Destination: "/github/workspace"}}})
		if err != nil {
			b.Fatal(err)
		}
		res, err := c.Wait(ctx)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("container: %v %+v", err, res)
		}
		if err := c.Destroy(); err != nil {
			b.Fatal(err)
		}
		contained += time.Since(t)
	}
	n := float64(b.N)
	b.ReportMetric(float64(execd.Milliseconds())/n, "exec-ms")
	b.ReportMetric(float64(contained.Milliseconds())/n, "container-ms")
	b.ReportMetric(float64(contained)/float64(execd), "container/exec")
}

// BenchmarkPlatformChoice is what auto costs a job once the host's KVM
// verdict is kept: the device check, the key (boot id, the binary's and
// /dev/kvm's identity) and the kept verdict read, against the choice of
// a pinned systrap, which does none of it, interleaved. Without a
// /dev/kvm the device check ends it early; the verdict path is then
// timed with the device's answer taken as yes (its cost still paid) and
// the key without /dev/kvm's stat.
func BenchmarkPlatformChoice(b *testing.B) {
	requireRootB(b)
	root := filepath.Join(testStateBase, "bench-choice")
	defer os.RemoveAll(root)
	key := platform.HostKey
	if _, err := platform.HostKey(); err != nil {
		key = func() (string, error) {
			boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
			var st unix.Stat_t
			unix.Stat("/proc/self/exe", &st)
			return fmt.Sprintf("boot=%s exe=%d:%d:%d", strings.TrimSpace(string(boot)), st.Dev, st.Ino, st.Ctim.Nsec), err
		}
	}
	j := platform.Judge{
		Device:   func() error { KVMDeviceUsable(); return nil },
		Key:      key,
		Probe:    func(context.Context) error { b.Fatal("the verdict is kept: no probe"); return nil },
		Verdicts: platform.NewVerdicts(platformDir(root)),
	}
	k, err := key()
	if err != nil {
		b.Fatal(err)
	}
	j.Verdicts.Write(platform.Verdict{Key: k, Usable: false, Reason: "a probe sandbox did not boot on kvm (kept)"})
	ctx := context.Background()
	var auto, pinned time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if c, err := j.Choose(ctx, PlatformAuto); err != nil || !strings.Contains(c.Reason, "(kept)") {
			b.Fatalf("%+v %v", c, err)
		}
		auto += time.Since(t)
		t = time.Now()
		if _, err := j.Choose(ctx, PlatformSystrap); err != nil {
			b.Fatal(err)
		}
		pinned += time.Since(t)
	}
	n := float64(b.N)
	b.ReportMetric(float64(auto.Nanoseconds())/n/1000, "auto-kept-µs")
	b.ReportMetric(float64(pinned.Nanoseconds())/n/1000, "pinned-µs")
	b.ReportMetric(float64(auto-pinned)/n/1e6, "added-ms")
}

// BenchmarkFirstProbe is the first job's cost after a boot: the probe
// sandbox on kvm where /dev/kvm opens (here it is the kvm probe the
// first auto job runs), else the same probe on systrap (a host without
// /dev/kvm never probes: the shape and cost of the probe are what is
// measured), against a job's own sandbox cycle (create, `true`, destroy),
// interleaved.
func BenchmarkFirstProbe(b *testing.B) {
	requireRootB(b)
	root := filepath.Join(testStateBase, "bench-probe")
	defer os.RemoveAll(root)
	platform := PlatformKVM
	if KVMDeviceUsable() != nil {
		platform = PlatformSystrap
	}
	ws := b.TempDir()
	os.Chown(ws, 1000, 1000)
	ctx := context.Background()
	var probe, job time.Duration
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := ProbePlatform(ctx, root, platform); err != nil && platform == PlatformSystrap {
			b.Fatal(err)
		}
		probe += time.Since(t)
		t = time.Now()
		sb, err := Create(ctx, Config{ID: testJobID(), Workspace: ws, StateRoot: root, Limits: DefaultLimits(), Platform: PlatformSystrap})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Exec(ctx, Step{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
		sb.Destroy(ctx)
		job += time.Since(t)
	}
	n := float64(b.N)
	b.ReportMetric(float64(probe.Microseconds())/n/1000, platform+"-probe-ms")
	b.ReportMetric(float64(job.Microseconds())/n/1000, "job-sandbox-ms")
	b.ReportMetric(float64(probe)/float64(job), "probe/job-sandbox")
}

// BenchmarkWorkspaceLimit compares whole jobs (create, one step, destroy:
// what the user waits for) in a bounded workspace (the default 16G limit:
// mkfs, loop device, overlay, and the merge of what the job wrote) with
// the same jobs in an unlimited one, interleaved in every iteration. The
// steps: `true` (the fixed cost), the sample's go build with its build
// cache and binary in the workspace, and a file-heavy one (20,000 small
// files unpacked, read back and merged).
func BenchmarkWorkspaceLimit(b *testing.B) {
	requireRootB(b)
	src, err := filepath.Abs("../testdata/sample-pr")
	if err != nil {
		b.Fatal(err)
	}
	files := filepath.Join(b.TempDir(), "files.tar")
	if out, err := exec.Command("/bin/sh", "-c", "cd $(dirname "+files+") && mkdir t && cd t && for d in $(seq 100); do mkdir d$d; for f in $(seq 200); do head -c 1024 /dev/urandom > d$d/f$f; done; done && tar cf "+files+" . && cd .. && rm -r t").CombinedOutput(); err != nil {
		b.Fatalf("make the files: %v %s", err, out)
	}
	firstJob(b, filepath.Join(testStateBase, "bench-ws"), b.TempDir())
	for _, w := range []struct {
		name, script string
		fill         func(ws string) error
	}{
		{"true", "true", func(string) error { return nil }},
		{"go-build", "export GOCACHE=$PWD/.cache GOFLAGS=-buildvcs=false GOTOOLCHAIN=local PATH=/usr/local/go/bin:$PATH; go build -a -o wordcount ./cmd/wordcount",
			func(ws string) error { return exec.Command("cp", "-a", src+"/.", ws).Run() }},
		{"small-files", "mkdir x && cd x && tar xf ../files.tar && cat d*/* | wc -c",
			func(ws string) error { return exec.Command("cp", files, ws).Run() }},
	} {
		b.Run(w.name, func(b *testing.B) {
			var took [2]time.Duration
			for i := 0; i < b.N; i++ {
				for k, limit := range []int64{0, DefaultLimits().Workspace} {
					ws := b.TempDir()
					if err := w.fill(ws); err != nil {
						b.Fatal(err)
					}
					exec.Command("chown", "-R", "1000:1000", ws).Run()
					l := DefaultLimits()
					l.Workspace = limit
					t := time.Now()
					ctx := context.Background()
					sb, err := Create(ctx, Config{ID: testJobID(), Workspace: ws, StateRoot: filepath.Join(testStateBase, "bench-ws"), Limits: l})
					if err != nil {
						b.Fatal(err)
					}
					res, err := sb.Exec(ctx, Step{Args: []string{"/bin/sh", "-c", w.script}})
					if derr := sb.Destroy(ctx); err == nil {
						err = derr
					}
					took[k] += time.Since(t)
					if err != nil || res.ExitCode != 0 {
						b.Fatalf("step: %v %+v", err, res)
					}
				}
			}
			n := float64(b.N)
			b.ReportMetric(took[0].Seconds()/n, "unlimited-s")
			b.ReportMetric(took[1].Seconds()/n, "bounded-s")
			b.ReportMetric(float64(took[1])/float64(took[0]), "bounded/unlimited")
		})
	}
}

// BenchmarkExecShim is what recording every process costs (issue 24):
// sandboxes whose init and steps start through the exec shim, as every
// sandbox's do, against sandboxes whose init and steps the control API
// starts directly, where no trace point sees them (as before issue 24).
// The step is `true` through Exec's whole path (pipes, limit detection,
// the record). Cold: a fresh sandbox per step, as `airlock run -- true`,
// the two in turn and in alternating order, with `runsc do true` beside
// them for the cold-start ratio; warm: steps in turn in two sandboxes
// that stay up, as a job's later steps. Medians of the pairs.
func BenchmarkExecShim(b *testing.B) {
	ws, state := coldStartState(b, "bench-shim")
	ctx := context.Background()
	config := func(way int) Config {
		return Config{ID: testJobID(), Workspace: ws, StateRoot: state, Limits: DefaultLimits(), unrecorded: way == 1}
	}
	var coldShim, coldDirect, coldAdded, warmAdded []time.Duration
	var shimRatio, directRatio, pairRatio, ratioAdded []float64
	for i := 0; i < b.N; i++ {
		runscDo := runscDoTrue(b)
		var took [2]time.Duration
		for _, way := range []int{i % 2, 1 - i%2} {
			took[way] = coldJob(b, config(way))
		}
		coldShim, coldDirect = append(coldShim, took[0]), append(coldDirect, took[1])
		coldAdded = append(coldAdded, took[0]-took[1])
		pairRatio = append(pairRatio, float64(took[0])/float64(took[1]))
		ratioAdded = append(ratioAdded, float64(took[0]-took[1])/float64(runscDo))
		shimRatio = append(shimRatio, float64(took[0])/float64(runscDo))
		directRatio = append(directRatio, float64(took[1])/float64(runscDo))
	}
	var up [2]*Sandbox
	for way := range up {
		c := config(way)
		c.Workspace = b.TempDir() // each sandbox bounds its own
		os.Chown(c.Workspace, 1000, 1000)
		sb, err := Create(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Destroy(ctx)
		up[way] = sb
	}
	for i := 0; i < 10*b.N; i++ {
		var took [2]time.Duration
		for _, way := range []int{i % 2, 1 - i%2} {
			t := time.Now()
			execTrue(b, up[way])
			took[way] = time.Since(t)
		}
		warmAdded = append(warmAdded, took[0]-took[1])
	}
	for _, e := range up[1].Record().Execs {
		if e.SHA256 != "" || e.PID != 1 {
			b.Fatalf("the direct sandbox recorded %+v: it is not the baseline without the record", e)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(coldShim)), "cold-shim-ms")
	b.ReportMetric(ms(median(coldDirect)), "cold-direct-ms")
	b.ReportMetric(ms(median(coldAdded)), "cold-added-ms")
	b.ReportMetric(median(pairRatio), "cold-shim/direct")
	b.ReportMetric(median(shimRatio), "shim/runsc-do")
	b.ReportMetric(median(directRatio), "direct/runsc-do")
	b.ReportMetric(median(ratioAdded), "ratio-added")
	b.ReportMetric(ms(median(warmAdded)), "warm-added-ms")
}

// coldStartState is a cold-start benchmark's workspace (owned by the
// sandbox's user) and state directory (named name, removed at the end),
// after the state's first job (firstJob).
func coldStartState(b *testing.B, name string) (ws, state string) {
	requireRootB(b)
	ws = b.TempDir()
	os.Chown(ws, 1000, 1000)
	state = filepath.Join(testStateBase, name)
	b.Cleanup(func() { os.RemoveAll(state) })
	firstJob(b, state, ws)
	return ws, state
}

// firstJob runs a job in state untimed, as a host's first, and waits for
// the platform verdict (the probe that a boot's first job starts beside
// it, on a host with /dev/kvm: up to 20 s where KVM does not boot), so
// that no probe runs while the benchmarks time the jobs after it.
func firstJob(b *testing.B, state, ws string) {
	ctx := context.Background()
	sb, err := Create(ctx, Config{ID: testJobID(), Workspace: ws, StateRoot: state, Limits: DefaultLimits()})
	if err != nil {
		b.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		b.Fatal(err)
	}
	hostJudge(state).Judge(ctx)
	b.ResetTimer()
}

// BenchmarkFirstJobBesideAHangingProbe is what a host's first job pays
// for the KVM probe where the probe hangs (issue 38: it used to wait up
// to 20 s): a cold job with no verdict kept, which starts the probe (a
// runsc that never answers, in the background process, as the host's
// judge starts it), against the same job asked for systrap, which never
// probes, interleaved. Each iteration has a verdict directory of its
// own, so each first job starts a probe.
func BenchmarkFirstJobBesideAHangingProbe(b *testing.B) {
	ws, state := coldStartState(b, "bench-first-job")
	hang := filepath.Join(b.TempDir(), "runsc")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	var judges []*platform.Judge
	var first, systrap time.Duration
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(state, fmt.Sprintf("platform-%d", i))
		j := &platform.Judge{
			Device: func() error { return nil },
			Key:    func() (string, error) { return "boot=bench hanging-probe", nil },
			Probe:  func(context.Context) error { b.Fatal("a job waited for the probe"); return nil },
			Background: func(key string) string {
				return platform.StartBackground(platform.BackgroundProbe{Dir: dir, Key: key, Runsc: hang, Timeout: 5 * time.Second})
			},
			Verdicts: platform.NewVerdicts(dir),
		}
		judges = append(judges, j)
		first += coldJob(b, Config{ID: testJobID(), Workspace: ws, StateRoot: state, Limits: DefaultLimits(), judge: j})
		systrap += coldJob(b, Config{ID: testJobID(), Workspace: ws, StateRoot: state, Limits: DefaultLimits(), Platform: PlatformSystrap})
	}
	b.StopTimer()
	for _, j := range judges {
		for end := time.Now().Add(time.Minute); j.Verdicts.Busy() && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		}
		if _, ok := j.Verdicts.Read("boot=bench hanging-probe"); !ok {
			b.Errorf("no verdict in %s", j.Verdicts.Dir())
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(first.Microseconds())/n/1000, "first-job-ms")
	b.ReportMetric(float64(systrap.Microseconds())/n/1000, "systrap-job-ms")
	b.ReportMetric(float64(first)/float64(systrap), "first/systrap")
}

// runscDoTrue times the embedded runsc's own `runsc do true`, the
// baseline of the cold-start benchmarks.
func runscDoTrue(b *testing.B) time.Duration {
	t := time.Now()
	cmd := exec.Command("/proc/self/exe", "--root="+b.TempDir(), "--shared-root="+sharedRoot, "--network=none", "--host-settings=ignore", "do", "true")
	cmd.Args[0] = "runsc"
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("runsc do: %v %s", err, out)
	}
	return time.Since(t)
}

// coldJob times airlock's whole job cycle for `true` in a new sandbox
// of cfg: reap, create, the step, destroy.
func coldJob(b *testing.B, cfg Config) time.Duration {
	t := time.Now()
	ctx := context.Background()
	if _, err := Reap(ctx, cfg.StateRoot); err != nil {
		b.Fatal(err)
	}
	sb, err := Create(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	execTrue(b, sb)
	if err := sb.Destroy(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(t)
}

// execTrue runs `true` as a step of sb.
func execTrue(b *testing.B, sb *Sandbox) {
	if res, err := sb.Exec(context.Background(), Step{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
		b.Fatalf("exec: %v %+v", err, res)
	}
}

func median[T cmp.Ordered](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
