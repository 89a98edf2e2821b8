package hook

import (
	"fmt"
	"io"
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
// config, each once per job, digested before the step runs. What cannot
// be digested is recorded with the reason, never left out.
func (d *job) recordActions(args []string, env map[string]string, stderr io.Writer) {
	hostActions, ok := d.mounts.Host(containerActions)
	if !ok {
		return
	}
	for _, p := range actionDirs(args, env) {
		owner, repo, ref, dir, ok := actionAt(hostActions, p)
		if !ok || d.actionsSeen[dir] {
			continue
		}
		if d.actionsSeen == nil {
			d.actionsSeen = map[string]bool{}
		}
		d.actionsSeen[dir] = true
		a := attest.Descriptor{
			Name: owner + "/" + repo + "@" + ref, URI: "git+" + d.serverURL() + "/" + owner + "/" + repo + "@" + ref,
			Annotations: map[string]string{"path": containerActions + "/" + dir},
		}
		sum, err := actionDigest(hostActions, dir)
		if err != nil {
			a.Annotations["digest"] = "not taken: " + err.Error()
			fmt.Fprintf(stderr, "airlock: action %s: no digest for the provenance: %v\n", a.Name, err)
		} else {
			a.Digest = map[string]string{attest.TreeDigestAlg: sum}
		}
		d.attest.Actions = append(d.attest.Actions, a)
	}
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
// config, each once: as the workflow named it, with its digest when the
// reference pins one.
func (d *job) recordImage(image string) {
	ref := "docker://" + strings.TrimPrefix(image, "docker://")
	if image == "" || d.actionsSeen[ref] {
		return
	}
	if d.actionsSeen == nil {
		d.actionsSeen = map[string]bool{}
	}
	d.actionsSeen[ref] = true
	a := attest.Descriptor{Name: ref, URI: ref, Annotations: map[string]string{"note": "a Docker action's image, run on the root the policy maps it to (sandbox.images)"}}
	if _, sum, ok := strings.Cut(image, "@sha256:"); ok && attest.IsSHA256(sum) {
		a.Digest = map[string]string{"sha256": sum}
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
