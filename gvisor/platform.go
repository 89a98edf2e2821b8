package gvisor

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Platforms airlock runs sandboxes on: systrap (system calls trapped
// with seccomp, works everywhere) and kvm (the sandbox's kernel in a
// virtual machine of /dev/kvm: system calls cost far less, where the host
// has KVM). "auto" picks kvm when /dev/kvm is usable, else systrap.
const (
	PlatformAuto    = "auto"
	PlatformSystrap = "systrap"
	PlatformKVM     = "kvm"
)

// kvmAPIVersion is the only KVM API version Linux has had
// (KVM_API_VERSION), and kvmGetAPIVersion the ioctl that asks for it
// (_IO(KVMIO, 0x00), linux/kvm.h; x/sys/unix does not name it).
const (
	kvmAPIVersion    = 12
	kvmGetAPIVersion = 0xAE00
)

// KVMUsable reports why /dev/kvm cannot run sandboxes here, or nil: it
// opens the device and asks for its API version (KVM_GET_API_VERSION),
// as the KVM platform will.
func KVMUsable() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("/dev/kvm: %w", err)
	}
	defer f.Close()
	v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion)
	if err != nil {
		return fmt.Errorf("/dev/kvm: KVM_GET_API_VERSION: %w", err)
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("/dev/kvm: KVM API version %d, not %d", v, kvmAPIVersion)
	}
	return nil
}

// ResolvePlatform turns a requested platform ("" is auto) into the one
// runsc gets.
func ResolvePlatform(p string) (string, error) {
	return resolvePlatform(p, KVMUsable)
}

func resolvePlatform(p string, kvm func() error) (string, error) {
	switch p {
	case "", PlatformAuto:
		if kvm() == nil {
			return PlatformKVM, nil
		}
		return PlatformSystrap, nil
	case PlatformSystrap:
		return PlatformSystrap, nil
	case PlatformKVM:
		if err := kvm(); err != nil {
			return "", fmt.Errorf("%w: platform kvm: %v: use --platform systrap (or auto), or give the host /dev/kvm", ErrInvalidConfig, err)
		}
		return PlatformKVM, nil
	}
	return "", fmt.Errorf("%w: platform %q: use auto, systrap or kvm", ErrInvalidConfig, p)
}
