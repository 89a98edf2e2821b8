// Package suggest turns the egress that attested runs were refused (or,
// under egress.mode "audit", would have been refused) into a repository
// policy: egress.allow rules as narrow as the evidence (host, ports, and
// for plain HTTP the methods and path prefixes seen), each with a comment
// saying what it rests on, merged into the repository's existing
// .github/airlock.cue without repeating what it allows already.
//
// It never suggests an IP address, a deny range (those are the
// organisation's allowCIDRs to open, not a repository's rules) or
// anything for trust, and it offers a "*.suffix" rule only when several
// sibling names were seen, saying so.
//
// Which refusals a rule could change it reads from the kind of rule each
// decision row names (ruleKind, a rules.RuleKind; rules.KindOfText for
// rows of older statements, which name the rule in words only).
//
// Layer 3: above policies, attest and runner/egress/rules (whose compiled
// policy says what is allowed already); `airlock policy suggest` in
// cmd/airlock verifies the bundles and calls Suggest.
package suggest

import (
	"fmt"
	"net/netip"
	pathpkg "path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/net/publicsuffix"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/internal/textsafe"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner/egress/rules"
)

// Run is one attested run's predicate; Name says where it came from, and
// Unverified that it was read without a verified signature.
type Run struct {
	Name       string
	Predicate  attest.Predicate
	Unverified bool
}

// Rule is one suggested egress.allow entry and the evidence behind it.
type Rule struct {
	Host         string
	Ports        []int
	Methods      []string
	PathPrefixes []string
	Evidence     Evidence
	// Siblings are the names a "*." rule stands for.
	Siblings []string
}

// Evidence is what a rule rests on.
type Evidence struct {
	// Attempts counts the decisions (DNS queries, connections, requests);
	// Denied and WouldDeny split them by outcome.
	Attempts, Denied, WouldDeny int
	Runs                        int
	Steps, Programs             []string
	// DNSOnly: only DNS queries were seen, so the port is assumed (443).
	DNSOnly bool
	// UnplainPaths is set when a path the rule could not narrow to was
	// seen; Collapsed names the one prefix that stands for many.
	UnplainPaths bool
	Collapsed    string
}

// Result is the suggestion: the rules, what was left out and why, and the
// repository policy file with the rules merged in.
type Result struct {
	Rules []Rule
	Notes []string
	File  []byte
}

// numericLast is a name whose last label is a number: an address.
var numericLast = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\.(0x[0-9a-f]*|[0-9]+)$`) })

// hostName is a name a rule may hold (the schema's #EgressRule host
// without the wildcard). Compiled on first use: its bounded repetitions
// make it costly, and every start of the airlock binary would pay it.
var hostName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$`)
})

// schemaMethods are the methods a rule may name.
var schemaMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// siblingsForWildcard is how many names below one parent a "*." rule
// needs.
const siblingsForWildcard = 3

// maxRules bounds one suggestion (a repository policy file is at most
// 256 KiB).
const maxRules = 500

// maxPrefixes bounds a rule's path prefixes; past it the rule keeps their
// common directory.
const maxPrefixes = 8

// attempt is one refused decision reduced to what a rule needs.
type attempt struct {
	host, method, path string
	port               int
	kind               int // dnsAttempt, tunnelAttempt or httpAttempt
	wouldDeny          bool
	run                int
	step, program      string
}

const (
	dnsAttempt = iota
	tunnelAttempt
	httpAttempt
)

// Options are what a suggestion is made against.
type Options struct {
	// Existing is the repository's policy file at the base commit (nil
	// when it has none), Path its name for messages.
	Existing []byte
	Path     string
	// Current, when not nil, is the effective egress policy at the base
	// commit (organisation and repository): what it allows already is not
	// suggested again.
	Current *policies.Egress
	// AgentRuns uses the runs of pull requests detected as agent work
	// too; by default they are left out: what an agent tried to reach is
	// no evidence of what the repository needs.
	AgentRuns bool
}

