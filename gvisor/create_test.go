package gvisor

import (
	"encoding/json"
	"io"
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The gofer finds its bundle on the command line runsc gives it
// (container.createGoferProcess: "gofer", "--bundle", dir, ...).
func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root=/r", "gofer", "--bundle", "/j/bundle", "--gofer-mount-confs=lisafs:self", "id"}, "/j/bundle"},
		{[]string{"gofer", "--bundle=/j/bundle", "id"}, "/j/bundle"},
		{[]string{"gofer", "-bundle", "/j/bundle"}, "/j/bundle"},
		{[]string{"gofer", "--bundle"}, ""},
		{[]string{"gofer", "--", "--bundle", "/x"}, ""},
		{[]string{"--spec-fd=5", "gofer"}, ""},
		{[]string{"gofer", "--bundles", "/x", "--bundle-x=/y"}, ""},
	} {
		if got := flagValue(tc.args, "bundle"); got != tc.want {
			t.Errorf("flagValue(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// The gofer takes its root plan from the spec runsc hands it, by pread:
// the descriptor's offset stays where runsc's gofer code expects it. A
// spec without the annotation (runsc's own do) has no plan; a broken one
// is an error, never an empty root.
func TestPlanOf(t *testing.T) {
	plan := rootPlan{Source: "/", Target: "/j/rootfs", Dirs: []string{"workspace"}}
	b, _ := json.Marshal(plan)
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		found, err  bool
	}{
		{"airlock's bundle", map[string]string{planAnnotation: string(b)}, true, false},
		{"another bundle", map[string]string{"dev.gvisor.x": "y"}, false, false},
		{"a broken plan", map[string]string{planAnnotation: "{"}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, _ := json.Marshal(specs.Spec{Version: "1.0.0", Annotations: tc.annotations})
			f, err := os.CreateTemp(t.TempDir(), "config.json")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.Write(spec)
			f.Seek(3, io.SeekStart)
			got, found, err := planOf(int(f.Fd()))
			if found != tc.found || (err != nil) != tc.err {
				t.Fatalf("found %v, err %v; want found %v, error %v", found, err, tc.found, tc.err)
			}
			if found && !tc.err && (got.Target != plan.Target || len(got.Dirs) != 1) {
				t.Errorf("plan %+v, want %+v", got, plan)
			}
			if off, _ := f.Seek(0, io.SeekCurrent); off != 3 {
				t.Errorf("the descriptor's offset moved to %d", off)
			}
		})
	}
}
