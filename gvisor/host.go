package gvisor

import (
	"bytes"
	"fmt"
	"os"
)

// checkHost tells, in one sentence each, why this host cannot run a
// sandbox, before anything is created: not root, no /proc/self/exe, or a
// kernel without the namespaces and seccomp that gVisor relies on.
func checkHost() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		return ErrNoSelfExe
	}
	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			return fmt.Errorf("%w: it has no %s namespaces (/proc/self/ns/%s is missing); use a kernel built with CONFIG_NAMESPACES and the %s namespace", ErrHostUnsupported, ns, ns, ns)
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err == nil && !bytes.Contains(status, []byte("\nSeccomp:")) {
		return fmt.Errorf("%w: it has no seccomp filtering, which gVisor's systrap platform and its own hardening need; use a kernel built with CONFIG_SECCOMP_FILTER", ErrHostUnsupported)
	}
	return nil
}
