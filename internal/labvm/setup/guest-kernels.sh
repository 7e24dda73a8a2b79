#!/usr/bin/env bash
# Unpacks the newer guest kernels of the Linux-driver tests' kernel matrix
# (run by internal/labvm/setup/test-deps.sh, so by `make test-deps` and `make test`); the
# oldest, bookworm's 6.1, is test-deps.sh's own vfio-kernel/. Each is
# Debian's cloud flavour (small, boots fast under TCG, has the MHI and WWAN
# modules), downloaded with apt into a private state and unpacked with
# dpkg -x, no root needed:
#
#   $cache/kernel-trixie/             trixie's kernel (6.12, with trixie-security)
#   $cache/kernel-trixie-backports/   the newest in trixie-backports (7.x)
#
# The newer packages differ from bookworm's: modules live under
# usr/lib/modules (merged /usr), are xz-compressed (.ko.xz), and from 7.x on
# the image package is split into linux-binary-* (the kernel, at
# usr/lib/modules/<version>/vmlinuz) and linux-modules-*. The script
# unpacks all of them and decompresses the modules the tests load (MHI,
# WWAN, GNSS, mhi_net) next to the .ko.xz files, so the guest's busybox
# insmod needs no xz; internal/labvm finds either layout.
#
# Usage: guest-kernels.sh CACHE-DIR. $GOMHI_KERNEL_TRIXIE_DIR and
# $GOMHI_KERNEL_TRIXIE_BACKPORTS_DIR name other folders (then nothing is
# unpacked there if a kernel is in place). Mirrors: $GOMHI_DEBIAN_MIRROR and
# $GOMHI_DEBIAN_SECURITY_MIRROR, else the machine's apt sources.
# Idempotent: a folder already holding a kernel and its decompressed MHI
# modules is only checked (a newer Debian kernel is not fetched until the
# folder is removed). Exits non-zero, saying why, if a kernel cannot be
# prepared.
set -euo pipefail

say() { echo "test-deps: kernels: $*"; }

cache=${1:?usage: guest-kernels.sh CACHE-DIR}
declare -A dirs=(
	[trixie]=${GOMHI_KERNEL_TRIXIE_DIR:-$cache/kernel-trixie}
	[trixie-backports]=${GOMHI_KERNEL_TRIXIE_BACKPORTS_DIR:-$cache/kernel-trixie-backports}
)
suites=(trixie trixie-backports)

# kernel_in DIR: the kernel image of an unpacked tree, in either layout.
kernel_in() {
	{ compgen -G "$1/boot/vmlinuz-*" || compgen -G "$1/usr/lib/modules/*/vmlinuz" || true; } | head -n1
}
kernel_ok() {
	[ -n "$(kernel_in "$1")" ] && compgen -G "$1/lib/modules/*/kernel/drivers/bus/mhi/host/mhi.ko" >/dev/null ||
		compgen -G "$1/usr/lib/modules/*/kernel/drivers/bus/mhi/host/mhi.ko" >/dev/null
}

