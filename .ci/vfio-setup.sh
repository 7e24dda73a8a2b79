#!/usr/bin/env bash
# Installs what TestVFIOInQEMU (pcigeneric/vfio/qemu_test.go) needs: QEMU
# (qemu-system-x86, with the edu device and the emulated Intel IOMMU), a
# static busybox and cpio for the guest's initramfs, and Debian's cloud
# kernel, unpacked (not installed) into a cache directory.
#
# Usage (as root): bash .ci/vfio-setup.sh
# The kernel goes to $GOMHI_VFIO_KERNEL_DIR (default /var/cache/gomhi/vfio-kernel).
# Idempotent: packages already present and a kernel already unpacked are
# left alone. See docs/VFIO.md.
set -euo pipefail

kdir=${GOMHI_VFIO_KERNEL_DIR:-/var/cache/gomhi/vfio-kernel}
say() { echo "vfio-setup: $*"; }

if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
	say "needs a Debian-like system (apt-get, dpkg). Elsewhere install QEMU (x86_64, with the" >&2
	say "edu device), a static busybox and cpio, and unpack a kernel with VFIO type1 and" >&2
	say "intel-iommu into $kdir (boot/vmlinuz-VER, lib/modules/VER/); see docs/VFIO.md" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	say "needs root (apt-get); run: sudo bash $0" >&2
	exit 1
fi

updated=
apt_update() {
	if [ -z "$updated" ]; then
		apt-get update -qq
		updated=1
	fi
}

# 1. Packages.
pkgs=()
command -v qemu-system-x86_64 >/dev/null || pkgs+=(qemu-system-x86)
# The guest needs a statically linked busybox (it runs with no libc).
if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then
	pkgs+=(busybox-static)
fi
command -v cpio >/dev/null || pkgs+=(cpio)
if [ ${#pkgs[@]} -gt 0 ]; then
	apt_update
	say "installing ${pkgs[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
else
	say "qemu-system-x86_64, static busybox and cpio already present"
fi

# 2. Kernel: Debian's cloud flavour (small, boots in ~3 s under TCG, has
# VFIO type1 and the Intel IOMMU driver). Unpacked with dpkg -x: installing
# a linux-image package would build an initramfs for the host for nothing.
if ls "$kdir"/boot/vmlinuz-* >/dev/null 2>&1 && [ -d "$kdir/lib/modules" ]; then
	say "kernel already in $kdir: $(basename "$(ls "$kdir"/boot/vmlinuz-* | head -n1)")"
	exit 0
fi
apt_update
# The metapackage depends on the versioned image, e.g. linux-image-6.1.0-57-cloud-amd64.
pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
	awk '/Depends: linux-image-[0-9].*-cloud-amd64/ {print $2; exit}')
if [ -z "$pkg" ]; then
	say "cannot resolve the cloud kernel package from linux-image-cloud-amd64" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chown _apt "$tmp" 2>/dev/null || true # lets apt download without the "unsandboxed" warning
say "downloading $pkg"
(cd "$tmp" && apt-get download -qq "$pkg")
rm -rf "$kdir.new"
mkdir -p "$kdir.new"
dpkg -x "$tmp"/"$pkg"_*.deb "$kdir.new"
rm -rf "$kdir"
mv "$kdir.new" "$kdir"
say "unpacked $pkg into $kdir ($(du -sh "$kdir" | cut -f1))"
