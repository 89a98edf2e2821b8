package report

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/images"
)

// hexOf is a sha256 digest's hex of repeated s (two characters).
func hexOf(s string) string { return strings.Repeat(s, 32) }

// TestPulledImagesInProvenance: a job whose images were pulled (its
// container's, its services', its Docker actions'; runner.Result.Images)
// has each in the provenance's resolvedDependencies once, by the digest
// of the image manifest that ran, with the digest its reference resolved
// to (an index's), the platform, the rule, and the key id of the
// signature that verified it; a Docker action's descriptor (as the hook
// records it) gets the signature and is not repeated; and the statement
// still validates with the in-toto attestation framework's bindings.
func TestPulledImagesInProvenance(t *testing.T) {
	const (
		jobRef    = "ghcr.io/acme/build:1"
		dbRef     = "postgres:16"
		cacheRef  = "redis@sha256:" + "7777777777777777777777777777777777777777777777777777777777777777"
		actionRef = "ghcr.io/acme/lint:2"
		keyA      = "sha256:" + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		issuer    = "https://token.actions.githubusercontent.com"
		workflow  = "https://github.com/acme/db/.github/workflows/release.yml@refs/tags/v16"
	)
	rule := "images.allow[0] (ghcr.io/acme/**)"
	pulled := []images.Resolved{
		// The job's container: a multi-platform image, signed at its index.
		{Ref: jobRef, Digest: "sha256:" + hexOf("10"), ImageDigest: "sha256:" + hexOf("11"), Platform: "linux/amd64", Rule: rule,
			Signature: &images.Signature{Format: images.FormatCosignLegacy, KeyID: keyA, Ref: "ghcr.io/acme/build:sha256-" + hexOf("10") + ".sig"}, Pulled: true},
		// A service, signed keyless in the bundle format.
		{Ref: dbRef, Digest: "sha256:" + hexOf("20"), ImageDigest: "sha256:" + hexOf("21"), Platform: "linux/amd64", Rule: "images.allow[1] (docker.io/library/*)",
			Signature: &images.Signature{Format: images.FormatSigstoreBundle, Identity: &images.Identity{Subject: workflow, Issuer: issuer}}},
		// A service by digest, unsigned under a rule in mode warn.
		{Ref: cacheRef, Digest: "sha256:" + hexOf("77"), ImageDigest: "sha256:" + hexOf("77"), Platform: "linux/amd64", Rule: "images.allow[2] (docker.io/library/redis)",
			Warnings: []string{"images.allow[2] (docker.io/library/redis): image not signed as the policy requires: no signature found (mode warn: pulled all the same)"}},
		// A Docker action, pulled by two steps: one image.
		{Ref: actionRef, Digest: "sha256:" + hexOf("30"), ImageDigest: "sha256:" + hexOf("31"), Platform: "linux/amd64", Rule: rule,
			Signature: &images.Signature{Format: images.FormatSigstoreBundle, KeyID: keyA}},
		{Ref: actionRef, Digest: "sha256:" + hexOf("30"), ImageDigest: "sha256:" + hexOf("31"), Platform: "linux/amd64", Rule: rule,
			Signature: &images.Signature{Format: images.FormatSigstoreBundle, KeyID: keyA}},
		// A service on the job container's image: the same bytes.
		{Ref: jobRef, Digest: "sha256:" + hexOf("10"), ImageDigest: "sha256:" + hexOf("11"), Platform: "linux/amd64", Rule: rule,
			Signature: &images.Signature{Format: images.FormatCosignLegacy, KeyID: keyA}},
	}
	// The Docker action as runner/hook's recordImage records it.
	action := attest.Descriptor{Name: "docker://" + actionRef, Digest: map[string]string{"sha256": hexOf("31")}, Annotations: map[string]string{
		"reference": "docker://" + actionRef, "digest": "sha256:" + hexOf("30"), "platform": "linux/amd64",
		"digest-note": "kept as the hook wrote it",
	}}
	actionAnnotations := maps.Clone(action.Annotations)
	checkout := attest.Descriptor{Name: "actions/checkout@v4", URI: "git+https://github.com/actions/checkout@v4", Digest: map[string]string{attest.TreeDigestAlg: hexOf("44")}}

	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "dist"), 0o755)
	os.WriteFile(filepath.Join(ws, "dist", "app.tar.gz"), []byte("the app"), 0o644)
	res := jobResult("job-img", true)
	res.Sandbox.RootFS = "/var/lib/airlock/images/roots/" + hexOf("11") + "/rootfs"
	res.Images = pulled
	dir := t.TempDir()
	c := &runner.AttestConfig{
		Dir: dir, Outputs: []string{"dist/app.tar.gz"}, Repository: ws, Actions: []attest.Descriptor{checkout, action},
		Meta: attest.Meta{AirlockVersion: "v0.9.0", Repository: "https://github.com/acme/app", HeadSHA: headSHA, BaseSHA: strings.Repeat("1", 40),
			PullRequest: 7, Author: "Copilot", Event: "pull_request", ContainerImage: "docker://" + jobRef},
	}
	att := Finish(context.Background(), res, c, nil, io.Discard)
	if att.Provenance == nil || att.Provenance.Unsigned == "" {
		t.Fatalf("provenance %+v", att.Provenance)
	}
	stmt, err := os.ReadFile(att.Provenance.Unsigned)
	if err != nil {
		t.Fatal(err)
	}

	// The in-toto attestation framework reads and validates it.
	var st intoto.Statement
	if err := protojson.Unmarshal(stmt, &st); err != nil {
		t.Fatalf("in-toto statement: %v", err)
	}
	if err := st.Validate(); err != nil {
		t.Fatalf("in-toto statement: %v", err)
	}
	pred, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		t.Fatal(err)
	}
	var sp slsa.Provenance
	if err := protojson.Unmarshal(pred, &sp); err != nil {
		t.Fatalf("SLSA provenance v1: %v", err)
	}
	if err := sp.Validate(); err != nil {
		t.Fatalf("SLSA provenance v1: %v", err)
	}
	for _, d := range sp.GetBuildDefinition().GetResolvedDependencies() {
		if err := d.Validate(); err != nil {
			t.Errorf("dependency %s: %v", d.GetName(), err)
		}
	}

	var got struct {
		Predicate attest.Provenance `json:"predicate"`
	}
	if err := json.Unmarshal(stmt, &got); err != nil {
		t.Fatal(err)
	}
	deps := got.Predicate.BuildDefinition.ResolvedDependencies
	var names []string
	byName := map[string]attest.Descriptor{}
	for _, d := range deps {
		names = append(names, d.Name)
		if _, dup := byName[d.Name]; dup {
			t.Errorf("%s is listed twice", d.Name)
		}
		byName[d.Name] = d
	}
	want := []string{"source", "rootfs", "containerImage", "actions/checkout@v4", "docker://" + actionRef, "docker://" + dbRef, "docker://" + cacheRef}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("resolved dependencies %q, want %q", names, want)
	}

	for _, tc := range []struct {
		name   string
		digest string
		ann    map[string]string
		absent []string
	}{
		{"containerImage", hexOf("11"), map[string]string{
			"reference": "docker://" + jobRef, "digest": "sha256:" + hexOf("10"), "platform": "linux/amd64", "rule": rule,
			"signature": images.FormatCosignLegacy, "signatureKeyId": keyA,
		}, []string{"referenceDigest", "warnings"}},
		{"docker://" + dbRef, hexOf("21"), map[string]string{
			"reference": "docker://" + dbRef, "digest": "sha256:" + hexOf("20"), "platform": "linux/amd64",
			"signature": images.FormatSigstoreBundle, "signatureSubject": workflow, "signatureIssuer": issuer,
		}, []string{"warnings", "signatureKeyId"}},
		{"docker://" + cacheRef, hexOf("77"), map[string]string{
			"reference": "docker://" + cacheRef, "digest": "sha256:" + hexOf("77"), "referenceDigest": "sha256:" + hexOf("77"),
			"warnings": pulled[2].Warnings[0],
		}, []string{"signature", "signatureKeyId"}},
		{"docker://" + actionRef, hexOf("31"), map[string]string{
			"reference": "docker://" + actionRef, "digest": "sha256:" + hexOf("30"), "platform": "linux/amd64", "rule": rule,
			"signature": images.FormatSigstoreBundle, "signatureKeyId": keyA, "digest-note": "kept as the hook wrote it",
		}, nil},
	} {
		d := byName[tc.name]
		if len(d.Digest) != 1 || d.Digest["sha256"] != tc.digest {
			t.Errorf("%s: digest %v, want sha256 %s", tc.name, d.Digest, tc.digest)
		}
		for k, v := range tc.ann {
			if d.Annotations[k] != v {
				t.Errorf("%s: annotation %s = %q, want %q", tc.name, k, d.Annotations[k], v)
			}
		}
		for _, k := range tc.absent {
			if v, ok := d.Annotations[k]; ok {
				t.Errorf("%s: annotation %s = %q, want none", tc.name, k, v)
			}
		}
	}
	if r := byName["rootfs"]; r.URI != "file://"+res.Sandbox.RootFS || !strings.Contains(r.Annotations["source"], "containerImage") || !strings.Contains(r.Annotations["source"], "sha256:"+hexOf("11")) {
		t.Errorf("rootfs %+v", r)
	}
	if !maps.Equal(action.Annotations, actionAnnotations) {
		t.Errorf("the hook's descriptor was changed: %v", action.Annotations)
	}
}

