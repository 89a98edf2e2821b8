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
// made artifacts, both pushed to the job's stores (c.Stores) before the
// door reports the job (and, with retain, the older ones in its
// directory pruned, none still pending), then the summary; what
// happened is said on log.
func Finish(ctx context.Context, res runner.Result, c *runner.AttestConfig, retain *Retention, log io.Writer) *Attestation {
	att, run := writeRun(ctx, res, c, log)
	att.Provenance = writeProvenance(res, c, run, log)
	att.Stored = keep(ctx, res, c, att, run, log)
	if retain != nil {
		if _, err := retain.Prune(c.Dir, time.Now()); err != nil {
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

// ResultOutput is where a door puts a job's JSON result: a file, and
// standard output.
type ResultOutput struct {
	File string
	JSON bool
}

// Conclude is what a door that ran one job does after it: Finish (the
// attestation written and kept, the summary on stderr), the trust
// findings published, and the JSON result written where out says. An
// error is the JSON result that could not be printed.
func Conclude(ctx context.Context, res runner.Result, c *runner.AttestConfig, retain *Retention, out ResultOutput, stdout, stderr io.Writer) (Outcome, error) {
	att := Finish(ctx, res, c, retain, stderr)
	if res.Trust != nil {
		PublishTrust(res.Trust, stdout, stderr)
	}
	o := Outcome{Result: res, Attestation: att}
	if out.File != "" {
		if err := o.WriteFile(out.File); err != nil {
			fmt.Fprintf(stderr, "airlock: %v\n", err)
		}
	}
	if out.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(o); err != nil {
			return o, fmt.Errorf("write JSON result: %w", err)
		}
	}
	return o, nil
}
