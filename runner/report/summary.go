package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/gvisor/quota"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/credentials"
	"github.com/airlock-ci/airlock/runner/egress"
)

// WriteSummary prints the final table: one row per step with its status,
// exit code, duration and the limit it hit.
func WriteSummary(w io.Writer, res runner.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATUS\tEXIT\tDURATION\tLIMIT")
	for _, s := range res.Steps {
		exit, dur, limit := "-", "-", "-"
		if s.Status != runner.StatusSkipped {
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
	WritePlatform(w, res.Sandbox.Platform, res.Sandbox.PlatformReason, res.Sandbox.PlatformAttempts)
	writeEnclosed(w, res.Sandbox)
	WriteEgress(w, res.Egress)
	WriteCredentials(w, res.Credentials)
	writeWorkspace(w, res.WorkspaceVolume)
	if t := res.Trust; t != nil {
		fmt.Fprintf(w, "trust: %d finding(s)", len(t.Findings))
		if len(t.ReadOnly) > 0 {
			fmt.Fprintf(w, ", read-only in the sandbox: %s", strings.Join(t.ReadOnly, ", "))
		}
		fmt.Fprintln(w)
		for _, f := range t.Findings {
			loc := f.Path
			if f.Line > 0 {
				loc = fmt.Sprintf("%s:%d", f.Path, f.Line)
			}
			line := fmt.Sprintf("  %s %s %s %s: %s [%s", f.Phase, f.Category, loc, f.Kind, f.Reason, f.Action)
			if f.Outcome != "" {
				line += ", " + f.Outcome
			}
			fmt.Fprintln(w, textsafe.Line(line)+"]")
		}
		if t.Failed {
			fmt.Fprintf(w, "job fails: %s\n", textsafe.Line(t.Reason))
		}
		if t.Error != "" {
			fmt.Fprintf(w, "trust: incomplete: %s\n", textsafe.Line(t.Error))
		}
	}
	if res.Error != "" {
		fmt.Fprintf(w, "airlock: %s\n", res.Error)
	}
}

// writeEnclosed says what bounds a job that ran in the enclosing cgroup,
// and that the configured memory and CPU limits do not hold.
func writeEnclosed(w io.Writer, sb runner.SandboxInfo) {
	if sb.LimitsEnforcedBy == "" {
		return
	}
	limit := func(v string, set bool) string {
		if !set {
			return "none"
		}
		return v
	}
	l := sb.Limits
	fmt.Fprintf(w, "limits: enforced by %s; memory %s, CPUs %s, pids %d (gVisor)\n", sb.LimitsEnforcedBy,
		limit(policies.HumanSize(l.Memory), l.Memory > 0), limit(strconv.FormatFloat(l.CPUs, 'f', -1, 64), l.CPUs > 0), l.Pids)
}

// WritePlatform prints the platform the sandbox ran on, and why
// ("platform: systrap (kvm unusable: open /dev/kvm: no such file or
// directory)"), and each start that failed.
func WritePlatform(w io.Writer, platform, reason string, attempts []attest.PlatformAttempt) {
	if platform == "" {
		return
	}
	if reason != "" {
		platform += " (" + reason + ")"
	}
	fmt.Fprintln(w, "platform: "+textsafe.Line(platform))
	for _, a := range attempts {
		if a.Error != "" {
			fmt.Fprintf(w, "  start on %s failed: %s\n", textsafe.Line(a.Platform), textsafe.Line(a.Error))
		}
	}
}

// WriteCredentials prints what the job's sandbox never saw and where
// each credential went: names, hosts and counts.
func WriteCredentials(w io.Writer, c *credentials.Record) {
	if c == nil || len(c.Withheld)+len(c.Uses) == 0 {
		return
	}
	var names []string
	for _, h := range c.Withheld {
		names = append(names, fmt.Sprintf("%s (%s)", h.Name, strings.Join(h.Variables, ", ")))
	}
	fmt.Fprintf(w, "credentials withheld from the sandbox: %s\n", textsafe.Line(strings.Join(names, "; ")))
	for _, u := range c.Uses {
		var parts []string
		for _, n := range []struct {
			what string
			n    int
		}{{"injected", u.Injected}, {"refused", u.Refused}, {"sent elsewhere as its placeholder", u.Elsewhere}} {
			if n.n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", n.what, n.n))
			}
		}
		where := u.Host
		if u.Route != "" {
			where += " (" + u.Route + ")"
		}
		line := fmt.Sprintf("  %s to %s: %s", u.Credential, where, strings.Join(parts, ", "))
		if u.Rule != "" {
			line += " [" + u.Rule + "]"
		}
		fmt.Fprintln(w, textsafe.Line(line))
	}
}

// WriteEgress prints a job's egress in a few lines: the totals, and each
// destination refused (or, under audit, let through that enforcement
// would refuse) with the rule at work.
func WriteEgress(w io.Writer, e *egress.Report) {
	if e == nil {
		return
	}
	fmt.Fprintf(w, "egress through gateway %s: %d allowed, %d denied", e.Gateway, e.Allowed, e.Denied)
	if e.Mode == "audit" {
		fmt.Fprintf(w, ", %d would-deny (audit: not enforced)", e.WouldDeny)
	}
	if e.Dropped > 0 {
		fmt.Fprintf(w, " (%d more not recorded: the record was full)", e.Dropped)
	}
	fmt.Fprintln(w)
	refused := egress.Refusals(e.Decisions)
	for i, d := range refused {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more (the JSON result)\n", len(refused)-i)
			break
		}
		dest := d.Name
		if dest == "" {
			dest = d.Address
		}
		fmt.Fprintf(w, "  %s %s:%d (%s) %s\n", d.Decision, textsafe.Line(dest), d.Port, d.Protocol, textsafe.Line(d.Rule))
	}
	if e.ModeNote != "" {
		fmt.Fprintf(w, "  %s\n", textsafe.Line(e.ModeNote))
	}
}

// writeWorkspace says how much of its workspace limit the job used and
// what of it was merged back into the workspace.
func writeWorkspace(w io.Writer, v *runner.WorkspaceVolume) {
	if v == nil {
		return
	}
	u, m := v.Usage, v.Merged
	full := ""
	if u.Full() {
		full = " (full: raise sandbox.limits.workspace in the organisation policy)"
	}
	medium := ""
	if v.Medium == quota.MediumTmpfs {
		medium = " (kept in memory until the merge, no loop devices here: the pod's memory limit counts it)"
	}
	fmt.Fprintf(w, "workspace: %s of %s and %d of %d files written%s%s; merged %d file(s), %s, %d removed\n",
		policies.HumanSize(u.Bytes), policies.HumanSize(v.Limit), u.Files, u.LimitFiles, full, medium, m.Files, policies.HumanSize(m.Bytes), m.Removed)
}
