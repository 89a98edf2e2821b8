package monitor

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	pb "gvisor.dev/gvisor/pkg/sentry/seccheck/points/points_go_proto"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// Bounds on what one record keeps. They are deliberately generous for a CI
// job (a large build execs a few thousand processes) and small enough that a
// hostile workload cannot make airlock use more than a few MiB.
const (
	maxExecs       = 10000
	maxConnects    = 10000
	maxRefused     = 1000
	maxRecordBytes = 8 << 20
	maxPathLen     = 4096
	maxArgs        = 64
	maxArgLen      = 1024
	maxArgvBytes   = 8192
)

// Exec is one execve seen inside the sandbox.
type Exec struct {
	Time time.Time `json:"time"`
	// PID and PPID are thread-group IDs in the sandbox's root PID namespace.
	PID  int32  `json:"pid"`
	PPID int32  `json:"ppid"`
	UID  uint32 `json:"uid"`
	// Binary is the resolved path of the executable inside the sandbox.
	Binary string   `json:"binary"`
	Argv   []string `json:"argv"`
	// ArgvTruncated is set when argv was cut to fit the record's bounds.
	ArgvTruncated bool `json:"argvTruncated,omitempty"`
	// SHA256 is the hex digest of the executable, computed by the sentry.
	SHA256 string `json:"sha256,omitempty"`
	// Source says how airlock knows of the exec: SourceExecve or
	// SourceAirlock. Both are seen at the sentry's execve trace point.
	Source string `json:"source"`
	Exit   *Exit  `json:"exit,omitempty"`
}

// ExecShimPath is where airlock's exec shim is in the sandbox and its
// containers (at the top: an image's own /.airlock cannot take a mount
// point): a process started as the shim is airlock's, and its program
// is the shim's execve.
const ExecShimPath = "/.airlock-exec"

// shimWindow bounds how long after airlock started a process its shim's
// exec may come: a pid whose shim did not exec (and whose exit event came
// before Started) cannot lend "airlock" to a later process that reuses it.
const shimWindow = 30 * time.Second

// Sources of an Exec.
const (
	// SourceExecve is an execve(2) a process in the sandbox made.
	SourceExecve = "execve"
	// SourceAirlock is a process airlock started through runsc's control
	// API (a step's own process, airlock's helper), seen as its exec
	// shim execve(2)s the program.
	SourceAirlock = "airlock"
)

// Exit is how a process that was exec'd ended.
type Exit struct {
	Time time.Time `json:"time"`
	// Code is the exit code when the process exited normally.
	Code int `json:"code"`
	// Signal is the terminating signal number, 0 when it exited normally.
	Signal int `json:"signal,omitempty"`
}

// Connect is one connect(2) attempt seen inside the sandbox.
type Connect struct {
	Time time.Time `json:"time"`
	PID  int32     `json:"pid"`
	// Family is inet, inet6, unix or the raw family number.
	Family  string `json:"family"`
	Address string `json:"address"`
	Port    int    `json:"port,omitempty"`
	// Result is "ok", "in progress" or the errno name (ECONNREFUSED, ...).
	Result string `json:"result"`
}

// WriteRefused is an open for writing refused because the file system is
// read-only (EROFS): a write to a path airlock mounted read-only.
type WriteRefused struct {
	Time time.Time `json:"time"`
	PID  int32     `json:"pid"`
	// Path is absolute inside the sandbox, as far as it could be rebuilt
	// from the working directory or the directory descriptor.
	Path string `json:"path"`
}

// Snapshot is a copy of a record at one moment, safe to marshal.
type Snapshot struct {
	Execs    []Exec    `json:"execs"`
	Connects []Connect `json:"connects"`
	// WritesRefused are opens for writing refused with EROFS.
	WritesRefused []WriteRefused `json:"writesRefused,omitempty"`
	// DroppedExecs and DroppedConnects count events not kept because the
	// record was full.
	DroppedExecs    uint64 `json:"droppedExecs"`
	DroppedConnects uint64 `json:"droppedConnects"`
	// DroppedBySentry counts events the sentry could not deliver (our
	// socket was full); Malformed counts packets that failed to decode.
	DroppedBySentry uint64 `json:"droppedBySentry"`
	Malformed       uint64 `json:"malformed"`
	// ForkRefused counts clone/fork/vfork calls refused with EAGAIN: the
	// process limit at work.
	ForkRefused uint64 `json:"forkRefused"`
}

