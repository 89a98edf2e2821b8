package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/files"
)

// Keeper keeps a job's bundles in its stores. The bundles lie in Dir
// (the attestation directory); Dir/pending holds a marker for each job
// that some store does not hold yet: written before the first push, so
// that a runner killed mid-push leaves it, and removed only when every
// store holds every bundle. Retention keeps a pending job's files
// (PendingJobs), and the next job retries it (RetryPending).
type Keeper struct {
	Stores  []storeref.Ref
	Options Options
	Dir     string
	// Sessions, when set, keeps each store open across the Keeper's
	// calls (Prepare while the job runs, then Keep); nil: each call
	// opens its stores anew.
	Sessions *Sessions
}

// Sessions keeps a job's stores open once opened, so that the commit's
// preparation while the job runs and the push after it share their
// connections and the registry's token: after the job, no ping and no
// token exchange (two round trips to a registry across the internet),
// and the empty blob is not looked for again. A registry's token that
// expires meanwhile is fetched again on its 401 (go-containerregistry's
// bearer transport).
type Sessions struct {
	mu     sync.Mutex
	stores map[string]Backend
}

// open returns the store r names, opened once per Sessions.
func (ss *Sessions) open(r storeref.Ref, o Options) (Backend, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	key := r.String()
	if b, ok := ss.stores[key]; ok {
		return b, nil
	}
	b, err := Open(r, o)
	if err != nil {
		return nil, err
	}
	if ss.stores == nil {
		ss.stores = map[string]Backend{}
	}
	ss.stores[key] = b
	return b, nil
}

// open opens the store r names, through k.Sessions when set.
func (k Keeper) open(r storeref.Ref) (Backend, error) {
	if k.Sessions != nil {
		return k.Sessions.open(r, k.Options)
	}
	return Open(r, k.Options)
}

// Bundle is one of a job's bundles on disk: its file's name in the
// Keeper's Dir and its labels.
type Bundle struct {
	File   string
	Labels Labels
}

