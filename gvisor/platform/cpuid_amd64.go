package platform

import (
	"encoding/binary"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// kvmGetSupportedCPUID is KVM_GET_SUPPORTED_CPUID, _IOWR(KVMIO, 0x05,
// struct kvm_cpuid2) (linux/kvm.h; the struct's fixed part is 8 bytes),
// and kvmCPUIDEntrySize the size of a struct kvm_cpuid_entry2.
const (
	kvmGetSupportedCPUID = 0xC008AE05
	kvmCPUIDEntrySize    = 40
	kvmMaxCPUIDEntries   = 256
)

// kvmSupportedCPUID asks /dev/kvm which CPUID it offers its guests.
func kvmSupportedCPUID() ([]cpuidEntry, error) {
	f, err := os.OpenFile(Device, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 8+kvmMaxCPUIDEntries*kvmCPUIDEntrySize)
	le := binary.LittleEndian
	le.PutUint32(buf, kvmMaxCPUIDEntries)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), kvmGetSupportedCPUID, uintptr(unsafe.Pointer(&buf[0])))
	runtime.KeepAlive(buf)
	if errno != 0 {
		return nil, errno
	}
	n := min(int(le.Uint32(buf)), kvmMaxCPUIDEntries)
	entries := make([]cpuidEntry, 0, n)
	for i := 0; i < n; i++ {
		e := buf[8+i*kvmCPUIDEntrySize:]
		entries = append(entries, cpuidEntry{
			function: le.Uint32(e[0:]), index: le.Uint32(e[4:]),
			// e[8:12] is flags.
			regs: [4]uint32{le.Uint32(e[12:]), le.Uint32(e[16:]), le.Uint32(e[20:]), le.Uint32(e[24:])},
		})
	}
	return entries, nil
}
