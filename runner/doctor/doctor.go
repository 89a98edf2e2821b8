// Package doctor checks whether a host can run airlock's jobs, for the
// runner's administrator (`airlock doctor`), in the spirit of `docker
// info` and k3s's check-config: one line per check, ok, warn or fail,
// each with the reason and, where it is not ok, the fix.
//
// The checks do what a job does rather than guess from version numbers
// where they can: the platform checks boot probe sandboxes, the sandbox
// check creates one with a job's limits and cgroups and runs `true` in
// it, the network check makes a job's pair of namespaces with its veth.
// They leave nothing behind but the KVM verdict that a job's background
// probe would have written (gvisor.JudgeKVM) and the probes' logs.
//
// Layer 3: above the leaves it checks (gvisor, policies, attest,
// runner/egress/netns); it knows no job and is no door: cmd/airlock reads
// the host's configuration (flags, the hook's environment) into Options.
package doctor

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/gvisor/cgroup"
	"github.com/airlock-ci/airlock/gvisor/quota"
	"github.com/airlock-ci/airlock/internal/buildinfo"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/netns"
)

// Status is a check's outcome.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn" // jobs run, but something is off
	Fail Status = "fail" // jobs cannot run as configured
)

// Check is one line of the report.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail says what was found; Fix, when not ok, what to do.
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is every check, in order.
type Report struct {
	Checks []Check `json:"checks"`
	// Ready: no check failed, so the host can run jobs.
	Ready bool `json:"ready"`
}

// NotRoot says the root check failed: nothing else could be checked
// as a job would use it.
func (r Report) NotRoot() bool {
	for _, c := range r.Checks {
		if c.Name == "root" && c.Status == Fail {
			return true
		}
	}
	return false
}

// Options are the host's configuration as the doors use it.
type Options struct {
	// StateRoot is airlock run's state directory; HookDir the runner
	// hook's jobs root (AIRLOCK_HOOK_DIR), checked too when set.
	StateRoot, HookDir string
	// Workspaces are directories jobs work in (the runner's _work): no
	// state directory may be inside one.
	Workspaces []string
	// OrgDir is the organisation policy's directory ("" : the host's
	// default, when it has one).
	OrgDir string
	// AttestKey is the signing key given to airlock (flag or
	// AIRLOCK_ATTEST_KEY); empty: the organisation policy's attest.key.
	AttestKey string
	// Password gives an encrypted key's password.
	Password attest.PasswordFunc
	// AttestStores are the host's attestation stores (the hook's
	// AIRLOCK_ATTEST_STORE, unparsed), AttestStoreAuth their
	// credentials file; the organisation policy's attest.store adds to
	// them.
	AttestStores, AttestStoreAuth string
	// Node is the node the runner runs the hook's index.js with ("" :
	// the one in PATH).
	Node string
	// RunscBuildID is the Go build ID of the runsc sidecar airlock was
	// built with (runner.Inputs.RunscBuildID); empty: none.
	RunscBuildID string
	// Spelling is how the door names its inputs in hints (`airlock
	// doctor`: its flags); nil: in words.
	Spelling input.Spelling
}

// MinKernel is the oldest Linux gVisor supports (its docs: 4.14.77;
// systrap's seccomp use needs no more).
var MinKernel = [2]int{4, 14}

// MinNode is the node major version the hook's index.js is tested with:
// the runner's own externals/node20.
const MinNode = 20

// minFreeState is the free space below which a state directory warns:
// each job's overlay file store and logs live there.
const minFreeState = 2 << 30

// Run runs every check.
func Run(ctx context.Context, o Options) Report {
	checks := []func(context.Context, Options) []Check{
		checkRoot, checkBinary, checkKernel, checkCgroups, checkPlatforms, checkHugePages, checkWorkspaceLimit, checkSandbox,
		checkNetwork, checkStateDirs, checkNode, checkPolicyAndKey,
	}
	var r Report
	for _, c := range checks {
		r.Checks = append(r.Checks, c(ctx, o)...)
	}
	r.Ready = true
	for _, c := range r.Checks {
		if c.Status == Fail {
			r.Ready = false
		}
	}
	return r
}

