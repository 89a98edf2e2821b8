package hook

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/runner"
)

func TestContainerCommand(t *testing.T) {
	bundle := runner.Image{RootFS: "/img", Args: []string{"/entrypoint.sh", "default-arg"}}
	plain := runner.Image{RootFS: "/img"}
	for _, tc := range []struct {
		name    string
		entry   string
		args    []string
		img     runner.Image
		want    []string
		wantErr string
	}{
		{"workflow entry point", "node", []string{"x.js"}, bundle, []string{"node", "x.js"}, ""},
		{"image command", "", nil, bundle, []string{"/entrypoint.sh", "default-arg"}, ""},
		{"arguments to the image's entry point", "", []string{"--flag"}, bundle, []string{"/entrypoint.sh", "--flag"}, ""},
		{"plain directory, entry point given", "sh", nil, plain, []string{"sh"}, ""},
		{"plain directory, nothing to run", "", []string{"--flag"}, plain, nil, "records no command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := command(tc.entry, tc.args, tc.img, "the action")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// A Docker action gets the runner's directories only: never the Docker
// socket nor a host path outside the work directory, never more writable
// than the job has it; sources the job can write are resolved without
// symlinks (Beneath); what the job's sandbox masks stays covered. (The
// symlink attack itself is in TestHookServicesAndDockerActions.)
func TestStepMounts(t *testing.T) {
	work := t.TempDir()
	repo := filepath.Join(work, "app", "app")
	responses := filepath.Join(work, "_temp", responsesDir)
	os.MkdirAll(repo, 0o755)
	os.MkdirAll(responses, 0o755)
	d := &job{dir: t.TempDir(), hostMasks: []string{responses}, mounts: Mounts{
		{Source: work, Target: "/__w"},
		{Source: filepath.Join(work, "_temp"), Target: "/__w/_temp"},
		{Source: "/opt/externals", Target: "/__e", ReadOnly: true},
	}}
	got, err := d.stepMounts([]Mount{
		{Source: "/var/run/docker.sock", Target: "/var/run/docker.sock"},
		{Source: repo, Target: "/github/workspace"},
		{Source: work, Target: "/__w"},
		{Source: "/opt/externals", Target: "/__e"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []gvisor.Mount{
		{Source: "/opt/externals", Destination: "/__e", ReadOnly: true},
		{Source: work, Destination: "/__w", Beneath: work},
		{Source: filepath.Join(d.dir, "empty"), Destination: "/__w/_temp/" + responsesDir, ReadOnly: true},
		{Source: repo, Destination: "/github/workspace", Beneath: work},
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts:\n got %+v\nwant %+v", got, want)
	}
	if _, err := d.stepMounts([]Mount{{Source: "/etc", Target: "/host-etc"}}); err == nil || !strings.Contains(err.Error(), "outside the runner's work directory") {
		t.Errorf("a host path: %v", err)
	}
}
