package storeref

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Ref
		err  string // in the error; empty: no error
	}{
		{in: "oci://ghcr.io/my-org/attestations", want: Ref{Kind: OCI, Registry: "ghcr.io", Repository: "my-org/attestations", Required: true}},
		{in: "oci://127.0.0.1:5000/airlock", want: Ref{Kind: OCI, Registry: "127.0.0.1:5000", Repository: "airlock", Required: true}},
		{in: "oci://registry.internal:5000/a/b?required=false&insecure=true", want: Ref{Kind: OCI, Registry: "registry.internal:5000", Repository: "a/b", Insecure: true}},
		{in: "file:///mnt/attestations", want: Ref{Kind: File, Path: "/mnt/attestations", Required: true}},
		{in: "file://localhost/mnt/a?required=false", want: Ref{Kind: File, Path: "/mnt/a"}},
		{in: "", err: "empty"},
		{in: " oci://r/x", err: "spaces"},
		{in: "oci://r/x y", err: "space or a control"},
		{in: "s3://bucket/x", err: `unknown scheme "s3"`},
		{in: "ghcr.io/org/repo", err: "no scheme"},
		{in: "oci://ghcr.io", err: "no repository"},
		{in: "oci:///repo", err: "no registry"},
		{in: "oci://ghcr.io/Org/Repo", err: "not a valid OCI repository name"},
		{in: "oci://user:pass@ghcr.io/org/repo", err: "holds credentials"},
		{in: "oci://ghcr.io/org/repo?required=maybe", err: "not true or false"},
		{in: "oci://ghcr.io/org/repo?retries=3", err: `unknown option "retries"`},
		{in: "oci://ghcr.io/org/repo?required=true&required=false", err: "given 2 times"},
		{in: "oci://ghcr.io/org/repo#x", err: "fragment"},
		{in: "oci://ghcr.io/org/%2e%2e", err: "escaped"},
		{in: "file://host/mnt/a", err: "on this host"},
		{in: "file:relative/path", err: "absolute"},
		{in: "file:///mnt/../etc", err: "clean"},
		{in: "file:///", err: "clean"},
		{in: "file:///mnt/a?insecure=true", err: "for OCI"},
		{in: "oci://r/" + strings.Repeat("a", MaxLen), err: "longer than"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.err != "" {
				if err != nil && strings.Contains(err.Error(), "pass@") {
					t.Fatalf("the error prints the credentials: %v", err)
				}
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "oci://REGISTRY/REPOSITORY") {
					t.Fatalf("Parse(%q) = %+v, %v; want an error with %q and the form", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			again, err := Parse(got.String())
			if err != nil || again != got {
				t.Fatalf("Parse(String()) = %+v, %v; want %+v", again, err, got)
			}
		})
	}
}

func TestParseListMerges(t *testing.T) {
	refs, err := ParseList("oci://r.example/a?required=false, file:///mnt/x\noci://r.example/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || !refs[0].Required || refs[1].Path != "/mnt/x" {
		t.Fatalf("got %+v; want two stores, the registry's required (one of its two names is)", refs)
	}
	if _, err := ParseList("oci://r.example/a nonsense"); err == nil {
		t.Fatal("a list with a bad name parsed")
	}
}

// Any name: Parse never panics; a name it takes prints back as a name
// it takes the same way; a refusal never prints what stands between
// :// and @ (credentials someone put in a name).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"oci://ghcr.io/org/repo", "file:///mnt/a?required=false", "oci://u:p@r/x", "oci://127.0.0.1:5000/a/b?insecure=true&required=false", "file://host/x", "oci://r/%2e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			if i, j := strings.Index(s, "://"), strings.LastIndex(s, "@"); i >= 0 && j > i+3 && strings.Contains(err.Error(), s[i+3:j]) && len(s[i+3:j]) > 3 && !strings.Contains(Form, s[i+3:j]) {
				t.Fatalf("the refusal of %q prints %q: %v", s, s[i+3:j], err)
			}
			return
		}
		again, err := Parse(r.String())
		if err != nil || again != r {
			t.Fatalf("Parse(%q) = %+v; its String %q parses to %+v, %v", s, r, r.String(), again, err)
		}
	})
}