// Outcome is what one store did with a job's bundles.
type Outcome struct {
	Store    string  `json:"store"`
	Required bool    `json:"required"`
	Entries  []Entry `json:"entries,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// pendingJob is a marker's content: no credentials, only names.
type pendingJob struct {
	JobID   string          `json:"jobId"`
	Created time.Time       `json:"created"`
	Records []pendingRecord `json:"records"`
	// Stores are the stores the job was to be kept in
	// (storeref.Ref.String); Held the tags each already holds, by
	// location.
	Stores    []string            `json:"stores"`
	Held      map[string][]string `json:"held"`
	Attempts  int                 `json:"attempts"`
	LastError string              `json:"lastError,omitempty"`
}

type pendingRecord struct {
	File   string `json:"file"`
	Digest string `json:"digest"`
	Labels Labels `json:"labels"`
}

const (
	pendingDir    = "pending"
	markerSuffix  = ".json"
	lockSuffix    = ".lock"
	lostSuffix    = ".lost"
	badSuffix     = ".unreadable"
	maxMarker     = 1 << 20
	maxRetryJobs  = 20
	pendingPrefix = "job-"
)

// Keep pushes a job's bundles to every store, all stores at once, and
// says what each did. The job stays pending (its marker in Dir/pending)
// until every store holds every bundle.
func (k Keeper) Keep(ctx context.Context, jobID string, bundles []Bundle) []Outcome {
	if len(k.Stores) == 0 || len(bundles) == 0 {
		return nil
	}
	p := pendingJob{JobID: jobID, Created: time.Now().UTC(), Held: map[string][]string{}}
	for _, r := range k.Stores {
		p.Stores = append(p.Stores, r.String())
	}
	failAll := func(err error) []Outcome {
		var out []Outcome
		for _, r := range k.Stores {
			out = append(out, Outcome{Store: r.Location(), Required: r.Required, Error: err.Error()})
		}
		return out
	}
	if !validJobID(jobID) {
		return failAll(fmt.Errorf("job id %q cannot name a pending marker", jobID))
	}
	root, err := k.openDir()
	if err != nil {
		return failAll(err)
	}
	defer root.Close()
	records := make([]Record, len(bundles))
	for i, b := range bundles {
		data, err := readCapped(root, b.File, attest.MaxBundleSize)
		if err != nil {
			return failAll(fmt.Errorf("read the bundle: %w", err))
		}
		records[i] = Record{Labels: b.Labels, Bundle: data}
		p.Records = append(p.Records, pendingRecord{File: b.File, Digest: digestOf(data), Labels: b.Labels})
	}
	unlock, err := k.lock(jobID, false)
	if err != nil {
		return failAll(err)
	}
	defer unlock()
	if err := k.writeMarker(p); err != nil {
		os.Remove(k.markerPath(jobID) + lockSuffix)
		return failAll(fmt.Errorf("the pending marker could not be written, so nothing was pushed: %w", err))
	}
	out := k.push(ctx, &p, k.Stores, records)
	k.settle(p)
	return out
}

// Prepare puts in each store, all at once, what every job of the commit
// shares, while the job runs: on a registry, the commit's subject
// manifest, so that the push after the job writes one manifest less.
// It is best effort, and says nothing: Keep puts whatever is missing,
// and reports what fails. repository and commit are the labels the
// job's records will have.
func (k Keeper) Prepare(ctx context.Context, repository, commit string) {
	var wg sync.WaitGroup
	for _, r := range k.Stores {
		wg.Go(func() {
			if b, err := k.open(r); err == nil {
				if p, ok := b.(commitPreparer); ok {
					p.PrepareCommit(ctx, repository, commit)
				}
			}
		})
	}
	wg.Wait()
}

// push puts records in each store at once and notes in p what each
// holds.
func (k Keeper) push(ctx context.Context, p *pendingJob, stores []storeref.Ref, records []Record) []Outcome {
	out := make([]Outcome, len(stores))
	var wg sync.WaitGroup
	for i, r := range stores {
		out[i] = Outcome{Store: r.Location(), Required: r.Required}
		wg.Go(func() {
			b, err := k.open(r)
			if err != nil {
				out[i].Error = err.Error()
				return
			}
			for _, rec := range records {
				e, err := b.Put(ctx, rec)
				if err != nil {
					out[i].Error = err.Error()
					return
				}
				out[i].Entries = append(out[i].Entries, e)
			}
		})
	}
	wg.Wait()
	p.Attempts++
	p.LastError = ""
	for _, o := range out {
		for _, e := range o.Entries {
			if !slices.Contains(p.Held[o.Store], e.Tag) {
				p.Held[o.Store] = append(p.Held[o.Store], e.Tag)
			}
		}
		if o.Error != "" {
			p.LastError = joinErr(p.LastError, o.Error)
		}
	}
	return out
}

// settle removes p's marker when every store holds every record, else
// writes what it holds.
func (k Keeper) settle(p pendingJob) {
	if p.complete() {
		os.Remove(k.markerPath(p.JobID))
		os.Remove(k.markerPath(p.JobID) + lockSuffix)
		return
	}
	k.writeMarker(p)
}

// complete says whether every store holds every record.
func (p pendingJob) complete() bool {
	for _, s := range p.Stores {
		r, err := storeref.Parse(s)
		if err != nil {
			return false
		}
		for _, rec := range p.Records {
			if !slices.Contains(p.Held[r.Location()], rec.Labels.Tag()) {
				return false
			}
		}
	}
	return true
}

// RetryPending pushes what earlier jobs left pending (at most
// maxRetryJobs of them, oldest first, within ctx), each to the stores
// that do not hold it yet, and says on log what it did. A job whose
// marker another process holds (its own job still pushing) is left
// alone. It returns how many jobs it found pending and how many are
// now held everywhere.
func (k Keeper) RetryPending(ctx context.Context, log io.Writer) (pending, kept int) {
	markers, _ := filepath.Glob(filepath.Join(k.Dir, pendingDir, pendingPrefix+"*"+markerSuffix))
	slices.SortFunc(markers, func(a, b string) int { return modTime(a).Compare(modTime(b)) })
	root, err := k.openDir()
	if err != nil {
		return 0, 0
	}
	defer root.Close()
	for _, m := range markers {
		if pending >= maxRetryJobs || ctx.Err() != nil {
			break
		}
		jobID := strings.TrimSuffix(filepath.Base(m), markerSuffix)
		if !validJobID(jobID) {
			continue
		}
		unlock, err := k.lock(jobID, true)
		if err != nil {
			continue // its own job, or another retry, is at it
		}
		pending++
		if k.retry(ctx, root, jobID, log) {
			kept++
		}
		unlock()
	}
	return pending, kept
}

// retry pushes one pending job; true when every store now holds it.
func (k Keeper) retry(ctx context.Context, root *os.Root, jobID string, log io.Writer) bool {
	b, err := files.ReadCapped(k.markerPath(jobID), maxMarker)
	if errors.Is(err, fs.ErrNotExist) {
		os.Remove(k.markerPath(jobID) + lockSuffix) // its own job settled it meanwhile
		return false
	}
	if err != nil {
		return false
	}
	var p pendingJob
	if err := json.Unmarshal(b, &p); err != nil || p.JobID != jobID || p.Held == nil {
		fmt.Fprintf(log, "airlock: pending attestation %s: the marker does not parse; set aside as %s, no longer retried\n", k.markerPath(jobID), k.setAside(jobID, badSuffix))
		return false
	}
	var records []Record
	for _, r := range p.Records {
		data, err := readCapped(root, r.File, attest.MaxBundleSize)
		if err == nil && digestOf(data) != r.Digest {
			err = fmt.Errorf("it hashes to %s, not the %s that was to be stored", digestOf(data), r.Digest)
		}
		if err != nil {
			fmt.Fprintf(log, "airlock: ATTESTATION LOST: %s of job %s cannot be stored: %v; its marker is set aside as %s\n", r.File, jobID, err, k.setAside(jobID, lostSuffix))
			return false
		}
		records = append(records, Record{Labels: r.Labels, Bundle: data})
	}
	var todo []storeref.Ref
	for _, s := range p.Stores {
		r, err := storeref.Parse(s)
		if err != nil {
			continue
		}
		for _, rec := range records {
			if !slices.Contains(p.Held[r.Location()], rec.Tag()) {
				todo = append(todo, r)
				break
			}
		}
	}
	out := k.push(ctx, &p, todo, records)
	k.settle(p)
	for _, o := range out {
		if o.Error != "" {
			fmt.Fprintf(log, "airlock: attestation of %s (pending since %s) still not in %s: %s\n", jobID, p.Created.Format(time.RFC3339), o.Store, o.Error)
			continue
		}
		for _, e := range o.Entries {
			fmt.Fprintf(log, "airlock: attestation of %s (pending since %s) now stored: %s\n", jobID, p.Created.Format(time.RFC3339), e.Ref)
		}
	}
	return p.complete()
}

// setAside renames a marker that can never be retried (what it names
// is gone, or it does not parse) to one that RetryPending does not take,
// so that it never starves the others; it stays for an administrator.
func (k Keeper) setAside(jobID, suffix string) string {
	to := k.markerPath(jobID) + suffix
	os.Rename(k.markerPath(jobID), to)
	os.Remove(k.markerPath(jobID) + lockSuffix)
	return to
}

// PendingJobs are the ids of the jobs of dir that some store does not
// hold yet: retention must keep their files.
func PendingJobs(dir string) map[string]bool {
	out := map[string]bool{}
	markers, _ := filepath.Glob(filepath.Join(dir, pendingDir, pendingPrefix+"*"+markerSuffix))
	for _, m := range markers {
		out[strings.TrimSuffix(filepath.Base(m), markerSuffix)] = true
	}
	return out
}

func (k Keeper) openDir() (*os.Root, error) {
	if err := os.MkdirAll(filepath.Join(k.Dir, pendingDir), 0o700); err != nil {
		return nil, fmt.Errorf("attestation directory: %w", err)
	}
	r, err := os.OpenRoot(k.Dir)
	if err != nil {
		return nil, fmt.Errorf("attestation directory: %w", err)
	}
	return r, nil
}

func (k Keeper) markerPath(jobID string) string {
	return filepath.Join(k.Dir, pendingDir, jobID+markerSuffix)
}

// lock takes the job's lock: waiting for it (Keep: a retry that holds
// it ends within its deadline), or not at all (RetryPending).
func (k Keeper) lock(jobID string, noWait bool) (func(), error) {
	how := unix.LOCK_EX
	if noWait {
		how |= unix.LOCK_NB
	}
	f, err := files.Lock(k.markerPath(jobID)+lockSuffix, how)
	if err != nil {
		return nil, fmt.Errorf("lock the pending marker of %s: %w", jobID, err)
	}
	return func() { f.Close() }, nil
}

// writeMarker replaces p's marker whole, synced: a runner that dies
// right after leaves the marker, never an empty file. Its new time puts
// it last among the markers RetryPending takes, oldest first.
func (k Keeper) writeMarker(p pendingJob) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return files.WriteDurable(k.markerPath(p.JobID), b)
}

// validJobID is a job id that names a file: job- and hex or a few
// other safe characters.
func validJobID(id string) bool {
	if !strings.HasPrefix(id, pendingPrefix) || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func modTime(p string) time.Time {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Failed are the outcomes of required stores that failed.
func Failed(out []Outcome) []Outcome {
	return slices.DeleteFunc(slices.Clone(out), func(o Outcome) bool { return o.Error == "" || !o.Required })
}
