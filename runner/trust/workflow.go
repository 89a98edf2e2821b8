package trust

import (
	"bytes"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/rhysd/actionlint"
)

// maxWorkflowSize bounds a workflow file parsed for the semantic diff.
const maxWorkflowSize = 1 << 20

// dangerousTriggers run with the base repository's secrets and write
// token on input an outsider controls.
var dangerousTriggers = []string{"pull_request_target", "workflow_run", "issue_comment", "pull_request_review_comment", "discussion_comment"}

// untrustedExpr matches expressions of event fields an outsider writes.
var untrustedExpr = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\$\{\{[^}]*\b(github\.event\.(pull_request\.(title|body|head\.ref|head\.label|head\.repo\.default_branch)|issue\.(title|body)|comment\.body|review\.body|review_comment\.body|discussion\.(title|body)|head_commit\.(message|author\.(name|email))|commits\b[^}]*\.(message|author)|pages\b[^}]*\.page_name|workflow_run\.(head_branch|head_commit\.message|display_title))|github\.head_ref)\b[^}]*\}\}`)
})

// fullSHA is an action reference pinned to a commit.
var fullSHA = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`@[0-9a-f]{40}$`) })

var secretRef = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\bsecrets\.([A-Za-z_][A-Za-z0-9_]*)`) })

// escalation is one dangerous property of a workflow, with the line that
// has it. The key identifies it across versions of the file.
type escalation struct {
	key    string
	line   int
	reason string
}

