// Package platform decides which gVisor platform a job's sandbox runs on:
// systrap (system calls trapped with seccomp: works everywhere) or kvm
// (the sentry in a virtual machine of /dev/kvm: system calls cost far
// less, where the host has a KVM that gVisor can use). It owns the
// choice (Judge.Choose), the host's KVM verdict and where it is kept
// (Verdicts, Dir), and when the probe runs (Judge, StartBackground,
// RunBackground). Booting a probe sandbox is not its job: the caller
// hands the probe in as a function (gvisor.ProbePlatform does it).
//
// What must stay true:
//   - No job waits for the probe when auto is asked. Without a kept
//     verdict the job runs on systrap at once, and the probe starts
//     beside it in a process of its own (StartBackground), which keeps
//     its verdict for the jobs after it. At most one probe runs per
//     verdict directory (a lock held by the probe process).
//   - kvm asked for explicitly is judged before the sandbox is made (the
//     caller waits for a probe when none is kept) and refused where it
//     cannot boot: it is never replaced by systrap.
//   - KVM is an acceleration, never a requirement of auto: a /dev/kvm
//     that opens and answers is not enough (nested virtualisation often
//     offers a KVM whose CPUID lacks what gVisor's ring0 sets, and the
//     KVM platform then panics while it creates its first vCPU), so the
//     verdict comes from booting gVisor on it.
//   - A verdict is kept outside any one state directory where the host
//     allows it (/run/airlock/platform: cleared at boot, shared by every
//     state directory), keyed by the boot, /dev/kvm's identity, the gVisor
//     build and the probe's own version (HostKey). It is believed only
//     from a regular file that root owns and alone may read and write,
//     for this key, whole; anything else is ignored and probed again.
//   - The probe's output is runsc's, never the workload's; it is still
//     bounded and cut to one line before it becomes a reason.
//
// Layer 1: imports internal packages only.
package platform
