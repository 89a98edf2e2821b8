package doctor

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-ci/airlock/attest/storeref"
	"github.com/airlock-ci/airlock/internal/testregistry"
)

// The attestation store's line: none is a warning that says where the
// records go; a name that does not parse fails (every job would be
// refused); a store that answers is ok, one that does not a warning
// with why; a registry that refuses the credentials says so.
func TestCheckStores(t *testing.T) {
	reg := testregistry.InProcess(t, testregistry.Options{User: "airlock", Password: "pw"})
	dir := t.TempDir()
	policyStore, _ := storeref.Parse("file://" + dir)
	down := fmt.Sprintf("oci://127.0.0.1:%d/a/b", testregistry.FreePort(t))
	for _, tc := range []struct {
		name       string
		fromPolicy []storeref.Ref
		env, auth  string
		status     Status
		want       string
	}{
		{"none", nil, "", "", Warn, "the attestations stay in the runner's own directory"},
		{"malformed", nil, "ghcr.io/org/x", "", Fail, "no scheme"},
		{"the policy's file store", []storeref.Ref{policyStore}, "", "", OK, "file://" + dir + " answer(s)"},
		{"a registry that answers", nil, "oci://" + reg.Host + "/airlock/attestations", reg.AuthFile(t, "", ""), OK, "credentials from"},
		{"wrong credentials", nil, "oci://" + reg.Host + "/airlock/attestations", reg.AuthFile(t, "airlock", "nope"), Warn, "refused the credentials (401)"},
		{"down", []storeref.Ref{policyStore}, down, "", Warn, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkStores(context.Background(), tc.fromPolicy, Options{AttestStores: tc.env, AttestStoreAuth: tc.auth})
			if c.Status != tc.status || !strings.Contains(c.Detail, tc.want) {
				t.Fatalf("%+v; want %s with %q", c, tc.status, tc.want)
			}
		})
	}
}