// WriteText prints the report for a person: a line per check, the fix
// under a check that is not ok, and the verdict with the counts.
func (r Report) WriteText(w io.Writer) {
	counts := map[Status]int{}
	for _, c := range r.Checks {
		counts[c.Status]++
		fmt.Fprintf(w, "%-5s %-20s %s\n", c.Status, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(w, "%-5s %-20s fix: %s\n", "", "", c.Fix)
		}
	}
	verdict := "this host can run airlock's jobs"
	if !r.Ready {
		verdict = "this host cannot run airlock's jobs as configured"
	}
	fmt.Fprintf(w, "%s (%d ok, %d warn, %d fail)\n", verdict, counts[OK], counts[Warn], counts[Fail])
}

func ok(name, format string, args ...any) Check {
	return Check{Name: name, Status: OK, Detail: fmt.Sprintf(format, args...)}
}

func bad(s Status, name, detail, fix string) Check {
	return Check{Name: name, Status: s, Detail: detail, Fix: fix}
}

func checkRoot(context.Context, Options) []Check {
	if os.Geteuid() != 0 {
		return []Check{bad(Fail, "root", fmt.Sprintf("running as uid %d", os.Geteuid()), "run airlock (and the runner's hook) as root: gVisor's runsc needs it; try sudo airlock doctor")}
	}
	return []Check{ok("root", "running as root")}
}

// checkBinary: runsc re-executes this binary inside its own chroot, where
// no ELF interpreter is: a dynamically linked airlock starts no sandbox.
func checkBinary(_ context.Context, o Options) []Check {
	static, err := buildinfo.Static("/proc/self/exe")
	if err != nil {
		return []Check{bad(Fail, "binary", "read /proc/self/exe: "+err.Error(), "mount /proc")}
	}
	if !static {
		return []Check{bad(Fail, "binary", "airlock is dynamically linked: runsc cannot re-execute it inside its chroot", "build it static: CGO_ENABLED=0 go build ./cmd/airlock (make build does)")}
	}
	return []Check{ok("binary", "statically linked (runsc re-executes it in its chroot)"), checkSidecar(o)}
}

// checkSidecar: a job's gofer and sandbox start from the runsc sidecar
// beside airlock, when airlock was built with one and it is usable
// (gvisor.FindRunsc); else from airlock itself, a slower start.
func checkSidecar(o Options) Check {
	if o.RunscBuildID == "" {
		return ok("runsc sidecar", "none: airlock was built without one (go build), and starts its sandboxes itself; make build makes airlock-runsc, which starts them sooner")
	}
	path, err := gvisor.OwnRunsc(o.RunscBuildID)
	if err != nil {
		return bad(Warn, "runsc sidecar", err.Error(), "install the airlock and airlock-runsc of one make build side by side, owned by root and writable by root alone; meanwhile sandboxes start from airlock itself, about 0.1 s slower")
	}
	return ok("runsc sidecar", "%s, of this build: jobs' sandboxes start from it", path)
}

func checkKernel(context.Context, Options) []Check {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return []Check{bad(Fail, "kernel", "uname: "+err.Error(), "")}
	}
	release, machine := unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:])
	name := fmt.Sprintf("Linux %s (%s)", release, machine)
	if v, good := kernelAtLeast(release, MinKernel); !good {
		return []Check{bad(Fail, "kernel", fmt.Sprintf("%s: older than %d.%d (read %d.%d)", name, MinKernel[0], MinKernel[1], v[0], v[1]), fmt.Sprintf("gVisor needs Linux %d.%d or later", MinKernel[0], MinKernel[1]))}
	}
	if err := gvisor.CheckHost(); err != nil && err != gvisor.ErrNotRoot {
		return []Check{bad(Fail, "kernel", name+": "+err.Error(), "")}
	}
	return []Check{ok("kernel", "%s: namespaces and seccomp filtering present", name)}
}

// kernelAtLeast parses a release ("6.18.44-fc-v1045") and compares it.
func kernelAtLeast(release string, min [2]int) ([2]int, bool) {
	var v [2]int
	parts := strings.SplitN(release, ".", 3)
	for i := 0; i < 2 && i < len(parts); i++ {
		digits := strings.TrimRightFunc(parts[i], func(r rune) bool { return r < '0' || r > '9' })
		v[i], _ = strconv.Atoi(digits)
	}
	return v, v[0] > min[0] || v[0] == min[0] && v[1] >= min[1]
}

