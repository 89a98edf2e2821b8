package policies

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestImageRoot(t *testing.T) {
	images := map[string]string{
		"node:20":                      "/srv/images/node20",
		"postgres":                     "/srv/images/postgres",
		"ghcr.io/acme/tool:1":          "/srv/images/tool",
		"localhost:5000/build:2":       "/srv/images/build",
		"alpine@sha256:0123456789abcd": "/srv/images/alpine-pinned",
	}
	for _, tc := range []struct {
		ref, want string
	}{
		{"node:20", "/srv/images/node20"},
		{"docker.io/library/node:20", "/srv/images/node20"},
		{"library/node:20", "/srv/images/node20"},
		{"docker://node:20", "/srv/images/node20"},
		{"node:18", ""},
		{"node", ""},
		{"postgres:latest", "/srv/images/postgres"},
		{"docker.io/postgres", "/srv/images/postgres"},
		{"index.docker.io/library/postgres:latest", "/srv/images/postgres"},
		{"GHCR.IO/acme/tool:1", "/srv/images/tool"},
		{"ghcr.io/acme/tool:2", ""},
		{"acme/tool:1", ""},
		{"localhost:5000/build:2", "/srv/images/build"},
		{"build:2", ""},
		{"alpine@sha256:0123456789abcd", "/srv/images/alpine-pinned"},
		{"alpine", ""},
		{"", ""},
		{"node:20 ", ""},
	} {
		got, ok := ImageRoot(images, tc.ref)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("ImageRoot(%q) = %q, %v; want %q", tc.ref, got, ok, tc.want)
		}
	}
}

// TestSigstoreIdentitySchema loads organisation policies whose image
// rules name Sigstore identities, and checks what the schema refuses.
func TestSigstoreIdentitySchema(t *testing.T) {
	const rule = `images: allow: [{name: "ghcr.io/acme/**", signedByIdentity: [%s]}]` + "\n"
	for _, tc := range []struct {
		name, identity string
		want           SigstoreIdentity
		wantErr        []string
	}{
		{
			name:     "subject",
			identity: `{issuer: "https://token.actions.githubusercontent.com", subject: "https://github.com/acme/app/.github/workflows/release.yml@refs/heads/main", trustedRoot: "/etc/airlock/trusted_root.json"}`,
			want:     SigstoreIdentity{Issuer: "https://token.actions.githubusercontent.com", Subject: "https://github.com/acme/app/.github/workflows/release.yml@refs/heads/main", TrustedRoot: "/etc/airlock/trusted_root.json"},
		},
		{
			name:     "regexp",
			identity: `{issuer: "https://accounts.google.com", subjectRegexp: ".*@acme\\.com", trustedRoot: "/etc/airlock/trusted_root.json"}`,
			want:     SigstoreIdentity{Issuer: "https://accounts.google.com", SubjectRegexp: `.*@acme\.com`, TrustedRoot: "/etc/airlock/trusted_root.json"},
		},
		{
			name:     "neither subject nor regexp",
			identity: `{issuer: "https://i.test", trustedRoot: "/etc/airlock/trusted_root.json"}`,
			wantErr:  []string{"images.allow.0.signedByIdentity.0: give subject", "or subjectRegexp", "one of the two"},
		},
		{
			name:     "both subject and regexp",
			identity: `{issuer: "https://i.test", subject: "a", subjectRegexp: "a", trustedRoot: "/etc/airlock/trusted_root.json"}`,
			wantErr:  []string{"images.allow.0.signedByIdentity.0: give subject", "one of the two"},
		},
		{
			name:     "a regexp that is not RE2",
			identity: `{issuer: "https://i.test", subjectRegexp: "(?<=x)a", trustedRoot: "/etc/airlock/trusted_root.json"}`,
			wantErr:  []string{"images.allow.0.signedByIdentity.0.subjectRegexp: error parsing regexp"},
		},
		{
			name:     "a KMS key",
			identity: `], signedBy: ["awskms:///arn:aws:kms:eu-west-1:1:key/abc"`,
			wantErr:  []string{"images.allow.0.signedBy.0", "is a KMS key", "cosign public-key --key awskms:///arn:aws:kms:eu-west-1:1:key/abc"},
		},
		{
			name:     "relative trusted root",
			identity: `{issuer: "https://i.test", subject: "a", trustedRoot: "trusted_root.json"}`,
			wantErr:  []string{"images.allow.0.signedByIdentity.0.trustedRoot"},
		},
		{
			name:     "no trusted root",
			identity: `{issuer: "https://i.test", subject: "a"}`,
			wantErr:  []string{"trustedRoot"},
		},
		{
			name:     "an unknown field",
			identity: `{issuer: "https://i.test", subject: "a", trustedRoot: "/r.json", sans: ["a"]}`,
			wantErr:  []string{"sans", "field not allowed"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := Source{Kind: KindOrg, Path: "/etc/airlock/org.cue", Data: []byte(fmt.Sprintf(rule, tc.identity))}
			eff, err := Load(context.Background(), []Source{src})
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("loaded %+v, want an error", eff.Policy.Images)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error lacks %q:\n%v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := eff.Policy.Images.Allow[0].SignedByIdentity
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("signedByIdentity = %+v, want %+v", got, tc.want)
			}
		})
	}
}
