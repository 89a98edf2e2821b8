package suggest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/parser"
)

// merge appends the rules to the egress.allow list of the repository's
// policy file, or writes a new file when there is none. CUE's parser
// finds the list and its formatter prints the result, so the file's
// other contents and comments stay as they were. A list in CUE is one
// value: the rules go into the list the file has, not into a second one.
func merge(existing []byte, path string, rs []Rule, runs int) ([]byte, error) {
	if path == "" {
		path = "airlock.cue"
	}
	var elems bytes.Buffer
	for _, r := range rs {
		writeRule(&elems, r)
	}
	var src []byte
	switch {
	case len(existing) == 0:
		src = fmt.Appendf(nil, "// The repository's airlock policy, suggested by `airlock policy suggest`\n// from %d attested run(s): review each rule before committing it.\npackage airlock\n\negress: allow: [\n%s]\n", runs, elems.Bytes())
	case len(rs) == 0:
		src = existing
	default:
		f, err := parser.ParseFile(path, existing, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		list, err := allowList(f, path)
		if err != nil {
			return nil, err
		}
		if list == nil {
			src = fmt.Appendf(bytes.Clone(existing), "\negress: allow: [\n%s]\n", elems.Bytes())
			break
		}
		at := list.Rbrack.Offset()
		insert := "\n" + elems.String()
		if n := len(list.Elts); n > 0 && !bytes.Contains(existing[list.Elts[n-1].End().Offset():at], []byte(",")) {
			insert = "," + insert
		}
		src = append(append(bytes.Clone(existing[:at]), insert...), existing[at:]...)
	}
	out, err := format.Source(src)
	if err != nil {
		return nil, fmt.Errorf("format %s with the suggested rules: %w", path, err)
	}
	return out, nil
}

// allowList finds the egress.allow list literal of the file, in any of
// CUE's spellings (egress: allow: [...], egress: {allow: [...]}); nil when
// the file has none. An allow that is not a list literal (a reference, a
// comprehension, a disjunction) cannot take rules safely.
func allowList(f *ast.File, path string) (*ast.ListLit, error) {
	for _, d := range f.Decls {
		eg, ok := d.(*ast.Field)
		if !ok || labelName(eg.Label) != "egress" {
			continue
		}
		st, ok := eg.Value.(*ast.StructLit)
		if !ok {
			continue
		}
		for _, e := range st.Elts {
			al, ok := e.(*ast.Field)
			if !ok || labelName(al.Label) != "allow" {
				continue
			}
			list, ok := al.Value.(*ast.ListLit)
			if !ok {
				return nil, fmt.Errorf("%s: egress.allow is not a plain list, so the suggested rules cannot be added to it: add them by hand", path)
			}
			return list, nil
		}
	}
	return nil, nil
}

func labelName(l ast.Label) string {
	switch x := l.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.BasicLit:
		if s, err := strconv.Unquote(x.Value); err == nil {
			return s
		}
	}
	return ""
}

// writeRule writes a rule as a CUE list element with its evidence as
// comments above it; ports are left out when they are the default [443].
// Every string is quoted by CUE's own quoting, and the comments were
// made safe (Rule.comment).
func writeRule(w *bytes.Buffer, r Rule) {
	for _, l := range r.comment() {
		w.WriteString(l + "\n")
	}
	fmt.Fprintf(w, "{host: %s", literal.String.Quote(r.Host))
	if len(r.Ports) != 1 || r.Ports[0] != 443 {
		ports := make([]string, len(r.Ports))
		for i, p := range r.Ports {
			ports[i] = strconv.Itoa(p)
		}
		fmt.Fprintf(w, ", ports: [%s]", strings.Join(ports, ", "))
	}
	if len(r.Methods) > 0 {
		fmt.Fprintf(w, ", methods: %s", quoted(r.Methods))
	}
	if len(r.PathPrefixes) > 0 {
		fmt.Fprintf(w, ", pathPrefixes: %s", quoted(r.PathPrefixes))
	}
	w.WriteString("},\n")
}

func quoted(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = literal.String.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