// Suggest builds the rules from runs.
func Suggest(runs []Run, o Options) (Result, error) {
	var res Result
	existing, path, current := o.Existing, o.Path, o.Current
	var kept []Run
	repos := map[string]bool{}
	for _, r := range runs {
		if a := r.Predicate.Policy.Agent; a != nil && a.Agent && !o.AgentRuns {
			res.Notes = append(res.Notes, fmt.Sprintf("%s left out: a pull request detected as agent work (%s); what an agent tried to reach is no evidence of what the repository needs", textsafe.Line(r.Name), textsafe.Line(textsafe.Clip(a.Reason, 120, "..."))))
			continue
		}
		repos[r.Predicate.Job.Repository] = true
		kept = append(kept, r)
	}
	if len(repos) > 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("the runs come from %d repositories: the suggestion joins what they all reached", len(repos)))
	}
	runs = kept
	var allowed *rules.Policy
	if current != nil {
		e := *current
		e.Mode = "enforce" // what the rules allow, not what audit lets through
		var err error
		// Secrets' values do not matter here; only the rules do.
		if allowed, err = rules.Compile(e, func(string) (string, bool) { return "unused", true }); err != nil {
			return res, fmt.Errorf("the current policy: %w", err)
		}
	}
	var atts []attempt
	skipped := map[string]int{}
	for i, r := range runs {
		for _, a := range attempts(i, r.Predicate, skipped) {
			if allowed != nil && allowedBy(allowed, a) {
				skipped["allowed by the policy at the base commit already"]++
				continue
			}
			atts = append(atts, a)
		}
	}
	res.Rules = build(atts)
	var folded []string
	res.Rules, folded = wildcards(res.Rules)
	res.Notes = append(res.Notes, folded...)
	if len(res.Rules) > maxRules {
		res.Notes = append(res.Notes, fmt.Sprintf("%d more rule(s) not suggested: at most %d at once (the runs reached that many destinations; look at them before allowing any)", len(res.Rules)-maxRules, maxRules))
		res.Rules = res.Rules[:maxRules]
	}
	for _, why := range sortedKeys(skipped) {
		res.Notes = append(res.Notes, fmt.Sprintf("%d attempt(s) not suggested: %s", skipped[why], why))
	}
	file, err := merge(existing, path, res.Rules, len(runs))
	if err != nil {
		return res, err
	}
	res.File = file
	return res, nil
}

// attempts reads one predicate's refused decisions, counting those no
// repository rule could allow under skipped.
func attempts(run int, p attest.Predicate, skipped map[string]int) []attempt {
	var out []attempt
	execs := execsByPID(p.Processes.Execs)
	for _, d := range p.Egress.Rows() {
		if d.Decision != rules.Denied && d.Decision != rules.WouldDeny {
			continue
		}
		name := strings.TrimSuffix(strings.ToLower(d.Name), ".")
		kind := ruleKind(d)
		switch {
		case !kind.ByRules():
			skipped[fmt.Sprintf("refused by %s, which no egress.allow rule changes", category(kind, d.Rule))]++
			continue
		case name == "":
			skipped["no host name (a connection to an address)"]++
			continue
		case isAddr(name):
			skipped["an IP address (egress is allowed by name only)"]++
			continue
		case !hostName().MatchString(name):
			skipped["not a host name"]++
			continue
		case numericLast().MatchString(name):
			// 0177.0.0.1, 10.1: an address in another spelling.
			skipped["an IP address (egress is allowed by name only)"]++
			continue
		}
		a := attempt{host: name, port: d.Port, wouldDeny: d.Decision == rules.WouldDeny, run: run, step: attest.StepAt(p.Steps, d.Time), program: programAt(execs[d.PID], d.Time)}
		switch {
		case d.Protocol == rules.ProtoDNS:
			a.kind, a.port = dnsAttempt, 0
		case d.Method != "" && !slices.Contains(schemaMethods, d.Method):
			// A rule naming methods cannot name this one, and one
			// without methods would allow them all.
			skipped["a request method no rule can name ("+textsafe.Clip(textsafe.Line(d.Method), 16, "...")+")"]++
			continue
		case d.Method != "" && d.Path != "":
			// Plain HTTP: direct, through the proxy, inside a CONNECT
			// tunnel, or decrypted by the gateway.
			a.kind, a.method, a.path = httpAttempt, d.Method, d.Path
		default:
			a.kind = tunnelAttempt
		}
		if a.kind != dnsAttempt && (a.port <= 0 || a.port > 65535) {
			skipped["no valid port"]++
			continue
		}
		out = append(out, a)
	}
	return out
}

