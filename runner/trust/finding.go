package trust

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/airlock-ci/airlock/internal/textsafe"
)

// Phase is when the change a finding reports was made.
type Phase string

// Phases of a finding.
const (
	Authored Phase = "authored" // the pull request's commits
	Runtime  Phase = "runtime"  // the sandboxed job
)

// Kind is what happened to the path a finding names.
type Kind string

// Kinds of change.
const (
	KindAdded        Kind = "added"
	KindModified     Kind = "modified"
	KindDeleted      Kind = "deleted"
	KindModeChanged  Kind = "mode-changed"
	KindSymlink      Kind = "symlink-changed"
	KindEscalation   Kind = "escalation"    // a workflow became more dangerous
	KindWriteRefused Kind = "write-refused" // the job tried to write a read-only path
	KindIncomplete   Kind = "incomplete"    // the inspection stopped at a bound
	KindUnparsable   Kind = "unparsable"    // an agent tool config that does not parse
)

// Severity is how loudly a finding is shown: it follows from the
// finding's action (severity), so an annotation, a check run and a
// compliance policy agree on what fails.
type Severity string

// Severities of a finding.
const (
	SeverityError   Severity = "error"   // the action fails the job
	SeverityWarning Severity = "warning" // annotated: warn, revert, readonly
	SeverityNotice  Severity = "notice"  // allowed, on record
)

// Finding is one change to the trust set.
type Finding struct {
	Phase    Phase    `json:"phase"`
	Category Category `json:"category"`
	// Check is the check that made the finding (checks.go): which of
	// airlock's inspections saw it, as a linter's rule names itself.
	Check Check  `json:"check,omitempty"`
	Path  string `json:"path"`
	// Line is where in the file, when known (1-based).
	Line int  `json:"line,omitempty"`
	Kind Kind `json:"kind"`
	// Severity is SeverityError for changes that fail the job,
	// SeverityWarning for annotated ones, SeverityNotice for the rest.
	Severity Severity `json:"severity"`
	Reason   string   `json:"reason"`
	// Diff is a bounded unified diff; DiffSHA256 is the digest of the
	// whole diff (before bounding).
	Diff       string `json:"diff,omitempty"`
	DiffSHA256 string `json:"diffSha256,omitempty"`
	// Action is the policy's action for the category and phase; Outcome
	// what airlock did ("reverted", "write refused: read-only", ...).
	Action  string `json:"action"`
	Outcome string `json:"outcome,omitempty"`
}

// Diff bounds.
const (
	maxDiffLines = 200
	maxDiffBytes = 16 << 10
	maxDiffInput = 64 << 10
)

// unifiedDiff returns a bounded unified diff of two texts and the digest
// of the whole diff. Binary content and hard-linked files are not shown.
func unifiedDiff(name string, a, b []byte) (string, string) {
	if isBinary(a) || isBinary(b) {
		sum := sha256.Sum256(append(append([]byte{}, a...), b...))
		return "(binary content not shown)", hex.EncodeToString(sum[:])
	}
	if len(a) > maxDiffInput || len(b) > maxDiffInput {
		// The diff algorithm is quadratic on large inputs.
		sum := sha256.Sum256(append(append([]byte{}, a...), b...))
		return fmt.Sprintf("(too large to diff: %d and %d bytes)", len(a), len(b)), hex.EncodeToString(sum[:])
	}
	text, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(a)), B: difflib.SplitLines(string(b)),
		FromFile: "a/" + name, ToFile: "b/" + name, Context: 2,
	})
	return boundDiff(text)
}

// boundDiff cuts a diff to the bounds and digests the whole.
func boundDiff(text string) (string, string) {
	sum := sha256.Sum256([]byte(text))
	lines := strings.SplitAfter(text, "\n")
	cut := false
	if len(lines) > maxDiffLines {
		lines, cut = lines[:maxDiffLines], true
	}
	out := strings.Join(lines, "")
	if len(out) > maxDiffBytes {
		out, cut = out[:maxDiffBytes], true
	}
	out = strings.ToValidUTF8(out, "\uFFFD")
	if cut {
		out += "\n... (diff cut; see diffSha256)\n"
	}
	return out, hex.EncodeToString(sum[:])
}

func isBinary(b []byte) bool {
	return slices.Contains(b[:min(len(b), 8000)], 0)
}

