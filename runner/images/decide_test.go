package images

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/policies"
)

// References are read the way Docker reads them.
func TestParseRef(t *testing.T) {
	const dg = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		in, name, tag, digest, full string
	}{
		{"node:20", "docker.io/library/node", "20", "", "docker.io/library/node:20"},
		{"node", "docker.io/library/node", "latest", "", "docker.io/library/node:latest"},
		{"docker://ghcr.io/org/tool:v1", "ghcr.io/org/tool", "v1", "", "ghcr.io/org/tool:v1"},
		{"index.docker.io/library/postgres:16", "docker.io/library/postgres", "16", "", "docker.io/library/postgres:16"},
		{"127.0.0.1:5000/team/app@" + dg, "127.0.0.1:5000/team/app", "", dg, "127.0.0.1:5000/team/app@" + dg},
		{"redis:7@" + dg, "docker.io/library/redis", "", dg, "docker.io/library/redis@" + dg},
	} {
		r, err := ParseRef(tc.in)
		if err != nil || r.Name() != tc.name || r.Tag() != tc.tag || r.Digest() != tc.digest || r.String() != tc.full {
			t.Errorf("%q: %q %q %q %q %v", tc.in, r.Name(), r.Tag(), r.Digest(), r, err)
		}
	}
	for _, bad := range []string{"", "docker://", "UPPER/case", "a b", "x@sha256:short"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("%q: parsed", bad)
		}
	}
}

func TestNameMatches(t *testing.T) {
	for _, tc := range []struct {
		glob, name string
		want       bool
	}{
		{"docker.io/library/*", "docker.io/library/node", true},
		{"docker.io/library/*", "docker.io/bitnami/node", false},
		{"docker.io/library/*", "docker.io/library/a/b", false},
		{"ghcr.io/my-org/**", "ghcr.io/my-org/tool", true},
		{"ghcr.io/my-org/**", "ghcr.io/my-org/team/tool", true},
		{"ghcr.io/my-org/**", "ghcr.io/my-org", false},
		{"ghcr.io/my-org/**", "ghcr.io/my-org-evil/tool", false},
		{"*.example.com/app", "registry.example.com/app", true},
		{"127.0.0.1:*/team/*", "127.0.0.1:5000/team/app", true},
		{"docker.io/library/node", "docker.io/library/node", true},
		{"[", "docker.io/library/node", false}, // a bad pattern matches nothing
	} {
		if got := NameMatches(tc.glob, tc.name); got != tc.want {
			t.Errorf("%q ~ %q: %v", tc.glob, tc.name, got)
		}
	}
}

// The policy's decision for each kind of job and reference: what is
// allowed, by which rule, and what a refusal says would allow it.
func TestDecide(t *testing.T) {
	const dg = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	section := &policies.Images{
		Allow: []policies.ImageRule{
			{Name: "docker.io/library/*", Digest: "agents", Mode: "enforce"},
			{Name: "ghcr.io/my-org/**", Digest: "always", Mode: "enforce", SignedBy: []string{"/etc/airlock/org.pub"}},
			{Name: "quay.io/lenient/*", Digest: "always", Mode: "warn"},
		},
		Mirrors:  map[string]string{"docker.io": "mirror.internal:5000"},
		Insecure: []string{"mirror.internal:5000"},
	}
	for _, tc := range []struct {
		name    string
		section *policies.Images
		ref     string
		agent   bool
		allowed bool
		rule    string // in the rule
		says    string // in the refusal, or in a warning
	}{
		{"no section, human, any registry", nil, "10.0.0.5:5000/internal/app:1", false, true, "a human's job may pull from any registry", ""},
		{"no section, agent, public", nil, "node:20", true, true, "an agent's job may pull from the public registries", ""},
		{"no section, agent, internal registry", nil, "10.0.0.5:5000/internal/app:1", true, false, "an agent's job may pull only from docker.io", `add {name: "10.0.0.5:5000/internal/app"} to images.allow`},
		{"no section, agent, name that carries data", nil, "c2VjcmV0.evil.example/x:1", true, false, "only from", "is not a public registry"},
		{"section, human, tag allowed", section, "node:20", false, true, "images.allow[0] (docker.io/library/*)", ""},
		{"section, agent, tag where a digest is required", section, "node:20", true, false, "images.allow[0]", "pin it: write docker.io/library/node@sha256:<digest>"},
		{"section, agent, digest", section, "node" + dg, true, true, "images.allow[0]", ""},
		{"section, human, always digest", section, "ghcr.io/my-org/tool:v1", false, false, "images.allow[1]", "requires a digest"},
		{"section, warn rule lets a tag through", section, "quay.io/lenient/x:1", true, true, "images.allow[2]", "mode warn: pulled all the same"},
		{"section, unlisted registry", section, "gcr.io/other/x" + dg, false, false, "images.allow", `no rule allows gcr.io/other/x (deny by default) (images.allow); to allow it: add {name: "gcr.io/other/x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := mustRef(t, tc.ref)
			d := Decide(ref, tc.section, tc.agent)
			if d.Allowed != tc.allowed || !strings.Contains(d.Rule, tc.rule) || d.CheckAddresses != tc.agent {
				t.Fatalf("%+v", d)
			}
			if tc.allowed {
				if tc.says != "" && !strings.Contains(strings.Join(d.Warnings, "; "), tc.says) {
					t.Errorf("warnings %q, want %q", d.Warnings, tc.says)
				}
				return
			}
			err := d.Error(ref)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), tc.ref) || strings.Contains(err.Error(), "\n") {
				t.Errorf("refusal %q, want one line naming the image and saying %q", err, tc.says)
			}
		})
	}
	d := Decide(mustRef(t, "ghcr.io/my-org/tool"+dg), section, true)
	if !d.Allowed || len(d.Signers) != 1 || d.Warn {
		t.Errorf("signed rule: %+v", d)
	}
	if d := Decide(mustRef(t, "node"+dg), section, false); d.Mirror != "mirror.internal:5000" {
		t.Errorf("mirror: %+v", d)
	}
}
