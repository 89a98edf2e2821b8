package hook

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/github"
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
	d := &job{cfg: cfg, dir: dir}
	fail := func(err error) int {
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
	s, err := runner.Open(context.Background(), j, cfg.Runtime)
	if err != nil {
		s.Abandon()
		return fail(err)
	}
	d.session = s
	svcs, err := d.startServices(context.Background(), args.Services)
	if err != nil {
		s.Close()
		return fail(err)
	}
	if b, _ := json.Marshal(svcs); len(svcs) > 0 {
		os.WriteFile(filepath.Join(dir, servicesFile), b, 0o600)
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
		srv.Shutdown(os.Stderr, os.Stderr)
	}()
	// A job whose cleanup never comes (the runner died, or its state was
	// lost) ends by itself after its time.
	if d.jobTimeout > 0 {
		time.AfterFunc(d.jobTimeout+watchdogSlack, func() { srv.Shutdown(os.Stderr, os.Stderr) })
	}
	if err := os.WriteFile(filepath.Join(dir, daemonReady), []byte(s.ID()), 0o600); err != nil {
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