// Compare returns the run-time findings between two snapshots of the same
// workspace, with the policy's run-time action on each.
func Compare(before, after *Snapshot, set *Set) []Finding {
	var out []Finding
	paths := map[string]bool{}
	for p := range before.Entries {
		paths[p] = true
	}
	for p := range after.Entries {
		paths[p] = true
	}
	if before.Truncated || after.Truncated {
		// A walk that stopped early may hide a planted file: never let
		// that pass as "no change".
		out = append(out, Finding{Phase: Runtime, Category: Inspection, Check: CheckRuntimeDiff, Path: ".", Kind: KindIncomplete, Severity: SeverityError, Action: ActionFail,
			Reason: fmt.Sprintf("the workspace is too large to inspect in full (more than %d entries or %d bytes to hash): findings may be missing", maxWalkEntries, maxReadTotal)})
	}
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		b, a := before.Entries[p], after.Entries[p]
		var f *Finding
		switch {
		case b == nil:
			f = &Finding{Path: p, Category: a.Category, Kind: KindAdded, Reason: "created by the job"}
			if a.Link != "" {
				f.Reason = fmt.Sprintf("symlink to %q created by the job", a.Link)
			}
		case a == nil:
			f = &Finding{Path: p, Category: b.Category, Kind: KindDeleted, Reason: "deleted by the job"}
		case b.Link != a.Link:
			f = &Finding{Path: p, Category: a.Category, Kind: KindSymlink, Reason: fmt.Sprintf("symlink target %q -> %q", b.Link, a.Link)}
		case b.config != nil && a.config != nil:
			// A git config: keys the job added or changed count (code or
			// redirection can hide behind any of them); keys it removed do
			// not (actions/checkout removes its credentials at the end).
			if !subsequence(a.config, b.config) {
				reason := "git config keys reordered or repeated by the job (the last value wins)"
				if added := missingFrom(a.config, b.config); len(added) > 0 {
					reason = "git config keys added or changed by the job: " + strings.Join(added, "; ")
				}
				f = &Finding{Path: p, Category: a.Category, Kind: KindModified, Reason: textsafe.Clip(reason, 1000, "...")}
			}
		case b.Facts != nil && a.Facts != nil:
			// What matters of the file counts (scripts, driver lines,
			// executable git config keys); for a git config any other
			// change too, as the key list cannot know every option.
			if !slices.Equal(b.Facts, a.Facts) {
				f = &Finding{Path: p, Category: a.Category, Kind: KindModified, Reason: factsReason(b.Facts, a.Facts)}
			} else if a.Category == GitConfig && b.SHA256 != a.SHA256 {
				f = &Finding{Path: p, Category: a.Category, Kind: KindModified, Reason: "git config changed by the job (no key on the code-executing list)"}
			}
		case b.SHA256 != a.SHA256:
			f = &Finding{Path: p, Category: a.Category, Kind: KindModified, Reason: "content changed by the job"}
		case b.Mode != a.Mode:
			f = &Finding{Path: p, Category: a.Category, Kind: KindModeChanged, Reason: fmt.Sprintf("mode %v -> %v", b.Mode, a.Mode)}
		}
		if f == nil {
			continue
		}
		f.Phase, f.Check = Runtime, CheckRuntimeDiff
		f.Action = set.RuntimeAction(f.Category)
		f.Severity = severity(f.Action)
		f.Diff, f.DiffSHA256 = entryDiff(p, b, a)
		f.Line = firstChangedLine(f.Diff)
		out = append(out, *f)
		// Not for a hard-linked file: it may be a host file linked into
		// the workspace, and its bytes are not shown anywhere.
		// Nor for a file that is agent-tools for being run: it is a
		// script, not a config.
		if a != nil && a.Links <= 1 && (b == nil || b.Links <= 1) {
			for _, af := range agentFindings(set.semanticCategory(p, f.Category), p, dataOf(b), dataOf(a)) {
				if af.Category == "" { // a finding may name a category of its own
					af.Category = f.Category
				}
				af.Phase, af.Action = Runtime, set.RuntimeAction(af.Category)
				af.Severity = severity(af.Action)
				out = append(out, af)
			}
		}
	}
	return explainScripts(out, set)
}

// dataOf is an entry's kept bytes (nil for none, or a file too large to
// keep).
func dataOf(e *Entry) []byte {
	if e == nil || !e.kept {
		return nil
	}
	return e.data
}

// subsequence reports whether list is base with some lines removed and
// none added or moved (for git config, where the last value wins).
func subsequence(list, base []string) bool {
	i := 0
	for _, x := range list {
		for i < len(base) && base[i] != x {
			i++
		}
		if i == len(base) {
			return false
		}
		i++
	}
	return true
}

// missingFrom is what of list is not in base.
func missingFrom(list, base []string) []string {
	var out []string
	for _, x := range list {
		if !slices.Contains(base, x) {
			out = append(out, x)
		}
	}
	return out
}

// entryDiff diffs two versions of a file when both sides are shown. A
// git config is shown as its key list, never as bytes.
func entryDiff(p string, b, a *Entry) (string, string) {
	if (b != nil && b.Category == GitConfig && isConfigFile(p)) || (a != nil && a.Category == GitConfig && isConfigFile(p)) {
		var bl, al []string
		if b != nil {
			bl = b.config
		}
		if a != nil {
			al = a.config
		}
		if (b != nil && b.config == nil) || (a != nil && a.config == nil) {
			return "(git config not parsed: not shown)", ""
		}
		return unifiedDiff(p, []byte(strings.Join(bl, "\n")+"\n"), []byte(strings.Join(al, "\n")+"\n"))
	}
	var bd, ad []byte
	for _, e := range []*Entry{b, a} {
		if e != nil && e.Links > 1 && e.Mode.IsRegular() {
			return fmt.Sprintf("(a file with %d hard links: content not shown)", e.Links), ""
		}
		if e != nil && e.Mode.IsRegular() && !e.kept {
			return "(too large to show)", ""
		}
	}
	if b != nil {
		bd = b.data
	}
	if a != nil {
		ad = a.data
	}
	return unifiedDiff(p, bd, ad)
}

func isConfigFile(p string) bool {
	base := path.Base(p)
	return base == "config" || base == "config.worktree"
}

func factsReason(before, after []string) string {
	var added, removed []string
	for _, f := range after {
		if !slices.Contains(before, f) {
			added = append(added, f)
		}
	}
	for _, f := range before {
		if !slices.Contains(after, f) {
			removed = append(removed, f)
		}
	}
	var parts []string
	if len(added) > 0 {
		parts = append(parts, "added "+strings.Join(added, "; "))
	}
	if len(removed) > 0 {
		parts = append(parts, "removed "+strings.Join(removed, "; "))
	}
	return textsafe.Clip(strings.Join(parts, "; "), 1000, "...")
}

// severity is the severity of a finding with the given action.
func severity(action string) Severity {
	switch action {
	case ActionFail:
		return SeverityError
	case ActionWarn, ActionRevert, ActionReadonly:
		return SeverityWarning
	}
	return SeverityNotice
}
