package policies

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
)

//go:embed schema.cue
var schemaCUE []byte

// Bounds on policy input. A policy is a few kilobytes; anything near these
// is a mistake or an attack.
const (
	MaxFileSize  = 256 << 10
	MaxTotalSize = 1 << 20
	MaxFiles     = 64
	// EvalTimeout bounds unification and validation.
	EvalTimeout = 5 * time.Second
)

// Source kinds.
const (
	KindOrg  = "org"
	KindRepo = "repo"
)

// Source is one policy file.
type Source struct {
	// Kind is KindOrg or KindRepo.
	Kind string `json:"kind"`
	// Path names the file in errors and results (for a repository file,
	// its path in the repository).
	Path string `json:"path"`
	// Commit is the commit a repository file was read from.
	Commit string `json:"commit,omitempty"`
	// SHA256 of Data, filled in by Load.
	SHA256 string `json:"sha256"`
	Data   []byte `json:"-"`
}

// Effective is the unified, validated policy.
type Effective struct {
	Policy  Policy   `json:"policy"`
	Sources []Source `json:"sources"`
	// Digest is the sha256 of the effective policy's canonical JSON.
	Digest string `json:"digest"`
	// CUE is the effective policy as CUE text.
	CUE string `json:"-"`
	// Explain says, for each value, which files set it.
	Explain []Origin `json:"-"`
	// Org is the organisation's files alone: what a repository may not
	// choose (host paths, the signing key) is read from here.
	Org *Policy `json:"-"`
}

// Origin is where one value of the effective policy came from.
type Origin struct {
	// Path is the value's path, such as sandbox.limits.pids.
	Path string `json:"path"`
	// Value is its effective value, as CUE.
	Value string `json:"value"`
	// SetBy lists file:line:column (kind) of every source that sets or
	// bounds it; empty means the schema's default.
	SetBy []string `json:"setBy"`
}

// Error is a policy error: one message per problem, each with the
// positions (file:line:column) involved.
type Error struct {
	Problems []string
}

func (e *Error) Error() string {
	return "invalid policy:\n  " + strings.Join(e.Problems, "\n  ")
}

// DefaultOrgDir is where a runner host keeps its organisation policy.
const DefaultOrgDir = "/etc/airlock"

// OrgSources reads the organisation policy from dir, or from
// DefaultOrgDir when dir is empty and the host has one. No directory: no
// organisation policy.
func OrgSources(dir string) ([]Source, error) {
	if dir == "" {
		if !HostHasOrgPolicy() {
			return nil, nil
		}
		dir = DefaultOrgDir
	}
	return LoadOrgDir(dir)
}

// HostHasOrgPolicy reports whether DefaultOrgDir exists.
func HostHasOrgPolicy() bool {
	fi, err := os.Stat(DefaultOrgDir)
	return err == nil && fi.IsDir()
}