// Record accumulates events from one sandbox. It is safe for concurrent use.
type Record struct {
	mu          sync.Mutex
	snap        Snapshot
	bytes       int
	running     map[int32]int       // pid -> index of its latest exec in snap.Execs
	started     map[int32]time.Time // pids airlock started, until their first exec
	lastDropped uint32
	received    uint64 // packets with a valid header, kept or not
}

// NewRecord returns an empty record.
func NewRecord() *Record {
	return &Record{
		running: make(map[int32]int),
		started: make(map[int32]time.Time),
		snap:    Snapshot{Execs: []Exec{}, Connects: []Connect{}},
	}
}

// Snapshot returns a deep-enough copy of the record: slices are copied, so
// later events do not change what the caller holds.
func (r *Record) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.snap
	s.Execs = make([]Exec, len(r.snap.Execs))
	for i, e := range r.snap.Execs {
		if e.Exit != nil {
			x := *e.Exit
			e.Exit = &x
		}
		s.Execs[i] = e
	}
	s.Connects = append([]Connect(nil), r.snap.Connects...)
	s.WritesRefused = append([]WriteRefused(nil), r.snap.WritesRefused...)
	if s.Connects == nil {
		s.Connects = []Connect{}
	}
	return s
}

// ExecCount returns how many execs the record holds, without copying it.
func (r *Record) ExecCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.snap.Execs)
}

// ConnectCount returns how many connect events the record holds.
func (r *Record) ConnectCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.snap.Connects)
}

// ConnectsFrom returns a copy of the connect events after the first n (n
// is an earlier ConnectCount: the list only grows).
func (r *Record) ConnectsFrom(n int) []Connect {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n >= len(r.snap.Connects) {
		return nil
	}
	return append([]Connect(nil), r.snap.Connects[max(n, 0):]...)
}

// ForkRefused returns how many fork-like calls were refused with EAGAIN so
// far. Comparing it before and after a step tells whether the step hit the
// process limit.
func (r *Record) ForkRefused() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snap.ForkRefused
}

func (r *Record) addMalformed() {
	r.mu.Lock()
	r.snap.Malformed++
	r.mu.Unlock()
}

// Received is how many events the sentry sent (packets with a valid
// header): what it costs a job to be recorded, and the proof that the
// sentry filters (SinkName).
func (r *Record) Received() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.received
}

// notePacket counts a packet with a valid header and folds the header's
// wrapping uint32 dropped counter into a monotonic total.
func (r *Record) notePacket(n uint32) {
	r.mu.Lock()
	r.received++
	r.snap.DroppedBySentry += uint64(n - r.lastDropped)
	r.lastDropped = n
	r.mu.Unlock()
}

