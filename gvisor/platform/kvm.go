package platform

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"golang.org/x/sys/unix"
)

// kvmAPIVersion is the only KVM API version Linux has had
// (KVM_API_VERSION), and kvmGetAPIVersion the ioctl that asks for it
// (_IO(KVMIO, 0x00), linux/kvm.h; x/sys/unix does not name it).
const (
	kvmAPIVersion    = 12
	kvmGetAPIVersion = 0xAE00
)

// Device is the KVM device the KVM platform opens.
const Device = "/dev/kvm"

// DeviceUsable reports why /dev/kvm cannot be opened as the KVM
// platform opens it, or nil: it opens the device and asks for its API
// version (KVM_GET_API_VERSION). This is necessary, not sufficient: only
// a probe sandbox tells whether gVisor boots on it.
func DeviceUsable() error {
	f, err := os.OpenFile(Device, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	v, err := unix.IoctlRetInt(int(f.Fd()), kvmGetAPIVersion)
	if err != nil {
		return fmt.Errorf("%s: KVM_GET_API_VERSION: %w", Device, err)
	}
	if v != kvmAPIVersion {
		return fmt.Errorf("%s: KVM API version %d, not %d", Device, v, kvmAPIVersion)
	}
	return nil
}

// probeVersion names how the probe boots its sandbox (its runsc flags):
// raise it when they change, so that no verdict of the old probe is
// believed.
const probeVersion = 2

// HostKey names what a KVM verdict holds for: this boot of the host
// (boot_id), this /dev/kvm (its identity changes when the KVM module is
// reloaded), the gVisor that runs the sandboxes and the probe's version.
// gVisor is named by its module version and checksum where the build
// has them (a release, or any build from the module proxy's copy), so
// every airlock binary and test binary with the same gVisor shares one
// verdict; a build whose gVisor is replaced or changed is named by its
// own file's identity instead (device, inode, size, times: hashing 127
// MB would take 0.35 s).
func HostKey() (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	var dev unix.Stat_t
	if err := unix.Stat(Device, &dev); err != nil {
		return "", fmt.Errorf("stat %s: %w", Device, err)
	}
	build, err := BuildID()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("boot=%s kvm=%d:%d:%d.%d %s probe=%d",
		strings.TrimSpace(string(boot)), dev.Rdev, dev.Ino, dev.Ctim.Sec, dev.Ctim.Nsec, build, probeVersion), nil
}

// BuildID names the gVisor this binary embeds, as HostKey keys it: its
// module version and checksum, else this binary's file identity.
func BuildID() (string, error) {
	if id := gvisorModule(debug.ReadBuildInfo()); id != "" {
		// The Go toolchain and the target's CPU level too: gVisor's KVM
		// platform leans on the Go runtime's internals.
		return id + " go=" + runtime.Version() + buildLevel(), nil
	}
	var exe unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &exe); err != nil {
		return "", fmt.Errorf("stat own binary: %w", err)
	}
	return fmt.Sprintf("exe=%d:%d:%d:%d.%d:%d.%d",
		exe.Dev, exe.Ino, exe.Size, exe.Mtim.Sec, exe.Mtim.Nsec, exe.Ctim.Sec, exe.Ctim.Nsec), nil
}

// buildLevel is the build's CPU level setting (GOAMD64, GOARM64), if any.
func buildLevel() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, st := range bi.Settings {
		if st.Key == "GOAMD64" || st.Key == "GOARM64" {
			return " " + st.Key + "=" + st.Value
		}
	}
	return ""
}

// gvisorModule names gVisor by its module's version and checksum in the
// build information bi, or returns "": no build information (test
// binaries have none of their modules), or a gVisor replaced or built
// from a directory, which has no checksum.
func gvisorModule(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == "gvisor.dev/gvisor" && d.Replace == nil && d.Sum != "" {
			return "gvisor=" + d.Version + "@" + d.Sum
		}
	}
	return ""
}
