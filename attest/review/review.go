// Package review is what a compliance reviewer does with an attestation
// store (attest/store): list a repository's, a pull request's or a
// commit's jobs, fetch their bundles as files that airlock verify and
// cosign take, and verify them all at once, each against its signature,
// its subject and what the store's index says of it (a label that does
// not match the signed statement is a failure: the index is not
// evidence).
//
// cmd/airlock's `attestations ls|get`, `verify --store` and
// `report --store` are its doors; it knows nothing of cobra.
//
// Layer 3: above attest, attest/store and runner/github (the jobs a
// pull request ran, for Missing).
package review

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sigstore/sigstore/pkg/signature"
	"golang.org/x/sync/errgroup"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner/github"
)

// Selection is what a reviewer asks for: a store (its name, and the
// credentials file for it), and the jobs of a repository, a pull
// request or a commit, or one record by its tag or digest (Ref).
type Selection struct {
	Store, Auth string
	Query       store.Query
	Ref         string
}

// hexCommit is a commit id or an abbreviation of one.
var hexCommit = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{7,40}$`) })

// Open checks the selection and opens its store.
func (s Selection) Open() (store.Backend, error) {
	if s.Store == "" {
		return nil, errors.New("--store is required: the attestation store (oci://REGISTRY/REPOSITORY or file:///PATH)")
	}
	if s.Query.Commit != "" && !hexCommit().MatchString(s.Query.Commit) {
		return nil, fmt.Errorf("--commit %q: give a commit id (7 to 40 lower-case hex digits)", s.Query.Commit)
	}
	if s.Query.PullRequest < 0 {
		return nil, fmt.Errorf("--pr %d: a pull request's number is positive", s.Query.PullRequest)
	}
	r, err := storeref.Parse(s.Store)
	if err != nil {
		return nil, err
	}
	return store.Open(r, store.Options{AuthFile: s.Auth})
}

// Find lists the entries the selection names: the one Ref, or what
// Query selects (every job of the store when it selects nothing).
func (s Selection) Find(ctx context.Context, b store.Backend) ([]store.Entry, error) {
	if s.Ref != "" {
		e, err := b.Resolve(ctx, s.Ref)
		if err != nil {
			return nil, err
		}
		return []store.Entry{e}, nil
	}
	return b.List(ctx, s.Query)
}

// Load opens the selection's store and finds what it selects: a
// selection that cannot be honoured is an input.Error, the store's
// trouble is not.
func (s Selection) Load(ctx context.Context) (store.Backend, []store.Entry, error) {
	b, err := s.Open()
	if err != nil {
		return nil, nil, input.Error{Err: err}
	}
	entries, err := s.Find(ctx, b)
	return b, entries, err
}

// WriteList prints entries one line a job (its kind, verdict, time,
// pull request, commit and reference), or as JSON.
func WriteList(out io.Writer, entries []store.Entry, asJSON bool) error {
	if asJSON {
		if entries == nil {
			entries = []store.Entry{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	w := tabwriter.NewWriter(textsafe.Writer(out), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "VERDICT\tKIND\tCREATED\tPR\tCOMMIT\tRUN\tJOB\tREFERENCE")
	for _, e := range entries {
		pr, run := "-", "-"
		if e.PullRequest > 0 {
			pr = fmt.Sprint(e.PullRequest)
		}
		if e.RunID != "" {
			run = e.RunID + "/" + e.RunAttempt
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Verdict, e.Kind, e.Created.UTC().Format(time.RFC3339), pr, abbrev(e.Commit), run, orDash(e.Job), e.Ref)
	}
	return w.Flush()
}

// Get writes each entry's bundle to dir as TAG.sigstore.json, as
// cosign and airlock verify take it, and returns the files.
func Get(ctx context.Context, b store.Backend, entries []store.Entry, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Names come from the store: written inside dir, or not at all.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var files []string
	for _, e := range entries {
		data, err := b.Fetch(ctx, e)
		if err != nil {
			return files, err
		}
		name := e.Tag + ".sigstore.json"
		if !filepath.IsLocal(name) || filepath.Base(name) != name {
			return files, fmt.Errorf("the store names a record %q: not a file name", e.Tag)
		}
		if err := root.WriteFile(name, data, 0o644); err != nil {
			return files, err
		}
		files = append(files, filepath.Join(dir, name))
	}
	return files, nil
}

// Result is one job's verification.
type Result struct {
	Entry store.Entry `json:"entry"`
	// Verified is the run attestation (nil for a provenance bundle,
	// which is checked by its signature and subject type alone).
	Verified *attest.Verified `json:"verified,omitempty"`
	Error    string           `json:"error,omitempty"`
}

// verifyWorkers bounds the bundles fetched and verified at once.
const verifyWorkers = 8

// VerifyAll fetches and verifies every entry with v (and the compliance
// policy in opts), at most verifyWorkers at once, in the entries'
// order.
func VerifyAll(ctx context.Context, b store.Backend, entries []store.Entry, v signature.Verifier, opts attest.VerifyOptions) []Result {
	out := make([]Result, len(entries))
	var g errgroup.Group
	g.SetLimit(verifyWorkers)
	for i, e := range entries {
		out[i].Entry = e
		g.Go(func() error {
			ver, err := verifyOne(ctx, b, e, v, opts)
			out[i].Verified = ver
			if err != nil {
				out[i].Error = err.Error()
			}
			return nil // each entry's error is its own
		})
	}
	g.Wait()
	return out
}

// verifyOne verifies one entry's bundle, and that the store's labels
// say what the signed statement says.
func verifyOne(ctx context.Context, b store.Backend, e store.Entry, v signature.Verifier, opts attest.VerifyOptions) (*attest.Verified, error) {
	data, err := b.Fetch(ctx, e)
	if err != nil {
		return nil, err
	}
	if e.Kind == store.KindProvenance {
		_, err := attest.VerifyProvenance(data, v)
		return nil, err
	}
	if opts.Commit == "" {
		opts.Commit = e.Commit // the subject must be the commit it is filed under
	}
	ver, err := attest.Verify(data, v, opts)
	if err != nil {
		return nil, err
	}
	return ver, labelsAgree(e, ver)
}

// labelsAgree says where the store's labels of e and the statement
// they index differ: every label a reviewer filters on, and the tag
// they make.
func labelsAgree(e store.Entry, ver *attest.Verified) error {
	p := ver.Predicate
	verdict := store.VerdictFailed
	if p.Verdict.Passed {
		verdict = store.VerdictPassed
	}
	var gh attest.GitHubRun
	if p.Runner.GitHub != nil {
		gh = *p.Runner.GitHub
	}
	for _, l := range []struct{ what, stored, signed string }{
		{"verdict", e.Verdict, verdict},
		{"commit", e.Commit, ver.Subject.Digest["gitCommit"]},
		{"repository", e.Repository, ver.Subject.Name},
		{"pull request", fmt.Sprint(e.PullRequest), fmt.Sprint(p.Job.PullRequest)},
		{"job", e.JobID, p.Sandbox.ID},
		{"run", e.RunID, gh.RunID},
		{"run attempt", e.RunAttempt, gh.RunAttempt},
		{"workflow job", e.Job, gh.Job},
		{"runner", e.Runner, gh.RunnerName},
	} {
		if l.stored != l.signed {
			return fmt.Errorf("the store says %s %q, the signed statement %q", l.what, l.stored, l.signed)
		}
	}
	if e.Tag != e.Labels.Tag() {
		return fmt.Errorf("the store files it under the tag %s, its labels make %s", e.Tag, e.Labels.Tag())
	}
	return nil
}

// WriteResults prints one line a job, VERIFIED or NOT VERIFIED and
// why, then a count; or JSON. failed counts the jobs not verified.
func WriteResults(out io.Writer, results []Result, asJSON bool) (failed int, err error) {
	for _, r := range results {
		if r.Error != "" {
			failed++
		}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return failed, enc.Encode(struct {
			Jobs   []Result `json:"jobs"`
			Failed int      `json:"failed"`
		}{results, failed})
	}
	w := textsafe.Writer(out)
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(w, "NOT VERIFIED  %s  %s: %s\n", r.Entry.Kind, r.Entry.Tag, r.Error)
			continue
		}
		verdict := ""
		if r.Verified != nil {
			verdict = " (the job " + r.Entry.Verdict + ")"
		}
		fmt.Fprintf(w, "VERIFIED      %s  %s%s\n", r.Entry.Kind, r.Entry.Tag, verdict)
	}
	fmt.Fprintf(w, "%d of %d bundle(s) verified\n", len(results)-failed, len(results))
	return failed, nil
}

func abbrev(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return orDash(c)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Report writes one HTML page over the run attestations of entries
// (attest.WritePullRequestHTML): each verified with v and checked
// against its labels as VerifyAll does, or, without v, read unverified
// and shown as such.
func Report(ctx context.Context, b store.Backend, entries []store.Entry, v signature.Verifier, title string, out io.Writer) error {
	var runs []store.Entry
	for _, e := range entries {
		if e.Kind == store.KindAttestation {
			runs = append(runs, e)
		}
	}
	pages := make([]attest.JobPage, len(runs))
	var g errgroup.Group
	g.SetLimit(verifyWorkers)
	for i, e := range runs {
		g.Go(func() error {
			pg := attest.JobPage{Tag: e.Tag, Ref: e.Ref}
			if v != nil {
				ver, err := verifyOne(ctx, b, e, v, attest.VerifyOptions{})
				pg.V, pg.Verified, pg.Status = ver, err == nil, "signature verified"
				if err != nil {
					pg.Status, pg.Error = err.Error(), err.Error()
				}
			} else if data, err := b.Fetch(ctx, e); err != nil {
				pg.Error = err.Error()
			} else if pg.V, err = attest.Inspect(data); err != nil {
				pg.V, pg.Error = nil, err.Error()
			} else {
				pg.Status = "SIGNATURE NOT CHECKED (give --key)"
			}
			pages[i] = pg
			return nil // each page says its own error
		})
	}
	g.Wait()
	return attest.WritePullRequestHTML(out, title, pages)
}

// Title names what a selection selects, for a page's title.
func (s Selection) Title() string { return "airlock: " + s.Describe() + " in " + s.Store }

// Describe says in words which jobs the selection selects.
func (s Selection) Describe() string {
	what := "every job"
	switch {
	case s.Query.PullRequest > 0:
		what = fmt.Sprintf("pull request #%d", s.Query.PullRequest)
	case s.Query.Commit != "":
		what = "commit " + s.Query.Commit
	}
	if s.Query.Repository != "" {
		what += " of " + s.Query.Repository
	}
	return what
}

// Missing are the jobs of jobs that ran on one of airlock's runners
// (their runs-on labels hold one of runsOn) and have no verified run
// attestation among verified (VerifyAll's results): matched by run,
// attempt and runner, each stored job standing for one. A job that never reached a runner (skipped,
// cancelled in the queue) is not missing.
func Missing(verified []Result, jobs []github.WorkflowJob, runsOn []string) []github.WorkflowJob {
	type key struct{ run, attempt, runner string }
	stored := map[key]int{}
	for _, r := range verified {
		// Only what verified stands for a job: an index entry alone is
		// the registry's word.
		if e := r.Entry; r.Error == "" && r.Verified != nil {
			stored[key{e.RunID, e.RunAttempt, e.Runner}]++
		}
	}
	var out []github.WorkflowJob
	for _, j := range jobs {
		if j.RunnerName == "" || !slices.ContainsFunc(j.Labels, func(l string) bool { return slices.Contains(runsOn, l) }) {
			continue
		}
		k := key{fmt.Sprint(j.RunID), fmt.Sprint(j.RunAttempt), j.RunnerName}
		if stored[k] > 0 {
			stored[k]--
			continue
		}
		out = append(out, j)
	}
	return out
}

// WriteMissing says which jobs have no stored attestation, one line
// each, and how many of how many.
func WriteMissing(out io.Writer, missing []github.WorkflowJob, considered int) {
	w := textsafe.Writer(out)
	for _, j := range missing {
		fmt.Fprintf(w, "MISSING  run %d attempt %d  %s / %s (job %d) on %s: %s, no stored attestation\n", j.RunID, j.RunAttempt, j.Workflow, j.Name, j.ID, j.RunnerName, orDash(j.Conclusion))
	}
	fmt.Fprintf(w, "%d of %d job(s) on airlock's runners have no stored attestation\n", len(missing), considered)
}

// OnRunners counts the jobs that ran on one of airlock's runners.
func OnRunners(jobs []github.WorkflowJob, runsOn []string) int {
	n := 0
	for _, j := range jobs {
		if j.RunnerName != "" && slices.ContainsFunc(j.Labels, func(l string) bool { return slices.Contains(runsOn, l) }) {
			n++
		}
	}
	return n
}
