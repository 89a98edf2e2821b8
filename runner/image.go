package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-ci/airlock/gvisor"
	"github.com/airlock-ci/airlock/internal/files"
)

// Image is an unpacked container image on the host, as the policy's
// sandbox.images names it: a root filesystem directory, or an OCI runtime
// bundle (config.json next to rootfs/, what `umoci unpack` writes), whose
// process gives the image's default command, environment and directory.
type Image struct {
	RootFS string
	// Args, Env and Dir are the bundle's process; empty for a plain
	// directory (which has no record of its image's entrypoint).
	Args []string
	Env  []string
	Dir  string
	// User is the bundle's process user; nil for a plain directory.
	User *gvisor.User
}

// maxBundleConfig bounds a bundle's config.json.
const maxBundleConfig = 1 << 20

// OpenImage reads an image directory.
func OpenImage(dir string) (Image, error) {
	cfgPath := filepath.Join(dir, "config.json")
	b, err := files.ReadCapped(cfgPath, maxBundleConfig)
	if errors.Is(err, fs.ErrNotExist) {
		return Image{RootFS: dir}, nil
	}
	if err != nil {
		return Image{}, fmt.Errorf("image bundle %s: %w", dir, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return Image{}, fmt.Errorf("image bundle %s: config.json is not an OCI runtime configuration: %w", dir, err)
	}
	root := "rootfs"
	if spec.Root != nil && spec.Root.Path != "" {
		root = spec.Root.Path
	}
	if filepath.IsAbs(root) || !filepath.IsLocal(root) {
		return Image{}, fmt.Errorf("image bundle %s: root.path %q must be a directory inside the bundle", dir, root)
	}
	img := Image{RootFS: filepath.Join(dir, root)}
	if spec.Process != nil {
		img.Args, img.Dir = spec.Process.Args, spec.Process.Cwd
		img.User = &gvisor.User{UID: spec.Process.User.UID, GID: spec.Process.User.GID}
		for _, e := range spec.Process.Env {
			if k, _, ok := strings.Cut(e, "="); ok && k != "" {
				img.Env = append(img.Env, e)
			}
		}
	}
	if fi, err := os.Stat(img.RootFS); err != nil || !fi.IsDir() {
		return Image{}, fmt.Errorf("image bundle %s: no root filesystem directory %s", dir, img.RootFS)
	}
	return img, nil
}
