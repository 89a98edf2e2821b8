package hook

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/files"
)

// The actions a job runs are part of what built its artifacts: the
// provenance names each, owner/repo@ref with the digest of its files
// (files.TreeDigest). The runner downloads an action into
// <_work>/_actions/<owner>/<repo>/<ref>/ (a ref with slashes makes more
// directories) and leaves <ref>.completed beside it when the download is
// whole; a step names the action's files in its arguments (a JavaScript
// action's script) or in GITHUB_ACTION_PATH (a composite action's steps).
// The job sees the directory read-only, so the digest airlock takes on
// the host before the first step that runs it is of what ran.

// actionPath finds a path below the job container's actions directory.
var actionPath = regexp.MustCompile(regexp.QuoteMeta(containerActions) + `/[^\s'"]+`)

// actionDirs are the paths below the actions directory that a step's
// arguments and GITHUB_ACTION_PATH name (container paths), each once.
func actionDirs(args []string, env map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range append(args, env["GITHUB_ACTION_PATH"]) {
		for _, p := range actionPath.FindAllString(s, -1) {
			if p = path.Clean(p); !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// actionAt is the action whose directory holds p (a path below the
// actions directory, as the job sees it): owner, repository, ref and the
// directory relative to the actions directory. The ref is the shortest
// run of components after owner/repo that the runner's download mark
// (.completed) names in hostActions; without one, the first component.
func actionAt(hostActions, p string) (owner, repo, ref, dir string, ok bool) {
	rel := strings.TrimPrefix(p, containerActions+"/")
	parts := strings.Split(rel, "/")
	if len(parts) < 3 {
		return "", "", "", "", false
	}
	for _, c := range parts {
		if c == "" || c == "." || c == ".." {
			return "", "", "", "", false
		}
	}
	owner, repo = parts[0], parts[1]
	for k := 3; k <= len(parts); k++ {
		cand := strings.Join(parts[:k], "/")
		if fi, err := os.Lstat(filepath.Join(hostActions, cand+".completed")); err == nil && fi.Mode().IsRegular() {
			return owner, repo, strings.Join(parts[2:k], "/"), cand, true
		}
	}
	return owner, repo, parts[2], strings.Join(parts[:3], "/"), true
}

// recordActions adds the actions a step runs to the job's attestation
// config, each once per job, digested before the step runs. At the
// job's first step, every action the runner downloaded for it (each
// directory with a .completed mark: the workflow's actions and those
// the composite actions among them use, which the runner fetches in
// "Set up job") is recorded first (recordDownloaded); then the action
// directories the step names, and a local action (uses: ./…, in the
// workspace) its GITHUB_ACTION_PATH names. What cannot be digested is
// recorded with the reason, never left out.
func (d *job) recordActions(args []string, env map[string]string, stderr io.Writer) {
	hostActions, ok := d.mounts.Host(containerActions)
	if ok {
		d.recordDownloaded(hostActions, stderr)
		for _, p := range actionDirs(args, env) {
			if owner, repo, ref, dir, ok := actionAt(hostActions, p); ok {
				d.recordAction(hostActions, owner, repo, ref, dir, stderr)
			}
		}
	}
	d.recordLocalAction(env, stderr)
}

// Bounds on the walk of the actions directory for download marks.
const (
	maxActionDepth = 12 // owner/repo/ref components
	maxActionMarks = 1000
)

// walkedKey marks in actionsSeen that the actions directory was walked.
const walkedKey = "\x00downloaded"

// recordDownloaded records, once per job, every action directory below
// hostActions that has the runner's download mark beside it
// (OWNER/REPO/REF.completed, REF possibly with slashes), in path order;
// the walk follows no symlink and does not descend into an action's
// own files, so a file named *.completed inside one is no action.
func (d *job) recordDownloaded(hostActions string, stderr io.Writer) {
	if d.actionsSeen[walkedKey] {
		return
	}
	if d.actionsSeen == nil {
		d.actionsSeen = map[string]bool{}
	}
	d.actionsSeen[walkedKey] = true
	marks := 0
	filepath.WalkDir(hostActions, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == hostActions {
			return nil
		}
		rel, _ := filepath.Rel(hostActions, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		isDir := e.IsDir()
		if !isDir && e.Type()&fs.ModeSymlink == 0 || strings.HasSuffix(rel, ".completed") {
			return nil
		}
		if len(parts) >= 3 {
			if fi, err := os.Lstat(p + ".completed"); err == nil && fi.Mode().IsRegular() {
				if marks++; marks > maxActionMarks {
					fmt.Fprintf(stderr, "airlock: more than %d downloaded actions: those after %s are recorded only when a step names them\n", maxActionMarks, rel)
					return filepath.SkipAll
				}
				d.recordAction(hostActions, parts[0], parts[1], strings.Join(parts[2:], "/"), filepath.ToSlash(rel), stderr)
				if isDir {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if isDir && len(parts) >= maxActionDepth {
			return filepath.SkipDir
		}
		return nil
	})
}

// recordAction adds the action at dir (below hostActions) once.
func (d *job) recordAction(hostActions, owner, repo, ref, dir string, stderr io.Writer) {
	if d.actionsSeen[dir] {
		return
	}
	if d.actionsSeen == nil {
		d.actionsSeen = map[string]bool{}
	}
	d.actionsSeen[dir] = true
	a := attest.Descriptor{
		Name: owner + "/" + repo + "@" + ref, URI: "git+" + d.serverURL() + "/" + owner + "/" + repo + "@" + ref,
		Annotations: map[string]string{"path": containerActions + "/" + dir},
	}
	d.digestInto(&a, hostActions, dir, stderr)
	d.attest.Actions = append(d.attest.Actions, a)
}

// digestInto sets a's tree digest of dir below base, or says in its
// annotations why there is none.
func (d *job) digestInto(a *attest.Descriptor, base, dir string, stderr io.Writer) {
	sum, err := actionDigest(base, dir)
	if err != nil {
		a.Annotations["digest"] = "not taken: " + err.Error()
		fmt.Fprintf(stderr, "airlock: action %s: no digest for the provenance: %v\n", a.Name, err)
		return
	}
	a.Digest = map[string]string{attest.TreeDigestAlg: sum}
}

// recordLocalAction records the local action (uses: ./PATH) a step's
// GITHUB_ACTION_PATH names when it lies in the job's workspace
// (GITHUB_WORKSPACE): name ./PATH, digested before the step like a
// downloaded action. The workspace is the job's to write, so the digest
// is of what the directory held when the step began (which an earlier
// step may have changed from the commit).
func (d *job) recordLocalAction(env map[string]string, stderr io.Writer) {
	ws, ap := path.Clean(env["GITHUB_WORKSPACE"]), path.Clean(env["GITHUB_ACTION_PATH"])
	rel := strings.TrimPrefix(ap, ws+"/")
	if env["GITHUB_WORKSPACE"] == "" || env["GITHUB_ACTION_PATH"] == "" || rel == ap || !filepath.IsLocal(rel) || !strings.HasPrefix(ws, containerWork+"/") {
		return
	}
	hostWS, ok := d.mounts.Host(ws)
	if !ok || d.actionsSeen["./"+rel] {
		return
	}
	if d.actionsSeen == nil {
		d.actionsSeen = map[string]bool{}
	}
	d.actionsSeen["./"+rel] = true
	a := attest.Descriptor{Name: "./" + rel, Annotations: map[string]string{"path": ap, "source": "a local action, in the workspace: digested before the step that runs it"}}
	d.digestInto(&a, hostWS, rel, stderr)
	d.attest.Actions = append(d.attest.Actions, a)
}

// actionDigest is the tree digest of dir below hostActions, reached
// without following a symlink (a directory the runner linked to its
// action cache is not digested through the link).
func actionDigest(hostActions, dir string) (string, error) {
	root, err := files.OpenRootBeneath(hostActions, filepath.Join(hostActions, dir))
	if err != nil {
		return "", err
	}
	defer root.Close()
	return files.TreeDigest(root)
}

// recordImage adds the image of a Docker action to the job's attestation
// config, each once. What ran is the image directory the policy maps the
// reference to (sandbox.images), which is not digested: the descriptor
// has no digest of its own, its uri is that directory, and the
// reference as the workflow wrote it, with the digest it pins if any,
// is in its annotations (reference, referenceDigest).
func (d *job) recordImage(image string) {
	ref := "docker://" + strings.TrimPrefix(image, "docker://")
	if image == "" || d.actionsSeen[ref] {
		return
	}
	if d.actionsSeen == nil {
		d.actionsSeen = map[string]bool{}
	}
	d.actionsSeen[ref] = true
	a := attest.Descriptor{Name: ref, Annotations: map[string]string{
		"reference": ref,
		"digest":    "not taken: the image directory the policy maps the reference to (sandbox.images) ran, and it is not digested",
	}}
	if dir, ok := d.images.Mapped(strings.TrimPrefix(image, "docker://")); ok {
		a.URI = "file://" + dir
	} else if r, ok := d.images.ResolvedFor(image); ok {
		// Pulled: the image manifest that ran, by its digest.
		a.Digest = map[string]string{"sha256": strings.TrimPrefix(r.ImageDigest, "sha256:")}
		a.Annotations["digest"] = r.Digest
		a.Annotations["platform"] = r.Platform
	}
	if _, sum, ok := strings.Cut(image, "@sha256:"); ok && attest.IsSHA256(sum) {
		a.Annotations["referenceDigest"] = "sha256:" + sum
	}
	d.attest.Actions = append(d.attest.Actions, a)
}

// serverURL is the GitHub server the job's actions come from.
func (d *job) serverURL() string {
	if d.githubServer != "" {
		return strings.TrimSuffix(d.githubServer, "/")
	}
	return "https://github.com"
}
