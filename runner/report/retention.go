package report

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/airlock-ci/airlock/attest/store"
)

// Retention bounds what a state directory keeps of past jobs'
// attestations: the newest Keep jobs, none older than MaxAge (zero: no
// bound of that kind).
type Retention struct {
	Keep   int
	MaxAge time.Duration
}

// DefaultRetention is what airlock keeps unless told otherwise.
var DefaultRetention = Retention{Keep: 200, MaxAge: 30 * 24 * time.Hour}

// attestationFile is a file WriteAttestation or WriteProvenance writes:
// the job's id and one of their suffixes.
var attestationFile = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(job-[0-9a-f]+)\.(provenance\.)?(sigstore\.json|dsse\.json|UNSIGNED\.intoto\.json)$`)
})

// Prune removes from dir the attestation files of the jobs beyond r
// (a job's files go together; the newest file dates a job), and returns
// how many jobs it removed. A job that some attestation store does not
// hold yet is kept whatever its age. Only regular files named as WriteAttestation
// and WriteProvenance name them are touched, nothing is followed out of
// dir.
func (r Retention) Prune(dir string, now time.Time) (int, error) {
	if r.Keep <= 0 && r.MaxAge <= 0 {
		return 0, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return 0, err
	}
	type job struct {
		files  []string
		newest time.Time
	}
	jobs := map[string]*job{}
	pending := store.PendingJobs(dir) // not held by every store yet: kept
	for _, e := range entries {
		m := attestationFile().FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() || pending[m[1]] {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		j := jobs[m[1]]
		if j == nil {
			j = &job{}
			jobs[m[1]] = j
		}
		j.files = append(j.files, e.Name())
		if fi.ModTime().After(j.newest) {
			j.newest = fi.ModTime()
		}
	}
	order := slices.SortedFunc(maps.Values(jobs), func(a, b *job) int { return b.newest.Compare(a.newest) })
	removed := 0
	var errs []error
	for i, j := range order {
		if (r.Keep <= 0 || i < r.Keep) && (r.MaxAge <= 0 || now.Sub(j.newest) <= r.MaxAge) {
			continue
		}
		for _, f := range j.files {
			if err := root.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
