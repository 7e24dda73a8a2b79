#!/usr/bin/env bash
# Prepares what the real-kernel tests need (`make test-deps`, run by
# `make test`): the VFIO test (pcigeneric/vfio/qemu_test.go) and the
# Linux-driver tests (pcigeneric/vfiouser/linux_test.go) boot Debian's
# kernel under QEMU. Everything comes from Debian packages downloaded with
# apt into a private state (the host's dpkg database and sources are not
# touched) and unpacked with dpkg -x, so no root is needed, only network
# access to the Debian mirror the machine already uses:
#
#   qemu-vfio-user/  QEMU 11.1 (trixie-backports' qemu-system-x86 and its
#                    whole dependency closure, run through the bundle's own
#                    dynamic loader): edu, intel-iommu and vfio-user-pci,
#                    so one QEMU serves both kinds of test
#   vfio-kernel/     bookworm's cloud kernel (VFIO, MHI and WWAN modules)
#   busybox/         bookworm's busybox-static (bin/busybox), the guests'
#                    userland
#
# The initramfs is packed in Go (internal/labvm), so no cpio.
#
# The cache folder is $GOMHI_CACHE_DIR, else /var/cache/gomhi for root,
# else gomhi in the user's cache folder ($XDG_CACHE_HOME or ~/.cache);
# labvm.CacheDir computes the same. Per component: $GOMHI_QEMU (a
# qemu-system-x86_64 to use instead of the bundle), $GOMHI_QEMU_DIR,
# $GOMHI_VFIO_KERNEL_DIR, $GOMHI_BUSYBOX (a static busybox). Mirrors:
# $GOMHI_DEBIAN_MIRROR and $GOMHI_DEBIAN_SECURITY_MIRROR, else the first
# ones of the machine's apt sources.
#
# Idempotent: a component already in place is only checked (one line each,
# well under a second in all). When a component cannot be prepared the
# script says why; under CI=true it then fails, elsewhere it warns and the
# tests that need the component skip, saying so. See docs/RELIABILITY.md.
set -euo pipefail

say() { echo "test-deps: $*"; }

cache=${GOMHI_CACHE_DIR:-}
if [ -z "$cache" ]; then
	if [ "$(id -u)" -eq 0 ]; then
		cache=/var/cache/gomhi
	elif [ -n "${XDG_CACHE_HOME:-}" ]; then
		cache=$XDG_CACHE_HOME/gomhi
	elif [ -n "${HOME:-}" ]; then
		cache=$HOME/.cache/gomhi
	else
		cache=${TMPDIR:-/tmp}/gomhi-cache
	fi
fi
qdir=${GOMHI_QEMU_DIR:-$cache/qemu-vfio-user}
kdir=${GOMHI_VFIO_KERNEL_DIR:-$cache/vfio-kernel}
bdir=$cache/busybox

