// Package uploads records the artifacts a job uploads through the
// Actions artifact service (v4), from the bytes that pass the egress
// gateway: CreateArtifact names an artifact and gets a signed upload
// URL, the job writes the blob there (Azure block blob: Put Block, Put
// Block List, or Put Blob), and FinalizeArtifact claims the blob's
// sha256. The recorder hashes what the job sent, not what it claims.
//
// Layer 1: it knows the protocols' shapes, nothing of the gateway.
package uploads

import "time"

// Upload is one artifact the job uploaded, as the gateway saw it.
type Upload struct {
	// Name is the artifact's name (CreateArtifact's name).
	Name string `json:"name"`
	// SHA256 is the hex sha256 of the blob as the job committed it
	// through the gateway ("" when no committed blob was seen).
	SHA256 string `json:"sha256,omitempty"`
	// Size is the committed blob's length in bytes.
	Size int64 `json:"size"`
	// Claimed is the hash FinalizeArtifact claimed ("sha256:…"), as sent.
	Claimed string `json:"claimed,omitempty"`
	// Status: "finalized" (the claim matched the bytes and the service
	// accepted it), "refused" (see Reason), "unobserved" (finalized, but
	// no blob was committed through the gateway, so its digest is
	// unknown), or "not finalized".
	Status string `json:"status"`
	// Reason says why an upload was refused.
	Reason string `json:"reason,omitempty"`
	// ID is the artifact id the service returned on finalization.
	ID string `json:"id,omitempty"`
	// Created and Finalized are when the gateway saw the two RPCs.
	Created   time.Time `json:"created"`
	Finalized time.Time `json:"finalized,omitzero"`
}

// Statuses of an Upload.
const (
	Finalized    = "finalized"
	Refused      = "refused"
	Unobserved   = "unobserved"
	NotFinalized = "not finalized"
)
