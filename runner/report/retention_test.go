package report

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Retention keeps the newest jobs' attestations, none past their age, a
// job's files together (its provenance with its run attestation), and
// touches nothing else in the directory.
func TestRetention(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name    string
		r       Retention
		pending []string // jobs some attestation store does not hold yet
		want    []string // jobs kept
	}{
		{"by count", Retention{Keep: 2}, nil, []string{"job-01", "job-02"}},
		{"by age", Retention{MaxAge: 60 * time.Hour}, nil, []string{"job-01", "job-02"}},
		{"both", Retention{Keep: 1, MaxAge: 100 * time.Hour}, nil, []string{"job-01"}},
		{"no bound", Retention{}, nil, []string{"job-01", "job-02", "job-03", "job-04"}},
		{"a job still pending, whatever its age", Retention{Keep: 1, MaxAge: time.Hour}, []string{"job-04"}, []string{"job-04"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// job-01 is a day old, job-04 four days.
			for i, name := range []string{"job-01", "job-02", "job-03", "job-04"} {
				files := []string{name + ".sigstore.json", name + ".dsse.json", name + ".provenance.sigstore.json", name + ".provenance.dsse.json"}
				if i%2 == 1 {
					files = []string{name + ".UNSIGNED.intoto.json", name + ".provenance.UNSIGNED.intoto.json"}
				}
				for _, f := range files {
					p := filepath.Join(dir, f)
					os.WriteFile(p, []byte("{}"), 0o644)
					age := now.Add(-time.Duration(i+1) * 24 * time.Hour)
					os.Chtimes(p, age, age)
				}
			}
			os.MkdirAll(filepath.Join(dir, "pending"), 0o700)
			for _, p := range tc.pending {
				os.WriteFile(filepath.Join(dir, "pending", p+".json"), []byte("{}"), 0o600)
			}
			os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644)
			os.Symlink("/etc/passwd", filepath.Join(dir, "job-99.sigstore.json"))
			old := now.Add(-1000 * time.Hour)
			os.Chtimes(filepath.Join(dir, "notes.txt"), old, old)
			if _, err := tc.r.Prune(dir, now); err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, name := range []string{"job-01", "job-02", "job-03", "job-04"} {
				m, _ := filepath.Glob(filepath.Join(dir, name+".*"))
				switch {
				case len(m) > 0 && slices.Contains(tc.want, name):
					kept = append(kept, name)
				case len(m) > 0:
					t.Errorf("%s kept: %v", name, m)
				}
			}
			if !slices.Equal(kept, tc.want) {
				t.Errorf("kept %v, want %v", kept, tc.want)
			}
			for _, f := range []string{"notes.txt", "job-99.sigstore.json"} {
				if _, err := os.Lstat(filepath.Join(dir, f)); err != nil {
					t.Errorf("%s was removed", f)
				}
			}
		})
	}
}
