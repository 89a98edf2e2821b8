package hook

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/github"
	"github.com/airlock-ci/airlock/runner/report"
	"github.com/airlock-ci/airlock/runner/trust"
)

// maxCheckBundle is the largest attestation bundle put in the check run,
// and maxCheckText the most its text is made to hold (GitHub takes
// 65,535 characters; a bundle cut short would not verify).
const (
	maxCheckBundle = 48 << 10
	maxCheckText   = 62 << 10
)

// checkReport turns a job's result into its check run. Its conclusion is
// airlock's verdict (fails: airlockFails): a failure only when airlock
// fails the job; a job whose steps failed without that is neutral (the
// workflow may have let them fail).
func checkReport(res runner.Result, att *report.Attestation, fails []string) github.Report {
	r := github.Report{Conclusion: "success", Title: "airlock: passed"}
	var sum strings.Builder
	switch {
	case len(fails) > 0:
		r.Conclusion, r.Title = "failure", "airlock: failed"
		fmt.Fprintf(&sum, "airlock fails the job: %s\n\n", textsafe.Line(strings.Join(fails, "; ")))
	case !res.Passed:
		r.Conclusion, r.Title = "neutral", "airlock: steps failed, nothing for airlock to fail"
		fmt.Fprintf(&sum, "Steps failed (%s); the runner reports them, and airlock found nothing of its own to fail the job for.\n\n", textsafe.Line(strings.Join(res.Reasons(), "; ")))
	}
	for _, s := range res.Steps {
		fmt.Fprintf(&sum, "- step `%s`: %s (exit %d)\n", strings.ReplaceAll(s.Name, "`", "'"), s.Status, s.ExitCode)
	}
	if res.Trust != nil {
		sum.WriteString("\n" + res.Trust.Markdown())
		for _, f := range res.Trust.Findings {
			// The check run's annotation level of the severity.
			level := map[trust.Severity]string{trust.SeverityError: "failure", trust.SeverityWarning: "warning"}[f.Severity]
			if level == "" {
				level = "notice"
			}
			r.Annotations = append(r.Annotations, github.Annotation{Path: f.Path, Line: f.Line, Level: level, Title: "airlock trust: " + string(f.Category), Message: f.Reason})
		}
	}
	r.Summary = sum.String()
	var text strings.Builder
	if e := res.Egress; e != nil {
		var b strings.Builder
		report.WriteEgress(&b, e)
		fmt.Fprintf(&text, "```\n%s```\n", strings.ReplaceAll(b.String(), "`", "'"))
		if e.Mode == "audit" {
			text.WriteString("Egress ran in audit (egress.mode): what enforcement would refuse was let through and recorded as would-deny; `airlock policy suggest` turns it into rules.\n")
		}
	}
	if c := res.Credentials; c != nil && len(c.Withheld) > 0 {
		var b strings.Builder
		report.WriteCredentials(&b, c)
		fmt.Fprintf(&text, "\n```\n%s```\n", strings.ReplaceAll(b.String(), "`", "'"))
	}
	if refs := att.StoredRefs(); len(refs) > 0 {
		text.WriteString("Stored (`airlock attestations get` or `crane` fetch them; `airlock verify --store` checks them):\n")
		for _, r := range refs {
			fmt.Fprintf(&text, "- `%s`\n", r)
		}
		text.WriteString("\n")
	}
	if att != nil && att.Provenance != nil {
		publishBundle(&text, "Provenance", att.Provenance.Bundle)
	}
	if att != nil {
		publishBundle(&text, "Attestation", att.Bundle)
	}
	r.Text = text.String()
	return r
}

// publishBundle names a bundle (what: Provenance or Attestation) in the
// check run's text with its sha256, and puts it there whole when it
// fits: the hook's cleanup runs after the job's last step, so no step can
// upload it, and a consumer (a workflow_run workflow, docs/provenance.md)
// takes it from here for airlock verify or cosign anywhere. Each bundle
// is one line of JSON inside a block whose summary names its file; one
// left out (over maxCheckBundle, or past maxCheckText with what came
// before it) is named with why.
func publishBundle(text *strings.Builder, what, path string) {
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	fmt.Fprintf(text, "%s: `%s`, sha256 `%x`.\n", what, filepath.Base(path), sha256.Sum256(b))
	switch {
	case len(b) > maxCheckBundle:
		fmt.Fprintf(text, "The %s bundle is not included: it is %d bytes, more than the %d a check run carries of one bundle; take it from the attestation store named above, or the runner's attestation directory.\n\n", strings.ToLower(what), len(b), maxCheckBundle)
	case text.Len()+len(b)+200 > maxCheckText:
		fmt.Fprintf(text, "The %s bundle is not included: its %d bytes would take the check run's text past %d; take it from the attestation store named above, or the runner's attestation directory.\n\n", strings.ToLower(what), len(b), maxCheckText)
	case !json.Valid(b) || bytes.ContainsAny(b, "`\n"):
		fmt.Fprintf(text, "The %s bundle is not included: it is not one line of JSON.\n\n", strings.ToLower(what))
	default:
		fmt.Fprintf(text, "\n<details><summary>%s bundle (Sigstore): %s</summary>\n\n```json\n%s\n```\n</details>\n\n", what, filepath.Base(path), b)
	}
}