// ruleKind is the kind of the rule that decided a row; a row of a
// statement made before rows carried it has only the rule's text.
func ruleKind(d attest.EgressDecision) rules.RuleKind {
	if d.RuleKind != "" {
		return rules.RuleKind(d.RuleKind)
	}
	return rules.KindOfText(d.Rule)
}

// category names what refused a decision (the rule of kind, cited as
// rule), for the notes.
func category(kind rules.RuleKind, rule string) string {
	switch kind {
	case rules.KindDenyRange, rules.KindDenyCIDR:
		return "a deny range (the organisation's allowCIDRs opens one)"
	case rules.KindFronting:
		return "the fronting check"
	case rules.KindCredentials, rules.KindService:
		return "the credentials policy"
	}
	if rule == "" {
		return "an unnamed check"
	}
	// Rows cite rules in short form; any other text is shown so too.
	return textsafe.Line(textsafe.Clip(strings.TrimPrefix(rule, "egress."), 40, "..."))
}

func isAddr(s string) bool {
	_, err := netip.ParseAddr(strings.Trim(s, "[]"))
	return err == nil
}

// allowedBy reports an attempt the policy allows already.
func allowedBy(p *rules.Policy, a attempt) bool {
	switch a.kind {
	case dnsAttempt:
		return p.NameAllowed(a.host)
	case httpAttempt:
		return p.Request(a.host, a.port, a.method, a.path, a.path).Allowed
	default:
		_, v := p.Connect(a.host, a.port)
		return v.Allowed
	}
}

// hostEvidence gathers one host's attempts.
type hostEvidence struct {
	tunnel      map[int]bool
	http        map[int]bool
	methods     map[string]bool
	paths       map[string]bool
	unplain     bool
	dns         bool
	ev          Evidence
	runs        map[int]bool
	steps, bins map[string]bool
}

// build makes one or two rules per host: connections the gateway could
// not read into (TLS, CONNECT, other TCP) need the port alone; plain HTTP
// requests get the methods and path prefixes seen. A host seen only in
// DNS gets port 443.
func build(atts []attempt) []Rule {
	hosts := map[string]*hostEvidence{}
	for _, a := range atts {
		h := hosts[a.host]
		if h == nil {
			h = &hostEvidence{tunnel: map[int]bool{}, http: map[int]bool{}, methods: map[string]bool{}, paths: map[string]bool{}, runs: map[int]bool{}, steps: map[string]bool{}, bins: map[string]bool{}}
			hosts[a.host] = h
		}
		h.ev.Attempts++
		if a.wouldDeny {
			h.ev.WouldDeny++
		} else {
			h.ev.Denied++
		}
		h.runs[a.run] = true
		if a.step != "" {
			h.steps[a.step] = true
		}
		if a.program != "" {
			h.bins[a.program] = true
		}
		switch a.kind {
		case dnsAttempt:
			h.dns = true
		case tunnelAttempt:
			h.tunnel[a.port] = true
		case httpAttempt:
			h.http[a.port] = true
			h.methods[a.method] = true
			if dir, ok := pathDir(a.path); ok {
				h.paths[dir] = true
			} else {
				h.unplain = true
			}
		}
	}
	var out []Rule
	for _, host := range sortedKeys(hosts) {
		h := hosts[host]
		ev := h.ev
		ev.Runs, ev.Steps, ev.Programs = len(h.runs), sortedKeys(h.steps), sortedKeys(h.bins)
		var httpPorts []int
		for p := range h.http {
			if !h.tunnel[p] {
				httpPorts = append(httpPorts, p)
			}
		}
		if len(h.tunnel) > 0 {
			out = append(out, Rule{Host: host, Ports: sortedKeys(h.tunnel), Evidence: ev})
		}
		if len(httpPorts) > 0 {
			slices.Sort(httpPorts)
			r := Rule{Host: host, Ports: httpPorts, Evidence: ev}
			methods := sortedKeys(h.methods)
			if !slices.ContainsFunc(methods, func(m string) bool { return !slices.Contains(schemaMethods, m) }) {
				r.Methods = methods
			}
			if !h.unplain {
				all := sortedKeys(h.paths)
				r.PathPrefixes = prefixes(all)
				if len(r.PathPrefixes) == 1 && !slices.Contains(all, r.PathPrefixes[0]) {
					r.Evidence.Collapsed = fmt.Sprintf("%s stands for %d directories seen", r.PathPrefixes[0], len(all))
				}
			}
			r.Evidence.UnplainPaths = h.unplain
			out = append(out, r)
		}
		if len(h.tunnel) == 0 && len(httpPorts) == 0 {
			ev.DNSOnly = true
			out = append(out, Rule{Host: host, Ports: []int{443}, Evidence: ev})
		}
	}
	return out
}

