package runner

import (
	"strings"
	"testing"
	"time"
)

func TestParseSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doc     string
		want    []StepSpec
		wantErr string
	}{
		{
			name: "yaml document",
			doc:  "steps:\n  - name: build\n    run: make\n    timeout: 90s\n    env: {GOFLAGS: -mod=mod}\n  - run: make test\n    working-directory: sub\n",
			want: []StepSpec{
				{Name: "build", Run: "make", Timeout: Duration(90 * time.Second), Env: map[string]string{"GOFLAGS": "-mod=mod"}},
				{Name: "step 2", Run: "make test", WorkingDirectory: "sub"},
			},
		},
		{name: "json", doc: `{"steps":[{"name":"a","run":"true","timeout":5}]}`, want: []StepSpec{{Name: "a", Run: "true", Timeout: Duration(5 * time.Second)}}},
		{name: "bare list", doc: "- run: echo hi\n  shell: bash\n", want: []StepSpec{{Name: "step 1", Run: "echo hi", Shell: "bash"}}},
		{name: "empty", doc: "steps: []\n", wantErr: "no steps"},
		{name: "unknown field", doc: "steps:\n  - run: x\n    runs-on: linux\n", wantErr: "not a steps document"},
		{name: "duplicate names", doc: "steps:\n  - {name: a, run: x}\n  - {name: a, run: y}\n", wantErr: `name "a" is used twice`},
		{name: "empty run", doc: "steps:\n  - name: a\n    run: '  '\n", wantErr: "`run` is empty"},
		{name: "bad shell", doc: "steps:\n  - {run: x, shell: pwsh}\n", wantErr: `shell "pwsh"`},
		{name: "bad timeout", doc: "steps:\n  - {run: x, timeout: soon}\n", wantErr: "use a duration"},
		{name: "negative timeout", doc: "steps:\n  - {run: x, timeout: -5s}\n", wantErr: "must be positive"},
		{name: "bad env name", doc: "steps:\n  - run: x\n    env: {'A=B': c}\n", wantErr: "is invalid"},
		{name: "not yaml", doc: "\x00\x01{{{", wantErr: "not a steps document"},
		// JSON is read as JSON: YAML refuses a raw DEL, and reads a raw
		// U+0085 as a line break (FuzzParseSteps' round trip).
		{name: "json with characters YAML reads apart", doc: "{\"steps\":[{\"name\":\"\x7f\",\"run\":\"a\u0085b\"}]}", want: []StepSpec{{Name: "\x7f", Run: "a\u0085b"}}},
		{name: "json with an unknown field", doc: `{"steps":[{"run":"x","runs-on":"linux"}]}`, wantErr: "not a steps document"},
		{name: "a yaml flow mapping", doc: "{steps: [{run: x}]}", want: []StepSpec{{Name: "step 1", Run: "x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSteps([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Name != w.Name || g.Run != w.Run || g.Shell != w.Shell || g.Timeout != w.Timeout || g.WorkingDirectory != w.WorkingDirectory || len(g.Env) != len(w.Env) {
					t.Errorf("step %d = %+v, want %+v", i, g, w)
				}
				for k, v := range w.Env {
					if g.Env[k] != v {
						t.Errorf("step %d env %s = %q, want %q", i, k, g.Env[k], v)
					}
				}
			}
		})
	}
}

func TestStepArgv(t *testing.T) {
	if got := (StepSpec{Run: "x"}).argv(); strings.Join(got, " ") != "/bin/sh -e -c x" {
		t.Errorf("sh argv = %q", got)
	}
	if got := (StepSpec{Run: "x", Shell: "bash"}).argv(); got[0] != "bash" || got[len(got)-1] != "x" {
		t.Errorf("bash argv = %q", got)
	}
}
