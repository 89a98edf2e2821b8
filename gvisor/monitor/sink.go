package monitor

import (
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"gvisor.dev/gvisor/pkg/atomicbitops"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/fd"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/seccheck"
	pb "gvisor.dev/gvisor/pkg/sentry/seccheck/points/points_go_proto"
	// The remote sink, whose setup setupSink runs (runsc links it too).
	_ "gvisor.dev/gvisor/pkg/sentry/seccheck/sinks/remote"
	"gvisor.dev/gvisor/pkg/sentry/seccheck/sinks/remote/wire"
)

// SinkName is the trace sink airlock's sandboxes send their events
// through (PodInitConfig names it). It is gVisor's "remote" sink, the
// same handshake and packets, with one difference: it runs in the sentry
// (runsc boot is airlock's binary, so it is registered there too) and
// passes on only the events a Record keeps. A build opens files by the
// hundred thousand, and a message per open, sent by the sentry and read
// by airlock, cost a warm policy-mode step a fifth of its time (issue
// 38); the record keeps only the opens refused with EROFS.
const SinkName = "airlock"

// The sink must be known by name before runsc reads a pod init config:
// gVisor offers only a registry filled at init (its own sinks register
// the same way).
func init() {
	seccheck.RegisterSink(seccheck.SinkDesc{Name: SinkName, Setup: setupSink, New: newSink})
}

// Kept says whether an event of type t is one a Record keeps, so that the
// sentry sends it: everything but the opens not refused with EROFS, the
// forks not refused with EAGAIN and the exits of threads that do not lead
// their thread group. Record.apply asks it too, of what it receives.
func Kept(t pb.MessageType, msg proto.Message) bool {
	type withExit interface{ GetExit() *pb.Exit }
	switch t {
	case pb.MessageType_MESSAGE_SYSCALL_OPEN:
		m, ok := msg.(withExit)
		return !ok || m.GetExit().GetErrorno() == int64(unix.EROFS)
	case pb.MessageType_MESSAGE_SYSCALL_CLONE, pb.MessageType_MESSAGE_SYSCALL_FORK:
		m, ok := msg.(withExit)
		return !ok || m.GetExit().GetErrorno() == int64(unix.EAGAIN)
	case pb.MessageType_MESSAGE_SENTRY_TASK_EXIT:
		m, ok := msg.(*pb.TaskExit)
		if !ok || m.GetContextData() == nil {
			return true
		}
		return m.GetContextData().GetThreadId() == m.GetContextData().GetThreadGroupId()
	}
	return true
}

// setupSink runs in the process that creates the sandbox (airlock): it
// connects to the receiver and shakes hands exactly as gVisor's remote
// sink does, by running that sink's own setup.
func setupSink(config map[string]any) (*os.File, error) {
	files, err := seccheck.SetupSinks([]seccheck.SinkConfig{{Name: "remote", Config: config}})
	if err != nil {
		return nil, err
	}
	return files[0], nil
}

// sentrySink runs in the sentry. Its write is gVisor's remote sink's
// (pkg/sentry/seccheck/sinks/remote/remote.go), whose constructor is not
// exported: a non-blocking write of header and payload, a few retries
// while the socket is full, then the event is counted as dropped.
type sentrySink struct {
	seccheck.SinkDefaults
	endpoint       *fd.FD
	dropped        atomicbitops.Uint32
	retries        int
	initialBackoff time.Duration
	maxBackoff     time.Duration
}

func newSink(config map[string]any, endpoint *fd.FD) (seccheck.Sink, error) {
	if endpoint == nil {
		return nil, fmt.Errorf("the %s trace sink needs an endpoint", SinkName)
	}
	s := &sentrySink{endpoint: endpoint, initialBackoff: 25 * time.Microsecond, maxBackoff: 10 * time.Millisecond}
	if v, ok := config["retries"]; ok {
		n, ok := v.(float64)
		if !ok || n != float64(int(n)) || n < 0 {
			return nil, fmt.Errorf("retries %v is not a count", v)
		}
		s.retries = int(n)
	}
	for key, d := range map[string]*time.Duration{"backoff": &s.initialBackoff, "backoff_max": &s.maxBackoff} {
		v, ok := config[key]
		if !ok {
			continue
		}
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s %v is not a duration", key, v)
		}
		parsed, err := time.ParseDuration(str)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		*d = parsed
	}
	if s.initialBackoff > s.maxBackoff {
		return nil, fmt.Errorf("backoff %v is above backoff_max %v", s.initialBackoff, s.maxBackoff)
	}
	return s, nil
}

func (*sentrySink) Name() string { return SinkName }

func (s *sentrySink) Status() seccheck.SinkStatus {
	return seccheck.SinkStatus{DroppedCount: uint64(s.dropped.Load())}
}

func (s *sentrySink) Stop() { s.endpoint.Close() }

