package policies

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteExplain writes each value of the effective policy with the files
// that set it (`airlock policy eval --explain`).
func (e *Effective) WriteExplain(w io.Writer) {
	for _, x := range e.Explain {
		by := "schema default"
		if len(x.SetBy) > 0 {
			by = strings.Join(x.SetBy, "; ")
		}
		fmt.Fprintf(w, "%s: %s\t# %s\n", x.Path, x.Value, by)
	}
}

// WriteCUE writes the effective policy as CUE, its digest and sources in
// comments first, and a comment when the head changes the repository's
// policy (change; nil: not compared).
func (e *Effective) WriteCUE(w io.Writer, change *PolicyChange) {
	fmt.Fprintf(w, "// effective policy %s\n", e.Digest)
	for _, s := range e.Sources {
		at := ""
		if s.Commit != "" {
			at = "@" + s.Commit
		}
		fmt.Fprintf(w, "// source %s %s%s sha256:%s\n", s.Kind, s.Path, at, s.SHA256)
	}
	if change != nil && change.Changed {
		fmt.Fprintf(w, "// the head commit changes %s: that change does not apply to this run\n", RepoPolicyPath)
	}
	fmt.Fprint(w, e.CUE)
}

// VetFiles vets each file (VetFile), printing "ok FILE" to ok or
// "FILE: why" to bad, and returns how many failed (`airlock policy vet`).
func VetFiles(ctx context.Context, paths []string, org []Source, ok, bad io.Writer) int {
	n := 0
	for _, f := range paths {
		if err := VetFile(ctx, f, org); err != nil {
			n++
			fmt.Fprintf(bad, "%s: %v\n", f, err)
			continue
		}
		fmt.Fprintf(ok, "ok %s\n", f)
	}
	return n
}

// VetFile checks a repository policy file against the schema and, with
// org, unified with the organisation's sources (`airlock policy vet`).
func VetFile(ctx context.Context, path string, org []Source) error {
	srcs, err := ReadFiles([]string{path}, KindRepo)
	if err != nil {
		return err
	}
	_, err = Load(ctx, append(slices.Clone(org), srcs...))
	return err
}
