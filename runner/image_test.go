package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOpenImage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		config  string // config.json; "" for a plain directory
		rootfs  string // directory made inside the image dir
		want    Image  // RootFS relative to the image dir
		wantErr string
	}{
		{name: "plain directory", want: Image{RootFS: "."}},
		{name: "bundle", config: `{"ociVersion":"1.0.2","root":{"path":"rootfs"},"process":{"args":["/entrypoint.sh","serve"],"env":["PATH=/usr/bin","=bad","NOEQUALS"],"cwd":"/srv"}}`, rootfs: "rootfs",
			want: Image{RootFS: "rootfs", Args: []string{"/entrypoint.sh", "serve"}, Env: []string{"PATH=/usr/bin"}, Dir: "/srv"}},
		{name: "default root path", config: `{"process":{"args":["x"]}}`, rootfs: "rootfs", want: Image{RootFS: "rootfs", Args: []string{"x"}}},
		{name: "root outside the bundle", config: `{"root":{"path":"../../etc"}}`, wantErr: "must be a directory inside the bundle"},
		{name: "absolute root", config: `{"root":{"path":"/"}}`, wantErr: "must be a directory inside the bundle"},
		{name: "no rootfs", config: `{"root":{"path":"rootfs"}}`, wantErr: "no root filesystem directory"},
		{name: "not JSON", config: `{"root":`, wantErr: "not an OCI runtime configuration"},
		{name: "huge", config: `{"x":"` + strings.Repeat("a", maxBundleConfig) + `"}`, wantErr: "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.config != "" {
				os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.config), 0o644)
			}
			if tc.rootfs != "" {
				os.Mkdir(filepath.Join(dir, tc.rootfs), 0o755)
			}
			got, err := OpenImage(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			want.RootFS = filepath.Join(dir, tc.want.RootFS)
			if got.RootFS != want.RootFS || !slices.Equal(got.Args, want.Args) || !slices.Equal(got.Env, want.Env) || got.Dir != want.Dir {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}