// pathDir is the directory of a plain request path, as a prefix ("/a/b/c"
// is "/a/b/"); false for a path a prefix could not match (dot segments,
// encoded slashes: the gateway never matches those).
func pathDir(p string) (string, bool) {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.Contains(strings.ToLower(p), "%2") {
		return "", false
	}
	if c := pathpkg.Clean(p); c != p && c+"/" != p {
		return "", false
	}
	return p[:strings.LastIndexByte(p, '/')+1], true
}

// prefixes drops the prefixes another one covers; past maxPrefixes it
// keeps their longest common directory.
func prefixes(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		covered := false
		for _, o := range dirs {
			if o != d && strings.HasPrefix(d, o) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, d)
		}
	}
	if len(out) <= maxPrefixes {
		return out
	}
	common := out[0]
	for _, d := range out[1:] {
		for !strings.HasPrefix(d, common) {
			common = common[:strings.LastIndexByte(strings.TrimSuffix(common, "/"), '/')+1]
		}
	}
	return []string{common}
}

// wildcards folds the rules of siblingsForWildcard or more names below
// one parent into "*.parent" rules, never below a public suffix ("*.com",
// "*.co.uk"), and says so in the notes.
func wildcards(in []Rule) ([]Rule, []string) {
	byParent := map[string][]string{}
	for _, r := range in {
		if r.Evidence.DNSOnly {
			continue // a name only asked for is no evidence of a family
		}
		_, parent, _ := strings.Cut(r.Host, ".")
		if !slices.Contains(byParent[parent], r.Host) {
			byParent[parent] = append(byParent[parent], r.Host)
		}
	}
	var notes []string
	folded := map[string]string{}
	for _, parent := range sortedKeys(byParent) {
		names := byParent[parent]
		if len(names) < siblingsForWildcard || !strings.Contains(parent, ".") {
			continue
		}
		// Never at or above a registrable domain: *.amazonaws.com or
		// *.example.com would hold every tenant or service below it.
		if reg, err := publicsuffix.EffectiveTLDPlusOne(parent); err != nil || reg == parent {
			continue
		}
		for _, n := range names {
			folded[n] = "*." + parent
		}
		notes = append(notes, fmt.Sprintf("*.%s stands for %d sibling names seen (%s): a rule per name would be narrower", parent, len(names), strings.Join(names, ", ")))
	}
	if len(folded) == 0 {
		return in, notes
	}
	var out []Rule
	index := map[string]int{} // wildcard host and shape -> position in out
	for _, r := range in {
		w, ok := folded[r.Host]
		if !ok {
			out = append(out, r)
			continue
		}
		key := fmt.Sprintf("%s|%v", w, r.Methods != nil || r.PathPrefixes != nil)
		i, seen := index[key]
		if !seen {
			index[key] = len(out)
			_, parent, _ := strings.Cut(r.Host, ".")
			r.Siblings = byParent[parent]
			r.Host = w
			out = append(out, r)
			continue
		}
		m := &out[i]
		m.Ports = union(m.Ports, r.Ports)
		if m.Methods != nil && r.Methods != nil {
			m.Methods = union(m.Methods, r.Methods)
		} else {
			m.Methods = nil
		}
		if m.PathPrefixes != nil && r.PathPrefixes != nil {
			m.PathPrefixes = prefixes(union(m.PathPrefixes, r.PathPrefixes))
		} else {
			m.PathPrefixes = nil
		}
		m.Evidence = mergeEvidence(m.Evidence, r.Evidence)
	}
	slices.SortStableFunc(out, func(a, b Rule) int { return strings.Compare(a.Host, b.Host) })
	return out, notes
}