// apply decodes one payload of the given type and adds it to the record.
func (r *Record) apply(t pb.MessageType, payload []byte) error {
	switch t {
	case pb.MessageType_MESSAGE_SENTRY_EXEC:
		var m pb.ExecveInfo
		if err := proto.Unmarshal(payload, &m); err != nil {
			return err
		}
		r.addExec(&m)
	case pb.MessageType_MESSAGE_SENTRY_EXIT_NOTIFY_PARENT:
		var m pb.ExitNotifyParentInfo
		if err := proto.Unmarshal(payload, &m); err != nil {
			return err
		}
		r.addExit(m.GetContextData(), m.GetExitStatus(), true)
	case pb.MessageType_MESSAGE_SENTRY_TASK_EXIT:
		var m pb.TaskExit
		if err := proto.Unmarshal(payload, &m); err != nil {
			return err
		}
		// Only the thread-group leader's exit says anything about the
		// process (Kept: the sentry sends no other).
		if Kept(t, &m) {
			r.addExit(m.GetContextData(), m.GetExitStatus(), false)
		}
	case pb.MessageType_MESSAGE_SYSCALL_CONNECT:
		var m pb.Connect
		if err := proto.Unmarshal(payload, &m); err != nil {
			return err
		}
		r.addConnect(&m)
	case pb.MessageType_MESSAGE_SYSCALL_CLONE, pb.MessageType_MESSAGE_SYSCALL_FORK:
		// Fork, vfork and clone all arrive as one of these two shapes; we
		// only need the exit errno, which sits in the same field of both.
		var m pb.Clone
		if t == pb.MessageType_MESSAGE_SYSCALL_FORK {
			var f pb.Fork
			if err := proto.Unmarshal(payload, &f); err != nil {
				return err
			}
			m.Exit = f.GetExit()
		} else if err := proto.Unmarshal(payload, &m); err != nil {
			return err
		}
		// Kept: refused with EAGAIN, the process limit at work.
		if Kept(t, &m) {
			r.mu.Lock()
			r.snap.ForkRefused++
			r.mu.Unlock()
		}
	case pb.MessageType_MESSAGE_SYSCALL_OPEN:
		var m pb.Open
		if err := proto.Unmarshal(payload, &m); err != nil {
			return err
		}
		// Kept: refused with EROFS; every other open is dropped at once
		// (they are many, and not what the record is for).
		if Kept(t, &m) {
			r.addOpen(&m)
		}
	case pb.MessageType_MESSAGE_CONTAINER_START:
		// A container's first process: recorded as an exec of its
		// command (its environment is never asked for nor kept).
		var m pb.Start
		if err := proto.Unmarshal(payload, &m); err != nil {
			return err
		}
		args := m.GetArgs()
		if len(args) > 0 && args[0] == ExecShimPath {
			// Started through airlock's shim: its execve, next, is the
			// record, with the digest.
			cd := m.GetContextData()
			r.Started(cd.GetThreadGroupId(), eventTime(cd))
			return nil
		}
		bin := ""
		if len(args) > 0 {
			bin = args[0]
		}
		// Started, not exec'd, and by airlock's request (the job's
		// init, airlock's reaper; a container where there is no shim):
		// airlock's, without a digest.
		cd := m.GetContextData()
		r.Started(cd.GetThreadGroupId(), eventTime(cd))
		r.addExec(&pb.ExecveInfo{ContextData: cd, BinaryPath: bin, Argv: args})
	default:
		return fmt.Errorf("unexpected message type %d", t)
	}
	return nil
}

// addOpen keeps an open refused with EROFS.
func (r *Record) addOpen(m *pb.Open) {
	cd := m.GetContextData()
	p := m.GetPathname()
	if !path.IsAbs(p) {
		base := cd.GetCwd()
		if m.GetFd() != int64(unix.AT_FDCWD) && m.GetFdPath() != "" {
			base = m.GetFdPath()
		}
		p = path.Join(base, p)
	}
	w := WriteRefused{Time: eventTime(cd), PID: cd.GetThreadGroupId(), Path: textsafe.Clip(path.Clean(p), maxPathLen, "")}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.snap.WritesRefused) >= maxRefused {
		return
	}
	r.snap.WritesRefused = append(r.snap.WritesRefused, w)
}

func eventTime(cd *pb.ContextData) time.Time {
	if ns := cd.GetTimeNs(); ns > 0 {
		return time.Unix(0, ns).UTC()
	}
	return time.Now().UTC()
}

func (r *Record) addExec(m *pb.ExecveInfo) {
	cd := m.GetContextData()
	e := Exec{
		Time:   eventTime(cd),
		PID:    cd.GetThreadGroupId(),
		PPID:   cd.GetParentThreadGroupId(),
		UID:    cd.GetCredentials().GetEffectiveUid(),
		Binary: textsafe.Clip(m.GetBinaryPath(), maxPathLen, ""),
	}
	e.Argv, e.ArgvTruncated = boundArgv(m.GetArgv())
	e.Source = SourceExecve
	if h := m.GetBinarySha256(); len(h) == 32 {
		e.SHA256 = hex.EncodeToString(h)
	}
	size := 128 + len(e.Binary) + len(e.SHA256)
	for _, a := range e.Argv {
		size += len(a) + 16
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.snap.Execs) >= maxExecs || r.bytes+size > maxRecordBytes {
		r.snap.DroppedExecs++
		delete(r.running, e.PID)
		return
	}
	r.bytes += size
	if since, ok := r.started[e.PID]; ok {
		delete(r.started, e.PID)
		if !e.Time.Before(since) && e.Time.Sub(since) < shimWindow {
			e.Source = SourceAirlock
		}
	}
	r.snap.Execs = append(r.snap.Execs, e)
	r.running[e.PID] = len(r.snap.Execs) - 1
}

