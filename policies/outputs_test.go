package policies

import (
	"context"
	"slices"
	"testing"
)

// attest.outputs names the job's artifacts; attest.subjects, its
// deprecated synonym, still counts: both, once each, outputs first; the
// organisation's and the repository's lists unify.
func TestOutputPatterns(t *testing.T) {
	for _, tc := range []struct {
		name, org, repo string
		want            []string
	}{
		{"none", "", "", []string{}},
		{"outputs", "", `attest: outputs: ["dist/*.tar.gz"]`, []string{"dist/*.tar.gz"}},
		{"subjects, deprecated", "", `attest: subjects: ["out/app"]`, []string{"out/app"}},
		{"both, once each", "", "attest: outputs: [\"a\", \"b\"]\nattest: subjects: [\"b\", \"c\"]", []string{"a", "b", "c"}},
		{"the organisation's and the repository's unify", `attest: outputs: ["a", ...]`, `attest: outputs: ["a", "b"]`, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srcs []Source
			if tc.org != "" {
				srcs = append(srcs, Source{Kind: KindOrg, Path: "org.cue", Data: []byte(tc.org)})
			}
			if tc.repo != "" {
				srcs = append(srcs, repo(tc.repo))
			}
			eff, err := Load(context.Background(), srcs)
			if err != nil {
				t.Fatal(err)
			}
			if got := eff.Policy.Attest.OutputPatterns(); !slices.Equal(got, tc.want) {
				t.Errorf("outputs %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := Load(context.Background(), []Source{repo(`attest: outputs: "dist"`)}); err == nil {
		t.Error("a string for the list was accepted")
	}
}