// LoadOrgDir reads every *.cue file of an organisation policy directory,
// in name order.
func LoadOrgDir(dir string) ([]Source, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.cue"))
	if err != nil {
		return nil, fmt.Errorf("organisation policy %s: %w", dir, err)
	}
	if len(names) > MaxFiles {
		return nil, fmt.Errorf("organisation policy %s: %d files, at most %d", dir, len(names), MaxFiles)
	}
	sort.Strings(names)
	var out []Source
	for _, n := range names {
		src, err := readFile(n, KindOrg)
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	return out, nil
}

// readFile reads one policy file from disk, refusing oversized ones
// before reading them.
func readFile(path, kind string) (Source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Source{}, fmt.Errorf("policy file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Source{}, fmt.Errorf("policy file %s: not a regular file", path)
	}
	if fi.Size() > MaxFileSize {
		return Source{}, fmt.Errorf("policy file %s: %d bytes, at most %d", path, fi.Size(), MaxFileSize)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Source{}, fmt.Errorf("policy file: %w", err)
	}
	return Source{Kind: kind, Path: path, Data: b}, nil
}

// ReadFiles reads policy files named on the command line.
func ReadFiles(paths []string, kind string) ([]Source, error) {
	var out []Source
	for _, p := range paths {
		src, err := readFile(p, kind)
		if err != nil {
			return nil, err
		}
		out = append(out, src)
	}
	return out, nil
}

// Load unifies the schema with every source, in order (organisation files
// first, then the repository's), validates that the result is complete
// and decodes it. Nothing in the sources can make it run longer than
// EvalTimeout or read more than MaxTotalSize.
func Load(ctx context.Context, sources []Source) (*Effective, error) {
	total := 0
	for i := range sources {
		s := &sources[i]
		if len(s.Data) > MaxFileSize {
			return nil, fmt.Errorf("policy file %s: %d bytes, at most %d", s.Path, len(s.Data), MaxFileSize)
		}
		total += len(s.Data)
		sum := sha256.Sum256(s.Data)
		s.SHA256 = hex.EncodeToString(sum[:])
	}
	if total > MaxTotalSize || len(sources) > MaxFiles {
		return nil, fmt.Errorf("policy: %d files with %d bytes in all; at most %d files and %d bytes", len(sources), total, MaxFiles, MaxTotalSize)
	}
	ctx, cancel := context.WithTimeout(ctx, EvalTimeout)
	defer cancel()
	type result struct {
		eff *Effective
		err error
	}
	done := make(chan result, 1)
	// CUE evaluation cannot be interrupted: it runs on its own goroutine
	// and is abandoned (not waited for) when the deadline passes.
	go func() {
		eff, err := evaluate(sources)
		if err == nil {
			err = orgOnly(eff)
		}
		done <- result{eff, err}
	}()
	select {
	case r := <-done:
		return r.eff, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("policy evaluation took longer than %s (pathological disjunctions or recursion?): %w", EvalTimeout, ctx.Err())
	}
}

func evaluate(sources []Source) (*Effective, error) {
	cctx := cuecontext.New()
	schema := cctx.CompileBytes(schemaCUE, cue.Filename("airlock:schema.cue"))
	if err := schema.Err(); err != nil {
		return nil, fmt.Errorf("embedded schema: %w", err)
	}
	schemaPolicy := schema.LookupPath(cue.ParsePath("#Policy"))
	v := schemaPolicy
	var problems []string
	compiled := make([]cue.Value, len(sources))
	for i, s := range sources {
		fv, err := compile(cctx, s)
		if err != nil {
			problems = append(problems, describe(err, schemaPolicy)...)
			continue
		}
		compiled[i] = fv
		v = v.Unify(fv)
	}
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	if err := v.Validate(cue.Concrete(true), cue.Final()); err != nil {
		return nil, &Error{Problems: describe(err, schemaPolicy)}
	}
	var p Policy
	if err := v.Decode(&p); err != nil {
		return nil, &Error{Problems: describe(err, schemaPolicy)}
	}
	problems = append(p.Images.check(), unknownCategories(schemaPolicy, v, p.Trust)...)
	problems = append(problems, p.Attest.checkStores(compiled)...)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	canon, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode effective policy: %w", err)
	}
	sum := sha256.Sum256(canon)
	text, err := format.Node(v.Syntax(cue.Final(), cue.Concrete(true)))
	if err != nil {
		return nil, fmt.Errorf("format effective policy: %w", err)
	}
	return &Effective{Policy: p, Sources: sources, Digest: hex.EncodeToString(sum[:]), CUE: string(text), Explain: explain(v, sources, compiled)}, nil
}