// A job container the organisation maps (not pulled) keeps its
// descriptor as before, and a Docker action whose image was mapped (no
// digest) is left as the hook wrote it, even beside a pull of its
// reference.
func TestMappedImagesUnchangedBesidePulls(t *testing.T) {
	var p attest.Predicate
	p.Job.ContainerImage = "node:20"
	p.Job.Images = []attest.Image{{Ref: "alpine:3", Digest: "sha256:" + hexOf("50"), ImageDigest: "sha256:" + hexOf("51"), Platform: "linux/amd64", Rule: "r",
		Signature: &attest.ImageSignature{Format: images.FormatCosignLegacy, KeyID: "sha256:" + hexOf("aa")}}}
	mapped := attest.Descriptor{Name: "docker://busybox:1", URI: "file:///srv/images/busybox", Annotations: map[string]string{"reference": "docker://busybox:1"}}
	deps := dependencies(p, attest.SubjectInfo{}, "/srv/images/node", []attest.Descriptor{mapped})
	var names []string
	for _, d := range deps {
		names = append(names, d.Name)
	}
	if strings.Join(names, " ") != "rootfs containerImage docker://busybox:1 docker://alpine:3" {
		t.Fatalf("dependencies %q", names)
	}
	if c := deps[1]; c.URI != "file:///srv/images/node" || len(c.Digest) != 0 || c.Annotations["reference"] != "docker://node:20" {
		t.Errorf("containerImage %+v", c)
	}
	if b := deps[2]; len(b.Annotations) != 1 || len(b.Digest) != 0 {
		t.Errorf("mapped action %+v", b)
	}
	if a := deps[3]; a.Digest["sha256"] != hexOf("51") || a.Annotations["signatureKeyId"] != "sha256:"+hexOf("aa") || a.Annotations["digest"] != "sha256:"+hexOf("50") {
		t.Errorf("pulled alpine %+v", a)
	}
	if r := deps[0]; strings.Contains(r.Annotations["source"], "pulled") {
		t.Errorf("rootfs of a mapped image %+v", r)
	}
}
