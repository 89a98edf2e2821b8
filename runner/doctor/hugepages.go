package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
)

// The host's transparent huge page settings that gVisor recommends
// (runsc's host-settings check, runsc/hostsettings): shmem_enabled lets
// the sentry's memory file, which holds the sandbox's memory, use huge
// pages; defrag keeps direct compaction out of page faults.
const (
	thpShmem  = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
	thpDefrag = "/sys/kernel/mm/transparent_hugepage/defrag"
)

// checkHugePages reads the host's transparent huge page settings and
// warns where gVisor would change them.
func checkHugePages(context.Context, Options) []Check {
	shmem, err1 := os.ReadFile(thpShmem)
	defrag, err2 := os.ReadFile(thpDefrag)
	if err1 != nil || err2 != nil {
		return []Check{ok("huge pages", "not read (%v): no advice on the host's transparent huge pages", errors.Join(err1, err2))}
	}
	return []Check{hugePagesAdvice(chosen(string(shmem)), chosen(string(defrag)))}
}

// chosen is the value a kernel choice file selects: "always [madvise]
// never" reads madvise.
func chosen(file string) string {
	s := strings.TrimSpace(file)
	if _, after, ok := strings.Cut(s, "["); ok {
		s, _, _ = strings.Cut(after, "]")
	}
	return s
}

// hugePagesAdvice judges the settings as gVisor's host-settings check
// does: shmem_enabled never is better advise (deny is the
// administrator's choice, left alone), defrag madvise better never and
// defer+madvise better defer.
func hugePagesAdvice(shmem, defrag string) Check {
	var fixes, why []string
	if shmem == "never" {
		fixes = append(fixes, "echo advise > "+thpShmem)
		why = append(why, "shmem_enabled "+shmem+": the sandboxes' memory is in 4 KiB pages")
	}
	want := map[string]string{"madvise": "never", "defer+madvise": "defer"}[defrag]
	if want != "" {
		fixes = append(fixes, "echo "+want+" > "+thpDefrag)
		why = append(why, "defrag "+defrag+": page faults may compact memory directly")
	}
	if len(fixes) == 0 {
		return ok("huge pages", "transparent huge pages: shmem_enabled %s, defrag %s (as gVisor recommends)", shmem, defrag)
	}
	return bad(Warn, "huge pages", strings.Join(why, "; "),
		fmt.Sprintf("%s (gVisor's recommended host settings; a warm go test step ran about 9 %% faster with them, BENCHMARKS.md §16); on a Kubernetes node, set them on the node", strings.Join(fixes, "; ")))
}