failed=()
finish() {
	if [ ${#failed[@]} -eq 0 ]; then
		exit 0
	fi
	if [ "${CI:-}" = true ]; then
		say "CI=true: cannot prepare ${failed[*]}" >&2
		exit 1
	fi
	say "warning: cannot prepare ${failed[*]}; the tests that need it will skip (with CI=true they fail)" >&2
	exit 0
}

mkdir -p "$cache" || {
	failed+=("the cache folder $cache")
	finish
}
# Two runs at once (two worktrees) wait for each other instead of
# unpacking into the same folders.
if command -v flock >/dev/null; then
	exec 9>"$cache/.test-deps.lock"
	flock 9
fi

# The Linux-driver tests' newer guest kernels: trixie's and trixie-backports'.
"$(dirname "$0")/guest-kernels.sh" "$cache" || failed+=("the newer guest kernels (internal/labvm/setup/guest-kernels.sh)")

# --- What is already there -------------------------------------------------

qemu_ok() { [ -x "$1/qemu" ] && "$1/qemu" -version 2>/dev/null | grep -q 'QEMU emulator'; }
kernel_ok() { ls "$1"/boot/vmlinuz-* >/dev/null 2>&1 && [ -d "$1/lib/modules" ]; }
busybox_ok() { [ -x "$1/bin/busybox" ] && "$1/bin/busybox" true 2>/dev/null; }

need_qemu= need_kernel= need_busybox=
if [ -n "${GOMHI_QEMU:-}" ]; then
	if "$GOMHI_QEMU" -version 2>/dev/null | grep -q 'QEMU emulator'; then
		say "qemu: \$GOMHI_QEMU=$GOMHI_QEMU ($("$GOMHI_QEMU" -version | head -n1))"
	else
		say "qemu: \$GOMHI_QEMU=$GOMHI_QEMU does not run" >&2
		failed+=("qemu (\$GOMHI_QEMU=$GOMHI_QEMU)")
	fi
elif qemu_ok "$qdir"; then
	say "qemu: $("$qdir/qemu" -version | head -n1) in $qdir"
else
	need_qemu=1
fi
if kernel_ok "$kdir"; then
	say "kernel: $(basename "$(ls "$kdir"/boot/vmlinuz-* | head -n1)") in $kdir"
else
	need_kernel=1
fi
if [ -n "${GOMHI_BUSYBOX:-}" ]; then
	if "$GOMHI_BUSYBOX" true 2>/dev/null; then
		say "busybox: \$GOMHI_BUSYBOX=$GOMHI_BUSYBOX"
	else
		say "busybox: \$GOMHI_BUSYBOX=$GOMHI_BUSYBOX does not run" >&2
		failed+=("busybox (\$GOMHI_BUSYBOX=$GOMHI_BUSYBOX)")
	fi
elif busybox_ok "$bdir"; then
	say "busybox: $("$bdir/bin/busybox" | head -n1 | cut -d' ' -f1-2) in $bdir"
else
	need_busybox=1
fi
# The ModemManager guest's Debian root file system (mmdebstrap, genext2fs);
# GOMHI_SETUP_ROOTFS=0 leaves it out (mhictl lab's first use without
# --userland modemmanager).
if [ "${GOMHI_SETUP_ROOTFS:-1}" != 0 ]; then
	"$(dirname "$0")/guest-rootfs.sh" "$cache" || failed+=("the ModemManager guest's root file system (internal/labvm/setup/guest-rootfs.sh)")
fi
if [ -z "$need_qemu$need_kernel$need_busybox" ]; then
	finish
fi

# --- Private apt states ----------------------------------------------------

for t in apt-get apt-cache dpkg; do
	if ! command -v $t >/dev/null; then
		say "needs $t (a Debian-like host); elsewhere install QEMU >= 10.1 (GOMHI_QEMU), a static busybox" >&2
		say "(GOMHI_BUSYBOX) and unpack a kernel with VFIO, MHI and WWAN modules into $kdir; see docs/VFIO.md" >&2
		[ -n "$need_qemu" ] && failed+=(qemu)
		[ -n "$need_kernel" ] && failed+=(kernel)
		[ -n "$need_busybox" ] && failed+=(busybox)
		finish
	fi
done

# The mirrors the machine already uses (the first deb.debian.org-style URIs
# of its own sources), so everything comes from the same place.
. "$(dirname "$0")/mirrors.sh"
debian_mirrors
if [ -z "$mirror" ]; then
	say "no Debian mirror in the machine's apt sources; set GOMHI_DEBIAN_MIRROR" >&2
	[ -n "$need_qemu" ] && failed+=(qemu)
	[ -n "$need_kernel" ] && failed+=(kernel)
	[ -n "$need_busybox" ] && failed+=(busybox)
	finish
fi

work=$(mktemp -d "$cache/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# apt_state NAME SOURCE-LINE...: a private apt state under $work/NAME with
# fresh package lists; sets aptopts.
apt_state() {
	local name=$1 s=$work/$1
	shift
	mkdir -p "$s"/{lists/partial,cache/archives/partial,etc/parts}
	printf '%s\n' "$@" >"$s/etc/sources.list"
	aptopts=(
		-o "Dir::Etc::SourceList=$s/etc/sources.list"
		-o "Dir::Etc::SourceParts=$s/etc/parts"
		-o "Dir::Etc::Preferences=$s/etc/preferences"
		-o "Dir::Etc::PreferencesParts=$s/etc/parts"
		-o "Dir::State::Lists=$s/lists"
		-o "Dir::Cache=$s/cache"
		-o "Dir::State::status=/dev/null"
		-o "Debug::NoLocking=1"
		-o "APT::Sandbox::User=root"
		-o "Acquire::Languages=none"
	)
	say "$name: fetching package lists"
	apt-get "${aptopts[@]}" -qq update
}

# unpack DIR DEB...: dpkg -x each package into DIR. Components are built in
# FOLDER.work and then replace FOLDER (commit FOLDER), so an interrupted run
# never leaves a half folder in place.
unpack() {
	local dir=$1
	shift
	mkdir -p "$dir"
	for deb in "$@"; do
		dpkg -x "$deb" "$dir"
	done
}
commit() {
	rm -rf "$1"
	mv "$1.work" "$1"
}

# --- bookworm: kernel and busybox ------------------------------------------

if [ -n "$need_kernel$need_busybox" ]; then
	SECONDS=0
	lines=("deb [signed-by=$keyring] $mirror bookworm main")
	[ -n "$security" ] && lines+=("deb [signed-by=$keyring] $security bookworm-security main")
	if ! apt_state bookworm "${lines[@]}"; then
		say "bookworm: apt-get update failed" >&2
		[ -n "$need_kernel" ] && failed+=(kernel)
		[ -n "$need_busybox" ] && failed+=(busybox)
	else
		dl=$work/bookworm/dl
		mkdir -p "$dl"
		if [ -n "$need_kernel" ]; then
			# Debian's cloud flavour: small, boots in ~3 s under TCG, has VFIO
			# type1, the Intel IOMMU driver and the MHI and WWAN modules. The
			# metapackage depends on the versioned image.
			pkg=$(apt-cache "${aptopts[@]}" depends linux-image-cloud-amd64 2>/dev/null |
				awk '/Depends: linux-image-[0-9].*-cloud-amd64/ {print $2; exit}')
			if [ -z "$pkg" ]; then
				say "kernel: cannot resolve the versioned package of linux-image-cloud-amd64" >&2
				failed+=(kernel)
			elif ! (cd "$dl" && apt-get "${aptopts[@]}" -qq download "$pkg"); then
				say "kernel: downloading $pkg failed" >&2
				failed+=(kernel)
			else
				rm -rf "$kdir.work"
				unpack "$kdir.work" "$dl/${pkg}"_*.deb
				if kernel_ok "$kdir.work"; then
					commit "$kdir"
					say "kernel: unpacked $pkg into $kdir ($(du -sh "$kdir" | cut -f1))"
				else
					say "kernel: $pkg has no boot/vmlinuz-* and lib/modules" >&2
					failed+=(kernel)
				fi
			fi
		fi
		if [ -n "$need_busybox" ]; then
			if ! (cd "$dl" && apt-get "${aptopts[@]}" -qq download busybox-static); then
				say "busybox: downloading busybox-static failed" >&2
				failed+=(busybox)
			else
				rm -rf "$bdir.work"
				unpack "$bdir.work" "$dl"/busybox-static_*.deb
				if busybox_ok "$bdir.work"; then
					commit "$bdir"
					say "busybox: $("$bdir/bin/busybox" | head -n1 | cut -d' ' -f1-2) unpacked into $bdir"
				else
					say "busybox: busybox-static has no runnable bin/busybox" >&2
					failed+=(busybox)
				fi
			fi
		fi
		say "bookworm part done in ${SECONDS} s"
	fi
fi

# --- trixie-backports: QEMU ------------------------------------------------

# QEMU >= 10.1 is the first with the vfio-user client (vfio-user-pci).
if [ -n "$need_qemu" ]; then
	SECONDS=0
	suite=trixie-backports
	qfail() {
		say "qemu: $*" >&2
		failed+=(qemu)
	}
	if ! apt_state trixie "deb [signed-by=$keyring] $mirror trixie main" \
		"deb [signed-by=$keyring] $mirror $suite main"; then
		qfail "apt-get update failed"
	# An empty dpkg status makes apt resolve the complete closure, libc6
	# included.
	elif ! apt-get "${aptopts[@]}" -qq -y --download-only --no-install-recommends \
		-t "$suite" install qemu-system-x86 >/dev/null; then
		qfail "downloading qemu-system-x86 and its dependency closure failed"
	else
		debs=("$work"/trixie/cache/archives/*.deb)
		rm -rf "$qdir.work"
		root=$qdir.work/root
		unpack "$root" "${debs[@]}"
		# The wrapper runs the bundle's QEMU with the bundle's libraries,
		# modules and firmware. Paths are relative to the wrapper so the
		# folder can move.
		cat >"$qdir.work/qemu" <<'EOF'
#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
r=$here/root
l=$r/usr/lib/x86_64-linux-gnu
QEMU_MODULE_DIR=$l/qemu exec "$l/ld-linux-x86-64.so.2" --library-path "$l" \
	"$r/usr/bin/qemu-system-x86_64" -L "$r/usr/share/qemu" -L "$r/usr/share/seabios" "$@"
EOF
		chmod +x "$qdir.work/qemu"
		missing=
		for d in vfio-user-pci edu intel-iommu; do
			"$qdir.work/qemu" -device "$d,help" 2>/dev/null | grep -q ' options:' || missing="$missing $d"
		done
		if [ ! -x "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ] || ! qemu_ok "$qdir.work"; then
			qfail "the unpacked QEMU (${#debs[@]} packages) does not run"
		elif [ -n "$missing" ]; then
			qfail "the unpacked QEMU lacks the device(s)$missing"
		else
			commit "$qdir"
			say "qemu: $("$qdir/qemu" -version | head -n1) from ${#debs[@]} packages in $qdir ($(du -sh "$qdir" | cut -f1), ${SECONDS} s)"
		fi
	fi
fi

finish
