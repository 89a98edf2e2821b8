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

// The runner sends services without names: each is named after its
// image, as a host name, in order, and never twice.
func TestServiceNames(t *testing.T) {
	images := []string{
		"redis:7", "docker.io/library/redis:7", "ghcr.io/acme/db:1@sha256:0123", "localhost:5000/my_app:v1",
		"../../etc", "", strings.Repeat("a", 80) + ":1", "redis", "REDIS",
	}
	var services []Container
	for _, im := range images {
		services = append(services, Container{Image: im})
	}
	want := []string{"redis", "redis-2", "db", "my-app", "etc", "service", strings.Repeat("a", 48), "redis-3", "redis-4"}
	if got := serviceNames(services); !slices.Equal(got, want) {
		t.Errorf("serviceNames = %q, want %q", got, want)
	}
}

// The workflow's options: --user, as the runner passes createOptions.
func TestOptionsUser(t *testing.T) {
	for _, tc := range []struct {
		options string
		want    *gvisor.User
		err     string
	}{
		{"", nil, ""},
		{"--cpus 1 --health-cmd 'redis-cli ping'", nil, ""},
		{"--user 1001", &gvisor.User{UID: 1001, GID: 1001}, ""},
		{"--user=1001:1002 --cpus 1", &gvisor.User{UID: 1001, GID: 1002}, ""},
		{"-u root", &gvisor.User{}, ""},
		{"-u=1003 --rm", &gvisor.User{UID: 1003, GID: 1003}, ""},
		{"-u1004:1005", &gvisor.User{UID: 1004, GID: 1005}, ""},
		{"--userns host --ulimit nofile=10", nil, ""},
		{strings.Repeat("x", maxArgs+1), nil, "longer than"},
		{"--user runner", nil, "numeric UID[:GID]"},
		{"--user 1:x", nil, "numeric UID[:GID]"},
		{"--label 'unclosed", nil, "do not parse"},
	} {
		got, err := optionsUser(tc.options)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.options, err, tc.err)
			}
		case err != nil || (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want):
			t.Errorf("%q: %v, %v; want %v", tc.options, got, err, tc.want)
		}
	}
}

// isAlpine reads the job's root's os-release inside the root: a symlink
// to the host's own is not followed there.
func TestIsAlpine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(root string)
		want  bool
	}{
		{"alpine", func(r string) { os.WriteFile(filepath.Join(r, "etc", "os-release"), []byte("ID=alpine\n"), 0o644) }, true},
		{"alpine-release only", func(r string) { os.WriteFile(filepath.Join(r, "etc", "alpine-release"), []byte("3.20.0\n"), 0o644) }, false},
		{"debian", func(r string) {
			os.WriteFile(filepath.Join(r, "etc", "os-release"), []byte("ID=debian\nID_LIKE=alpine\n"), 0o644)
		}, false},
		{"relative symlink inside the root", func(r string) {
			os.MkdirAll(filepath.Join(r, "usr", "lib"), 0o755)
			os.WriteFile(filepath.Join(r, "usr", "lib", "os-release"), []byte("ID=alpine\n"), 0o644)
			os.Symlink("../usr/lib/os-release", filepath.Join(r, "etc", "os-release"))
		}, true},
		{"absolute symlink out of the root", func(r string) {
			host := filepath.Join(t.TempDir(), "os-release")
			os.WriteFile(host, []byte("ID=alpine\n"), 0o644)
			os.Symlink(host, filepath.Join(r, "etc", "os-release"))
		}, false},
		{"nothing", func(string) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "etc"), 0o755)
			tc.setup(root)
			if got := isAlpine(root); got != tc.want {
				t.Errorf("isAlpine = %v, want %v", got, tc.want)
			}
		})
	}
}
