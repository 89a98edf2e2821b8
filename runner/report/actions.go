package report

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/airlock-ci/airlock/internal/input"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner/trust"
)

// When airlock run is a step of a GitHub Actions job (the composite
// action), its output is read by the runner for workflow commands, and
// the job has a summary file. These put airlock's findings where a
// reviewer looks, and keep the job's own output from speaking for it.

// PauseWorkflowCommands stops GitHub's processing of workflow commands
// in the log (when running under GitHub Actions) and returns the function
// that resumes it: the job's output must not issue them (a fake
// "::stop-commands::" would silence airlock's annotations, "::add-mask::"
// hide evidence), so they are off while it runs, with a token the job
// cannot guess.
func PauseWorkflowCommands(w io.Writer) func() {
	if os.Getenv("GITHUB_ACTIONS") != "true" {
		return func() {}
	}
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	fmt.Fprintf(w, "::stop-commands::%s\n", token)
	return func() { fmt.Fprintf(w, "::%s::\n", token) }
}

// PublishTrust shows the trust findings as GitHub annotations (when
// running under GitHub Actions) and in the job summary file.
func PublishTrust(r *trust.Report, stdout, stderr io.Writer) {
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		r.WriteAnnotations(stdout)
	}
	if p := os.Getenv("GITHUB_STEP_SUMMARY"); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			_, err = io.WriteString(f, r.Markdown())
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "airlock: write the job summary: %v\n", err)
		}
	}
}

// WriteTrust writes a trust report in format: markdown (what a person
// reads: no terminal escape from a diff reaches them), json, or
// annotations (GitHub workflow commands).
func WriteTrust(w io.Writer, r *trust.Report, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "annotations":
		r.WriteAnnotations(w)
		return nil
	case "markdown":
		_, err := io.WriteString(w, textsafe.Lines(r.Markdown()))
		return err
	}
	return input.Errorf(input.Format, "%q: want markdown, json or annotations", format)
}