// send sends an event the record keeps, an open with its path's
// directory filled in (resolveOpen); the others are dropped here.
func (s *sentrySink) send(ctx context.Context, msg proto.Message, t pb.MessageType) {
	if !Kept(t, msg) {
		return
	}
	if open, ok := msg.(*pb.Open); ok {
		resolveOpen(ctx, open)
	}
	out, err := proto.Marshal(msg)
	if err != nil {
		s.dropped.Add(1)
		return
	}
	hdr := wire.Header{HeaderSize: uint16(wire.HeaderStructSize), DroppedCount: s.dropped.Load(), MessageType: uint16(t)}
	var hdrOut [wire.HeaderStructSize]byte
	hdr.MarshalUnsafe(hdrOut[:])
	backoff := s.initialBackoff
	for i := 0; ; i++ {
		_, err := unix.Writev(s.endpoint.FD(), [][]byte{hdrOut[:], out})
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EAGAIN) || i >= s.retries {
			s.dropped.Add(1)
			return
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, s.maxBackoff)
	}
}

func (s *sentrySink) Clone(ctx context.Context, _ seccheck.FieldSet, m *pb.CloneInfo) error {
	s.send(ctx, m, pb.MessageType_MESSAGE_SENTRY_CLONE)
	return nil
}

func (s *sentrySink) Execve(ctx context.Context, _ seccheck.FieldSet, m *pb.ExecveInfo) error {
	s.send(ctx, m, pb.MessageType_MESSAGE_SENTRY_EXEC)
	return nil
}

func (s *sentrySink) ExitNotifyParent(ctx context.Context, _ seccheck.FieldSet, m *pb.ExitNotifyParentInfo) error {
	s.send(ctx, m, pb.MessageType_MESSAGE_SENTRY_EXIT_NOTIFY_PARENT)
	return nil
}

func (s *sentrySink) TaskExit(ctx context.Context, _ seccheck.FieldSet, m *pb.TaskExit) error {
	s.send(ctx, m, pb.MessageType_MESSAGE_SENTRY_TASK_EXIT)
	return nil
}

func (s *sentrySink) Mmap(ctx context.Context, _ seccheck.FieldSet, m *pb.MmapInfo) error {
	s.send(ctx, m, pb.MessageType_MESSAGE_SENTRY_MMAP)
	return nil
}

func (s *sentrySink) ContainerStart(ctx context.Context, _ seccheck.FieldSet, m *pb.Start) error {
	s.send(ctx, m, pb.MessageType_MESSAGE_CONTAINER_START)
	return nil
}

func (s *sentrySink) RawSyscall(ctx context.Context, _ seccheck.FieldSet, m *pb.Syscall) error {
	s.send(ctx, m, pb.MessageType_MESSAGE_SYSCALL_RAW)
	return nil
}

func (s *sentrySink) Syscall(ctx context.Context, _ seccheck.FieldSet, _ *pb.ContextData, t pb.MessageType, m proto.Message) error {
	s.send(ctx, m, t)
	return nil
}

// resolveOpen fills in, for an open the sink sends with a relative path,
// the directory that path is relative to: the task's working directory
// (the context's cwd) or the directory of the fd it named (fd_path), as
// gVisor's points would (pkg/sentry/kernel/seccheck.go,
// pkg/sentry/syscalls/linux/points.go). The trace session does not ask
// the sentry for them (PodInitConfig): each is a walk up the dentry tree,
// for every open of a build, of which the record keeps a handful. It runs
// on the task's goroutine (the syscall's exit), where the task's file
// system context and fd table may be read without locks.
func resolveOpen(ctx context.Context, m *pb.Open) {
	if ctx == nil || path.IsAbs(m.GetPathname()) {
		return
	}
	t := kernel.TaskFromContext(ctx)
	if t == nil {
		return
	}
	if m.GetFd() == int64(unix.AT_FDCWD) {
		root, wd := t.FSContext().RootDirectory(), t.FSContext().WorkingDirectory()
		if !root.Ok() || !wd.Ok() {
			return
		}
		defer root.DecRef(t)
		defer wd.DecRef(t)
		cwd, err := t.Kernel().VFS().PathnameWithDeleted(t, root, wd)
		if err != nil {
			return
		}
		if m.ContextData == nil {
			m.ContextData = &pb.ContextData{}
		}
		m.ContextData.Cwd = cwd
		return
	}
	fdt := t.FDTable()
	if fdt == nil || m.GetFd() < 0 || m.GetFd() > int64(^uint32(0)>>1) {
		return
	}
	file, _ := fdt.Get(int32(m.GetFd()))
	if file == nil {
		return
	}
	defer file.DecRef(t)
	root := t.MountNamespace().Root(t)
	defer root.DecRef(t)
	if dir, err := t.Kernel().VFS().PathnameWithDeleted(t, root, file.VirtualDentry()); err == nil {
		m.FdPath = dir
	}
}
