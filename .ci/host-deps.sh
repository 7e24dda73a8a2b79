#!/usr/bin/env bash
# Installs the Debian packages the tests need (`make host-deps`, the first
# step of `make test`, so of .ci/run too): the list is .ci/host-packages.
#
# - Everything there: one line, nothing else.
# - Missing, as root on a machine with apt-get: apt-get update, then
#   apt-get install --no-install-recommends of what is missing.
# - Missing, without root or apt-get: stops (exit 1) before any test runs
#   and prints the one command that installs what is missing.
# - Without root, under CI=true (make test sets it): stops (exit 1) too, the
#   TUN, FUSE, namespace and systemd-unit tests need root.
#
# Outside CI=true (`make test CI=false`) a missing package or root is a
# warning, and the tests that need it skip, each saying what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "host-deps: $*"; }
# $GOMHI_HOST_PACKAGES: another list (the script's own test uses it).
list=${GOMHI_HOST_PACKAGES:-.ci/host-packages}
strict=
[ "${CI:-}" = true ] && strict=1

# have CHECK: a command on PATH, or an absolute path that exists.
have() {
	case $1 in
	/*) [ -e "$1" ] ;;
	*) command -v "$1" >/dev/null ;;
	esac
}

missing=()
checks=()
while read -r check pkg _; do
	case $check in '' | '#'*) continue ;; esac
	if ! have "$check"; then
		checks+=("$check")
		# One package once, in the list's order.
		case " ${missing[*]:-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
	fi
done <"$list"

root=
[ "$(id -u)" -eq 0 ] && root=1
apt=
command -v apt-get >/dev/null && command -v dpkg >/dev/null && apt=1

if [ ${#missing[@]} -gt 0 ] && [ -n "$root" ] && [ -n "$apt" ]; then
	say "installing ${missing[*]} (missing: ${checks[*]})"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	still=()
	while read -r check pkg _; do
		case $check in '' | '#'*) continue ;; esac
		have "$check" || still+=("$check ($pkg)")
	done <"$list"
	if [ ${#still[@]} -gt 0 ]; then
		say "installed, but still missing: ${still[*]}" >&2
		exit 1
	fi
	missing=()
fi

if [ ${#missing[@]} -gt 0 ]; then
	if [ -n "$apt" ]; then
		cmd="sudo apt-get install -y --no-install-recommends ${missing[*]}"
	else
		cmd="install the Debian packages ${missing[*]} (or your system's equivalents)"
	fi
	if [ -n "$strict" ]; then
		say "missing: ${checks[*]}; the tests need them. Install them with:" >&2
		echo "  $cmd" >&2
		[ -z "$root" ] && say "then run the tests as root (TUN, FUSE, namespaces): sudo env \"PATH=\$PATH\" make test" >&2
		exit 1
	fi
	say "warning: missing ${checks[*]}; the tests that need them skip (install: $cmd)" >&2
fi

if [ -z "$root" ]; then
	if [ -n "$strict" ]; then
		say "the TUN, FUSE, network-namespace and systemd-unit tests need root; run:" >&2
		echo "  sudo env \"PATH=\$PATH\" make test" >&2
		say "(or make test CI=false: the tests that need root skip, each saying so)" >&2
		exit 1
	fi
	say "warning: not root; the tests that need root skip" >&2
fi
[ ${#missing[@]} -eq 0 ] && say "all $(grep -cvE '^[[:space:]]*(#|$)' "$list") tools of $list present"
exit 0
