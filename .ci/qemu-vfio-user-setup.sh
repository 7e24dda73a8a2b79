#!/usr/bin/env bash
# Prepares QEMU >= 10.1 (the first version with the vfio-user client,
# device "vfio-user-pci") for the Linux-driver test
# (pcigeneric/vfiouser/linux_test.go): Debian's qemu-system-x86 from
# trixie-backports and its whole dependency closure, downloaded with apt
# into a private state (the host's dpkg database and sources are not
# touched) and unpacked with dpkg -x into one folder. QEMU then runs through
# that folder's own dynamic loader, so nothing of the host's libc is used;
# see docs/LINUX-DRIVER.md.
#
# Usage: bash .ci/qemu-vfio-user-setup.sh [DIR]
# DIR defaults to $GOMHI_QEMU_DIR or /var/cache/gomhi/qemu-vfio-user. The
# result is DIR/qemu (a wrapper script running the unpacked binary).
# Idempotent: a folder whose wrapper already runs is left alone. Needs no
# root (only write access to DIR) but needs network access to a Debian
# mirror.
set -euo pipefail

dir=${1:-${GOMHI_QEMU_DIR:-/var/cache/gomhi/qemu-vfio-user}}
suite=trixie-backports
say() { echo "qemu-vfio-user-setup: $*"; }

if [ -x "$dir/qemu" ] && "$dir/qemu" -version 2>/dev/null | grep -q 'QEMU emulator'; then
	say "already in $dir: $("$dir/qemu" -version | head -n1)"
	exit 0
fi
for t in apt-get dpkg; do
	command -v "$t" >/dev/null || {
		say "needs $t (a Debian-like host); elsewhere install QEMU >= 10.1 and set GOMHI_QEMU to its qemu-system-x86_64" >&2
		exit 1
	}
done

# The mirror the machine already uses (first deb.debian.org-style URI of its
# own sources), so the bundle comes from the same place as everything else.
mirror=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
	grep -oE 'https?://[^ ]+/debian/?' | grep -v security | head -n1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}

SECONDS=0
work="$dir.work"
rm -rf "$work"
mkdir -p "$work"/{lists/partial,cache/archives/partial,etc}
cat >"$work/etc/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main
EOF
aptopts=(
	-o "Dir::Etc::SourceList=$work/etc/sources.list"
	-o "Dir::Etc::SourceParts=/nonexistent"
	-o "Dir::State::Lists=$work/lists"
	-o "Dir::Cache=$work/cache"
	-o "Dir::State::status=/dev/null"
	-o "Debug::NoLocking=1"
	-o "APT::Sandbox::User=root"
	-o "Acquire::Languages=none"
)
say "fetching $suite package lists from $mirror"
apt-get "${aptopts[@]}" -qq update
say "downloading qemu-system-x86 and its dependency closure"
# An empty dpkg status makes apt resolve the complete closure, libc6 included.
apt-get "${aptopts[@]}" -qq -y --download-only --no-install-recommends \
	-t "$suite" install qemu-system-x86 >/dev/null
root="$work/root"
mkdir -p "$root"
n=0
for deb in "$work"/cache/archives/*.deb; do
	dpkg -x "$deb" "$root"
	n=$((n + 1))
done
lib="$root/usr/lib/x86_64-linux-gnu"
loader=$(ls "$root"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root"/lib64/ld-linux-x86-64.so.2 2>/dev/null | head -n1 || true)
if [ -z "$loader" ] || [ ! -x "$root/usr/bin/qemu-system-x86_64" ]; then
	say "unpacked $n packages but found no qemu-system-x86_64 or dynamic loader in them" >&2
	exit 1
fi
rm -rf "$work/cache" "$work/lists" "$work/etc"

# The wrapper runs the bundle's QEMU with the bundle's libraries, modules
# and firmware. Paths are relative to the wrapper so the folder can move.
cat >"$work/qemu" <<'EOF'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
r=$here/root
l=$r/usr/lib/x86_64-linux-gnu
QEMU_MODULE_DIR=$l/qemu exec "$l/ld-linux-x86-64.so.2" --library-path "$l" \
	"$r/usr/bin/qemu-system-x86_64" -L "$r/usr/share/qemu" -L "$r/usr/share/seabios" "$@"
EOF
chmod +x "$work/qemu"
if ! "$work/qemu" -version | grep -q 'QEMU emulator'; then
	say "the unpacked QEMU does not run" >&2
	exit 1
fi
if ! "$work/qemu" -device vfio-user-pci,help 2>/dev/null | grep -q socket; then
	say "the unpacked QEMU has no vfio-user-pci device" >&2
	exit 1
fi
rm -rf "$dir"
mv "$work" "$dir"
say "$("$dir/qemu" -version | head -n1) from $n packages in $dir ($(du -sh "$dir" | cut -f1), ${SECONDS} s)"
