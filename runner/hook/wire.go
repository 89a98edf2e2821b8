package hook

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Handler is what the daemon does for requests.
type Handler interface {
	// Step runs one step and returns its exit code.
	Step(ctx context.Context, args ScriptArgs, stdout, stderr io.Writer) (int, error)
	// ContainerStep runs a Docker action's step and returns its exit code.
	ContainerStep(ctx context.Context, args ContainerStepArgs, stdout, stderr io.Writer) (int, error)
	// Cleanup ends the job, writing its report to stdout and stderr:
	// everything is released when it returns.
	Cleanup(ctx context.Context, stdout, stderr io.Writer) error
}

// Server serves one job's requests: steps one at a time; a cleanup stops
// a running step first, then ends the job and the server.
type Server struct {
	h  Handler
	mu sync.Mutex // held while a step or the cleanup runs

	cmu     sync.Mutex
	cancel  context.CancelFunc // of the running step
	closing bool
	done    chan struct{}
}

// NewServer returns a server for h.
func NewServer(h Handler) *Server { return &Server{h: h, done: make(chan struct{})} }

// Done is closed once the cleanup has run.
func (s *Server) Done() <-chan struct{} { return s.done }

// Serve accepts connections until the cleanup has run.
func (s *Server) Serve(ln net.Listener) {
	go func() { <-s.done; ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go s.serve(c)
	}
}

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req Request
	if err := json.NewDecoder(io.LimitReader(c, maxInput)).Decode(&req); err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	enc := &frameWriter{enc: json.NewEncoder(c), conn: c}
	switch req.Op {
	case "step", "container-step":
		var run func(ctx context.Context) (int, error)
		switch {
		case req.Op == "step" && req.Step != nil:
			run = func(ctx context.Context) (int, error) { return s.h.Step(ctx, *req.Step, enc.stream(1), enc.stream(2)) }
		case req.Op == "container-step" && req.Container != nil:
			run = func(ctx context.Context) (int, error) {
				return s.h.ContainerStep(ctx, *req.Container, enc.stream(1), enc.stream(2))
			}
		default:
			enc.end(-1, "no step")
			return
		}
		code, err := s.step(c, run)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		enc.end(code, msg)
	case "cleanup":
		err := s.cleanup(enc)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		// The answer goes out before the daemon may exit.
		enc.end(0, msg)
		s.finish()
	default:
		enc.end(-1, fmt.Sprintf("unknown request %q", req.Op))
	}
}

// step runs one step (script or container), cancelled when the hook
// process goes away or the cleanup comes.
func (s *Server) step(c net.Conn, run func(context.Context) (int, error)) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.cmu.Lock()
	if s.closing {
		s.cmu.Unlock()
		return -1, errors.New("the job is being cleaned up")
	}
	s.cmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmu.Lock()
	if s.closing {
		s.cmu.Unlock()
		return -1, errors.New("the job is being cleaned up")
	}
	s.cancel = cancel
	s.cmu.Unlock()
	// The hook process going away (the runner cancelled the step) ends
	// the step: the client never writes again, so a read returns then.
	go func() {
		io.Copy(io.Discard, c)
		cancel()
	}()
	return run(ctx)
}

// Shutdown ends the job from within the daemon (a signal, the watchdog),
// as a cleanup request would, without needing the socket (which may be
// gone with the job's directory).
func (s *Server) Shutdown(stdout, stderr io.Writer) error {
	err := s.cleanupTo(stdout, stderr)
	s.finish()
	return err
}

func (s *Server) cleanup(enc *frameWriter) error {
	return s.cleanupTo(enc.stream(1), enc.stream(2))
}

func (s *Server) cleanupTo(stdout, stderr io.Writer) error {
	s.cmu.Lock()
	if s.closing {
		s.cmu.Unlock()
		<-s.done
		return nil
	}
	s.closing = true
	if s.cancel != nil {
		s.cancel() // a running step is stopped before the job ends
	}
	s.cmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h.Cleanup(context.Background(), stdout, stderr)
}

// finish ends the server once the cleanup's answer is sent.
func (s *Server) finish() {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

// frameWriter writes frames as JSON lines, one writer at a time; a
// client that stops reading does not wedge the daemon.
type frameWriter struct {
	mu   sync.Mutex
	enc  *json.Encoder
	conn net.Conn
}

const frameTimeout = 30 * time.Second

func (f *frameWriter) stream(n int) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.conn.SetWriteDeadline(time.Now().Add(frameTimeout))
		if err := f.enc.Encode(Frame{Stream: n, Data: p}); err != nil {
			return 0, err
		}
		return len(p), nil
	})
}

func (f *frameWriter) end(code int, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conn.SetWriteDeadline(time.Now().Add(frameTimeout))
	f.enc.Encode(Frame{Done: true, Exit: code, Error: msg})
}

// DaemonError is a failure the daemon reported (the job failed, say), as
// opposed to not reaching it.
type DaemonError struct{ Msg string }

func (e *DaemonError) Error() string { return e.Msg }

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

// errNoDaemon is a call that found no daemon to answer it.
var errNoDaemon = errors.New("the job's daemon is not running")

// Call sends a request to the daemon at sock and copies the answer's
// output to stdout and stderr. It returns the exit code the daemon sent.
// ctx ending closes the connection, which stops a running step.
func Call(ctx context.Context, sock string, req Request, stdout, stderr io.Writer) (int, error) {
	// What serve reads (at most maxInput bytes).
	line, err := encodeBounded(req)
	if err != nil {
		return -1, fmt.Errorf("hook: the %s request to the job's daemon: %w", req.Op, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return -1, fmt.Errorf("hook: %w (%w): was prepare_job run, or the job cleaned up?", errNoDaemon, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write(line); err != nil {
		return -1, fmt.Errorf("hook: send to the job's daemon: %w", err)
	}
	if uc, ok := c.(*net.UnixConn); ok && req.Op == "cleanup" {
		uc.CloseWrite()
	}
	dec := json.NewDecoder(bufio.NewReader(c))
	for {
		var f Frame
		if err := dec.Decode(&f); err != nil {
			return -1, fmt.Errorf("hook: the job's daemon went away: %w", err)
		}
		switch {
		case f.Done:
			if f.Error != "" {
				return f.Exit, &DaemonError{f.Error}
			}
			return f.Exit, nil
		case f.Stream == 1:
			stdout.Write(f.Data)
		case f.Stream == 2:
			stderr.Write(f.Data)
		}
	}
}
