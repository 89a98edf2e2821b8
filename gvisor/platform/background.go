package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// A probe in the background: the first auto job on a host (a boot, a
// new gVisor) starts on systrap at once and starts this probe beside it,
// in a process of its own, so that neither the job nor airlock waits
// for it: on a host whose KVM hangs the probe's answer takes its whole
// timeout. The process is this binary again, with argv[0] ProbeArgv0
// (main hands it to RunBackground, through gvisor.Dispatch); it runs in
// a session of its own, so it outlives an `airlock run` that ends first
// and no terminal's signal reaches it, and it ends by itself within the
// probe's timeout. It takes the verdicts' lock first: one probe per
// verdict directory, and a job that finds the lock held starts none.

// ProbeArgv0 is argv[0] of the background probe process.
const ProbeArgv0 = "airlock-platform-probe"

// BackgroundProbe is what the background probe process is told: its
// only argument, in JSON.
type BackgroundProbe struct {
	// Dir keeps the verdict and the probe's work (Dir).
	Dir string `json:"dir"`
	// Key is the verdict's key (HostKey), taken by the job that starts
	// the probe.
	Key string `json:"key"`
	// Runsc is the runsc the probe runs; "": this binary (runsc is
	// compiled in). Tests give one that never answers.
	Runsc string `json:"runsc,omitempty"`
	// Timeout bounds the probe.
	Timeout time.Duration `json:"timeout"`
}

// ProbeFunc boots a probe sandbox on kvm in dir with runsc ("" is this
// binary), within timeout, and says why it did not boot.
type ProbeFunc func(ctx context.Context, dir, runsc string, timeout time.Duration) error

// StartBackground starts p's probe in a process of its own, unless one
// holds the lock already, and returns what the job's reason says of it.
// It does not wait for the probe.
func StartBackground(p BackgroundProbe) string {
	v := NewVerdicts(p.Dir)
	if v.Busy() {
		return "a probe sandbox is booting on kvm beside it, for the jobs after it"
	}
	arg, err := json.Marshal(p)
	if err != nil {
		return "no probe started: " + err.Error()
	}
	cmd := exec.Command("/proc/self/exe", string(arg))
	cmd.Args[0] = ProbeArgv0
	cmd.Dir = "/"
	cmd.Env = []string{}
	// stdin, stdout and stderr are /dev/null: the probe's log is kept in
	// its directory, and a job's output is no place for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "no probe started: " + OneLine(err.Error())
	}
	// Reaped when it ends, if this process lives that long; else by init.
	go cmd.Wait()
	return "a probe sandbox boots on kvm beside it (pid " + strconv.Itoa(cmd.Process.Pid) + "), for the jobs after it"
}

// RunBackground is the background probe process: arg is its
// BackgroundProbe. It takes the lock (another probe holding it: nothing
// to do), probes unless a verdict for the key was kept meanwhile, and
// keeps the verdict. gaps, when given, adds what KVM's CPUID lacks to a
// failure. It returns the process's exit status.
func RunBackground(arg string, probe ProbeFunc, gaps func() string) int {
	var p BackgroundProbe
	dec := json.NewDecoder(bytes.NewReader([]byte(arg)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || p.Dir == "" || p.Key == "" || p.Timeout <= 0 {
		fmt.Fprintf(os.Stderr, "airlock: %s: started by airlock itself, with one JSON argument (%v)\n", ProbeArgv0, err)
		return 2
	}
	v := NewVerdicts(p.Dir)
	unlock, err := v.TryLock()
	if err != nil {
		return 0 // another probe runs, or nowhere to keep a verdict
	}
	defer unlock()
	if _, ok := v.Read(p.Key); ok {
		return 0
	}
	v.Write(verdictOf(p.Key, probe(context.Background(), p.Dir, p.Runsc, p.Timeout), gaps))
	return 0
}
