package hook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-ci/airlock/internal/files"
	"github.com/airlock-ci/airlock/runner/report"
)

// The hook's cleanup runs after the job's last step, so no step can
// upload the final attestation. Before a step that uploads artifacts
// (actions/upload-artifact), the hook writes an interim one, of the job
// so far (verdict.final false), to $RUNNER_TEMP/airlock/ for it to pick
// up; the final one goes to the runner host and the check run.

// interimDir and interimName are where, below the runner's temp
// directory, the interim attestation is put.
const (
	interimDir  = "airlock"
	interimName = "attestation.sigstore.json"
)

// uploadsArtifacts reports a step that runs actions/upload-artifact.
func uploadsArtifacts(a ScriptArgs) bool {
	for _, arg := range a.EntryPointArgs {
		if strings.Contains(arg, "/_actions/actions/upload-artifact/") {
			return true
		}
	}
	return false
}

// interimAttestation signs the job so far and puts the bundle in the
// runner's temp directory, where the job can read it.
func (d *job) interimAttestation(ctx context.Context, stderr io.Writer) {
	tmp, ok := d.mounts.Host(containerTemp)
	if !ok {
		return
	}
	o := d.attest
	o.Dir = filepath.Join(d.dir, "interim")
	o.ResolveSubject(ctx)
	d.pinWorkspace()
	o.ArtifactsDir = d.attest.ArtifactsDir
	info := report.WriteAttestation(ctx, d.session.Interim(), &o, io.Discard)
	if info.Bundle == "" {
		fmt.Fprintf(stderr, "airlock: no interim attestation for the upload: %s\n", info.Error)
		return
	}
	b, err := os.ReadFile(info.Bundle)
	if err == nil {
		work, _ := d.mounts.Host(containerWork)
		err = putInto(work, tmp, interimDir, interimName, b)
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock: no interim attestation for the upload: %v\n", err)
		return
	}
	fmt.Fprintf(stderr, "airlock: interim attestation of the job so far: %s/%s/%s (verdict.final false; the final one is in the check run)\n", containerTemp, interimDir, interimName)
}

// putInto writes data as dir/name below base (reached from work without
// following symlinks), which the job can write and may have filled with
// symlinks: nothing is followed out of base, the directory must be a
// real one, and the file is created afresh (O_EXCL), never written
// through what the job left there.
func putInto(work, base, dir, name string, data []byte) error {
	root, err := files.OpenRootBeneath(work, base)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if fi, err := root.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s in the runner's temp directory is not a directory", dir)
	}
	p := filepath.Join(dir, name)
	if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// pinWorkspace has the attestation read its artifact subjects from the
// repository opened without following symlinks: the job may have made it
// a symlink to a host directory.
func (d *job) pinWorkspace() {
	if d.pinnedRepo != nil {
		return
	}
	work, _ := d.mounts.Host(containerWork)
	f, err := files.OpenDirBeneath(work, d.attest.Repository)
	if err != nil {
		d.attest.ArtifactsDir = filepath.Join(d.dir, "no-repository")
		return
	}
	d.pinnedRepo = f
	d.attest.ArtifactsDir = files.FDPath(f)
}
