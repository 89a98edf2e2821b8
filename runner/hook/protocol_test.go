package hook

import (
	"strings"
	"testing"
)

func TestMountsHost(t *testing.T) {
	m := Mounts{
		{Source: "/home/runner/_work", Target: "/__w"},
		{Source: "/home/runner/_work/_temp", Target: "/__w/_temp"},
		{Source: "/srv/tmp-elsewhere", Target: "/__w/_tool"},
		{Source: "/home/runner/externals", Target: "/__e", ReadOnly: true},
	}
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/__w/repo/repo", "/home/runner/_work/repo/repo", true},
		{"/__w/_temp/x.sh", "/home/runner/_work/_temp/x.sh", true},
		{"/__w/_tool/go", "/srv/tmp-elsewhere/go", true},
		{"/__w/../etc/passwd", "", false},
		{"/__wx/y", "", false},
		{"/__e", "/home/runner/externals", true},
		{"/github/home", "", false},
	} {
		got, ok := m.Host(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Host(%q) = %q %v, want %q %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadInputRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"command":"rm_rf","state":{},"args":{}}`, "unknown command"},
		{`not json`, "not the runner's JSON"},
		{strings.Repeat(" ", maxInput+1), "larger than"},
	} {
		if _, err := ReadInput(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	in, err := ReadInput(strings.NewReader(`{"command":"cleanup_job","responseFile":null,"state":{"container":"x","jobDir":"/run/airlock/hooks/x"},"args":{}}`))
	if err != nil || in.State.JobDir != "/run/airlock/hooks/x" {
		t.Errorf("%+v %v", in, err)
	}
}
