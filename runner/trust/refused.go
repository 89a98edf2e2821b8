package trust

import (
	"fmt"
	"strings"

	"github.com/airlock-ci/airlock/gvisor/monitor"
	"github.com/airlock-ci/airlock/internal/paths"
)

// refusedWrites turns the sandbox's opens refused with EROFS on the
// read-only trust paths (below the repository at mount) into findings:
// the attempt is on record even though nothing changed.
func refusedWrites(mount string, set *Set, readOnly []string, rec monitor.Snapshot) []Finding {
	var out []Finding
	seen := map[string]bool{}
	for _, wr := range rec.WritesRefused {
		rel, ok := strings.CutPrefix(wr.Path, mount+"/")
		if !ok || seen[rel] || !paths.WithinAny(rel, readOnly) {
			continue
		}
		seen[rel] = true
		cat := set.Category(rel)
		switch {
		case rel == ".git/config":
			cat = GitConfig
		case strings.HasPrefix(rel, ".git/hooks"):
			cat = GitHooks
		}
		bin := ""
		for _, x := range rec.Execs {
			if x.PID == wr.PID && !x.Time.After(wr.Time) {
				bin = x.Binary
			}
		}
		// Nothing changed: a warning whatever the category's action.
		out = append(out, Finding{
			Phase: Runtime, Category: cat, Check: CheckRefusedWrite, Path: rel, Kind: KindWriteRefused,
			Reason: strings.TrimSpace(fmt.Sprintf("the job tried to write it (pid %d %s", wr.PID, bin)) + ")",
			Action: set.RuntimeAction(cat), Severity: SeverityWarning, Outcome: "write refused: read-only",
		})
	}
	return out
}
