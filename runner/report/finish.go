package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/airlock-ci/airlock/runner"
)

// Finish is what every door does when its job has ended: the
// attestation written, then the job's provenance next to it when the job
// made artifacts (and, with keep, the older ones in its directory
// pruned), then the summary; what happened is said on log.
func Finish(ctx context.Context, res runner.Result, c *runner.AttestConfig, keep *Retention, log io.Writer) *Attestation {
	att, run := writeRun(ctx, res, c, log)
	att.Provenance = writeProvenance(res, c, run, log)
	if keep != nil {
		if _, err := keep.Prune(c.Dir, time.Now()); err != nil {
			fmt.Fprintf(log, "airlock: pruning %s: %v\n", c.Dir, err)
		}
	}
	WriteSummary(log, res)
	return att
}

// Outcome is a job's JSON result (airlock run --json, --result): the
// job's result, and where its attestation and provenance went.
type Outcome struct {
	runner.Result
	Attestation *Attestation `json:"attestation"`
}

// WriteFile writes the outcome to path as indented JSON.
func (o Outcome) WriteFile(path string) error {
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}
