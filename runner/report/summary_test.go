package report

import (
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/runner/credentials"
)

// The summary says which credentials the sandbox never saw and where
// each went, names and counts only; a job without any says nothing.
func TestWriteCredentials(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  *credentials.Record
		want []string
	}{
		{"none", nil, nil},
		{"nothing withheld", &credentials.Record{Withheld: []credentials.Withheld{}, Uses: []credentials.Use{}}, nil},
		{"withheld and used", &credentials.Record{
			Withheld: []credentials.Withheld{{Name: "GitHub token", Variables: []string{"GITHUB_TOKEN", ".git/config"}}},
			Uses: []credentials.Use{
				{Credential: "GitHub token", Host: "github.com", Route: "git", Injected: 3},
				{Credential: "GitHub token", Host: "github.com", Route: "git", Refused: 1, Rule: "credentials.gitPush"},
				{Credential: "GitHub token", Host: "evil.example\x1b[2J", Elsewhere: 2},
			},
		}, []string{
			"credentials withheld from the sandbox: GitHub token (GITHUB_TOKEN, .git/config)\n",
			"  GitHub token to github.com (git): injected 3\n",
			"  GitHub token to github.com (git): refused 1 [credentials.gitPush]\n",
			"  GitHub token to evil.example?[2J: sent elsewhere as its placeholder 2\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			WriteCredentials(&b, tc.rec)
			if got, want := b.String(), strings.Join(tc.want, ""); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// The platform line says which platform ran and why, and each start
// that failed, on lines a job's text cannot break.
func TestWritePlatform(t *testing.T) {
	for _, tc := range []struct {
		name     string
		platform string
		reason   string
		attempts []attest.PlatformAttempt
		want     string
	}{
		{"no sandbox", "", "", nil, ""},
		{"no kvm", "systrap", "kvm unusable: open /dev/kvm: no such file or directory", []attest.PlatformAttempt{{Platform: "systrap"}},
			"platform: systrap (kvm unusable: open /dev/kvm: no such file or directory)\n"},
		{"fallback", "systrap", "the sandbox did not boot on kvm (x), so it was created again on systrap",
			[]attest.PlatformAttempt{{Platform: "kvm", Error: "cannot create sandbox\x1b[2J"}, {Platform: "systrap"}},
			"platform: systrap (the sandbox did not boot on kvm (x), so it was created again on systrap)\n  start on kvm failed: cannot create sandbox?[2J\n"},
	} {
		var b strings.Builder
		WritePlatform(&b, tc.platform, tc.reason, tc.attempts)
		if b.String() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, b.String(), tc.want)
		}
	}
}
