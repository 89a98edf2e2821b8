package attest

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
)

// WriteHTMLFile writes the HTML report of v (WriteHTML) to path.
func WriteHTMLFile(path string, v *Verified, verified bool, status string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteHTML(f, v, verified, status); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteHTML renders a verified attestation as one self-contained page
// (no external assets, no script) for reviewers, in the order a reviewer
// reads it: the verdict with a one-line summary, then the trust
// findings, the egress (refused first), the credentials, the steps, and
// the processes as a tree per step, collapsed. status is the
// verification outcome shown in the header.
func WriteHTML(w io.Writer, v *Verified, verified bool, status string) error {
	p := &v.Predicate
	return page().Execute(w, report{
		V: v, Verified: verified, Status: status, Summary: summaryLine(p, verified, status),
		Egress: egressFirstRefused(p.Egress.Summary), Decisions: refusedFirst(p.Egress.Rows()),
		Steps: processesByStep(p.Steps, p.Processes.Execs),
	})
}

// report is what the page template reads.
type report struct {
	// ID prefixes the sections' ids (a pull request's page has a
	// report per job).
	ID        string
	V         *Verified
	Verified  bool
	Status    string
	Summary   string
	Egress    []EgressSummary
	Decisions []EgressDecision
	Steps     []stepProcesses
}

// stepProcesses are the processes a step started, as a tree.
type stepProcesses struct {
	Name  string
	Count int
	Tree  []treeNode
}

// summaryLine is the verdict in one line: agent or not, policy, steps,
// refused egress, trust findings and the strongest action, signature.
func summaryLine(p *Predicate, verified bool, status string) string {
	var parts []string
	switch a := p.Policy.Agent; {
	case a == nil:
		parts = append(parts, "agent detection: no pull request event")
	case a.Agent:
		parts = append(parts, "agent work ("+a.Reason+")")
	default:
		parts = append(parts, "not agent work")
	}
	if d := p.Policy.EffectiveSHA256; d != "" {
		parts = append(parts, "policy "+short(d))
	} else {
		parts = append(parts, "no policy")
	}
	byStatus := map[string]int{}
	for _, s := range p.Steps {
		byStatus[s.Status]++
	}
	var st []string
	for _, k := range []string{"passed", "failed", "skipped", "timeout"} {
		if byStatus[k] > 0 {
			st = append(st, fmt.Sprintf("%d %s", byStatus[k], k))
		}
	}
	parts = append(parts, fmt.Sprintf("%d step(s): %s", len(p.Steps), strings.Join(st, ", ")))
	denied, would := 0, 0
	for _, e := range p.Egress.Summary {
		denied += e.Denied
		would += e.WouldDeny
	}
	eg := fmt.Sprintf("egress: %d denied, %d would-deny", denied, would)
	if p.Egress.Mode == "audit" {
		eg += " (audit)"
	}
	parts = append(parts, eg)
	parts = append(parts, fmt.Sprintf("trust: %d finding(s)%s", len(p.Trust.Findings), strongest(p.Trust.Findings)))
	if verified {
		parts = append(parts, status)
	} else {
		parts = append(parts, "NOT VERIFIED")
	}
	return strings.Join(parts, " · ")
}

// actionRank orders trust actions from the mildest.
var actionRank = map[string]int{"allow": 1, "warn": 2, "revert": 3, "readonly": 4, "fail": 5}

func strongest(fs []TrustFinding) string {
	best := ""
	for _, f := range fs {
		if actionRank[f.Action] > actionRank[best] {
			best = f.Action
		}
	}
	if best == "" {
		return ""
	}
	return ", strongest action " + best
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// egressFirstRefused orders destinations: denied first, then would-deny,
// then the rest, each by name.
func egressFirstRefused(in []EgressSummary) []EgressSummary {
	out := slices.Clone(in)
	rank := func(e EgressSummary) int {
		switch {
		case e.Denied > 0:
			return 0
		case e.WouldDeny > 0:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b EgressSummary) int {
		if r := rank(a) - rank(b); r != 0 {
			return r
		}
		return strings.Compare(a.Destination, b.Destination)
	})
	return out
}

// refusedFirst puts denied decisions first, then would-deny, in time
// order within each.
func refusedFirst(ds []EgressDecision) []EgressDecision {
	rank := map[string]int{"denied": 0, "would-deny": 1}
	r := func(d EgressDecision) int {
		if n, ok := rank[d.Decision]; ok {
			return n
		}
		return 2
	}
	slices.SortStableFunc(ds, func(a, b EgressDecision) int { return r(a) - r(b) })
	return ds
}

// processesByStep puts each exec under the step whose time span holds
// it (before the first or after the last: "outside the steps"), each
// step's processes as a tree.
func processesByStep(steps []Step, execs []Exec) []stepProcesses {
	groups := make([][]Exec, len(steps)+1)
	for _, e := range execs {
		i := slices.IndexFunc(steps, func(s Step) bool { return s.Holds(e.Time) })
		if i < 0 {
			i = len(steps)
		}
		groups[i] = append(groups[i], e)
	}
	var out []stepProcesses
	for i, g := range groups {
		name := "outside the steps"
		if i < len(steps) {
			name = steps[i].Name
		}
		if len(g) == 0 && i == len(steps) {
			continue
		}
		out = append(out, stepProcesses{Name: name, Count: len(g), Tree: processTree(g)})
	}
	return out
}

// treeNode is one process with its depth in the tree.
type treeNode struct {
	Exec  Exec
	Depth int
}

// processTree orders execs depth first by parent pid.
func processTree(execs []Exec) []treeNode {
	children := map[int32][]Exec{}
	known := map[int32]bool{}
	for _, e := range execs {
		known[e.PID] = true
	}
	var roots []Exec
	for _, e := range execs {
		if known[e.PPID] && e.PPID != e.PID {
			children[e.PPID] = append(children[e.PPID], e)
		} else {
			roots = append(roots, e)
		}
	}
	var out []treeNode
	seen := map[int32]bool{}
	var walk func(e Exec, depth int)
	walk = func(e Exec, depth int) {
		out = append(out, treeNode{e, min(depth, 20)})
		if seen[e.PID] {
			return
		}
		seen[e.PID] = true
		for _, c := range children[e.PID] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	// Execs whose parents form a cycle (a pid reused) are not under any
	// root: list them flat rather than lose them.
	for _, e := range execs {
		if !seen[e.PID] {
			seen[e.PID] = true
			out = append(out, treeNode{e, 0})
		}
	}
	return out
}

// pageFuncs are the templates' functions.
var pageFuncs = template.FuncMap{
	"join":   strings.Join,
	"indent": func(n int) string { return strings.Repeat("\u00a0\u00a0", n) },
	"short":  short,
	"inc":    func(i int) int { return i + 1 },
}

// jobBody is one job's report: the single-job page's body, and each
// job's section of a pull request's page (IDs prefixed with .ID).
const jobBody = `{{if not .Verified}}<div class="banner fail"><strong>NOT VERIFIED</strong>: {{.Status}}. Nothing below is trustworthy until the bundle is verified with the signer's key.</div>{{end}}
<div class="banner {{if and .Verified .V.Predicate.Verdict.Passed}}pass{{else}}fail{{end}}" id="{{$.ID}}verdict">
<strong>{{if .V.Predicate.Verdict.Passed}}PASSED{{else}}FAILED{{end}}</strong> (exit {{.V.Predicate.Verdict.ExitCode}}){{if .Verified}} · {{.Status}}{{end}}
</div>
<p class="summary" id="{{$.ID}}summary">{{.Summary}}</p>
{{range .V.Predicate.Verdict.Reasons}}<p>{{.}}</p>{{end}}
<h1>{{.V.Predicate.Job.Name}} · {{.V.Subject.Name}}</h1>
<table>
<tr><th>subject</th><td>{{range $k, $v := .V.Subject.Digest}}<code>{{$k}}:{{$v}}</code> {{end}}</td></tr>
<tr><th>pull request</th><td>{{.V.Predicate.Job.Repository}} #{{.V.Predicate.Job.PullRequest}} by {{.V.Predicate.Job.Author}} · base <code>{{short .V.Predicate.Job.BaseSHA}}</code> head <code>{{short .V.Predicate.Job.HeadSHA}}</code></td></tr>
<tr><th>runner</th><td>airlock {{.V.Predicate.Runner.AirlockVersion}} ({{short .V.Predicate.Runner.AirlockCommit}}) · gVisor {{.V.Predicate.Runner.GVisorVersion}} · <span id="{{$.ID}}platform">{{.V.Predicate.Runner.Platform}}{{with .V.Predicate.Runner.PlatformReason}} ({{.}}){{end}}</span>{{range .V.Predicate.Runner.PlatformAttempts}}{{if .Error}}<br><span class="fail">start on {{.Platform}} failed: {{.Error}}</span>{{end}}{{end}} · host {{.V.Predicate.Runner.Hostname}}</td></tr>
<tr><th>policy</th><td><code>{{.V.Predicate.Policy.EffectiveSHA256}}</code>{{range .V.Predicate.Policy.Sources}}<br>{{.Kind}} {{.Path}} {{short .Commit}} <code>{{short .SHA256}}</code>{{end}}{{with .V.Predicate.Policy.Agent}}<br>agent: {{.Agent}} ({{.Reason}}){{end}}</td></tr>
<tr><th>time</th><td>{{.V.Predicate.Times.Start.Format "2006-01-02 15:04:05Z07:00"}} – {{.V.Predicate.Times.End.Format "15:04:05Z07:00"}}</td></tr>
</table>
<h2 id="{{$.ID}}trust">Trust findings ({{len .V.Predicate.Trust.Findings}}{{if .V.Predicate.Trust.Dropped}}, {{.V.Predicate.Trust.Dropped}} more not recorded{{end}})</h2>
{{with .V.Predicate.Trust.Error}}<p class="fail">incomplete: {{.}}</p>{{end}}
{{range .V.Predicate.Trust.Findings}}<div class="{{if eq .Severity "error"}}fail{{end}}"><p><strong>{{.Phase}} {{.Category}}</strong> <code>{{.Path}}{{if .Line}}:{{.Line}}{{end}}</code> {{.Kind}}: {{.Reason}} [{{.Action}}{{if .Outcome}}, {{.Outcome}}{{end}}]</p>{{with .Diff}}<pre>{{.}}</pre>{{end}}</div>{{else}}<p>none</p>{{end}}
<h2 id="{{$.ID}}egress">Egress{{if eq .V.Predicate.Egress.Mode "audit"}} (audit: would-deny was let through){{end}}{{if .V.Predicate.Egress.Dropped}} ({{.V.Predicate.Egress.Dropped}} decisions not recorded){{end}}</h2>
{{with .V.Predicate.Egress.ModeNote}}<p>{{.}}</p>{{end}}
<table><tr><th>destination</th><th>denied</th><th>would-deny</th><th>allowed</th><th>bytes out</th><th>bytes in</th></tr>
{{range .Egress}}<tr class="{{if .Denied}}denied{{else if .WouldDeny}}would-deny{{else}}allowed{{end}}"><td>{{.Destination}}</td><td>{{.Denied}}</td><td>{{.WouldDeny}}</td><td>{{.Allowed}}</td><td>{{.BytesOut}}</td><td>{{.BytesIn}}</td></tr>{{else}}<tr><td colspan="6">no egress</td></tr>{{end}}
</table>
<details><summary>every decision ({{len .Decisions}}), refused first</summary>
<table><tr><th>time</th><th>process</th><th>protocol</th><th>destination</th><th>decision</th><th>rule</th><th>reason</th></tr>
{{range .Decisions}}<tr class="{{.Decision}}"><td>{{.Time.Format "15:04:05.000"}}</td><td>{{.PID}}</td><td>{{.Protocol}}</td><td>{{.Name}} {{.Address}}:{{.Port}} {{.Method}} {{.Path}}</td><td>{{.Decision}}</td><td>{{.Rule}}</td><td>{{.Reason}}</td></tr>{{end}}
</table></details>
{{with .V.Predicate.Credentials}}{{if or .Withheld .Masked}}<h2 id="{{$.ID}}credentials">Credentials ({{len .Withheld}} withheld from the sandbox{{if .Masked}}, {{.Masked}} masked value(s) redacted{{end}})</h2>
<p>{{range $i, $w := .Withheld}}{{if $i}}; {{end}}<strong>{{$w.Name}}</strong> ({{join $w.Variables ", "}}){{end}}</p>
{{if .Uses}}<table><tr><th>credential</th><th>host</th><th>route</th><th>injected</th><th>refused</th><th>sent elsewhere</th><th>rule</th></tr>
{{range .Uses}}<tr class="{{if .Refused}}denied{{else}}allowed{{end}}"><td>{{.Credential}}</td><td>{{.Host}}</td><td>{{.Route}}</td><td>{{.Injected}}</td><td>{{.Refused}}</td><td>{{.Elsewhere}}</td><td>{{.Rule}}</td></tr>{{end}}
</table>{{end}}{{end}}{{end}}
<h2 id="{{$.ID}}steps">Steps</h2>
<table><tr><th>step</th><th>status</th><th>exit</th><th>limit</th><th>stdout</th><th>stderr</th></tr>
{{range .V.Predicate.Steps}}<tr class="{{if eq .Status "passed"}}pass{{else}}fail{{end}}"><td>{{.Name}}</td><td>{{.Status}}</td><td>{{.ExitCode}}</td><td>{{.Limit}}</td><td>{{.StdoutBytes}} B <code>{{short .StdoutSHA256}}</code></td><td>{{.StderrBytes}} B <code>{{short .StderrSHA256}}</code></td></tr>{{end}}
</table>
<h2 id="{{$.ID}}processes">Processes ({{len .V.Predicate.Processes.Execs}}{{if .V.Predicate.Processes.Dropped}}, {{.V.Predicate.Processes.Dropped}} not recorded{{end}})</h2>
{{range .Steps}}<details class="step"><summary>{{.Name}}: {{.Count}} process(es)</summary>
<table><tr><th>process</th><th>pid</th><th>exit</th><th>sha256</th></tr>
{{range .Tree}}<tr><td>{{indent .Depth}}<code>{{.Exec.Binary}}</code> {{join .Exec.Argv " "}}{{if eq .Exec.Source "airlock"}} <em>(started by airlock)</em>{{end}}</td><td>{{.Exec.PID}}</td><td>{{with .Exec.ExitCode}}{{.}}{{end}}{{if .Exec.Signal}} signal {{.Exec.Signal}}{{end}}</td><td><code>{{short .Exec.SHA256}}</code></td></tr>{{end}}
</table></details>{{end}}
`

// pageStyle is the pages' one stylesheet.
const pageStyle = `<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;width:100%} td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3} code,pre{font:12px ui-monospace,monospace} pre{background:#f7f7f7;padding:6px;overflow:auto;max-height:20em;white-space:pre-wrap}
.pass{background:#d7f5d7} .fail{background:#f8d4d4} .allowed{background:#eefbee} .denied{background:#fde8e8} .would-deny{background:#fff3cd}
.banner{padding:10px;border-radius:4px;font-size:1.2em} .summary{font-size:1.05em;margin:.6em 0}
summary{cursor:pointer} details{margin:.3em 0}
@media print{body{margin:0;font-size:11px} pre{max-height:none} .banner,.pass,.fail,.allowed,.denied,.would-deny{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
</style>`

var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.Must(template.New("report").Funcs(pageFuncs).Parse(`{{define "job"}}` + jobBody + `{{end}}`)).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>airlock attestation: {{.V.Predicate.Job.Name}}</title>
` + pageStyle + `</head><body>
{{template "job" .}}</body></html>
`))
})

// JobPage is one job of a pull request's page: its verified statement
// (nil where it could not be fetched or read: Error says why), whether
// its signature was checked (Status says how), and where it is stored.
type JobPage struct {
	Tag, Ref string
	V        *Verified
	Verified bool
	Status   string
	Error    string
}

// prJob is a job as the pull request's template reads it.
type prJob struct {
	JobPage
	Report  report
	Summary string
}

// WritePullRequestHTML renders every job of a pull request (or a
// commit) as one self-contained page: a table of the jobs first (the
// verdict, whether the signature verified, the same one-line summary as
// the single-job page), then each job's report, collapsed, built from
// the same predicate with the same template.
func WritePullRequestHTML(w io.Writer, title string, jobs []JobPage) error {
	data := struct {
		Title                            string
		Jobs                             []prJob
		Passed, Failed, NotVerified, All int
	}{Title: title, All: len(jobs)}
	for i, j := range jobs {
		pj := prJob{JobPage: j}
		switch {
		case j.V == nil:
			data.NotVerified++
		case !j.Verified:
			data.NotVerified++
			fallthrough
		default:
			p := &j.V.Predicate
			pj.Summary = summaryLine(p, j.Verified, j.Status)
			pj.Report = report{ID: fmt.Sprintf("job%d-", i+1), V: j.V, Verified: j.Verified, Status: j.Status, Summary: pj.Summary,
				Egress: egressFirstRefused(p.Egress.Summary), Decisions: refusedFirst(p.Egress.Rows()), Steps: processesByStep(p.Steps, p.Processes.Execs)}
			if j.Verified && p.Verdict.Passed {
				data.Passed++
			} else if j.Verified {
				data.Failed++
			}
		}
		data.Jobs = append(data.Jobs, pj)
	}
	return prPage().Execute(w, data)
}

var prPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.Must(template.New("pull request").Funcs(pageFuncs).Parse(`{{define "job"}}` + jobBody + `{{end}}`)).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>airlock: {{.Title}}</title>
` + pageStyle + `</head><body>
<h1 id="title">{{.Title}}</h1>
<div class="banner {{if or .Failed .NotVerified}}fail{{else}}pass{{end}}" id="verdicts"><strong>{{.All}} job(s)</strong>: {{.Passed}} passed, {{.Failed}} failed, {{.NotVerified}} not verified</div>
<table id="jobs"><tr><th>job</th><th>verdict</th><th>summary</th><th>stored</th></tr>
{{range $i, $j := .Jobs}}<tr class="{{if and $j.V $j.Verified $j.V.Predicate.Verdict.Passed}}pass{{else}}fail{{end}}"><td><a href="#job{{inc $i}}-verdict">{{$j.Tag}}</a></td><td>{{if not $j.V}}NOT VERIFIED: {{$j.Error}}{{else if not $j.Verified}}NOT VERIFIED: {{$j.Status}}{{else if $j.V.Predicate.Verdict.Passed}}PASSED{{else}}FAILED{{end}}</td><td>{{$j.Summary}}</td><td><code>{{$j.Ref}}</code></td></tr>
{{end}}</table>
{{range $i, $j := .Jobs}}{{if $j.V}}<details class="job"><summary>{{$j.Tag}}</summary>
{{template "job" $j.Report}}</details>
{{end}}{{end}}</body></html>
`))
})
