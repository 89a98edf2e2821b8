package attest

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// In the report's per-step process tree the step's own process (the one
// airlock started) is the root and what it ran hangs below it; the page
// says which process airlock started.
func TestStepsProcessTree(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []Step{{Name: "build", Start: at(0), End: at(100)}}
	execs := []Exec{
		{Time: at(1), PID: 5, PPID: 0, Source: "airlock", Binary: "/bin/sh", Argv: []string{"sh", "-c", "make"}},
		{Time: at(2), PID: 6, PPID: 5, Source: "execve", Binary: "/usr/bin/make", Argv: []string{"make"}},
		{Time: at(3), PID: 7, PPID: 6, Source: "execve", Binary: "/usr/bin/cc", Argv: []string{"cc"}},
		{Time: at(4), PID: 8, PPID: 5, Source: "execve", Binary: "/bin/true", Argv: []string{"true"}},
	}
	got := processesByStep(steps, execs)
	if len(got) != 1 || got[0].Name != "build" || got[0].Count != 4 {
		t.Fatalf("groups %+v", got)
	}
	var shape []string
	for _, n := range got[0].Tree {
		shape = append(shape, strings.Repeat("  ", n.Depth)+n.Exec.Binary)
	}
	want := []string{"/bin/sh", "  /usr/bin/make", "    /usr/bin/cc", "  /bin/true"}
	if strings.Join(shape, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(shape, "\n"), strings.Join(want, "\n"))
	}
	p := predicate(1, 0, 0)
	p.Steps, p.Processes.Execs = steps, execs
	var b bytes.Buffer
	if err := WriteHTML(&b, &Verified{Predicate: p, Subject: SubjectInfo{Name: "repo"}}, true, "verified"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "(started by airlock)"); n != 1 {
		t.Errorf("the page marks %d processes as started by airlock, want the step's own one", n)
	}
}