// enclosedCheck is the cgroups line where the cgroup file system is
// read-only (a pod's container): jobs run in the enclosing cgroup, and
// only its limits hold.
func enclosedCheck(detail string, e cgroup.Enclosing) Check {
	detail += "; read-only (a container that is not privileged): jobs run in the enclosing cgroup, one job per pod, and the policy's memory and CPU limits do not hold here"
	var unset []string
	if e.Memory > 0 {
		detail += "; the pod's memory limit " + policies.HumanSize(e.Memory)
	} else {
		unset = append(unset, "memory")
	}
	if e.CPUs > 0 {
		detail += fmt.Sprintf("; its CPU limit %g", e.CPUs)
	} else {
		unset = append(unset, "cpu")
	}
	if len(unset) > 0 {
		return bad(Warn, "cgroups", detail+"; nothing bounds a job's "+strings.Join(unset, " or "), "give the runner container resources.limits ("+strings.Join(unset, ", ")+") in the scale set's values")
	}
	return ok("cgroups", "%s", detail)
}

func checkCgroups(context.Context, Options) []Check {
	info := cgroup.Host()
	where := info.Cgroup
	if where == "" {
		where = "/"
	}
	detail := fmt.Sprintf("%s layout, airlock's cgroup %s; controllers for the limits: %s", info.Layout, where, orNone(info.Available))
	if info.Layout == "v2" {
		detail += fmt.Sprintf(" (at the root; enabled for airlock's cgroup now: %s; airlock enables the rest down its path, and moves its cgroup's processes into a leaf, %s, when that cgroup holds them)", orNone(info.Delegated), "airlock-leaf")
	}
	switch {
	case info.Layout == "none":
		return []Check{bad(Fail, "cgroups", "no cgroup file system at /sys/fs/cgroup", "mount cgroup2 at /sys/fs/cgroup (or the v1 hierarchies)")}
	case len(info.Missing) > 0 && info.Layout == "v2":
		return []Check{bad(Fail, "cgroups", detail+"; missing: "+strings.Join(info.Missing, ", "),
			"the hierarchy airlock sees lacks them: on a host, enable them at the root; in a container, delegate them to its cgroup namespace (systemd: Delegate=yes in the runner's unit)")}
	case len(info.Missing) > 0:
		return []Check{bad(Warn, "cgroups", detail+"; not mounted: "+strings.Join(info.Missing, ", "), "mount the v1 hierarchies of the missing controllers under /sys/fs/cgroup; without them a job's limits do not hold")}
	case info.ReadOnly:
		return []Check{enclosedCheck(detail, *info.Enclosing)}
	}
	return []Check{ok("cgroups", "%s", detail)}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// checkPlatforms boots a probe sandbox on each platform.
func checkPlatforms(ctx context.Context, o Options) []Check {
	var out []Check
	if took, err := gvisor.ProbePlatform(ctx, o.StateRoot, gvisor.PlatformSystrap); err != nil {
		fix := "see " + probeLog(o.StateRoot, gvisor.PlatformSystrap) + "; systrap needs seccomp and ptrace-free process creation"
		if hint := gvisor.ContainerFix(err.Error()); hint != "" {
			fix += "; " + hint
		}
		out = append(out, bad(Fail, "platform systrap", "a probe sandbox did not boot: "+err.Error(), fix))
	} else {
		out = append(out, ok("platform systrap", "a probe sandbox booted in %s", took.Round(time.Millisecond)))
	}
	// The verdict is kept where every job reads it (the host's, shared by
	// every state directory); doctor waits for its probe, a job never does.
	if err := gvisor.KVMDeviceUsable(); errors.Is(err, fs.ErrNotExist) {
		out = append(out, ok("platform kvm", "none (%v): auto runs jobs on systrap", err))
	} else if usable, why := gvisor.JudgeKVM(ctx, o.StateRoot); usable {
		out = append(out, ok("platform kvm", "usable: %s; auto runs jobs on kvm", why))
	} else {
		out = append(out, bad(Warn, "platform kvm", "unusable: "+why+"; auto runs jobs on systrap",
			"none needed: systrap runs every job, only slower on system calls; for kvm, give the host a /dev/kvm that gVisor boots on (bare metal, or nested virtualisation that passes the host CPU's features), then run airlock doctor again"))
	}
	return out
}

func probeLog(root, platform string) string {
	return filepath.Join(root, "platform", platform+"-probe.log")
}

// stateRoots are the doors' state directories:
// airlock run's state root and the hook's jobs root.
func stateRoots(o Options) []string {
	roots := []string{o.StateRoot}
	if o.HookDir != "" && filepath.Clean(o.HookDir) != filepath.Clean(o.StateRoot) {
		roots = append(roots, o.HookDir)
	}
	return roots
}

// checkSandbox creates a sandbox as a job's is made, limits and cgroups
// included, and runs `true` in it.
func checkSandbox(ctx context.Context, o Options) []Check {
	// As a job starts it: from the sidecar where one is usable.
	sidecar, _ := gvisor.OwnRunsc(o.RunscBuildID)
	p, took, err := gvisor.ProbeJob(ctx, o.StateRoot, sidecar)
	if err != nil {
		fix := "this host cannot start a job's sandbox; the error names the part that failed"
		if strings.Contains(err.Error(), "cgroup") {
			fix = "the sandbox's cgroup could not be set up: see the cgroups line above"
		}
		return []Check{bad(Fail, "sandbox", "a job's sandbox (default limits) did not start: "+err.Error(), fix)}
	}
	return []Check{ok("sandbox", "a job's sandbox (default limits, cgroups, overlay, bounded workspace) ran `true` in %s on %s", took.Round(time.Millisecond), p)}
}

// checkWorkspaceLimit bounds a scratch workspace as a job's is bounded
// (sandbox.limits.workspace: loop device, ext4 image, overlay), writes
// into it, and releases it.
func checkWorkspaceLimit(context.Context, Options) []Check {
	fail := func(err error) []Check {
		return []Check{bad(Fail, "workspace limit", "a workspace could not be bounded: "+err.Error(),
			"install e2fsprogs (mkfs.ext4); airlock needs loop devices (/dev/loop-control), ext4 and overlayfs; in a pod without loop devices airlock mounts a tmpfs instead, which needs CAP_SYS_ADMIN (deploy/arc/values.yaml); or, organisation only, sandbox.limits.workspace: \"0\" for no limit")}
	}
	base, err := os.MkdirTemp("", "airlock-doctor-workspace-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(base)
	ws := filepath.Join(base, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return fail(err)
	}
	start := time.Now()
	v, err := quota.Mount(filepath.Join(base, "volume"), "", ws, quota.Limit{Bytes: quota.MinBytes})
	if err != nil {
		return fail(err)
	}
	took := time.Since(start)
	medium := "an ext4 image on a loop device"
	if v.Medium() == quota.MediumTmpfs {
		medium = "a tmpfs: no loop devices here, so a job's workspace writes are kept in memory until the merge, counted against the pod's memory"
	}
	werr := os.WriteFile(filepath.Join(ws, "probe"), []byte("airlock doctor\n"), 0o644)
	if _, err := v.Release(); err != nil || werr != nil {
		return fail(errors.Join(werr, err))
	}
	if b, err := os.ReadFile(filepath.Join(ws, "probe")); err != nil || string(b) != "airlock doctor\n" {
		return fail(fmt.Errorf("what was written was not merged back: %q %v", b, err))
	}
	return []Check{ok("workspace limit", "a workspace bounded (%s, overlay) in %s, written and merged back", medium, took.Round(time.Millisecond))}
}

// checkNetwork makes a job's two network namespaces with their veth
// pair, and removes them.
func checkNetwork(context.Context, Options) []Check {
	pair, err := netns.New(netns.DefaultSubnet, netns.DefaultPool)
	if err != nil {
		return []Check{bad(Fail, "network", "a job's network namespaces and veth pair could not be made: "+err.Error(),
			"airlock needs network namespaces and veth (CONFIG_NET_NS, CONFIG_VETH), CAP_SYS_ADMIN and CAP_NET_ADMIN; in a pod, add both to the runner container's capabilities (deploy/arc/values.yaml)")}
	}
	if err := pair.Close(); err != nil {
		return []Check{bad(Warn, "network", "the namespaces were made but not removed cleanly: "+err.Error(), "")}
	}
	return []Check{ok("network", "network namespaces and a veth pair made and removed (the egress gateway's set-up)")}
}

// checkStateDirs checks each state directory: free space, owner, mode,
// and that no job can write it (it is inside no workspace).
func checkStateDirs(_ context.Context, o Options) []Check {
	var out []Check
	for _, d := range stateRoots(o) {
		out = append(out, checkStateDir(d, o.Workspaces, o.Spelling))
	}
	return out
}

func checkStateDir(dir string, workspaces []string, spell input.Spelling) Check {
	name := "state " + dir
	if err := gvisor.CheckStateRoot(dir, workspaces...); err != nil {
		return bad(Fail, name, err.Error(), "give airlock a state directory outside every workspace, with a short path ("+spell.Of(input.StateDir)+", AIRLOCK_HOOK_DIR)")
	}
	real, err := filepath.Abs(dir)
	if err != nil {
		return bad(Fail, name, err.Error(), "")
	}
	// The directory may not exist yet (the first job makes it): look at
	// the nearest that does.
	at := real
	for {
		if _, err := os.Stat(at); err == nil || at == "/" {
			break
		}
		at = filepath.Dir(at)
	}
	var st unix.Stat_t
	if err := unix.Stat(at, &st); err != nil {
		return bad(Fail, name, err.Error(), "")
	}
	if at == real && (st.Uid != 0 || st.Mode&0o022 != 0) {
		return bad(Fail, name, fmt.Sprintf("owned by uid %d, mode %#o: others may change it", st.Uid, st.Mode&0o777), "chown root "+dir+" && chmod go-w "+dir)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(at, &fs); err != nil {
		return bad(Fail, name, "statfs: "+err.Error(), "")
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	detail := fmt.Sprintf("%s free", policies.HumanSize(free))
	if at != real {
		detail += " (on " + at + "; the first job creates it)"
	}
	if free < minFreeState {
		return bad(Warn, name, detail, "free space there: each job's root overlay and logs are kept in it while the job runs (up to the overlay size, sandbox.limits.overlay)")
	}
	return ok(name, "%s", detail)
}

// checkNode runs node --version.
func checkNode(ctx context.Context, o Options) []Check {
	node := o.Node
	if node == "" {
		p, err := exec.LookPath("node")
		if err != nil {
			return []Check{bad(Warn, "node", "no node in PATH", "the runner runs the hook's index.js with its own externals/node20/bin/node: give "+o.Spelling.Of(input.Node)+" to check it; `airlock run` does not need node")}
		}
		node = p
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--version")
	cmd.Env = []string{"PATH=" + gvisor.DefaultPath}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return []Check{bad(Fail, "node", node+" --version: "+err.Error(), "give "+o.Spelling.Of(input.Node)+" as the runner's externals/node20/bin/node")}
	}
	v := strings.TrimSpace(out.String())
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[0])
	if major < MinNode {
		return []Check{bad(Warn, "node", fmt.Sprintf("%s is %s", node, v), fmt.Sprintf("the hook is tested with node %d (the runner's externals/node%d)", MinNode, MinNode))}
	}
	return []Check{ok("node", "%s %s (for the runner hook's index.js)", node, v)}
}

// checkPolicyAndKey vets the organisation policy and loads the signing
// key it (or the host) names.
func checkPolicyAndKey(ctx context.Context, o Options) []Check {
	var out []Check
	key := o.AttestKey
	var eff *policies.Effective
	srcs, err := policies.OrgSources(o.OrgDir)
	switch {
	case err != nil:
		out = append(out, bad(Fail, "organisation policy", err.Error(), "fix the files, then check them with airlock policy vet"))
	case len(srcs) == 0:
		out = append(out, bad(Warn, "organisation policy", "none (no "+policies.DefaultOrgDir+", no "+o.Spelling.Of(input.OrgDir)+")", "without one, a repository's .github/airlock.cue alone decides its sandbox and egress: put the organisation's *.cue files in "+policies.DefaultOrgDir))
	default:
		eff, err = policies.Load(ctx, srcs)
		if err != nil {
			out = append(out, bad(Fail, "organisation policy", policyError(err), "airlock policy vet "+filepath.Dir(srcs[0].Path)+"/*.cue shows every problem with its position"))
		} else {
			out = append(out, ok("organisation policy", "%d file(s) in %s vet; effective sha256:%s", len(srcs), filepath.Dir(srcs[0].Path), eff.Digest))
			if key == "" {
				key = eff.Policy.Attest.Key
			}
		}
	}
	out = append(out, checkKey(ctx, key, o.Password))
	var orgStores []storeref.Ref
	if eff != nil && eff.Org != nil {
		orgStores = eff.Org.Attest.Stores()
	}
	return append(out, checkStores(ctx, orgStores, o))
}

// checkStores says where the jobs' attestations are kept, and whether
// each store answers with the host's credentials (a store that does not
// is a warning: it may be down now, and a job then fails for it).
func checkStores(ctx context.Context, fromPolicy []storeref.Ref, o Options) Check {
	host, err := storeref.ParseList(o.AttestStores)
	if err != nil {
		return bad(Fail, "attestation store", err.Error(), "fix AIRLOCK_ATTEST_STORE: every prepare_job refuses the job until then")
	}
	stores := storeref.Merge(fromPolicy, host...)
	if len(stores) == 0 {
		return bad(Warn, "attestation store", "none: the attestations stay in the runner's own directory (an ARC pod's is gone with the pod)", "name one in the organisation policy (attest: store: [{uri: \"oci://REGISTRY/REPOSITORY\"}]) or in AIRLOCK_ATTEST_STORE, with its credentials in AIRLOCK_ATTEST_STORE_AUTH (docs/attestations.md)")
	}
	var names, trouble []string
	for _, r := range stores {
		names = append(names, r.String())
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := store.Probe(pctx, r, store.Options{AuthFile: o.AttestStoreAuth, Attempts: 1, AttemptTimeout: 10 * time.Second, Deadline: 20 * time.Second})
		cancel()
		if err != nil {
			trouble = append(trouble, err.Error())
		}
	}
	if len(trouble) > 0 {
		return bad(Warn, "attestation store", strings.Join(trouble, "; "), "a job whose required store does not take its record fails: check the store and its credentials file")
	}
	return ok("attestation store", "%s answer(s) a read (a push is proven by a job's); credentials from %s", strings.Join(names, ", "), cmp.Or(o.AttestStoreAuth, "none (anonymous)"))
}

func checkKey(ctx context.Context, ref string, password attest.PasswordFunc) Check {
	if ref == "" {
		return bad(Warn, "signing key", "none configured: attestations are written unsigned", "generate one (airlock keys generate) and set AIRLOCK_ATTEST_KEY or attest.key in the organisation policy")
	}
	signer, err := attest.LoadSigner(ctx, ref, password)
	if err != nil {
		return bad(Fail, "signing key", err.Error(), "make the key readable by root (and its password available in AIRLOCK_KEY_PASSWORD for an encrypted key)")
	}
	pub, err := signer.PublicKey()
	if err != nil {
		return bad(Fail, "signing key", ref+": public key: "+err.Error(), "")
	}
	if fi, err := os.Stat(ref); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && (st.Uid != 0 || fi.Mode().Perm()&0o077 != 0) {
			return bad(Warn, "signing key", fmt.Sprintf("%s: owned by uid %d, mode %#o; public key sha256 %s", ref, st.Uid, fi.Mode().Perm(), attest.KeyHint(pub)), "chown root "+ref+" && chmod 600 "+ref)
		}
	}
	return ok("signing key", "%s loads; public key sha256 %s (the hint in every bundle)", ref, attest.KeyHint(pub))
}

// policyError is a policy's problems on one line.
func policyError(err error) string {
	var pe *policies.Error
	if errors.As(err, &pe) {
		return "invalid policy: " + strings.Join(pe.Problems, "; ")
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
