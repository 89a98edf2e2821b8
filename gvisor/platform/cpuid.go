package platform

import (
	"bufio"
	"os"
	"strings"
)

// cr4Features are the CPU features for which gVisor's ring0 sets a CR4
// bit in its vCPUs (pkg/ring0/kernel_amd64.go, CPU.CR4): a KVM that does
// not offer one the host CPU has is the usual reason, on nested
// virtualisation, why KVM_SET_SREGS refuses the vCPU ("error setting
// system registers: invalid argument"). Each is named by its CPUID leaf,
// register and bit (Intel SDM vol. 2A, CPUID) and by its /proc/cpuinfo
// flag.
var cr4Features = []struct {
	name, flag string
	leaf       uint32
	reg        int // 0 eax, 1 ebx, 2 ecx, 3 edx
	bit        uint
}{
	{"XSAVE", "xsave", 1, 2, 26},
	{"PCID", "pcid", 1, 2, 17},
	{"FSGSBASE", "fsgsbase", 7, 1, 0},
	{"SMEP", "smep", 7, 1, 7},
	{"SMAP", "smap", 7, 1, 20},
	{"UMIP", "umip", 7, 2, 2},
	{"LA57", "la57", 7, 2, 16},
}

// cpuidEntry is one leaf (sub-leaf 0) of a CPUID table.
type cpuidEntry struct {
	function, index uint32
	regs            [4]uint32 // eax, ebx, ecx, edx
}

// cpuidGaps lists the CR4 features the host CPU has (its cpuinfo flags)
// and that KVM's supported CPUID lacks.
func cpuidGaps(host map[string]bool, kvm []cpuidEntry) []string {
	var gaps []string
	for _, f := range cr4Features {
		if !host[f.flag] {
			continue
		}
		has := false
		for _, e := range kvm {
			if e.function == f.leaf && e.index == 0 && e.regs[f.reg]&(1<<f.bit) != 0 {
				has = true
				break
			}
		}
		if !has {
			gaps = append(gaps, f.name)
		}
	}
	return gaps
}

// KVMCPUIDGaps says, in a few words, which CR4 features the host CPU has
// and KVM does not offer ("" when none, or where this cannot be asked).
func KVMCPUIDGaps() string {
	entries, err := kvmSupportedCPUID()
	if err != nil || len(entries) == 0 {
		return ""
	}
	gaps := cpuidGaps(hostCPUFlags(), entries)
	if len(gaps) == 0 {
		return ""
	}
	return "KVM's CPUID lacks " + strings.Join(gaps, ", ") + " (the host CPU has them)"
}

// hostCPUFlags reads the first processor's flags from /proc/cpuinfo.
func hostCPUFlags() map[string]bool {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "flags" {
			flags := map[string]bool{}
			for _, fl := range strings.Fields(v) {
				flags[fl] = true
			}
			return flags
		}
	}
	return nil
}
