package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/report"
)

// The check run publishes the provenance and the run attestation, each
// on one line in a block named for its file, for a workflow_run consumer
// to take out; a bundle too large is named with its digest, and the
// text says it was left out and why.
func TestCheckReportPublishesBundles(t *testing.T) {
	dir := t.TempDir()
	prov := filepath.Join(dir, "job-1.provenance.sigstore.json")
	run := filepath.Join(dir, "job-1.sigstore.json")
	os.WriteFile(prov, []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","p":1}`), 0o644)
	os.WriteFile(run, []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","r":"`+strings.Repeat("x", maxCheckBundle)+`"}`), 0o644)
	att := &report.Attestation{Files: report.Files{Bundle: run}, Provenance: &report.ProvenanceFiles{Files: report.Files{Bundle: prov}, Subjects: 1}}
	text := checkReport(runner.Result{Passed: true}, att, nil).Text
	for _, want := range []string{
		"Provenance: `job-1.provenance.sigstore.json`, sha256 `",
		"<details><summary>Provenance bundle (Sigstore): job-1.provenance.sigstore.json</summary>\n\n```json\n{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\",\"p\":1}\n```",
		"Attestation: `job-1.sigstore.json`, sha256 `",
		"The attestation bundle is not included: it is 49220 bytes, more than the 49152 a check run carries of one bundle",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the check run's text lacks %q:\n%.600s", want, text)
		}
	}
	if strings.Contains(text, "Attestation bundle (Sigstore)") {
		t.Error("a bundle past maxCheckBundle was put in the text")
	}
}
