package runner

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// WriteSummary prints the final table: one row per step with its status,
// exit code, duration and the limit it hit.
func WriteSummary(w io.Writer, res Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATUS\tEXIT\tDURATION\tLIMIT")
	for _, s := range res.Steps {
		exit, dur, limit := "-", "-", "-"
		if s.Status != StatusSkipped {
			exit = strconv.Itoa(s.ExitCode)
			dur = s.Duration.Round(time.Millisecond).String()
		}
		if s.Limit != "" {
			limit = s.Limit
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Status, exit, dur, limit)
	}
	tw.Flush()
	verdict := "passed"
	if !res.Passed {
		verdict = "failed"
	}
	fmt.Fprintf(w, "job %s %s in %s (sandbox %s, %d processes recorded)\n",
		res.Job, verdict, res.Duration.Round(time.Millisecond), res.Sandbox.ID, len(res.Processes.Execs))
	if res.Error != "" {
		fmt.Fprintf(w, "airlock: %s\n", res.Error)
	}
}
