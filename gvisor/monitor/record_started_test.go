package monitor

import (
	"testing"
	"time"

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