func mergeEvidence(a, b Evidence) Evidence {
	a.Attempts += b.Attempts
	a.Denied += b.Denied
	a.WouldDeny += b.WouldDeny
	a.Runs = max(a.Runs, b.Runs)
	a.Steps = union(a.Steps, b.Steps)
	a.Programs = union(a.Programs, b.Programs)
	a.DNSOnly = a.DNSOnly && b.DNSOnly
	a.UnplainPaths = a.UnplainPaths || b.UnplainPaths
	return a
}

// comment is the evidence in one line (or two), safe inside a CUE line
// comment: no control character, bounded.
func (r Rule) comment() []string {
	ev := r.Evidence
	var outcome []string
	if ev.WouldDeny > 0 {
		outcome = append(outcome, fmt.Sprintf("%d would-deny", ev.WouldDeny))
	}
	if ev.Denied > 0 {
		outcome = append(outcome, fmt.Sprintf("%d denied", ev.Denied))
	}
	line := fmt.Sprintf("%d attempt(s) (%s) in %d run(s)", ev.Attempts, strings.Join(outcome, ", "), ev.Runs)
	if len(ev.Steps) > 0 {
		line += "; steps: " + listOf(ev.Steps)
	}
	if len(ev.Programs) > 0 {
		line += "; programs: " + listOf(ev.Programs)
	}
	lines := []string{line}
	if ev.DNSOnly {
		lines = append(lines, "only DNS queries were seen: port 443 is assumed")
	}
	if ev.UnplainPaths {
		lines = append(lines, "a request path with dot segments or encoded slashes was seen: no path prefix")
	}
	if ev.Collapsed != "" {
		lines = append(lines, "path prefix "+ev.Collapsed+": narrower ones would be safer")
	}
	if len(r.Siblings) > 0 {
		lines = append(lines, fmt.Sprintf("stands for %d sibling names seen: %s", len(r.Siblings), listOf(r.Siblings)))
	}
	for i, l := range lines {
		// Format characters (a byte order mark, zero-width and bidi
		// controls) are shown, never kept: CUE refuses some of them.
		l = strings.Map(func(r rune) rune {
			if unicode.Is(unicode.Cf, r) {
				return '?'
			}
			return r
		}, textsafe.Line(l))
		lines[i] = "// " + textsafe.Clip(l, 300, "...")
	}
	return lines
}

// listOf names at most five items.
func listOf(items []string) string {
	if len(items) <= 5 {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
}

// execsByPID lists each pid's execs in time order.
func execsByPID(execs []attest.Exec) map[int32][]attest.Exec {
	out := map[int32][]attest.Exec{}
	for _, e := range execs {
		out[e.PID] = append(out[e.PID], e)
	}
	for _, l := range out {
		slices.SortStableFunc(l, func(a, b attest.Exec) int { return a.Time.Compare(b.Time) })
	}
	return out
}

// programAt is the program a pid ran at t: its last exec before then.
func programAt(execs []attest.Exec, t time.Time) string {
	bin := ""
	for _, e := range execs {
		if !e.Time.After(t) {
			bin = e.Binary
		}
	}
	return bin
}

func sortedKeys[K interface{ ~string | ~int }, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func union[T interface{ ~string | ~int }](a, b []T) []T {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
