#!/usr/bin/env bash
# Builds the ModemManager guest's root file system (run by
# internal/labvm/setup/test-deps.sh, so by `make test-deps` and `make test`): Debian
# bookworm's ModemManager 1.20.4, NetworkManager 1.42.4 (for
# networkmanager_test.go), libmbim/libqmi with their proxies and
# command-line tools, D-Bus, udev, polkitd, iproute2, kmod, ping and
# busybox, made by mmdebstrap in unshare mode (a user namespace: no root
# needed where the user has subordinate ids, nothing mounted on the host)
# into a tarball, then into an ext2 image by genext2fs (no root, no loop
# device). The test (pcigeneric/vfiouser/modemmanager_test.go) boots it as
# a virtio disk under QEMU with snapshot=on, so the image is never written.
# Documentation, manual pages and translations are left out.
#
#   $cache/mm-rootfs/rootfs.ext2     the image
#   $cache/mm-rootfs/packages.txt    the packages and versions inside
#   $cache/mm-rootfs/stamp           what the image was built from
#
# Usage: guest-rootfs.sh CACHE-DIR. $GOMHI_MM_ROOTFS names another image
# to use instead (then nothing is built). Mirrors: $GOMHI_DEBIAN_MIRROR and
# $GOMHI_DEBIAN_SECURITY_MIRROR, else the machine's apt sources. Idempotent:
# an image built from the same package list is only checked.
set -euo pipefail

say() { echo "test-deps: mm-rootfs: $*"; }

cache=${1:?usage: guest-rootfs.sh CACHE-DIR}
if [ -n "${GOMHI_MM_ROOTFS:-}" ]; then
	if [ -f "$GOMHI_MM_ROOTFS" ]; then
		say "\$GOMHI_MM_ROOTFS=$GOMHI_MM_ROOTFS"
		exit 0
	fi
	say "\$GOMHI_MM_ROOTFS=$GOMHI_MM_ROOTFS does not exist" >&2
	exit 1
fi
dir=$cache/mm-rootfs

# What goes in. Changing this list (or the trimming) rebuilds the image.
packages=modemmanager,network-manager,libmbim-utils,libmbim-proxy,libqmi-utils,libqmi-proxy,dbus,udev,polkitd,iproute2,kmod,iputils-ping,busybox
excludes=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/share/i18n/*' '/usr/share/lintian/*')
stamp="bookworm variant=essential include=$packages exclude=${excludes[*]} format=ext2-4k"

if [ -f "$dir/rootfs.ext2" ] && [ "$(cat "$dir/stamp" 2>/dev/null)" = "$stamp" ]; then
	say "$(wc -l <"$dir/packages.txt") packages, $(du -m --apparent-size "$dir/rootfs.ext2" | cut -f1) MB image in $dir"
	exit 0
fi

missing=()
for t in mmdebstrap genext2fs; do
	command -v $t >/dev/null || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "needs ${missing[*]} (Debian packages mmdebstrap, genext2fs and uidmap; make test installs them as root: .ci/host-packages)" >&2
	exit 1
fi

. "$(dirname "$0")/mirrors.sh"
debian_mirrors http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
lines=("deb [signed-by=$keyring] $mirror bookworm main")
[ -n "$security" ] && lines+=("deb [signed-by=$keyring] $security bookworm-security main")

SECONDS=0
mkdir -p "$cache"
work=$(mktemp -d "$cache/.mm-rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
opts=(--variant=essential --include="$packages"
	--aptopt='APT::Install-Recommends "false"'
	--customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" > "$1/packages.txt"'
	--customize-hook='copy-out /packages.txt '"$work"
	--customize-hook='rm -f "$1/packages.txt"')
for e in "${excludes[@]}"; do
	opts+=(--dpkgopt="path-exclude=$e")
done
# Keep the licences.
opts+=(--dpkgopt='path-include=/usr/share/doc/*/copyright')
# unshare: a user namespace maps root inside to the caller; root mode is
# the fallback for root on a machine without user namespaces.
built=
for mode in unshare root; do
	[ $mode = root ] && [ "$(id -u)" -ne 0 ] && break
	if mmdebstrap --mode=$mode "${opts[@]}" bookworm "$work/rootfs.tar" "${lines[@]}" </dev/null >"$work/mmdebstrap.log" 2>&1; then
		built=$mode
		break
	fi
	say "mmdebstrap --mode=$mode failed:" >&2
	grep -vE "^(Get|Fetched|Selecting|Preparing|Unpacking|Setting up|Processing|Reading|Hit|I:)" "$work/mmdebstrap.log" | tail -n 30 >&2
done
if [ -z "$built" ]; then
	exit 1
fi
# ext2 with 4 KiB blocks, a third of the contents free for what the guest
# writes at run time (into QEMU's snapshot, never into this file).
size=$(stat -c %s "$work/rootfs.tar")
blocks=$((size / 4096 * 13 / 10 + 16384))
if ! genext2fs -B 4096 -b $blocks -i 16384 -m 0 -L gomhi-mm -a "$work/rootfs.tar" "$work/rootfs.ext2" 2>"$work/genext2fs.log"; then
	say "genext2fs failed:" >&2
	cat "$work/genext2fs.log" >&2
	exit 1
fi
rm -rf "$dir.work"
mkdir -p "$dir.work"
mv "$work/rootfs.ext2" "$work/packages.txt" "$dir.work/"
echo "$stamp" >"$dir.work/stamp"
rm -rf "$dir"
mv "$dir.work" "$dir"
say "built with mmdebstrap --mode=$built in ${SECONDS} s: $(wc -l <"$dir/packages.txt") packages, tarball $((size / 1048576)) MB, image $(du -m --apparent-size "$dir/rootfs.ext2" | cut -f1) MB in $dir"
