package report

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/textsafe"
)

// WriteArtifactVerified is the readable report of a verified artifact
// (airlock verify --artifact): for each job that made it, who ran it for
// whom, whether an agent wrote it, its verdict, the egress it was
// refused, its trust findings and the uploads that are not subjects,
// from the provenance's summary; and whether the run attestation next
// to it was verified too; asJSON: the report as JSON. Everything from
// the job goes through a textsafe writer: no control character reaches
// the terminal.
func WriteArtifactVerified(out io.Writer, r *ArtifactReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	w := &errWriter{w: textsafe.Writer(out)}
	for _, j := range r.Jobs {
		fmt.Fprintf(w, "VERIFIED: %s (sha256 %s) is %q of %s\n", r.Artifact, r.SHA256, j.Subject.Name, filepath.Base(j.Bundle))
		writeJob(w, j)
	}
	for _, u := range r.Unverified {
		fmt.Fprintf(w, "left out (not signed with the key, not a provenance, or another run's): %s\n", u)
	}
	if w.err != nil {
		return fmt.Errorf("write the report: %w", w.err)
	}
	return nil
}

// errWriter keeps the first write error, and writes nothing after it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// writeJob says what one job that made the artifact did.
func writeJob(w io.Writer, j ArtifactJob) {
	prov := j.Provenance.Provenance
	ext, s := prov.BuildDefinition.ExternalParameters, j.Provenance.Run().Annotations
	rd := prov.RunDetails
	fmt.Fprintf(w, "  job %s%s\n", ext.Job, jobContext(ext))
	fmt.Fprintf(w, "  builder %s (airlock %s), %s to %s\n", rd.Builder.ID, rd.Builder.Version["airlock"], rd.Metadata.StartedOn.Format("2006-01-02T15:04:05Z07:00"), rd.Metadata.FinishedOn.Format("2006-01-02T15:04:05Z07:00"))
	switch a := s.Agent; {
	case a == nil:
		fmt.Fprintln(w, "  agent: not decided (no pull request event)")
	case a.Agent:
		fmt.Fprintf(w, "  agent: YES (%s)\n", a.Reason)
	default:
		fmt.Fprintf(w, "  agent: no (%s)\n", a.Reason)
	}
	verdict := "PASSED"
	if s.Verdict != "passed" {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "  verdict: %s (exit %d)\n", verdict, s.ExitCode)
	for _, r := range s.Reasons {
		fmt.Fprintf(w, "    reason: %s\n", r)
	}
	writeSummaryLists(w, s)
	writeRunCheck(w, j)
}

// jobContext says what of the job's repository, workflow, pull request,
// commit and event the provenance knows.
func jobContext(ext attest.ExternalParameters) string {
	var b strings.Builder
	for _, part := range []struct{ format, value string }{
		{" of %s", ext.Repository}, {" (workflow %s)", ext.Workflow}, {", pull request #%s", prNumber(ext.PullRequest)},
		{" at %s", ext.Ref}, {", event %s", ext.Event},
	} {
		if part.value != "" {
			fmt.Fprintf(&b, part.format, part.value)
		}
	}
	return b.String()
}

// prNumber is a pull request's number as jobContext prints it: "" for
// none (0, or a negative number no pull request has), so that its part
// is left out.
func prNumber(n int) string {
	if n <= 0 {
		return ""
	}
	return strconv.Itoa(n)
}

// writeSummaryLists prints the summary's refused egress, trust findings
// and uploads that are not subjects.
func writeSummaryLists(w io.Writer, s attest.RunSummary) {
	fmt.Fprintf(w, "  egress refused: %d destination(s)", len(s.RefusedEgress))
	if s.EgressMode == "audit" {
		fmt.Fprint(w, " (AUDIT: what the rules deny was let through, would-deny)")
	}
	fmt.Fprintln(w)
	for _, e := range s.RefusedEgress {
		fmt.Fprintf(w, "    %s denied %d would-deny %d\n", e.Destination, e.Denied, e.WouldDeny)
	}
	fmt.Fprintf(w, "  trust findings: %d\n", len(s.TrustFindings))
	for _, f := range s.TrustFindings {
		fmt.Fprintf(w, "    %s %s %s %s\n", f.Severity, f.Category, f.Check, f.Path)
	}
	if len(s.RefusedUploads) > 0 {
		fmt.Fprintf(w, "  uploads that are not subjects: %d\n", len(s.RefusedUploads))
		for _, u := range s.RefusedUploads {
			fmt.Fprintf(w, "    %s: %s %s\n", u.Name, u.Status, u.Reason)
		}
	}
	for _, n := range s.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// writeRunCheck says whether the run attestation was verified with it.
func writeRunCheck(w io.Writer, j ArtifactJob) {
	if j.Run == nil {
		where := "the provenance names no file next to it to look for"
		if j.RunExpected != "" {
			where = "not found at " + j.RunExpected
		}
		fmt.Fprintf(w, "  run attestation: %s %s; what is above is the provenance's summary of it\n", j.Provenance.Run().Name, where)
		return
	}
	fmt.Fprintf(w, "  run attestation: %s verified, and its statement is the provenance's byproduct (sha256 %s)\n", filepath.Base(j.RunBundle), j.Provenance.Run().Digest["sha256"])
}
