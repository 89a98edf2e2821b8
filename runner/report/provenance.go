package report

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"

	"github.com/airlock-ci/airlock/attest"
	"github.com/airlock-ci/airlock/runner"
	"github.com/airlock-ci/airlock/runner/egress"
	"github.com/airlock-ci/airlock/runner/egress/uploads"
)

// ProvenanceFiles is where a job's provenance went (docs/provenance.md):
// <job-id>.provenance.sigstore.json and .provenance.dsse.json, or
// .provenance.UNSIGNED.intoto.json, next to its run attestation.
type ProvenanceFiles struct {
	Files
	// Subjects counts the artifacts it names.
	Subjects int `json:"subjects"`
	// None says why no provenance was written: a job that made no
	// artifact has none (an in-toto statement needs a subject).
	None string `json:"none,omitempty"`
}

// ProvenanceSuffix ends the name of a provenance bundle; the run
// attestation of the same job is the same name with RunSuffix.
const (
	ProvenanceSuffix = ".provenance.sigstore.json"
	RunSuffix        = ".sigstore.json"
)

// Bounds on what the provenance takes of the job's uploads (each one is
// the job's to name and repeat).
const (
	maxUploadSubjects = attest.MaxProvenanceSubjects - attest.MaxArtifacts
	maxRefusedUploads = 100
)

// writeProvenance signs the job's provenance as its run attestation was
// signed (with the same signer, or unsigned for the same reason) and
// writes it next to it. What it did is said on log.
func writeProvenance(res runner.Result, c *runner.AttestConfig, run *runStatement, log io.Writer) *ProvenanceFiles {
	none := func(why string) *ProvenanceFiles {
		fmt.Fprintf(log, "provenance: none written: %s\n", why)
		return &ProvenanceFiles{None: why}
	}
	if run == nil {
		return none("the run attestation, which the provenance names, was not written")
	}
	subjects, prov := buildProvenance(res, c, run)
	if len(subjects) == 0 {
		return none("the job made no artifact (no upload finalized through the gateway, no file of attest.outputs), and an in-toto statement needs a subject")
	}
	stmt, err := attest.ProvenanceStatement(subjects, prov)
	if err != nil {
		info := &ProvenanceFiles{Files: Files{Error: err.Error()}}
		fmt.Fprintf(log, "airlock: PROVENANCE NOT WRITTEN: %v\n", err)
		return info
	}
	info := &ProvenanceFiles{Subjects: len(subjects)}
	info.Files = writeStatement(run.signer, run.unsignedWhy, stmt, filepath.Join(c.Dir, res.Sandbox.ID+".provenance"))
	switch {
	case info.Bundle != "":
		fmt.Fprintf(log, "provenance: %s (signed, %d artifact(s))\n", info.Bundle, len(subjects))
	case info.Unsigned == "":
		fmt.Fprintf(log, "airlock: PROVENANCE NOT WRITTEN: %s\n", info.Error)
	default:
		fmt.Fprintf(log, "airlock: PROVENANCE NOT SIGNED: %s; unsigned statement: %s\n", info.Error, info.Unsigned)
	}
	return info
}

// buildProvenance is the job's provenance and its subjects: the uploads
// the gateway saw finalized, then the policy's outputs. Everything the
// job did is taken from its run attestation's predicate.
func buildProvenance(res runner.Result, c *runner.AttestConfig, run *runStatement) ([]attest.SubjectInfo, attest.Provenance) {
	p := run.pred
	subjects, refused, notes := uploadSubjects(res.Egress)
	subjects = append(subjects, run.artifacts...)
	sum := sha256.Sum256(run.statement)
	byproduct := attest.RunByproduct{
		Name: filepath.Base(run.file), Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])},
		MediaType: attest.PayloadType, Annotations: runSummary(p, refused, notes),
	}
	prov := attest.Provenance{
		BuildDefinition: attest.BuildDefinition{
			BuildType:            attest.JobBuildType,
			ExternalParameters:   externalParameters(p),
			InternalParameters:   internalParameters(p, res.Sandbox, res.WorkspaceVolume),
			ResolvedDependencies: dependencies(p, run.subject, res.Sandbox.RootFS, c.Actions),
		},
		RunDetails: attest.RunDetails{
			Builder:    builder(p.Runner),
			Metadata:   attest.BuildMetadata{InvocationID: invocationID(p), StartedOn: res.Start.UTC(), FinishedOn: res.End.UTC()},
			Byproducts: []attest.RunByproduct{byproduct},
		},
	}
	return subjects, prov
}

// uploadSubjects are the uploads the gateway saw finalized, as the
// artifact service stores them (NAME.zip, the sha256 of the bytes); the
// rest (refused, never finalized, without a digest) are records, not
// subjects. Names come from the job and are clipped.
func uploadSubjects(eg *egress.Report) ([]attest.SubjectInfo, []attest.UploadRecord, []string) {
	subjects, refused, notes := []attest.SubjectInfo{}, []attest.UploadRecord{}, []string{}
	if eg == nil {
		return subjects, refused, notes
	}
	// Past a bound, the rest are counted, not dropped from the count: a
	// refused upload after the 500th finalized one is still on record.
	droppedSubjects, droppedRefused, firstDropped := 0, 0, ""
	for _, u := range eg.Uploads {
		name := clip(u.Name, 256)
		if u.Status == uploads.Finalized && attest.IsSHA256(u.SHA256) {
			if len(subjects) == maxUploadSubjects {
				if droppedSubjects++; droppedSubjects == 1 {
					firstDropped = name
				}
				continue
			}
			subjects = append(subjects, attest.SubjectInfo{Name: name + ".zip", Digest: map[string]string{"sha256": u.SHA256}})
			continue
		}
		if len(refused) == maxRefusedUploads {
			droppedRefused++
			continue
		}
		r := attest.UploadRecord{Name: name, Status: clip(u.Status, 32), Reason: clip(u.Reason, 512), Size: u.Size}
		if attest.IsSHA256(u.SHA256) {
			r.SHA256 = u.SHA256
		} else if u.Status == uploads.Finalized {
			r.Reason = "finalized without a digest of its bytes"
		}
		refused = append(refused, r)
	}
	if droppedSubjects > 0 {
		notes = append(notes, fmt.Sprintf("more than %d finalized uploads: %d are not subjects, from upload %q on", maxUploadSubjects, droppedSubjects, firstDropped))
	}
	if droppedRefused > 0 {
		notes = append(notes, fmt.Sprintf("%d upload(s) that are not subjects are not listed: more than %d", droppedRefused, maxRefusedUploads))
	}
	return subjects, refused, notes
}