// Started says that airlock started pid through the control API at
// since: the first exec of pid from then on (its shim's) is airlock's,
// whether its event came before this call or comes after.
func (r *Record) Started(pid int32, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := -1
	for i := len(r.snap.Execs) - 1; i >= 0 && !r.snap.Execs[i].Time.Before(since); i-- {
		if r.snap.Execs[i].PID == pid {
			first = i
		}
	}
	switch {
	case first >= 0:
		r.snap.Execs[first].Source = SourceAirlock
	case len(r.started) < maxExecs:
		r.started[pid] = since
	}
}

// addExit attaches an exit to the latest exec of the process. authoritative
// exits (exit_notify_parent) overwrite; leader task exits only fill a gap.
func (r *Record) addExit(cd *pb.ContextData, status int32, authoritative bool) {
	pid := cd.GetThreadGroupId()
	x := &Exit{Time: eventTime(cd)}
	ws := unix.WaitStatus(uint32(status))
	switch {
	case ws.Exited():
		x.Code = ws.ExitStatus()
	case ws.Signaled():
		x.Signal = int(ws.Signal())
		x.Code = 128 + x.Signal
	default:
		x.Code = int(status)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if authoritative {
		// A shim that never exec'd (its command was not there): its pid
		// is no one's to claim later.
		delete(r.started, pid)
	}
	i, ok := r.running[pid]
	if !ok {
		return
	}
	if r.snap.Execs[i].Exit == nil || authoritative {
		r.snap.Execs[i].Exit = x
	}
	if authoritative {
		delete(r.running, pid)
	}
}

func (r *Record) addConnect(m *pb.Connect) {
	cd := m.GetContextData()
	c := Connect{Time: eventTime(cd), PID: cd.GetThreadGroupId()}
	c.Family, c.Address, c.Port = parseSockaddr(m.GetAddress())
	switch errno := m.GetExit().GetErrorno(); errno {
	case 0:
		c.Result = "ok"
	case int64(unix.EINPROGRESS):
		c.Result = "in progress"
	default:
		c.Result = unix.ErrnoName(unix.Errno(errno))
		if c.Result == "" {
			c.Result = fmt.Sprintf("errno %d", errno)
		}
	}
	size := 96 + len(c.Address)

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.snap.Connects) >= maxConnects || r.bytes+size > maxRecordBytes {
		r.snap.DroppedConnects++
		return
	}
	r.bytes += size
	r.snap.Connects = append(r.snap.Connects, c)
}

// parseSockaddr decodes a raw sockaddr as the workload passed it. Short or
// odd input yields what could be read, never a panic.
func parseSockaddr(b []byte) (family, addr string, port int) {
	if len(b) < 2 {
		return "unknown", "", 0
	}
	fam := binary.LittleEndian.Uint16(b[0:2])
	switch fam {
	case unix.AF_INET:
		if len(b) < 8 {
			return "inet", "", 0
		}
		ip := netip.AddrFrom4([4]byte(b[4:8]))
		return "inet", ip.String(), int(binary.BigEndian.Uint16(b[2:4]))
	case unix.AF_INET6:
		if len(b) < 24 {
			return "inet6", "", 0
		}
		ip := netip.AddrFrom16([16]byte(b[8:24]))
		return "inet6", ip.String(), int(binary.BigEndian.Uint16(b[2:4]))
	case unix.AF_UNIX:
		path := b[2:]
		for i, ch := range path {
			if ch == 0 && i > 0 {
				path = path[:i]
				break
			}
		}
		if len(path) > 0 && path[0] == 0 {
			return "unix", "@" + textsafe.Clip(string(path[1:]), maxPathLen, ""), 0
		}
		return "unix", textsafe.Clip(string(path), maxPathLen, ""), 0
	default:
		return fmt.Sprintf("family %d", fam), "", 0
	}
}

// boundArgv keeps at most maxArgs arguments of at most maxArgLen bytes each
// and maxArgvBytes in total.
func boundArgv(argv []string) ([]string, bool) {
	out := make([]string, 0, min(len(argv), maxArgs))
	total, cut := 0, false
	for i, a := range argv {
		if i >= maxArgs || total >= maxArgvBytes {
			cut = true
			break
		}
		if len(a) > maxArgLen {
			a, cut = a[:maxArgLen], true
		}
		if total+len(a) > maxArgvBytes {
			a, cut = a[:maxArgvBytes-total], true
		}
		total += len(a)
		out = append(out, a)
	}
	return out, cut
}
