package trust

import (
	"fmt"
	"io"
	"strings"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// Report is the trust section of a job's result.
type Report struct {
	Findings []Finding `json:"findings"`
	// ReadOnly are the paths mounted read-only into the sandbox.
	ReadOnly []string `json:"readOnly,omitempty"`
	// Notes say what could not be inspected and why.
	Notes []string `json:"notes,omitempty"`
	// Failed is set when a finding's action is fail: the job fails after
	// it ran, with the findings as the reason.
	Failed bool   `json:"failed"`
	Reason string `json:"reason,omitempty"`
	// Error is trouble taking the diffs (the job is not failed for it,
	// but the report says it is incomplete).
	Error string `json:"error,omitempty"`
}

// Decide sets Failed and Reason from the findings.
func (r *Report) Decide() {
	var fails []string
	for _, f := range r.Findings {
		if f.Action == ActionFail {
			fails = append(fails, fmt.Sprintf("%s %s %s (%s)", f.Phase, f.Category, f.Path, f.Kind))
		}
	}
	r.Failed = len(fails) > 0
	if r.Failed {
		r.Reason = "trust policy: " + strings.Join(fails, "; ")
	}
}

// WriteAnnotations prints GitHub workflow commands, one per finding that
// is not merely allowed, so the findings show on the pull request's files.
func (r *Report) WriteAnnotations(w io.Writer) {
	if r.Error != "" {
		fmt.Fprintf(w, "::warning title=%s::%s\n", escapeProp("airlock trust: incomplete"), escapeData(r.Error))
	}
	for _, f := range r.Findings {
		// The workflow command of the severity: ::error, ::warning.
		level := map[Severity]string{SeverityError: "error", SeverityWarning: "warning"}[f.Severity]
		if level == "" || f.Action == ActionAllow {
			continue
		}
		props := "file=" + escapeProp(f.Path)
		if f.Line > 0 {
			props += fmt.Sprintf(",line=%d", f.Line)
		}
		props += ",title=" + escapeProp(fmt.Sprintf("airlock trust: %s %s", f.Category, f.Phase))
		msg := f.Reason
		if f.Outcome != "" {
			msg += " [" + f.Outcome + "]"
		}
		fmt.Fprintf(w, "::%s %s::%s\n", level, props, escapeData(msg))
	}
}

// escapeData and escapeProp follow the workflow command encoding, so a
// hostile path or reason cannot inject a command of its own.
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeProp(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// Markdown is a summary for a job summary or a pull request comment.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("### airlock: trust-sensitive files\n\n")
	if len(r.Findings) == 0 {
		b.WriteString("No change to git hooks, git config, attributes, CI, agent files or build entry points.\n")
	} else {
		b.WriteString("| phase | category | path | change | action | outcome |\n|---|---|---|---|---|---|\n")
		for _, f := range r.Findings {
			loc := f.Path
			if f.Line > 0 {
				loc += fmt.Sprintf(":%d", f.Line)
			}
			fmt.Fprintf(&b, "| %s | %s | `%s` | %s: %s | %s | %s |\n", f.Phase, f.Category, mdCell(loc), f.Kind, mdCell(f.Reason), f.Action, mdCell(f.Outcome))
		}
		for _, f := range r.Findings {
			if f.Diff == "" || f.Kind == KindEscalation {
				continue
			}
			fmt.Fprintf(&b, "\n<details><summary>%s %s</summary>\n\n```diff\n%s\n```\n</details>\n", f.Phase, mdCell(f.Path), strings.ReplaceAll(f.Diff, "```", "` ` `"))
		}
	}
	if r.Failed {
		fmt.Fprintf(&b, "\n**The job fails:** %s\n", mdCell(r.Reason))
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "\n**Incomplete:** %s\n", mdCell(r.Error))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n> %s\n", mdCell(n))
	}
	return b.String()
}

// mdCell makes hostile text inert in a Markdown table cell: no control
// character (a carriage return ends a row), no markup that links,
// embeds or formats.
func mdCell(s string) string {
	s = strings.Map(func(r rune) rune {
		if textsafe.Control(r) {
			return ' '
		}
		return r
	}, s)
	return strings.NewReplacer("|", "\\|", "`", "'", "<", "&lt;", ">", "&gt;", "[", "\\[", "]", "\\]", "(", "\\(", ")", "\\)",
		"!", "\\!", "*", "\\*", "_", "\\_", "#", "\\#", "\\", "\\\\").Replace(s)
}
