package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// imageRootFS makes an unpacked "image" for tests: bash and a few tools
// with the libraries they load, the usual merged-/usr symlinks, and a
// marker file no host has.
func imageRootFS(t testing.TB, marker string) string {
	t.Helper()
	root := t.TempDir()
	os.Chmod(root, 0o755)
	for _, d := range []string{"usr/bin", "usr/lib", "usr/lib64", "etc", "tmp", "proc", "dev", "sys"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}} {
		os.Symlink(l[0], filepath.Join(root, l[1]))
	}
	for _, bin := range []string{"bash", "cat", "ls", "id", "sleep", "env"} {
		p, err := exec.LookPath(bin)
		if err != nil {
			t.Skipf("needs %s", bin)
		}
		copyIntoRoot(t, root, p)
		out, _ := exec.Command("ldd", p).Output()
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					copyIntoRoot(t, root, f)
				}
			}
		}
	}
	os.WriteFile(filepath.Join(root, "etc", "image-release"), []byte(marker+"\n"), 0o644)
	// As `docker export` leaves them: empty files the runtime fills.
	for _, f := range []string{"resolv.conf", "hosts", "hostname"} {
		os.WriteFile(filepath.Join(root, "etc", f), nil, 0o644)
	}
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/bash\n"), 0o644)
	return root
}

// copyIntoRoot copies a host file to the same path under root, following
// the host's symlinks (/lib64 -> usr/lib64) to the real file.
func copyIntoRoot(t testing.TB, root, p string) {
	t.Helper()
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{p, real} {
		d := filepath.Join(root, dst)
		os.MkdirAll(filepath.Dir(d), 0o755)
		if err := os.WriteFile(d, b, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
}

// The job container's image, mapped by the organisation policy to an
// unpacked root filesystem, is the job's root: the steps see the image's
// files, not the host's, and the runner's directories at their paths.
// An image that is not mapped runs on the policy's root and says so.
func TestHookJobImage(t *testing.T) {
	for _, tc := range []struct {
		name, image, want string
	}{
		{"mapped", "docker.io/library/node:20", "image-node-20"},
		{"not mapped", "node:18", "host-root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunnerHost(t)
			root := imageRootFS(t, "image-node-20")
			os.WriteFile(filepath.Join(h.org, "images.cue"), []byte(fmt.Sprintf("package airlock\nsandbox: images: %q: %q\n", "node:20", root)), 0o644)
			h.prepareJSON = bytes.Replace(h.prepareJSON, []byte(`"image":"node:20"`), []byte(fmt.Sprintf(`"image":%q`, tc.image)), 1)
			state := h.prepare()
			code, out := h.step(state, `cat /etc/image-release 2>/dev/null || echo host-root; ls /__w/app/app; test -e /__e && echo externals-mounted; id -u`)
			if code != 0 || !strings.Contains(out, tc.want) || !strings.Contains(out, "main.go") || !strings.Contains(out, "externals-mounted") {
				t.Fatalf("step: exit %d: %s", code, out)
			}
			if code, out := h.cleanup(state); code != 0 {
				t.Fatalf("cleanup: exit %d: %s", code, out)
			}
			if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 0 {
				t.Errorf("the image directory was written: %v", entries)
			}
		})
	}
}
