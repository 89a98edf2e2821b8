package monitor

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/fd"
	"gvisor.dev/gvisor/pkg/sentry/seccheck"
	pb "gvisor.dev/gvisor/pkg/sentry/seccheck/points/points_go_proto"
)

// sinkCases are events of every type the sandbox's trace session asks
// for (PodInitConfig), each with whether the record keeps anything of it.
func sinkCases() []struct {
	name string
	typ  pb.MessageType
	msg  proto.Message
	kept bool
} {
	connectTo := make([]byte, 16)
	binary.LittleEndian.PutUint16(connectTo, unix.AF_INET)
	binary.BigEndian.PutUint16(connectTo[2:], 443)
	copy(connectTo[4:], []byte{10, 0, 0, 1})
	thread := ctxData(9, 1)
	thread.ThreadId = 10
	open := func(errno unix.Errno) *pb.Open {
		return &pb.Open{ContextData: ctxData(9, 1), Fd: int64(unix.AT_FDCWD), Pathname: "/w/.git/hooks/pre-commit", Exit: &pb.Exit{Errorno: int64(errno)}}
	}
	return []struct {
		name string
		typ  pb.MessageType
		msg  proto.Message
		kept bool
	}{
		{"exec", pb.MessageType_MESSAGE_SENTRY_EXEC, &pb.ExecveInfo{ContextData: ctxData(9, 1), BinaryPath: "/bin/git", Argv: []string{"git", "status"}}, true},
		{"container start", pb.MessageType_MESSAGE_CONTAINER_START, &pb.Start{ContextData: ctxData(1, 0), Args: []string{"/bin/sh"}}, true},
		{"open refused read-only", pb.MessageType_MESSAGE_SYSCALL_OPEN, open(unix.EROFS), true},
		{"open refused otherwise", pb.MessageType_MESSAGE_SYSCALL_OPEN, open(unix.EACCES), false},
		{"open that succeeded", pb.MessageType_MESSAGE_SYSCALL_OPEN, open(0), false},
		{"clone refused at the process limit", pb.MessageType_MESSAGE_SYSCALL_CLONE, &pb.Clone{Exit: &pb.Exit{Errorno: int64(unix.EAGAIN)}}, true},
		{"clone that succeeded", pb.MessageType_MESSAGE_SYSCALL_CLONE, &pb.Clone{Exit: &pb.Exit{Result: 12}}, false},
		{"fork refused", pb.MessageType_MESSAGE_SYSCALL_FORK, &pb.Fork{Exit: &pb.Exit{Errorno: int64(unix.EAGAIN)}}, true},
		{"vfork that succeeded", pb.MessageType_MESSAGE_SYSCALL_FORK, &pb.Fork{Exit: &pb.Exit{Result: 13}}, false},
		{"connect", pb.MessageType_MESSAGE_SYSCALL_CONNECT, &pb.Connect{ContextData: ctxData(9, 1), Address: connectTo, Exit: &pb.Exit{Errorno: int64(unix.ENETUNREACH)}}, true},
		{"exit notified to the parent", pb.MessageType_MESSAGE_SENTRY_EXIT_NOTIFY_PARENT, &pb.ExitNotifyParentInfo{ContextData: ctxData(9, 1), ExitStatus: 256}, true},
		{"exit of a thread group's leader", pb.MessageType_MESSAGE_SENTRY_TASK_EXIT, &pb.TaskExit{ContextData: ctxData(9, 1)}, true},
		{"exit of a thread", pb.MessageType_MESSAGE_SENTRY_TASK_EXIT, &pb.TaskExit{ContextData: thread}, false},
	}
}

// The sentry's filter and the record agree: every event the sink does not
// send is one the record would have kept nothing of.
func TestSinkDropsOnlyWhatTheRecordIgnores(t *testing.T) {
	for _, tc := range sinkCases() {
		t.Run(tc.name, func(t *testing.T) {
			if got := Kept(tc.typ, tc.msg); got != tc.kept {
				t.Fatalf("Kept = %v, want %v", got, tc.kept)
			}
			payload, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			// A record holding the exec of the process the events are
			// of, as it would by then (an exit changes only that).
			rec := NewRecord()
			rec.addExec(&pb.ExecveInfo{ContextData: ctxData(9, 1), BinaryPath: "/bin/sh"})
			before := rec.Snapshot()
			if err := rec.apply(tc.typ, payload); err != nil {
				t.Fatal(err)
			}
			unchanged := reflect.DeepEqual(rec.Snapshot(), before)
			if unchanged == tc.kept {
				t.Errorf("kept %v, but the record applying it changed: %v", tc.kept, !unchanged)
			}
		})
	}
}

// The sink, set up by gVisor's own remote-sink handshake against a real
// receiver, sends the kept events and only those.
func TestSinkSendsTheKeptEvents(t *testing.T) {
	r, rec := startReceiver(t)
	config := map[string]any{"endpoint": r.Path(), "retries": float64(3), "backoff": "100us", "backoff_max": "1ms"}
	f, err := setupSink(config)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, err := fd.NewFromFile(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := newSink(config, endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Stop()
	want := NewRecord()
	kept := 0
	// Against a record fed directly: the kept events, in order.
	for _, tc := range sinkCases() {
		if err := sink.Syscall(context.Background(), seccheck.FieldSet{}, nil, tc.typ, tc.msg); err != nil {
			t.Fatal(err)
		}
		if tc.kept {
			kept++
			payload, _ := proto.Marshal(tc.msg)
			want.apply(tc.typ, payload)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for rec.Received() < uint64(kept) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // for any packet beyond the count
	if got := rec.Received(); got != uint64(kept) {
		t.Errorf("the receiver got %d packets, want %d (the kept events)", got, kept)
	}
	if got, w := rec.Snapshot(), want.Snapshot(); !reflect.DeepEqual(got, w) {
		t.Errorf("record through the sink:\n%+v\nwant:\n%+v", got, w)
	}
	if s := sink.Status(); s.DroppedCount != 0 {
		t.Errorf("the sink dropped %d events", s.DroppedCount)
	}
}

func TestSinkConfigErrors(t *testing.T) {
	endpoint := fd.New(-1)
	for _, tc := range []struct {
		name   string
		config map[string]any
	}{
		{"retries not a count", map[string]any{"retries": 1.5}},
		{"retries negative", map[string]any{"retries": float64(-1)}},
		{"backoff not a duration", map[string]any{"backoff": "soon"}},
		{"backoff above its maximum", map[string]any{"backoff": "2ms", "backoff_max": "1ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newSink(tc.config, endpoint); err == nil {
				t.Error("accepted")
			}
		})
	}
	if _, err := newSink(nil, nil); err == nil {
		t.Error("no endpoint accepted")
	}
}
