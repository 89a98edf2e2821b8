package monitor

import (
	"bytes"
	"encoding/binary"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	pb "gvisor.dev/gvisor/pkg/sentry/seccheck/points/points_go_proto"
)

// sentry is a fake sink end: it speaks the remote-sink wire protocol the
// way gVisor's sentry does, over a real SOCK_SEQPACKET socket.
type sentry struct {
	t    *testing.T
	conn *net.UnixConn
}

func dialSentry(t *testing.T, path string) *sentry {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hs, _ := proto.Marshal(&pb.Handshake{Version: 1})
	if _, err := c.Write(hs); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1024)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("handshake reply: %v", err)
	}
	var reply pb.Handshake
	if err := proto.Unmarshal(buf[:n], &reply); err != nil || reply.Version != 1 {
		t.Fatalf("handshake reply %v %v", &reply, err)
	}
	return &sentry{t: t, conn: c}
}

func (s *sentry) send(typ pb.MessageType, dropped uint32, m proto.Message) {
	s.t.Helper()
	payload, err := proto.Marshal(m)
	if err != nil {
		s.t.Fatal(err)
	}
	s.raw(header(headerSize, uint16(typ), dropped), payload)
}

func (s *sentry) raw(parts ...[]byte) {
	s.t.Helper()
	if _, err := s.conn.Write(bytes.Join(parts, nil)); err != nil {
		s.t.Fatal(err)
	}
}

func header(size, typ uint16, dropped uint32) []byte {
	h := make([]byte, 8)
	binary.LittleEndian.PutUint16(h[0:], size)
	binary.LittleEndian.PutUint16(h[2:], typ)
	binary.LittleEndian.PutUint32(h[4:], dropped)
	return h
}

func startReceiver(t *testing.T) (*Receiver, *Record) {
	t.Helper()
	return startReceiverMax(t, defaultMaxPacket)
}

