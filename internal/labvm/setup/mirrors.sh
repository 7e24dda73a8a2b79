# Sourced by the .ci scripts that fetch Debian packages. debian_mirrors
# [DEFAULT] sets $mirror and $security (no trailing slash): from
# $GOMHI_DEBIAN_MIRROR and $GOMHI_DEBIAN_SECURITY_MIRROR, else the first
# debian and debian-security URIs of the machine's apt sources, so that
# everything comes from the place the machine already uses; $mirror falls
# back to DEFAULT (may be empty), $security to nothing.
debian_mirrors() {
	local sources
	sources=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true)
	mirror=${GOMHI_DEBIAN_MIRROR:-$(echo "$sources" | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -n1 || true)}
	security=${GOMHI_DEBIAN_SECURITY_MIRROR:-$(echo "$sources" | grep -oE 'https?://[^ ]+/debian-security/?( |$)' | head -n1 || true)}
	mirror=$(echo "${mirror:-${1:-}}" | tr -d ' ')
	mirror=${mirror%/}
	security=$(echo "$security" | tr -d ' ')
	security=${security%/}
}
