package hook

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/internal/paths"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner"
)

// Docker actions and service containers run as containers of their own
// inside the job's sandbox, on the image directory the organisation
// policy maps their image to (sandbox.images): same kernel, so the same
// network (the job reaches a service at its name, which /etc/hosts points
// at loopback), limits, egress gateway and record. Nothing else can run:
// there is no image store and no image builder in a sandbox.

// command is what a container runs: the workflow's entry point and
// arguments (the runner's pieces, split as the reference hooks split
// them, see Args); without an entry point, the image's command (an OCI
// bundle records it), whose first word stands for the image's entry
// point when the workflow gives arguments.
func command(entry string, pieces []string, img runner.Image, what string) ([]string, error) {
	args, err := Args(pieces)
	if err != nil {
		return nil, fmt.Errorf("%s: the arguments %q do not parse: %w", what, strings.Join(pieces, " "), err)
	}
	switch {
	case entry != "":
		return append([]string{entry}, args...), nil
	case len(img.Args) == 0:
		return nil, fmt.Errorf("%s: no entry point: the workflow gives none and the image directory %s records no command (map the image to an OCI bundle with config.json, as `umoci unpack` writes)", what, img.RootFS)
	case len(args) > 0:
		return append([]string{img.Args[0]}, args...), nil
	}
	return img.Args, nil
}

// The runner sets these in every container it starts (actions/runner
// DockerCommandManager.cs: "Watermark for GitHub Action environment"):
// GITHUB_ACTIONS always, CI unless the workflow sets it.
func runnerWatermark(env map[string]string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	out["GITHUB_ACTIONS"] = "true"
	if _, ok := env["CI"]; !ok {
		out["CI"] = "true"
	}
	return out
}

