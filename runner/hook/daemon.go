package hook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/report"
)

// watchdogSlack is how long past its job timeout a job whose cleanup
// never came (the runner died, or its state was lost) lives on.
const watchdogSlack = 15 * time.Minute

// Dispatch runs the job daemon when this process was started as one (by
// prepare_job, through /proc/self/exe) and exits; otherwise it returns.
// main calls it first, right after gvisor.Dispatch.
func Dispatch(b Build) {
	if filepath.Base(os.Args[0]) == daemonArg0 && len(os.Args) == 2 {
		os.Exit(daemon(ConfigFromEnv(b), os.Args[1]))
	}
}

// daemon is the job daemon: it opens the job's session and serves the
// hook calls until cleanup_job.
func daemon(cfg Config, dir string) int {
	// First, before anything can start: the registry credentials
	// prepare_job piped in (registry.go).
	creds, credErr := readCredentials(os.Stdin)
	d := &job{cfg: cfg, dir: dir}
	fail := func(err error) int {
		// A registry's refusal may quote what it was sent.
		err = redactErr(err, creds)
		os.WriteFile(filepath.Join(dir, daemonFailed), []byte(err.Error()), 0o600)
		fmt.Fprintf(os.Stderr, "airlock hook daemon: %v\n", err)
		if d.checkID != 0 {
			// The check run does not stay "in progress".
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d.gh.CompleteCheck(ctx, d.owner, d.repo, d.checkID, github.Report{Conclusion: "failure", Title: "airlock: the job could not start", Summary: textsafe.Line(err.Error())})
		}
		return 1
	}
	signal.Ignore(syscall.SIGHUP)
	os.WriteFile(filepath.Join(dir, daemonPIDFile), []byte(fmt.Sprint(os.Getpid())), 0o600)
	if credErr != nil {
		return fail(credErr)
	}
	b, err := os.ReadFile(filepath.Join(dir, prepareInputFile))
	if err != nil {
		return fail(err)
	}
	var args PrepareArgs
	if err := json.Unmarshal(b, &args); err != nil || args.Container == nil {
		return fail(fmt.Errorf("prepare input: %v", err))
	}
	j, err := d.build(context.Background(), args)
	if err != nil {
		return fail(err)
	}
	logf := os.Stderr
	j.Log, j.Stdout, j.Stderr = logf, logf, logf
	// The job container's and the services' pulls, each with the
	// credentials it came with; dropped once they are done.
	d.images.RefCredentials = byRef(creds)
	s, err := runner.Open(context.Background(), j, cfg.Runtime)
	if err != nil {
		s.Abandon()
		return fail(err)
	}
	d.session = s
	// The stores get the commit's share of the push while the job runs;
	// not before the sandbox is up (gvisor swaps the process's
	// environment while it creates one: report.PrepareStores).
	d.storesPrepared = report.PrepareStores(context.Background(), &d.attest)
	d.setContainerPath(s.ImageEnv()) // a pulled image's PATH is known now
	// Once the sandbox is there: a bounded workspace is an overlay by
	// now, and the masks' identities are the overlay's.
	d.pinMasks(j.Sandbox.Workspace)
	svcs, err := d.startServices(context.Background(), args.Services, d.serviceNames)
	d.images.RefCredentials = nil
	if err != nil {
		s.Close()
		return fail(err)
	}
	sock := filepath.Join(dir, daemonSocket)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		s.Abandon()
		return fail(err)
	}
	os.Chmod(sock, 0o600)
	srv := NewServer(d)
	// SIGTERM (the host shutting down) ends the job as cleanup would.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-term
		srv.Shutdown(logf, logf)
	}()
	// A job whose cleanup never comes (the runner died, or its state was
	// lost) ends by itself after its time.
	if d.jobTimeout > 0 {
		time.AfterFunc(d.jobTimeout+watchdogSlack, func() { srv.Shutdown(logf, logf) })
	}
	if err := writeWhole(filepath.Join(dir, daemonReady), ready{Services: svcs, IsAlpine: isAlpine(s.RootFS())}); err != nil {
		s.Abandon()
		return fail(err)
	}
	srv.Serve(ln)
	<-srv.Done()
	// The job is over (cleanup_job, the watchdog or a signal): nothing of
	// it stays on the host but its attestation.
	os.RemoveAll(dir)
	return 0
}

// writeWhole writes v as JSON to path so that a reader sees all of it or
// nothing (a temporary file renamed into place).
func writeWhole(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// maxRelease bounds an os-release file read.
const maxRelease = 64 << 10

// alpineID is the reference hook's test for Alpine
// (packages/docker/src/dockerCommands/container.ts isContainerAlpine:
// grep -i -e "^ID=*alpine*" over /etc/*release*).
var alpineID = regexp.MustCompile(`(?im)^ID=*alpine*`)

// isAlpine reports whether the job's root filesystem (empty: the host's)
// is Alpine's, which makes the runner pick its musl build of node for
// JavaScript actions. Its /etc/*release* files are read inside the root:
// a symlink in an image never leads to the host's files.
func isAlpine(rootfs string) bool {
	if rootfs == "" {
		rootfs = "/"
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return false
	}
	defer root.Close()
	names, _ := fs.Glob(root.FS(), "etc/*release*")
	for _, n := range names {
		f, err := root.Open(n)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(f, maxRelease))
		f.Close()
		if alpineID.Match(b) {
			return true
		}
	}
	return false
}
