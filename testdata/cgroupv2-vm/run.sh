#!/bin/sh
# The cgroup v2 host test (issue 22): boots a disposable VM under qemu
# (TCG: no KVM needed) on Debian 12's kernel with cgroup v1 switched off
# (cgroup_no_v1=all), cgroup2 mounted with nsdelegate, and runs airlock's
# jobs in each layout users' hosts have: airlock in the root cgroup, in a
# service cgroup with a few controllers or with all, and at the root of a
# cgroup namespace (a container). checks.sh, inside the VM, prints one
# "VMCHECK <layout> <check> ok|FAIL ..." line per check; this script
# prints them and fails if any failed or the VM did not finish.
#
# Needs root (to read the kernel package and build the image), Debian's
# qemu-system-x86 and busybox-static (installed when missing), and a
# static bin/airlock (make build). Usage: sh testdata/cgroupv2-vm/run.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
airlock=$top/bin/airlock
[ -x "$airlock" ] || { echo "vm: build airlock first (make build)" >&2; exit 1; }
if ! command -v qemu-system-x86_64 >/dev/null || [ ! -x /bin/busybox ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 busybox-static >/dev/null
fi

work=$(mktemp -d /tmp/airlock-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

# The kernel: Debian 12's newest 6.1 image package, from the package
# mirror, unpacked (never installed on this host).
pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | cut -d' ' -f1 | sort -V | tail -n 1)
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | cut -d' ' -f1 | sort -V | tail -n 1)
fi
[ -n "$pkg" ] || { echo "vm: no linux-image-6.1.0-*-amd64 package found" >&2; exit 1; }
(cd "$work" && apt-get download -qq "$pkg" 2>/dev/null)
dpkg-deb -x "$work"/linux-image-*.deb "$work/kernel"
kver=${pkg#linux-image-}
echo "vm: kernel $pkg"

# The image: busybox for the shell and its tools, util-linux's unshare
# (cgroup namespaces) with its libraries, the kernel modules a real host
# loads on demand (veth for the sandbox's network; xfrm and nfnetlink,
# whose netlink sockets the netlink library opens; loop and overlay for
# the bounded workspace, with e2fsprogs' mkfs.ext4), and airlock.
root=$work/root
mkdir -p "$root/bin" "$root/sbin" "$root/etc" "$root/lib/modules" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/run" "$root/root" "$root/newroot" "$root/var/tmp" "$root/usr/bin"
cp /bin/busybox "$root/bin/busybox"
for m in drivers/net/veth.ko net/xfrm/xfrm_algo.ko net/xfrm/xfrm_user.ko net/netfilter/nfnetlink.ko; do
  cp "$work/kernel/lib/modules/$kver/kernel/$m" "$root/lib/modules/"
done
# Built in or a module, depending on the kernel's configuration (Debian
# 12's: all modules; ext4 needs jbd2, mbcache and crc16, its checksums
# crc32c).
for m in drivers/block/loop.ko fs/overlayfs/overlay.ko lib/crc16.ko fs/mbcache.ko fs/jbd2/jbd2.ko crypto/crc32c_generic.ko fs/ext4/ext4.ko; do
  f="$work/kernel/lib/modules/$kver/kernel/$m"
  [ -f "$f" ] && cp "$f" "$root/lib/modules/"
  [ -f "$f.xz" ] && xz -dc "$f.xz" > "$root/lib/modules/$(basename "$m")"
done
copy_with_libs() {
  cp "$1" "$root$1"
  for lib in $(ldd "$1" | awk '/=>/ {print $3} /^\t\// {print $1}'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
copy_with_libs /usr/bin/unshare
mkdir -p "$root/usr/sbin"
copy_with_libs /usr/sbin/mke2fs
ln -s mke2fs "$root/usr/sbin/mkfs.ext4"
[ -f /etc/mke2fs.conf ] && cp /etc/mke2fs.conf "$root/etc/"
cp "$airlock" "$root/bin/airlock"
# Its runsc sidecar (make build makes both): the jobs start from it.
cp "$(dirname "$airlock")/airlock-runsc" "$root/bin/airlock-runsc"
cp "$here/init" "$here/checks.sh" "$root/"
chmod 755 "$root/init" "$root/checks.sh"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
printf '127.0.0.1 localhost\n' > "$root/etc/hosts"
(cd "$root" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$work/initrd.gz"
[ -s "$work/initrd.gz" ] || { echo "vm: could not pack the image" >&2; exit 1; }

echo "vm: booting (qemu, TCG, 2 vCPUs, 4 GiB)"
start=$(date +%s)
status=0
timeout 1500 qemu-system-x86_64 -machine q35 -accel tcg -cpu max -smp 2 -m 4096 \
  -kernel "$work/kernel/boot/vmlinuz-$kver" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 quiet cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 panic=-1 AIRLOCK_VM_CHECKS=${AIRLOCK_VM_CHECKS:-all}" \
  -nographic -no-reboot -nic none -serial stdio -monitor none > "$work/console.log" 2>&1 || status=$?
echo "vm: finished in $(( $(date +%s) - start )) s (qemu exit $status)"
tr -d '\r' < "$work/console.log" > "$top/bin/vm-console.log"
grep -a '^VMCHECK\|^VMINFO\|^VMBENCH' "$top/bin/vm-console.log" || true
if ! grep -aq '^VMDONE' "$work/console.log"; then
  echo "vm: the checks did not finish; the end of the console:" >&2
  tail -n 40 "$work/console.log" | tr -d '\r' >&2
  exit 1
fi
if grep -aq '^VMCHECK .* FAIL' "$work/console.log"; then
  echo "vm: checks failed" >&2
  exit 1
fi
echo "vm: every check passed"
