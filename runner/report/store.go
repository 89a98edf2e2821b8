package report

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/attest/store"
	"github.com/airlock-ci/airlock/runner"
)

// retryBudget bounds what a job spends on the bundles earlier jobs left
// pending: the job's own are pushed first, and are what it waits for.
const retryBudget = 30 * time.Second

// keep pushes the job's signed bundles to its stores (c.Stores) before
// the door reports the job, then retries what earlier jobs on this
// runner left pending; what happened is said on log. Nil: no store is
// configured.
func keep(ctx context.Context, res runner.Result, c *runner.AttestConfig, att *Attestation, run *runStatement, log io.Writer) []store.Outcome {
	if len(c.Stores) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx) // a cancelled job's record is kept all the same
	k := keeperOf(c)
	var bundles []store.Bundle
	if run != nil && att.Bundle != "" {
		l := labelsOf(res, c, run)
		bundles = append(bundles, store.Bundle{File: filepath.Base(att.Bundle), Labels: l})
		if p := att.Provenance; p != nil && p.Bundle != "" {
			l.Kind, l.PredicateType = store.KindProvenance, attest.ProvenanceType
			bundles = append(bundles, store.Bundle{File: filepath.Base(p.Bundle), Labels: l})
		}
	}
	if len(bundles) == 0 {
		fmt.Fprintf(log, "airlock: nothing stored in the attestation stores: the job has no signed bundle (%s)\n", orUnknown(att.Error))
		return nil
	}
	out := k.Keep(ctx, res.Sandbox.ID, bundles)
	healthy := true
	for _, o := range out {
		if o.Error != "" {
			healthy = false
			what := "ATTESTATION NOT STORED"
			if !o.Required {
				what = "attestation not stored (best-effort store)"
			}
			fmt.Fprintf(log, "airlock: %s in %s: %s; the bundle stays at %s, and a later job on this runner whose own push succeeds retries it\n", what, o.Store, o.Error, att.Bundle)
			continue
		}
		for _, e := range o.Entries {
			fmt.Fprintf(log, "%s stored: %s (tag %s, bundle %s)\n", e.Kind, e.Ref, e.Tag, e.Digest)
		}
	}
	if healthy {
		// Only while the stores answer: a store that is down would hold
		// this job for every pending one.
		rctx, cancel := context.WithTimeout(ctx, retryBudget)
		defer cancel()
		k.RetryPending(rctx, log)
	}
	return out
}

// PrepareStores puts in the job's stores, in the background, what every
// job of its commit shares (store.Keeper.Prepare), so that the push
// after the job is only the job's own. The subject must be resolved
// (a head that is no commit id yet is left to Keep), and the sandbox
// up: gvisor clears the process's environment while it creates one,
// and the labels and the transport's proxy settings are read from it.
// The stores stay open for the push after the job (c.StoreSessions).
// stop gives what is not done yet a moment (it is usually one request
// from done), then cancels it (Keep puts it) and waits.
func PrepareStores(ctx context.Context, c *runner.AttestConfig) (stop func()) {
	if len(c.Stores) == 0 || !c.HeadResolved() {
		return func() {}
	}
	repository, commit := commitLabels(subjectOf(c, statementMeta(c)))
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The push after the job goes through the same connections.
	c.StoreSessions = &store.Sessions{}
	k := keeperOf(c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Prepare(ctx, repository, commit)
	}()
	return func() {
		select {
		case <-done:
		case <-time.After(prepareGrace):
		}
		cancel()
		<-done
	}
}

// prepareGrace is how long the door waits, once the job is done, for a
// preparation still under way, rather than start it again in Keep.
const prepareGrace = time.Second

// keeperOf keeps c's bundles in c's stores, through the sessions the
// job's preparation opened (if any).
func keeperOf(c *runner.AttestConfig) store.Keeper {
	return store.Keeper{Stores: c.Stores, Options: store.Options{AuthFile: c.StoreAuth}, Dir: c.Dir, Sessions: c.StoreSessions}
}

// commitLabels are the Repository and Commit labels of a job whose
// statement has subject s.
func commitLabels(s attest.SubjectInfo) (repository, commit string) {
	return clip(s.Name, 480), s.Digest["gitCommit"]
}

// labelsOf are the labels of the job's run attestation: what its
// signed statement says.
func labelsOf(res runner.Result, c *runner.AttestConfig, run *runStatement) store.Labels {
	repository, commit := commitLabels(run.subject)
	l := store.Labels{
		Kind: store.KindAttestation, Repository: repository, PullRequest: c.Meta.PullRequest,
		Commit: commit, JobID: res.Sandbox.ID, Verdict: store.VerdictFailed,
		Created: time.Now().UTC().Truncate(time.Second), PredicateType: attest.PredicateType,
	}
	if run.pred.Verdict.Passed {
		l.Verdict = store.VerdictPassed
	}
	if gh := run.pred.Runner.GitHub; gh != nil {
		l.RunID, l.RunAttempt, l.Job, l.Runner = clip(gh.RunID, 64), clip(gh.RunAttempt, 16), clip(gh.Job, 256), clip(gh.RunnerName, 256)
	}
	return l
}

// StoreFailures say, of each required store that does not hold the
// job's bundles, why and where the bundle lies: airlock fails the job
// for them.
func (a *Attestation) StoreFailures() []string {
	if a == nil {
		return nil
	}
	var out []string
	for _, o := range store.Failed(a.Stored) {
		out = append(out, fmt.Sprintf("the attestation was not stored in %s (%s); it lies at %s until a later job on this runner stores it", o.Store, o.Error, a.Bundle))
	}
	return out
}

// StoredRefs are the references of the job's bundles in its stores,
// one line each, for a check run or a summary.
func (a *Attestation) StoredRefs() []string {
	if a == nil {
		return nil
	}
	var out []string
	for _, o := range a.Stored {
		for _, e := range o.Entries {
			out = append(out, fmt.Sprintf("%s: %s (tag %s, bundle %s)", e.Kind, e.Ref, e.Tag, e.Digest))
		}
	}
	return out
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown"
	}
	return s
}