// orgOnly evaluates the organisation's files alone into eff.Org and
// refuses a repository policy that changes a host choice: the root
// filesystem, host mounts and image directories name paths on the runner,
// and the job's user and capabilities its privileges, which only the
// runner's administrators may pick. (The signing key is taken from
// eff.Org by its users, and a repository's is ignored.)
func orgOnly(eff *Effective) error {
	var org []Source
	for _, s := range eff.Sources {
		if s.Kind == KindOrg {
			org = append(org, s)
		}
	}
	if len(org) == len(eff.Sources) {
		eff.Org = &eff.Policy
		return nil
	}
	o, err := evaluate(org)
	if err != nil {
		return fmt.Errorf("organisation policy alone: %w", err)
	}
	eff.Org = &o.Policy
	const hostPaths = "it names host paths, which only the organisation policy on the runner may choose"
	const privileges = "it decides the job's identity and privileges in the sandbox, which only the organisation policy on the runner may choose"
	var problems []string
	for _, f := range []struct {
		name, why string
		org, repo any
	}{
		{"sandbox.rootfs", hostPaths, o.Policy.Sandbox.RootFS, eff.Policy.Sandbox.RootFS},
		{"sandbox.mounts", hostPaths, o.Policy.Sandbox.Mounts, eff.Policy.Sandbox.Mounts},
		{"sandbox.images", hostPaths, o.Policy.Sandbox.Images, eff.Policy.Sandbox.Images},
		{"images", "it decides which registries and images the runner pulls and what it checks of them, which only the organisation policy on the runner may choose", o.Policy.Images, eff.Policy.Images},
		{"sandbox.platform", "it picks how the runner's host runs sandboxes", o.Policy.Sandbox.Platform, eff.Policy.Sandbox.Platform},
		{"sandbox.user", privileges, o.Policy.Sandbox.User, eff.Policy.Sandbox.User},
		{"sandbox.capabilities", privileges, o.Policy.Sandbox.Capabilities, eff.Policy.Sandbox.Capabilities},
		{"egress.mode", "it decides whether the egress rules are enforced at all, which only the organisation policy on the runner may choose", o.Policy.Egress.Mode, eff.Policy.Egress.Mode},
		{"attest.store", "it decides where the job's record is kept, which only the organisation policy on the runner may choose (a repository could send it where no reviewer looks)", o.Policy.Attest.Store, eff.Policy.Attest.Store},
	} {
		if !reflect.DeepEqual(f.org, f.repo) {
			problems = append(problems, fmt.Sprintf("%s: set by the repository policy (%s); %s: remove it from the repository policy, or ask the runner's administrators to add it", f.name, repoPaths(eff.Sources), f.why))
		}
	}
	if p := workspaceRaised(o.Policy.Sandbox.Limits, eff.Policy.Sandbox.Limits, eff.Sources); p != "" {
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

// workspaceRaised says why the effective workspace limit is refused when
// it is above the organisation's own ("0" is no limit: above any other).
func workspaceRaised(org, eff Limits, sources []Source) string {
	o, oerr := ParseSize(org.WorkspaceOrDefault())
	e, eerr := ParseSize(eff.WorkspaceOrDefault())
	if oerr != nil || eerr != nil || o == e || (o != 0 && e != 0 && e < o) || o == 0 {
		return ""
	}
	return fmt.Sprintf("sandbox.limits.workspace: the repository policy (%s) raises it to %q, above the organisation's %q: a repository may only lower it; lower it, or ask the runner's administrators to raise the organisation's", repoPaths(sources), eff.WorkspaceOrDefault(), org.WorkspaceOrDefault())
}

func repoPaths(srcs []Source) string {
	var out []string
	for _, s := range srcs {
		if s.Kind != KindOrg {
			out = append(out, s.Path)
		}
	}
	return strings.Join(out, ", ")
}

// explain walks the effective value's leaves (scalars and lists) and, for
// each, finds the sources that mention the same path.
func explain(v cue.Value, sources []Source, compiled []cue.Value) []Origin {
	var out []Origin
	var walk func(cue.Value, []cue.Selector)
	walk = func(v cue.Value, sels []cue.Selector) {
		if v.IncompleteKind() == cue.StructKind {
			it, err := v.Fields(cue.Final())
			if err != nil {
				return
			}
			for it.Next() {
				walk(it.Value(), append(append([]cue.Selector{}, sels...), it.Selector()))
			}
			return
		}
		path := cue.MakePath(sels...)
		o := Origin{Path: path.String()}
		if b, err := format.Node(v.Syntax(cue.Final(), cue.Concrete(true))); err == nil {
			o.Value = string(b)
		}
		for i, fv := range compiled {
			if !fv.Exists() {
				continue
			}
			if sv := fv.LookupPath(path); sv.Exists() {
				o.SetBy = append(o.SetBy, fmt.Sprintf("%s (%s)", sv.Pos(), sources[i].Kind))
			}
		}
		out = append(out, o)
	}
	walk(v, nil)
	return out
}

// compile parses one file and refuses what a policy must not contain.
func compile(cctx *cue.Context, s Source) (cue.Value, error) {
	if !utf8.Valid(s.Data) {
		line := 1 + strings.Count(string(s.Data[:firstInvalidUTF8(s.Data)]), "\n")
		return cue.Value{}, fmt.Errorf("%s:%d: not valid UTF-8", s.Path, line)
	}
	f, err := parser.ParseFile(s.Path, s.Data)
	if err != nil {
		return cue.Value{}, err
	}
	for imp := range f.ImportSpecs() {
		return cue.Value{}, fmt.Errorf("%s: imports %s: a policy may not import packages; write the values out", imp.Pos(), imp.Path.Value)
	}
	v := cctx.BuildFile(f)
	return v, v.Err()
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// schemaFile names the embedded schema in CUE's positions.
const schemaFile = "airlock:schema.cue"

// describe turns a CUE error into one line per value at fault. Each line
// starts with the position in a policy file (file:line:column), then the
// value's path and what is wrong with it, then what the schema allows
// there where the value is outside it (a word not in an enumeration, a
// string for a number, a field the schema lacks), then any further
// policy positions involved (the other side of a conflict). The schema's
// own positions are left out: they are airlock's, not the reader's.
func describe(err error, schema cue.Value) []string {
	var ce cueerrors.Error
	if !errors.As(err, &ce) {
		return []string{err.Error()}
	}
	type problem struct {
		path        string
		pos         []string
		msgs        []string
		conflicts   int
		values      map[string]int // how many conflicts each value is in
		disjunction bool
		outside     bool // the schema does not allow the value at all
	}
	var order []*problem
	byPath := map[string]*problem{}
	for _, e := range cueerrors.Errors(err) {
		path := strings.TrimPrefix(strings.Join(e.Path(), "."), "#Policy")
		path = strings.TrimPrefix(path, ".")
		p := byPath[path]
		if p == nil {
			p = &problem{path: path, values: map[string]int{}}
			byPath[path] = p
			order = append(order, p)
		}
		for _, pos := range cueerrors.Positions(e) {
			if at := pos.String(); !strings.HasPrefix(at, schemaFile) && !slices.Contains(p.pos, at) {
				p.pos = append(p.pos, at)
			}
		}
		format, args := e.Msg()
		msg := fmt.Sprintf(format, args...)
		switch {
		case strings.Contains(format, "empty disjunction"):
			p.disjunction, p.outside = true, true
			continue
		case strings.HasPrefix(format, "conflicting values %s and %s") && len(args) >= 2:
			p.conflicts++
			for _, a := range args[:2] {
				p.values[fmt.Sprint(a)]++
			}
			if strings.Contains(msg, "mismatched types") {
				p.outside = true
			}
		case strings.Contains(format, "field not allowed"):
			p.outside = true
		}
		if !slices.Contains(p.msgs, msg) {
			p.msgs = append(p.msgs, msg)
		}
	}
	var out []string
	for _, p := range order {
		var b strings.Builder
		if len(p.pos) > 0 {
			b.WriteString(p.pos[0] + ": ")
		}
		if p.path != "" {
			b.WriteString(p.path + ": ")
		}
		if v := commonValue(p.values, p.conflicts); p.disjunction && v != "" {
			b.WriteString(v + " is not allowed")
		} else {
			b.WriteString(strings.Join(p.msgs, "; "))
		}
		if p.outside {
			if allowed := schemaAllows(schema, p.path); allowed != "" {
				b.WriteString("; " + allowed)
			}
		}
		if len(p.pos) > 1 {
			b.WriteString(" (also " + strings.Join(p.pos[1:], ", ") + ")")
		}
		out = append(out, b.String())
	}
	if len(out) == 0 {
		out = append(out, err.Error())
	}
	return out
}

// commonValue is the value that every one of n conflicts names (the
// policy's, against each alternative of the schema's disjunction), or "".
func commonValue(values map[string]int, n int) string {
	if n == 0 {
		return ""
	}
	for v, c := range values {
		if c == n {
			return v
		}
	}
	return ""
}

// schemaAllows says what the schema (#Policy) allows at path: for a
// field the schema lacks, the fields of its parent; otherwise the value's
// constraint as CUE (an enumeration, a type, a bound). "" when the path
// is not in the schema or the constraint is too long to be a hint.
func schemaAllows(schema cue.Value, path string) string {
	if path == "" || !schema.Exists() {
		return ""
	}
	v := schema.LookupPath(cue.ParsePath(path))
	if !v.Exists() {
		sels := cue.ParsePath(path).Selectors()
		if len(sels) == 0 {
			return ""
		}
		parentPath := cue.MakePath(sels[:len(sels)-1]...)
		parent := parentPath.String()
		it, err := schema.LookupPath(parentPath).Fields(cue.Optional(true))
		if err != nil {
			return ""
		}
		var names []string
		for it.Next() {
			names = append(names, it.Selector().Unquoted())
		}
		if len(names) == 0 {
			return ""
		}
		where := "the policy"
		if parent != "" {
			where = parent
		}
		return where + " has the fields " + strings.Join(names, ", ")
	}
	if k := v.IncompleteKind(); k&(cue.StructKind|cue.ListKind) != 0 {
		return ""
	}
	text := fmt.Sprint(v)
	if len(text) > 200 || strings.Contains(text, "\n") {
		return ""
	}
	if strings.Contains(text, "*") {
		text += " (* marks the default)"
	}
	return "allowed: " + text
}

// unknownCategories refuses a trust action for a category that is
// neither built in (the schema's) nor given files in trust.globs: CUE
// accepts any name there, for categories of the policy's own, so a
// misspelt "git-hookz": "fail" would otherwise be accepted and do
// nothing.
func unknownCategories(schema, v cue.Value, t Trust) []string {
	builtin := map[string]bool{}
	var names []string
	if it, err := schema.LookupPath(cue.ParsePath("trust.runtime")).Fields(); err == nil {
		for it.Next() {
			builtin[it.Selector().Unquoted()] = true
			names = append(names, it.Selector().Unquoted())
		}
	}
	var problems []string
	for _, field := range []string{"authored", "runtime"} {
		actions := t.Authored
		if field == "runtime" {
			actions = t.Runtime
		}
		for _, name := range slices.Sorted(maps.Keys(actions)) {
			if builtin[name] || t.Globs[name] != nil {
				continue
			}
			path := cue.MakePath(cue.Str("trust"), cue.Str(field), cue.Str(name))
			msg := fmt.Sprintf("%s: no such category: the built-in ones are %s; a category of the policy's own needs its files in trust.globs.%s", path, strings.Join(names, ", "), cue.MakePath(cue.Str(name)))
			if pos := v.LookupPath(path).Pos(); pos.IsValid() {
				msg = pos.String() + ": " + msg
			}
			problems = append(problems, msg)
		}
	}
	return problems
}
