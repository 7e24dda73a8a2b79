package lab

// guestInit is the guest's /init (busybox sh): it mounts the kernel's file
// systems, loads the MHI modules (Linux's driver takes the served modem),
// waits for the data interface and gives it LAB_ADDR with LAB_PEER beyond,
// and then runs the user's script (#RUN#: guestScript) or a shell
// (guestShell). Lines starting with "LAB-" are for the host: LAB-BOOTED,
// LAB-WARN <text>, LAB-START, LAB-EXIT <status>.
const guestInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /run /var/run
ip link set lo up
echo "LAB-BOOTED $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
set -a
. /lab/env
set +a
for m in $LAB_MODULES; do
	insmod /lib/modules/$m || echo "LAB-WARN insmod $m failed"
done
# The data interface: Linux names it by the driver that binds the data
# channels (mhi_net: mhi_hwip0, mhi_wwan_mbim: wwan0); wait up to 20 s.
LAB_NETDEV=
i=0
while [ $i -lt 400 ]; do
	for n in $LAB_NETDEV_CANDIDATES; do [ -e /sys/class/net/$n ] && LAB_NETDEV=$n; done
	[ -n "$LAB_NETDEV" ] && break
	sleep 0.05; i=$((i+1))
done
if [ -n "$LAB_NETDEV" ]; then
	ip link set "$LAB_NETDEV" up
	ip addr add "$LAB_ADDR" peer "$LAB_PEER" dev "$LAB_NETDEV"
else
	echo "LAB-WARN no data interface after 20 s (looked for $LAB_NETDEV_CANDIDATES); LAB_NETDEV is empty"
fi
# The control ports Linux's mhi_wwan_ctrl created (/dev/wwan0mbim0…).
LAB_PORTS=$(ls /dev | grep '^wwan' | sed 's|^|/dev/|' | tr '\n' ' ')
export LAB_NETDEV LAB_PORTS
#RUN#
sync
poweroff -f
`

// guestScript runs the user's script with its arguments and reports its
// exit status.
const guestScript = `. /lab/args
echo "LAB-START $(cut -d' ' -f1 /proc/uptime)"
sh /lab/script "$@"
echo "LAB-EXIT $?"`

// guestShell gives the console to an interactive shell; the guest powers
// off when it exits.
const guestShell = `echo "lab: $LAB_DRIVER on $(uname -r), modem $LAB_MODEL; data interface ${LAB_NETDEV:-none} ($LAB_ADDR, peer $LAB_PEER); ports: ${LAB_PORTS:-none}"
echo "lab: exit or busybox poweroff -f ends the guest"
setsid -c sh -l </dev/ttyS0 >/dev/ttyS0 2>&1`
