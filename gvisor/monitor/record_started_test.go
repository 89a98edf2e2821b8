package monitor

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	pb "gvisor.dev/gvisor/pkg/sentry/seccheck/points/points_go_proto"
)

// Only the first exec of a process airlock started, within the shim's
// window, is airlock's, whichever of its event and airlock's Started
// comes first; a later exec of the same process, or of a pid reused after
// a shim that never exec'd, is the job's.
func TestStartedMarksOnlyTheShimsExec(t *testing.T) {
	at := func(pid int32, d time.Duration) *pb.ExecveInfo {
		cd := ctxData(pid, 1)
		cd.TimeNs += int64(d)
		return &pb.ExecveInfo{ContextData: cd, BinaryPath: "/bin/x", Argv: []string{"x"}}
	}
	since := time.Unix(0, ctxData(0, 0).TimeNs)
	for _, tc := range []struct {
		name string
		run  func(r *Record)
		want []string // the sources of the execs, in order
	}{
		{"event after Started", func(r *Record) { r.Started(7, since); r.addExec(at(7, time.Millisecond)) }, []string{SourceAirlock}},
		{"event before Started", func(r *Record) { r.addExec(at(7, time.Millisecond)); r.Started(7, since) }, []string{SourceAirlock}},
		{"the program execs again", func(r *Record) {
			r.Started(7, since)
			r.addExec(at(7, time.Millisecond))
			r.addExec(at(7, 2*time.Millisecond))
		}, []string{SourceAirlock, SourceExecve}},
		{"another pid", func(r *Record) { r.Started(7, since); r.addExec(at(8, time.Millisecond)) }, []string{SourceExecve}},
		{"an exec from before airlock started it", func(r *Record) { r.addExec(at(7, -time.Second)); r.Started(7, since) }, []string{SourceExecve}},
		{"the shim exited without exec; the pid reused", func(r *Record) {
			r.Started(7, since)
			r.addExit(ctxData(7, 1), 127<<8, true)
			r.addExec(at(7, time.Second))
		}, []string{SourceExecve}},
		{"after the shim's window", func(r *Record) { r.Started(7, since); r.addExec(at(7, time.Minute)) }, []string{SourceExecve}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecord()
			tc.run(r)
			var got []string
			for _, e := range r.Snapshot().Execs {
				got = append(got, e.Source)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("sources %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("sources %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// A container's start is airlock's: as the shim, its next exec is the
// record; as anything else (the job's init, airlock's reaper), the start
// itself is, with no digest.
func TestContainerStartIsAirlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // binary/source of the records
	}{
		{"through the shim", []string{ExecShimPath, "/usr/bin/redis-server"}, []string{"/bin/x airlock"}},
		{"the reaper", []string{"/.airlock/reaper"}, []string{"/.airlock/reaper airlock", "/bin/x execve"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecord()
			b, err := proto.Marshal(&pb.Start{ContextData: ctxData(9, 1), Args: tc.args})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.apply(pb.MessageType_MESSAGE_CONTAINER_START, b); err != nil {
				t.Fatal(err)
			}
			cd := ctxData(9, 1)
			cd.TimeNs += int64(time.Millisecond)
			r.addExec(&pb.ExecveInfo{ContextData: cd, BinaryPath: "/bin/x", Argv: []string{"x"}})
			var got []string
			for _, e := range r.Snapshot().Execs {
				got = append(got, e.Binary+" "+e.Source)
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("records %q, want %q", got, tc.want)
			}
		})
	}
}
