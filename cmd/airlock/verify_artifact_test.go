package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/policies"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/egress/rules"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
	"github.com/airlock-ci/airlock/runner/report"
)

// finishedJob writes a job's run attestation and provenance into dir as
// a door does at its end (report.Finish), for an agent's job (refused
// egress) or a human's, whose one upload was zip.
func finishedJob(t *testing.T, dir, key, id string, agent bool, zip []byte) {
	t.Helper()
	sum := sha256.Sum256(zip)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	res := runner.Result{
		Job: "build", Passed: true, Start: t0, End: t0.Add(time.Minute),
		Sandbox: runner.SandboxInfo{ID: id, Platform: "systrap", RootFS: "host"},
		Policy:  &runner.PolicyInfo{Digest: strings.Repeat("b", 64), Agent: &policies.Detection{Agent: agent, Reason: "as the test says"}},
		Egress:  &egress.Report{Mode: "enforce", Uploads: []uploads.Upload{{Name: "dist", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(zip)), Status: uploads.Finalized}}},
	}
	if agent {
		res.Egress.Decisions = []rules.Decision{{Time: t0, Protocol: rules.ProtoProxyConnect, Name: "evil.test", Port: 443, Decision: rules.Denied, Rule: "default (deny)"}}
	}
	c := &runner.AttestConfig{Dir: dir, Key: key, Meta: attest.Meta{Repository: "https://github.com/acme/app", HeadSHA: strings.Repeat("c", 40), PullRequest: 7, Event: "pull_request"}}
	if att := report.Finish(context.Background(), res, c, nil, io.Discard); att.Provenance == nil || att.Provenance.Bundle == "" {
		t.Fatalf("no provenance: %+v", att)
	}
}

// airlock verify --artifact: a file checked against the provenance of
// the job that made it (a bundle, or a directory of jobs'), what that
// job did printed or as JSON, and the compliance policy of
// docs/provenance.md over its run attestation; exit 1 when not verified,
// 64 for flags that do not go together.
func TestVerifyArtifactCommand(t *testing.T) {
	dir, keys := t.TempDir(), t.TempDir()
	prefix := filepath.Join(keys, "k")
	if err := attest.WriteKeyPair(prefix, nil); err != nil {
		t.Fatal(err)
	}
	human, agent := []byte("PK\x03\x04 a human's"), []byte("PK\x03\x04 an agent's")
	finishedJob(t, dir, prefix+".key", "job-aa", false, human)
	finishedJob(t, dir, prefix+".key", "job-bb", true, agent)
	file := func(b []byte) string {
		p := filepath.Join(t.TempDir(), "dist.zip")
		os.WriteFile(p, b, 0o644)
		return p
	}
	policy := "../../testdata/compliance/artifacts.cue"
	pub := prefix + ".pub"
	otherPub := filepath.Join(keys, "other.pub")
	if err := attest.WriteKeyPair(filepath.Join(keys, "other"), nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a human's artifact, by directory", []string{"--artifact", file(human), dir}, 0, "agent: no (as the test says)"},
		{"an agent's, by bundle", []string{"--artifact", file(agent), filepath.Join(dir, "job-bb.provenance.sigstore.json")}, 0, "agent: YES"},
		{"as JSON", []string{"--json", "--artifact", file(human), dir}, 0, `"name": "dist.zip"`},
		{"a tampered artifact", []string{"--artifact", file(append(human, '!')), dir}, 1, "NOT VERIFIED: sha256 "},
		{"compliance: a human's", []string{"--policy", policy, "--artifact", file(human), dir}, 0, "run attestation: job-aa.sigstore.json verified"},
		{"compliance: an agent's refused egress", []string{"--policy", policy, "--artifact", file(agent), dir}, 1, "compliance: predicate.egress.summary.0.denied"},
		{"--html is for a run attestation", []string{"--html", "r.html", "--artifact", file(human), dir}, exitUsage, "not with --artifact"},
		{"--repository is for an artifact", []string{"--repository", "https://github.com/acme/app", dir}, exitUsage, "with --artifact"},
		{"bound to its repository and commit", []string{"--repository", "https://github.com/acme/app", "--commit", strings.Repeat("c", 40), "--artifact", file(human), dir}, 0, "agent: no"},
		{"another repository's", []string{"--repository", "https://github.com/acme/fork", "--artifact", file(human), dir}, 1, `(provenance ` + filepath.Join(dir, "job-aa.provenance.sigstore.json") + `: the provenance is of repository "https://github.com/acme/app", not "https://github.com/acme/fork" (--repository)`},
		{"another commit's", []string{"--commit", strings.Repeat("d", 40), "--artifact", file(human), dir}, 1, "(--commit): a job of another commit made it"},
		{"another run's", []string{"--run", "https://github.com/acme/app/actions/runs/1", "--artifact", file(human), dir}, 1, `not within "https://github.com/acme/app/actions/runs/1" (--run)`},
		{"the wrong key", []string{"--artifact", file(human), filepath.Join(dir, "job-aa.provenance.sigstore.json")}, 1, "check that --key is the public key"},
		{"a provenance as a run attestation", []string{filepath.Join(dir, "job-aa.provenance.sigstore.json")}, 1, "verify --artifact"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			key := pub
			if tc.name == "the wrong key" {
				key = otherPub
			}
			code := execute(append([]string{"verify", "--key", key}, tc.args...), &out, &errb)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
				t.Fatalf("exit %d (want %d), want %q in:\n%s%s", code, tc.code, tc.want, out.String(), errb.String())
			}
			if strings.Contains(strings.Join(tc.args, " "), "--json") && !json.Valid(out.Bytes()) {
				t.Errorf("not JSON: %s", out.String())
			}
		})
	}
}

// airlock run under a policy with attest.outputs: the file the job
// leaves is the subject of a signed provenance next to the run
// attestation, and verify --artifact checks it against that directory.
func TestVerifyArtifactOfARun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	keys, att := t.TempDir(), t.TempDir()
	if err := attest.WriteKeyPair(filepath.Join(keys, "k"), nil); err != nil {
		t.Fatal(err)
	}
	ws := workspace(t)
	org := orgPolicy(t, `attest: outputs: ["dist/*.txt"]`+"\n")
	var out, errb bytes.Buffer
	code := execute([]string{"run", "-w", ws, "--state-dir", stateDir(t), "--org", org, "--attest-dir", att, "--attest-key", filepath.Join(keys, "k.key"),
		"--", "sh", "-c", "mkdir -p dist && echo built > dist/app.txt"}, &out, &errb)
	provs, _ := filepath.Glob(filepath.Join(att, "*.provenance.sigstore.json"))
	if code != 0 || len(provs) != 1 || !strings.Contains(errb.String(), "provenance: "+provs[0]+" (signed, 1 artifact(s))") {
		t.Fatalf("run: exit %d, provenance %v:\n%s", code, provs, errb.String())
	}
	out.Reset()
	errb.Reset()
	code = execute([]string{"verify", "--key", filepath.Join(keys, "k.pub"), "--artifact", filepath.Join(ws, "dist", "app.txt"), att}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), `is "dist/app.txt" of `+filepath.Base(provs[0])) || !strings.Contains(out.String(), "verified, and its statement is the provenance's byproduct") {
		t.Fatalf("verify: exit %d:\n%s%s", code, out.String(), errb.String())
	}
}
