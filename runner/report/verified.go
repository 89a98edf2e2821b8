package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/textsafe"
)

// WriteVerified is the readable report of a verified bundle (airlock
// verify). Everything
// from the job is shown through safe(): no control character reaches the
// terminal.
func WriteVerified(out io.Writer, v *attest.Verified) {
	w := textsafe.Writer(out)
	p := v.Predicate
	verdict := "PASSED"
	if !p.Verdict.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "VERIFIED: %s %v\n", v.Subject.Name, v.Subject.Digest)
	for _, a := range v.Artifacts {
		fmt.Fprintf(w, "  artifact %s sha256:%s\n", a.Name, a.Digest["sha256"])
	}
	fmt.Fprintf(w, "job %s %s (exit %d) on airlock %s, gVisor %s, host %s\n", p.Job.Name, verdict, p.Verdict.ExitCode, p.Runner.AirlockVersion, p.Runner.GVisorVersion, p.Runner.Hostname)
	WritePlatform(w, p.Runner.Platform, p.Runner.PlatformReason, p.Runner.PlatformAttempts)
	for _, r := range p.Verdict.Reasons {
		fmt.Fprintf(w, "  reason: %s\n", r)
	}
	fmt.Fprintf(w, "policy %s (%d sources)\n", p.Policy.EffectiveSHA256, len(p.Policy.Sources))
	fmt.Fprintln(w, "steps:")
	for _, s := range p.Steps {
		fmt.Fprintf(w, "  %-12s %-7s exit %d %s\n", s.Name, s.Status, s.ExitCode, s.Limit)
	}
	fmt.Fprintf(w, "processes: %d recorded, %d dropped, %d lost by the sentry\n", len(p.Processes.Execs), p.Processes.Dropped, p.Processes.DroppedBySentry)
	fmt.Fprintf(w, "egress: %d decisions recorded, %d not", len(p.Egress.Decisions), p.Egress.Dropped)
	if p.Egress.Mode == "audit" {
		fmt.Fprint(w, "; AUDIT: what the rules deny was let through (would-deny)")
	}
	fmt.Fprintln(w)
	if p.Egress.ModeNote != "" {
		fmt.Fprintf(w, "  %s\n", p.Egress.ModeNote)
	}
	for _, e := range p.Egress.Summary {
		would := ""
		if e.WouldDeny > 0 {
			would = fmt.Sprintf(" would-deny %d", e.WouldDeny)
		}
		fmt.Fprintf(w, "  %-40s allowed %d denied %d%s (%d B out, %d B in)\n", e.Destination, e.Allowed, e.Denied, would, e.BytesOut, e.BytesIn)
	}
	if c := p.Credentials; len(c.Withheld) > 0 || c.Masked > 0 {
		fmt.Fprintf(w, "credentials: %d withheld from the sandbox, %d masked value(s) redacted\n", len(c.Withheld), c.Masked)
		for _, h := range c.Withheld {
			fmt.Fprintf(w, "  withheld %s (%s)\n", h.Name, strings.Join(h.Variables, ", "))
		}
		for _, u := range c.Uses {
			fmt.Fprintf(w, "  %s to %s %s: injected %d, refused %d, elsewhere %d %s\n", u.Credential, u.Host, u.Route, u.Injected, u.Refused, u.Elsewhere, u.Rule)
		}
	}
	fmt.Fprintf(w, "trust: %d finding(s), %d not recorded\n", len(p.Trust.Findings), p.Trust.Dropped)
	if p.Trust.Error != "" {
		fmt.Fprintf(w, "  incomplete: %s\n", p.Trust.Error)
	}
	for _, f := range p.Trust.Findings {
		fmt.Fprintf(w, "  %s %s %s %s [%s] %s\n", f.Phase, f.Category, f.Path, f.Kind, f.Action, f.Reason)
	}
}