// WorkflowEscalations compares two versions of a workflow file (base may
// be nil for a new file) and returns what became more dangerous in head.
// A head that does not parse is a finding of its own.
func WorkflowEscalations(path string, base, head []byte) []Finding {
	mk := func(line int, reason string) Finding {
		return Finding{Phase: Authored, Category: CI, Check: CheckWorkflow, Path: path, Line: line, Kind: KindEscalation, Reason: reason}
	}
	if len(head) > maxWorkflowSize {
		return []Finding{mk(0, fmt.Sprintf("workflow is larger than %d bytes: not parsed, review it by hand", maxWorkflowSize))}
	}
	hw, errs := actionlint.Parse(head)
	lines := splitYAML(head)
	if hw == nil || len(errs) > 0 && len(hw.Jobs) == 0 {
		msg := "invalid workflow"
		line := 0
		if len(errs) > 0 {
			msg, line = "invalid workflow: "+errs[0].Message, lines.fileLine(errs[0].Line)
		}
		return []Finding{mk(line, msg)}
	}
	before := map[string]bool{}
	if len(base) > 0 && len(base) <= maxWorkflowSize {
		if bw, _ := actionlint.Parse(base); bw != nil {
			for _, e := range escalations(bw, splitYAML(base)) {
				before[e.key] = true
			}
		}
	}
	var out []Finding
	seen := map[string]bool{}
	for _, e := range escalations(hw, lines) {
		if before[e.key] || seen[e.key] {
			continue
		}
		seen[e.key] = true
		out = append(out, mk(lines.fileLine(e.line), e.reason))
	}
	// A step that used airlock and is gone: the job would run unsandboxed.
	if len(base) > 0 && countAirlock(base) > countAirlock(head) {
		out = append(out, mk(0, "a step that used airlock was removed: the job would run outside the sandbox"))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

func countAirlock(b []byte) int {
	return strings.Count(strings.ToLower(string(b)), "airlock")
}

// escalations lists the dangerous properties of a workflow, parsed from
// the file of these lines; their lines are the parser's.
func escalations(w *actionlint.Workflow, lines yamlLines) []escalation {
	var out []escalation
	add := func(key string, pos *actionlint.Pos, reason string) {
		line := 0
		if pos != nil {
			line = pos.Line
		}
		out = append(out, escalation{key: key, line: line, reason: reason})
	}
	for _, ev := range w.On {
		if we, ok := ev.(*actionlint.WebhookEvent); ok && slices.Contains(dangerousTriggers, we.EventName()) {
			add("trigger:"+we.EventName(), we.Pos, fmt.Sprintf("new trigger %s: runs with the base repository's secrets on input from outside", we.EventName()))
		}
	}
	if w.Permissions == nil {
		add("perm:workflow:absent", nil, "the workflow has no permissions block: its token gets the repository default, which may be write-all")
	}
	permissionEscalations("workflow", w.Permissions, add)
	envEscalations("workflow", w.Env, add)
	for _, id := range slices.Sorted(maps.Keys(w.Jobs)) {
		j := w.Jobs[id]
		permissionEscalations("job "+id, j.Permissions, add)
		envEscalations("job "+id, j.Env, add)
		if j.RunsOn != nil {
			for _, l := range j.RunsOn.Labels {
				if l != nil && strings.EqualFold(l.Value, "self-hosted") {
					add("self-hosted:"+id, l.Pos, fmt.Sprintf("job %s now runs on a self-hosted runner", id))
				}
			}
		}
		if wc := j.WorkflowCall; wc != nil {
			if wc.Uses != nil {
				usesEscalation("job "+id, wc.Uses, add)
			}
			if wc.InheritSecrets {
				add("inherit:"+id, j.Pos, fmt.Sprintf("job %s passes all secrets to a called workflow (secrets: inherit)", id))
			}
		}
		for i, st := range j.Steps {
			where := fmt.Sprintf("job %s step %d", id, i+1)
			envEscalations(where, st.Env, add)
			switch ex := st.Exec.(type) {
			case *actionlint.ExecAction:
				if ex.Uses != nil {
					usesEscalation(where, ex.Uses, add)
				}
				for _, in := range ex.Inputs {
					if in != nil && in.Value != nil {
						stringEscalations(where, in.Value, add)
					}
				}
			case *actionlint.ExecRun:
				if ex.Run != nil {
					stringEscalations(where, ex.Run, add)
					injectionEscalations(where, ex.Run, lines, add)
				}
			}
		}
	}
	return out
}

type addFunc func(key string, pos *actionlint.Pos, reason string)

// permissionEscalations reports write scopes (and write-all).
func permissionEscalations(where string, p *actionlint.Permissions, add addFunc) {
	if p == nil {
		return
	}
	if p.All != nil && p.All.Value == "write-all" {
		add("perm:"+where+":all", p.All.Pos, fmt.Sprintf("%s: permissions write-all", where))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Scopes)) {
		s := p.Scopes[name]
		if s.Value != nil && s.Value.Value == "write" {
			add("perm:"+where+":"+name, s.Value.Pos, fmt.Sprintf("%s: permission %s: write", where, name))
		}
	}
}

func envEscalations(where string, env *actionlint.Env, add addFunc) {
	if env == nil {
		return
	}
	for _, v := range env.Vars {
		if v == nil || v.Name == nil {
			continue
		}
		if strings.EqualFold(v.Name.Value, "ACTIONS_ALLOW_UNSECURE_COMMANDS") {
			add("unsecure:"+where, v.Name.Pos, fmt.Sprintf("%s: ACTIONS_ALLOW_UNSECURE_COMMANDS re-enables set-env and add-path", where))
		}
		if v.Value != nil {
			stringEscalations(where, v.Value, add)
		}
	}
}

// usesEscalation reports a remote action or reusable workflow not pinned
// to a full commit SHA. The key holds the reference, so a changed
// reference is new.
func usesEscalation(where string, uses *actionlint.String, add addFunc) {
	u := uses.Value
	if strings.HasPrefix(u, "./") || strings.HasPrefix(u, "docker://") && strings.Contains(u, "@sha256:") || fullSHA().MatchString(u) {
		return
	}
	add("uses:"+u, uses.Pos, fmt.Sprintf("%s: uses %s, not pinned to a full commit SHA", where, u))
}

// stringEscalations reports secrets referenced.
func stringEscalations(where string, s *actionlint.String, add addFunc) {
	for _, m := range secretRef().FindAllStringSubmatch(s.Value, -1) {
		if m[1] != "GITHUB_TOKEN" {
			add("secret:"+m[1], s.Pos, fmt.Sprintf("%s: uses secret %s", where, m[1]))
		}
	}
}

// injectionEscalations reports untrusted event fields expanded into a
// run script (s, parsed from the file of these lines).
func injectionEscalations(where string, s *actionlint.String, lines yamlLines, add addFunc) {
	for _, loc := range untrustedExpr().FindAllStringIndex(s.Value, -1) {
		m := s.Value[loc[0]:loc[1]]
		add("inject:"+where+":"+m, linePos(s, loc[0], m, lines), fmt.Sprintf("%s: %s is expanded into a shell script (script injection)", where, m))
	}
}

// linePos is the position of text, at byte i of a string's value: a
// multi-line value written as a literal block scalar (|) has the file's
// lines from the line after its key. Other multi-line values do not (a
// quoted one with \n escapes, a folded one), so a line that does not
// hold text is not taken: the value's own position is, which the file
// has (a finding never names a line past the file's end).
func linePos(s *actionlint.String, i int, text string, lines yamlLines) *actionlint.Pos {
	if s.Pos == nil {
		return nil
	}
	n := strings.Count(s.Value[:i], "\n")
	if strings.Contains(s.Value, "\n") {
		n++
	}
	line := s.Pos.Line + n
	if line > len(lines.text) || !bytes.Contains(lines.text[line-1], []byte(text)) {
		line = s.Pos.Line
	}
	return &actionlint.Pos{Line: line, Col: s.Pos.Col}
}

// yamlLines are a workflow's lines as its YAML parser numbers them: it
// ends a line at "\n", "\r\n", a lone "\r", NEL, LS or PS. Diffs and
// annotations end lines at "\n" alone, so each has the file line it
// starts on too: a finding names a line the file has.
type yamlLines struct {
	text [][]byte
	file []int
}

func splitYAML(src []byte) yamlLines {
	var l yamlLines
	start, file := 0, 1
	for i := 0; i < len(src); {
		w := 0
		switch {
		case src[i] == '\r' && i+1 < len(src) && src[i+1] == '\n':
			w = 2
		case src[i] == '\n' || src[i] == '\r':
			w = 1
		case src[i] == 0xc2 && bytes.HasPrefix(src[i:], []byte("\u0085")):
			w = 2
		case src[i] == 0xe2 && (bytes.HasPrefix(src[i:], []byte("\u2028")) || bytes.HasPrefix(src[i:], []byte("\u2029"))):
			w = 3
		}
		if w == 0 {
			i++
			continue
		}
		l.text = append(l.text, src[start:i])
		l.file = append(l.file, file)
		if src[i+w-1] == '\n' {
			file++
		}
		i += w
		start = i
	}
	l.text = append(l.text, src[start:])
	l.file = append(l.file, file)
	return l
}

// fileLine is the file line of the parser's line n, 0 for none.
func (l yamlLines) fileLine(n int) int {
	if n < 1 || n > len(l.file) {
		return 0
	}
	return l.file[n-1]
}