func startReceiverMax(t *testing.T, max int) (*Receiver, *Record) {
	t.Helper()
	rec := NewRecord()
	r, err := listen(filepath.Join(t.TempDir(), "m.sock"), rec, max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, rec
}

func waitRecord(t *testing.T, rec *Record, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := rec.Snapshot()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("record never reached the expected state: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ctxData(pid, ppid int32) *pb.ContextData {
	return &pb.ContextData{TimeNs: 1_700_000_000_000_000_000, ThreadId: pid, ThreadGroupId: pid, ParentThreadGroupId: ppid, Credentials: &pb.Credentials{EffectiveUid: 1000}}
}

func TestReceiverDecodesEvents(t *testing.T) {
	r, rec := startReceiver(t)
	s := dialSentry(t, r.Path())
	sum := bytes.Repeat([]byte{0xab}, 32)
	s.send(pb.MessageType_MESSAGE_SENTRY_EXEC, 0, &pb.ExecveInfo{ContextData: ctxData(7, 1), BinaryPath: "/usr/bin/make", Argv: []string{"make", "test"}, BinarySha256: sum})
	s.send(pb.MessageType_MESSAGE_SENTRY_EXIT_NOTIFY_PARENT, 0, &pb.ExitNotifyParentInfo{ContextData: ctxData(7, 1), ExitStatus: 2 << 8})
	addr := make([]byte, 16)
	binary.LittleEndian.PutUint16(addr, unix.AF_INET)
	binary.BigEndian.PutUint16(addr[2:], 443)
	copy(addr[4:], []byte{169, 254, 169, 254})
	s.send(pb.MessageType_MESSAGE_SYSCALL_CONNECT, 0, &pb.Connect{ContextData: ctxData(7, 1), Address: addr, Exit: &pb.Exit{Errorno: int64(unix.ENETUNREACH)}})
	s.send(pb.MessageType_MESSAGE_SYSCALL_CLONE, 3, &pb.Clone{Exit: &pb.Exit{Errorno: int64(unix.EAGAIN)}})

	snap := waitRecord(t, rec, func(s Snapshot) bool { return s.ForkRefused == 1 })
	if len(snap.Execs) != 1 {
		t.Fatalf("execs = %+v", snap.Execs)
	}
	e := snap.Execs[0]
	if e.Binary != "/usr/bin/make" || e.SHA256 != strings.Repeat("ab", 32) || e.PID != 7 || e.PPID != 1 || e.UID != 1000 {
		t.Errorf("exec = %+v", e)
	}
	if e.Exit == nil || e.Exit.Code != 2 || e.Exit.Signal != 0 {
		t.Errorf("exit = %+v, want code 2", e.Exit)
	}
	if len(snap.Connects) != 1 || snap.Connects[0].Address != "169.254.169.254" || snap.Connects[0].Port != 443 || snap.Connects[0].Result != "ENETUNREACH" {
		t.Errorf("connects = %+v", snap.Connects)
	}
	if snap.DroppedBySentry != 3 {
		t.Errorf("droppedBySentry = %d, want 3", snap.DroppedBySentry)
	}
}

// Hostile packets: short, lying headers, garbage payloads, unknown types,
// oversized packets. None may crash the receiver or stop it from decoding
// the next good packet.
func TestReceiverSurvivesHostilePackets(t *testing.T) {
	r, rec := startReceiverMax(t, 4096)
	s := dialSentry(t, r.Path())
	bad := [][]byte{
		{},
		{1, 2, 3},
		header(0, uint16(pb.MessageType_MESSAGE_SENTRY_EXEC), 0),
		header(60000, uint16(pb.MessageType_MESSAGE_SENTRY_EXEC), 0),
		append(header(8, uint16(pb.MessageType_MESSAGE_SENTRY_EXEC), 0), 0xff, 0xff, 0xff, 0xff, 0x0f),
		append(header(8, 999, 0), 1, 2, 3),
		append(header(8, uint16(pb.MessageType_MESSAGE_SYSCALL_CONNECT), 0), bytes.Repeat([]byte{0x0a}, 100)...),
		append(header(8, uint16(pb.MessageType_MESSAGE_SENTRY_EXEC), 0), make([]byte, 8000)...),
	}
	for _, b := range bad {
		if len(b) == 0 {
			continue // a zero-length SEQPACKET is EOF to the reader
		}
		s.raw(b)
	}
	s.send(pb.MessageType_MESSAGE_SENTRY_EXEC, 0, &pb.ExecveInfo{ContextData: ctxData(9, 1), BinaryPath: "/bin/true"})
	snap := waitRecord(t, rec, func(s Snapshot) bool { return len(s.Execs) == 1 })
	if snap.Malformed < 6 {
		t.Errorf("malformed = %d, want at least 6", snap.Malformed)
	}
}

// A flood of huge execs is bounded: argv and paths are cut, the record
// stops growing and counts what it dropped.
func TestRecordIsBounded(t *testing.T) {
	r, rec := startReceiver(t)
	s := dialSentry(t, r.Path())
	hugeArg := strings.Repeat("A", 100_000)
	argv := make([]string, 1000)
	for i := range argv {
		argv[i] = "arg"
	}
	argv[0] = hugeArg
	const sent = 1500
	for i := 0; i < sent; i++ {
		s.send(pb.MessageType_MESSAGE_SENTRY_EXEC, 0, &pb.ExecveInfo{ContextData: ctxData(int32(i+2), 1), BinaryPath: strings.Repeat("/x", 10_000), Argv: argv})
	}
	snap := waitRecord(t, rec, func(s Snapshot) bool {
		return uint64(len(s.Execs))+s.DroppedExecs+s.DroppedBySentry+s.Malformed >= sent
	})
	for _, e := range snap.Execs {
		total := 0
		for _, a := range e.Argv {
			total += len(a)
		}
		if len(e.Binary) > maxPathLen || len(e.Argv) > maxArgs || total > maxArgvBytes || !e.ArgvTruncated {
			t.Fatalf("exec not bounded: path %d, %d args, %d bytes, truncated %v", len(e.Binary), len(e.Argv), total, e.ArgvTruncated)
		}
	}
	if rec.bytes > maxRecordBytes {
		t.Errorf("record holds %d bytes, bound is %d", rec.bytes, maxRecordBytes)
	}
	if snap.DroppedExecs == 0 {
		t.Errorf("expected drops once the record is full (%d kept)", len(snap.Execs))
	}
}

// A connection that never sends anything, or closes mid-way, does not
// stop Close from returning.
func TestReceiverCloseWithSilentPeer(t *testing.T) {
	r, _ := startReceiver(t)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: r.Path(), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked on a silent connection")
	}
}

func TestParseSockaddr(t *testing.T) {
	in6 := make([]byte, 28)
	binary.LittleEndian.PutUint16(in6, unix.AF_INET6)
	binary.BigEndian.PutUint16(in6[2:], 53)
	in6[8+15] = 1
	unixAbs := append([]byte{byte(unix.AF_UNIX), 0, 0}, []byte("abstract\x00junk")...)
	for _, tc := range []struct {
		name         string
		in           []byte
		family, addr string
		port         int
	}{
		{"empty", nil, "unknown", "", 0},
		{"short inet", []byte{byte(unix.AF_INET), 0, 1}, "inet", "", 0},
		{"inet6 loopback", in6, "inet6", "::1", 53},
		{"short inet6", in6[:10], "inet6", "", 0},
		{"unix path", append([]byte{byte(unix.AF_UNIX), 0}, []byte("/run/x.sock\x00\x00")...), "unix", "/run/x.sock", 0},
		{"unix abstract", unixAbs, "unix", "@abstract", 0},
		{"odd family", []byte{0x39, 0x05, 1, 2}, "family 1337", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a, p := parseSockaddr(tc.in)
			if f != tc.family || a != tc.addr || p != tc.port {
				t.Errorf("got %s %q %d, want %s %q %d", f, a, p, tc.family, tc.addr, tc.port)
			}
		})
	}
}

// FuzzHandlePacket feeds arbitrary bytes through the decoder.
func FuzzHandlePacket(f *testing.F) {
	f.Add(header(8, uint16(pb.MessageType_MESSAGE_SENTRY_EXEC), 1))
	f.Add([]byte{8, 0, 10, 0, 0, 0, 0, 0, 0x12, 0x02, 0x02, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &Receiver{record: NewRecord()}
		r.handlePacket(b)
		r.record.Snapshot()
	})
}

// Opens, most of a build's events, are traced only when asked for (the
// job has read-only trust paths); the rest always.
func TestPodInitConfigPoints(t *testing.T) {
	for _, opens := range []bool{false, true} {
		b, err := PodInitConfig("/run/x/monitor.sock", opens)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"sentry/execve", "syscall/connect/exit", "syscall/clone/exit", "sentry/task_exit"} {
			if !strings.Contains(string(b), `"`+p+`"`) {
				t.Errorf("opens %v: no %s", opens, p)
			}
		}
		if got := strings.Contains(string(b), `"syscall/openat/exit"`); got != opens {
			t.Errorf("opens %v: openat traced %v", opens, got)
		}
	}
}