// serviceNames names the job's services, which the runner sends without
// the workflow's names for them (actions/runner#2783): each after its
// image's last path component (redis:7 and docker.io/library/redis are
// "redis", ghcr.io/acme/db:1 is "db"), made a host name, "-2", "-3"... on
// a clash, in the order given.
func serviceNames(services []Container) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range services {
		ref, _, _ := strings.Cut(s.Image, "@")
		ref = ref[strings.LastIndex(ref, "/")+1:]
		ref, _, _ = strings.Cut(ref, ":")
		base := strings.Trim(hostChars.ReplaceAllString(strings.ToLower(ref), "-"), "-")
		if len(base) > 48 {
			base = strings.Trim(base[:48], "-")
		}
		if base == "" {
			base = "service"
		}
		name := base
		for n := 2; seen[name]; n++ {
			name = fmt.Sprintf("%s-%d", base, n)
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

var hostChars = regexp.MustCompile(`[^a-z0-9-]+`)

// startServices starts the job's services in its sandbox, named by
// serviceNames; their output, prefixed with their names, is kept (its
// end) for cleanup_job to print. The runner matches its answer to the
// services by index: one entry each, in order, with ports never null.
func (d *job) startServices(ctx context.Context, services []Container, names []string) ([]ResponseContainer, error) {
	out := []ResponseContainer{}
	for i, s := range services {
		what := "service " + names[i]
		if len(s.UserMountVolumes) > 0 {
			fmt.Fprintf(os.Stderr, "airlock: %s: its own volumes are not mounted (%d): a workflow may not mount host paths into the sandbox\n", what, len(s.UserMountVolumes))
		}
		img, err := d.images.Open(ctx, s.Image, what)
		if err != nil {
			return nil, err
		}
		argv, err := command(s.EntryPoint, s.EntryPointArgs, img, what)
		if err != nil {
			return nil, err
		}
		env := append(slices.Clone(img.Env), runner.EnvList(runnerWatermark(s.Env))...)
		if err := d.session.StartService(ctx, gvisor.ContainerConfig{
			Name: "service-" + names[i], RootFS: img.RootFS, Args: argv, Env: env, Dir: img.Dir, Files: d.hosts,
		}, &d.serviceLog); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		// Inside the sandbox a service's ports are its own: the job
		// reaches them at the service's name and on localhost, at the
		// port the service listens on.
		ports := map[string]string{}
		for _, m := range s.PortMappings {
			p := m[strings.LastIndex(m, ":")+1:]
			p, _, _ = strings.Cut(p, "/")
			ports[p] = p
		}
		out = append(out, ResponseContainer{ID: "service-" + names[i], Network: "airlock", Ports: ports})
	}
	return out, nil
}

// ContainerStep runs a Docker action in a container of its own on its
// image (mapped by the policy, or pulled under it), with the image's PATH
// (the runner sends no prependPath for it).
func (d *job) ContainerStep(ctx context.Context, a ContainerStepArgs, stdout, stderr io.Writer) (int, error) {
	d.takeBaseline(stderr)
	if a.Dockerfile != nil && *a.Dockerfile != "" {
		return 1, fmt.Errorf("run_container_step: the action builds its image from %s, and airlock has no image builder in the sandbox: replace the action with run: steps or a JavaScript action, or ask the runner's administrators to map a prebuilt image (sandbox.images) and use it with docker://", *a.Dockerfile)
	}
	img, err := d.images.Open(ctx, a.Image, "run_container_step")
	if err != nil {
		return 1, fmt.Errorf("%w: replace the action with run: steps or a JavaScript action, or ask the runner's administrators to allow or map the image", err)
	}
	argv, err := command(a.EntryPoint, a.EntryPointArgs, img, "run_container_step")
	if err != nil {
		return 1, err
	}
	d.recordImage(a.Image)
	mounts, err := d.stepMounts(a.SystemMountVolumes)
	if err != nil {
		return 1, fmt.Errorf("run_container_step: %w", err)
	}
	if len(a.UserMountVolumes) > 0 {
		fmt.Fprintf(stderr, "airlock: the action's own volumes are not mounted (%d): a workflow may not mount host paths into the sandbox\n", len(a.UserMountVolumes))
	}
	staged := d.stageFileCommands(a.Env, fileCommandsInAction)
	defer d.copyBack(staged, stderr)
	return d.runStep(ctx, runner.StepSpec{
		Name: "docker://" + a.Image, Command: argv, Env: runnerWatermark(a.Env), WorkingDirectory: a.WorkingDirectory,
		Image: &img, Mounts: mounts, Files: d.hosts,
	}, stdout, stderr)
}

// stepMounts maps a Docker action's volumes: only the runner's own
// directories (below its work directory, or the job's own mounts, never
// more writable than the job has them), never the Docker socket; what
// the job's sandbox masks below them (the runner's hook responses, the
// policy's masks) stays covered.
//
// The job has run by now and can have replaced any directory below the
// work directory with a symlink to the host's root: such a source is
// resolved from the work directory without following symlinks, right
// before runsc binds it (gvisor.Mount.Beneath).
func (d *job) stepMounts(vols []Mount) ([]gvisor.Mount, error) {
	work, _ := d.mounts.Host(containerWork)
	if err := d.masksInPlace(work); err != nil {
		return nil, err
	}
	var out []gvisor.Mount
	for _, v := range Mounts(vols).Sorted() {
		src, dst := filepath.Clean(v.Source), path.Clean(v.Target)
		if strings.Contains(dst, "docker.sock") || strings.Contains(src, "docker.sock") {
			continue
		}
		m := gvisor.Mount{Source: src, Destination: dst, ReadOnly: v.ReadOnly}
		switch job, isJob := d.jobMount(src); {
		case d.fileCommands != "" && src == d.runnerFileCommands:
			// The job's own file-command directory (filecommands.go).
			m.Source = d.fileCommands
		case paths.Within(src, work):
			m.Beneath = work
		case isJob:
			// Mounted for the job at prepare_job, before any of its code
			// ran, and never writable when the job's mount is not.
			m.ReadOnly = m.ReadOnly || job.ReadOnly
		default:
			return nil, fmt.Errorf("volume %s -> %s is outside the runner's work directory; airlock mounts only the runner's own directories", v.Source, v.Target)
		}
		out = append(out, m)
		for _, mask := range d.hostMasks {
			if !paths.Below(mask, src) {
				continue
			}
			cover, err := d.emptyLike(mask)
			if err != nil {
				return nil, err
			}
			rel, _ := filepath.Rel(src, mask)
			out = append(out, gvisor.Mount{Source: cover, Destination: path.Join(dst, filepath.ToSlash(rel)), ReadOnly: true})
		}
		if d.fileCommands != "" && paths.Below(d.runnerFileCommands, src) {
			// The runner's temp directory as a volume: the runner's file
			// commands in it are the job's own here too.
			rel, _ := filepath.Rel(src, d.runnerFileCommands)
			out = append(out, gvisor.Mount{Source: d.fileCommands, Destination: path.Join(dst, filepath.ToSlash(rel))})
		}
	}
	return out, nil
}

// jobMount is the job's own mount with this host source, if any.
func (d *job) jobMount(src string) (Mount, bool) {
	for _, m := range d.mounts {
		if filepath.Clean(m.Source) == src {
			return m, true
		}
	}
	return Mount{}, false
}

// emptyLike returns an empty directory of the job's to mount over a
// masked directory. A masked file inside a volume cannot be covered so:
// the step is refused rather than shown it.
func (d *job) emptyLike(mask string) (string, error) {
	if fi, err := os.Lstat(mask); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("the volume holds %s, which the policy masks and which is not a directory: airlock cannot hide a file inside a Docker action's volume", mask)
	}
	dir := filepath.Join(d.dir, "empty")
	return dir, os.MkdirAll(dir, 0o555)
}

// fileID identifies a file whatever its name.
type fileID struct{ dev, ino uint64 }

// pinMasks records the identity of each mask below the work directory,
// before any of the job's code runs (its services start after it) and
// once the sandbox has the work directory as it will be during the job.
func (d *job) pinMasks(work string) {
	d.maskIDs = map[string]fileID{}
	for _, m := range d.hostMasks {
		if id, ok := identity(work, m); ok {
			d.maskIDs[m] = id
		}
	}
}

// masksInPlace refuses a Docker action when a masked directory is no
// longer where it was: the job can rename a parent of a mask (gVisor
// keeps only the mount point itself from moving) and so carry it into a
// volume, uncovered, under another name.
func (d *job) masksInPlace(work string) error {
	for m, want := range d.maskIDs {
		if got, ok := identity(work, m); !ok || got != want {
			return fmt.Errorf("%s, which the job may not see, was moved or replaced by the job: no Docker action runs in this job any more", m)
		}
	}
	return nil
}

// identity is the device and inode of p below base, reached without
// following symlinks.
func identity(base, p string) (fileID, bool) {
	f, err := files.OpenBeneath(base, p)
	if err != nil {
		return fileID{}, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

// maxServiceLog is how much of the services' output cleanup_job prints.
const maxServiceLog = 64 << 10

// tailBuffer keeps the last maxServiceLog bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	cut bool // something was dropped from the front
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - maxServiceLog; over > 0 {
		t.buf, t.cut = append(t.buf[:0], t.buf[over:]...), true
	}
	return len(p), nil
}

// writeTo prints what was kept, control characters shown as '?' (the
// lines are the services' own, each prefixed with its name).
func (t *tailBuffer) writeTo(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return
	}
	what := "the services' output"
	if t.cut {
		what += fmt.Sprintf(" (its last %d KiB)", maxServiceLog>>10)
	}
	fmt.Fprintf(w, "airlock: %s:\n%s\n", what, strings.TrimRight(textsafe.Lines(string(t.buf)), "\n"))
}