# pvh_vmlinux DIR: the uncompressed kernel (boot/vmlinux-<release>) next to
# the bzImage, taken out of it once. QEMU boots such an ELF through its PVH
# entry point, which saves the bzImage's decompression under TCG (about a
# quarter of a boot here); labvm uses it when it has the PVH note, the
# bzImage otherwise. The newer Debian images are zstd- or xz-compressed.
pvh_vmlinux() {
	local img rel out off
	img=$(kernel_in "$1")
	[ -n "$img" ] || return 0
	rel=$(basename "$img")
	[ "$rel" = vmlinuz ] && rel=$(basename "$(dirname "$img")") || rel=${rel#vmlinuz-}
	out=$1/boot/vmlinux-$rel
	[ -s "$out" ] && return 0
	mkdir -p "$1/boot"
	for magic in '\x28\xb5\x2f\xfd:zstd' '\xfd\x37\x7a\x58\x5a\x00:xz'; do
		command -v "${magic#*:}" >/dev/null || continue
		off=$(LC_ALL=C grep -obUaP "${magic%:*}" "$img" | head -n1 | cut -d: -f1)
		[ -n "$off" ] || continue
		# The stream is followed by the bzImage's trailer, which the
		# decompressor reports; what it wrote before is the whole kernel.
		tail -c +$((off + 1)) "$img" | "${magic#*:}" -dcq >"$out.tmp" 2>/dev/null || true
		if [ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' ')" = 177ELF ]; then
			mv "$out.tmp" "$out"
			return 0
		fi
	done
	rm -f "$out.tmp"
	say "no uncompressed kernel taken out of $img (the tests boot the bzImage, slower)" >&2
}

need=()
for s in "${suites[@]}"; do
	if kernel_ok "${dirs[$s]}"; then
		pvh_vmlinux "${dirs[$s]}"
		say "$s: $(cat "${dirs[$s]}/package" 2>/dev/null || basename "$(kernel_in "${dirs[$s]}")") in ${dirs[$s]}"
	else
		need+=("$s")
	fi
done
[ ${#need[@]} -eq 0 ] && exit 0

for t in apt-get apt-cache dpkg xz; do
	if ! command -v $t >/dev/null; then
		say "needs $t (apt, dpkg, xz-utils) to unpack Debian's kernels; elsewhere unpack a kernel with the MHI modules into ${dirs[${need[0]}]}" >&2
		exit 1
	fi
done

. "$(dirname "$0")/mirrors.sh"
debian_mirrors http://deb.debian.org/debian
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

SECONDS=0
mkdir -p "$cache"
work=$(mktemp -d "$cache/.kernels.XXXXXX")
trap 'rm -rf "$work"' EXIT
st=$work/apt
mkdir -p "$st"/{lists/partial,cache/archives/partial,etc/parts}
{
	echo "deb [signed-by=$keyring] $mirror trixie main"
	echo "deb [signed-by=$keyring] $mirror trixie-backports main"
	[ -n "$security" ] && echo "deb [signed-by=$keyring] $security trixie-security main"
} >"$st/etc/sources.list"
apt=(
	-o "Dir::Etc::SourceList=$st/etc/sources.list"
	-o "Dir::Etc::SourceParts=$st/etc/parts"
	-o "Dir::Etc::Preferences=$st/etc/preferences"
	-o "Dir::Etc::PreferencesParts=$st/etc/parts"
	-o "Dir::State::Lists=$st/lists"
	-o "Dir::Cache=$st/cache"
	-o "Dir::State::status=/dev/null"
	-o "Debug::NoLocking=1"
	-o "APT::Sandbox::User=root"
	-o "Acquire::Languages=none"
)
say "fetching trixie's package lists"
if ! apt-get "${apt[@]}" -qq update; then
	say "apt-get update failed" >&2
	exit 1
fi

failed=()
for s in "${need[@]}"; do
	dir=${dirs[$s]}
	# The metapackage's candidate in the suite (trixie: trixie or
	# trixie-security, whichever is newer, backports being pinned below
	# them; trixie-backports: the newest there, as default release) depends on the versioned image package, which from 7.x on
	# depends on the split linux-binary-* and linux-modules-* packages.
	rel=()
	[ "$s" = trixie ] || rel=(-o "APT::Default-Release=$s")
	pkg=$(apt-cache "${apt[@]}" "${rel[@]}" depends linux-image-cloud-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9].*-cloud-amd64$/ {print $2; exit}')
	if [ -z "$pkg" ]; then
		say "$s: cannot resolve the versioned package of linux-image-cloud-amd64" >&2
		failed+=("$s")
		continue
	fi
	abi=${pkg#linux-image-}
	pkgs=("$pkg")
	for p in $(apt-cache "${apt[@]}" depends "$pkg" 2>/dev/null | awk '/Depends: linux-(binary|modules)-/ {print $2}'); do
		[ "$p" = "linux-binary-$abi" ] || [ "$p" = "linux-modules-$abi" ] && pkgs+=("$p")
	done
	dl=$work/dl-$s
	mkdir -p "$dl"
	if ! (cd "$dl" && apt-get "${apt[@]}" -qq download "${pkgs[@]}"); then
		say "$s: downloading ${pkgs[*]} failed" >&2
		failed+=("$s")
		continue
	fi
	rm -rf "$dir.work"
	mkdir -p "$dir.work"
	for deb in "$dl"/*.deb; do
		dpkg -x "$deb" "$dir.work"
	done
	# The modules the tests load, decompressed next to their .ko.xz.
	find "$dir.work" \( -path '*/kernel/drivers/bus/mhi/*' -o -path '*/kernel/drivers/net/wwan/*' \
		-o -path '*/kernel/drivers/gnss/*' -o -path '*/kernel/drivers/net/mhi_net.ko.xz' \) \
		-name '*.ko.xz' -exec xz -d -k {} +
	version=$(dpkg-deb -f "$dl/${pkg}"_*.deb Version)
	echo "$pkg $version (${pkgs[*]})" >"$dir.work/package"
	if ! kernel_ok "$dir.work"; then
		say "$s: ${pkgs[*]} hold no kernel image with the MHI modules" >&2
		failed+=("$s")
		continue
	fi
	pvh_vmlinux "$dir.work"
	rm -rf "$dir"
	mv "$dir.work" "$dir"
	say "$s: unpacked $pkg $version (${#pkgs[@]} packages) into $dir ($(du -sh "$dir" | cut -f1))"
done
say "done in ${SECONDS} s"
if [ ${#failed[@]} -gt 0 ]; then
	say "could not prepare: ${failed[*]}" >&2
	exit 1
fi
