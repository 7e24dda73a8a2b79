package lab

// guestInit is the script that brings the modem up and runs the user's
// script: the guest's /init (busybox sh) in the minimal user land, the
// Debian root's /lab/init with ModemManager. #HEAD# mounts the kernel's
// file systems (guestHeadMinimal or guestHeadDebian, which also sets
// MODDIR, where the modules are); the driver's modules are loaded; the
// driver (#DRIVER#: guestLinux or guestGomhi) brings the modem up and sets
// LAB_NETDEV (its data interface, with LAB_ADDR and LAB_PEER beyond) and
// LAB_PORTS; #USERLAND# starts what the user land adds (guestModemManager);
// then the user's script runs (#RUN#: guestScript) or a shell (guestShell).
// Lines starting with "LAB-" are for the host: LAB-BOOTED, LAB-WARN
// <text>, LAB-START, LAB-EXIT <status>, LAB-INJECT <fault>.
const guestInit = `#HEAD#
ip link set lo up
echo "LAB-BOOTED $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
set -a
. /lab/env
set +a
for m in $LAB_MODULES; do
	insmod $MODDIR/$m || echo "LAB-WARN insmod $m failed"
done
#DRIVER#
#USERLAND#
export LAB_NETDEV LAB_PORTS
#RUN#
labstop
userlandstop
sync
#POWEROFF#
`

// guestHeadMinimal: busybox is the whole user land.
const guestHeadMinimal = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
MODDIR=/lib/modules
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /run /var/run
userlandstop() { :; }`

// guestSwitchRoot is the initramfs's /init in the ModemManager user land:
// it mounts the Debian root file system (the virtio disk, opened by QEMU
// with snapshot=on: writes vanish), copies the lab's files and modules
// there and switches to it, running /lab/init.
const guestSwitchRoot = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk; do
	insmod /lib/modules/$m.ko 2>/dev/null
done
i=0; while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
mkdir -p /newroot
if ! mount -t ext2 /dev/vda /newroot; then
	echo "LAB-WARN cannot mount the root file system (/dev/vda)"
	poweroff -f
fi
mkdir -p /newroot/lab/modules /newroot/lab/bin
cp -a /lab/. /newroot/lab/
cp /lib/modules/*.ko /newroot/lab/modules/
cp /bin/busybox /newroot/lab/bin/busybox
cp /bin/lab-inject /newroot/lab/bin/lab-inject
#COPYFILES#
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh /lab/init
`

// guestHeadDebian: the Debian root, with udev (ModemManager finds ports
// through it) and the lab's tools in /lab/bin.
const guestHeadDebian = `#!/bin/sh
export PATH=/lab/bin:/usr/sbin:/usr/bin:/sbin:/bin
MODDIR=/lab/modules
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/dbus /run/lock
mount -t tmpfs tmpfs /tmp
hostname gomhi-lab
/lib/systemd/systemd-udevd --daemon`

// guestModemManager starts D-Bus and ModemManager (its log:
// LAB_MM_LOG) after udev has seen the modem's ports, and waits up to 120
// s for it to list the modem: LAB_MM_MODEM is its index for mmcli -m.
const guestModemManager = `udevadm trigger --action=add
udevadm settle --timeout=60
systemd-machine-id-setup >/dev/null 2>&1 || dbus-uuidgen --ensure
dbus-daemon --system --fork
LAB_MM_LOG=/tmp/ModemManager.log
ModemManager --debug --log-level=DEBUG --log-file=$LAB_MM_LOG &
LAB_MM_PID=$!
LAB_MM_MODEM=
i=0
while [ $i -lt 480 ]; do
	LAB_MM_MODEM=$(mmcli -L 2>/dev/null | sed -n 's|.*/Modem/\([0-9]*\) .*|\1|p' | head -n1)
	[ -n "$LAB_MM_MODEM" ] && break
	sleep 0.25; i=$((i+1))
done
[ -n "$LAB_MM_MODEM" ] || echo "LAB-WARN ModemManager listed no modem in 120 s (its log: $LAB_MM_LOG)"
export LAB_MM_LOG LAB_MM_PID LAB_MM_MODEM
userlandstop() {
	kill $LAB_MM_PID 2>/dev/null
	i=0; while kill -0 $LAB_MM_PID 2>/dev/null && [ $i -lt 40 ]; do sleep 0.1; i=$((i+1)); done
}`

// laddr and lpeer give modem I (from 0) its address and peer: modem 0
// LAB_ADDR and LAB_PEER (192.0.2.1, .2), modem I 192.0.2.16I+1 and +2,
// each in a /28 of its own so that the routes do not collide.
const guestAddrs = `laddr() { echo 192.0.2.$((16*$1+1)); }
lpeer() { echo 192.0.2.$((16*$1+2)); }
LAB_NETDEVS=`

// guestLinux: Linux's drivers took the modems as the modules loaded; the
// data interfaces are named by the driver that binds the data channels
// (mhi_net: mhi_hwip0, mhi_hwip1…; mhi_wwan_mbim: wwan0, wwan1…), given
// out in name order.
const guestLinux = guestAddrs + `
i=0
while [ $i -lt 400 ]; do
	LAB_NETDEVS=$(for n in $LAB_NETDEV_CANDIDATES; do ls /sys/class/net | grep "^$n[0-9]*$"; done | sort | tr '\n' ' ')
	[ $(echo $LAB_NETDEVS | wc -w) -ge $LAB_MODEMS ] && break
	sleep 0.05; i=$((i+1))
done
n=0
for d in $LAB_NETDEVS; do
	ip link set "$d" up
	ip addr add "$(laddr $n)" peer "$(lpeer $n)" dev "$d"
	n=$((n+1))
done
[ $n -ge $LAB_MODEMS ] || echo "LAB-WARN $n data interfaces after 20 s for $LAB_MODEMS modems (looked for $LAB_NETDEV_CANDIDATES*): $LAB_NETDEVS"
LAB_NETDEV=$(echo $LAB_NETDEVS | cut -d' ' -f1)
# The control ports Linux's mhi_wwan_ctrl created (/dev/wwan0mbim0…).
LAB_PORTS=$(ls /dev | grep '^wwan' | sed 's|^|/dev/|' | tr '\n' ' ')
export LAB_NETDEVS
labstop() { :; }`

// guestGomhi: the real-modem rehearsal. The modems (vendor 0x17cb, in
// PCI address order) sit behind the emulated IOMMU; for each, 'mhictl
// bind' hands it to vfio-pci and its own 'mhictl up --device ADDR --name
// mhiI --tun mhiI' drives it with gomhi's host through the guest's VFIO,
// as a user (or the mhictl@.service unit, one instance per modem) does on
// real modems. Modem 0's address, pid and log are LAB_DEVICE, LAB_UP_PID
// and LAB_UP_LOG (/tmp/mhictl-up.log); every modem's, LAB_DEVICES,
// LAB_UP_PIDS and /tmp/mhictl-up-I.log; the control ports are the links in
// /run/gomhi/mhiI.
const guestGomhi = guestAddrs + `
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
LAB_DEVICES=$(for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0x17cb ] && basename $d; done | sort | tr '\n' ' ')
[ -n "$LAB_DEVICES" ] || echo "LAB-WARN no modem (vendor 0x17cb) on the guest's PCI bus"
LAB_UP_PIDS=
n=0
for dev in $LAB_DEVICES; do
	log=/tmp/mhictl-up-$n.log
	[ $n = 0 ] && log=/tmp/mhictl-up.log
	if ! mhictl bind "$dev" >/tmp/mhictl-bind.log 2>&1; then
		echo "LAB-WARN mhictl bind $dev failed: $(cat /tmp/mhictl-bind.log)"
		n=$((n+1)); continue
	fi
	eval "exec mhictl up --device $dev --name mhi$n --tun mhi$n --tun-addr $(laddr $n)/28 $LAB_UP_ARGS" >$log 2>&1 &
	pid=$!
	LAB_UP_PIDS="$LAB_UP_PIDS$pid "
	# Up once it says it is ready: the modem in M0, the TUN configured,
	# the control ports and netlink served (60 s: a firmware download
	# under TCG takes a while).
	i=0; ready=
	while [ $i -lt 1200 ] && kill -0 $pid 2>/dev/null; do
		grep -q '^mhictl up: ready' $log 2>/dev/null && { ready=1; break; }
		sleep 0.05; i=$((i+1))
	done
	if [ -n "$ready" ]; then
		LAB_NETDEVS="${LAB_NETDEVS}mhi$n "
	else
		echo "LAB-WARN mhictl up did not bring mhi$n ($dev) up; its log:"
		sed 's/^/  /' $log
	fi
	n=$((n+1))
done
LAB_DEVICE=$(echo $LAB_DEVICES | cut -d' ' -f1)
LAB_UP_PID=$(echo $LAB_UP_PIDS | cut -d' ' -f1)
LAB_UP_LOG=/tmp/mhictl-up.log
LAB_NETDEV=
echo " $LAB_NETDEVS" | grep -q ' mhi0 ' && LAB_NETDEV=mhi0
LAB_PORTS=$(ls -d /run/gomhi/mhi0/* 2>/dev/null | tr '\n' ' ')
export LAB_DEVICE LAB_DEVICES LAB_UP_PID LAB_UP_PIDS LAB_UP_LOG LAB_NETDEVS
# labstop: each mhictl up ends on SIGTERM within 10 s, as a service must.
labstop() {
	for pid in $LAB_UP_PIDS; do
		kill -TERM $pid 2>/dev/null
		i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
		if kill -0 $pid 2>/dev/null; then
			echo "LAB-WARN mhictl up (pid $pid) still running 10 s after SIGTERM"
			kill -KILL $pid
		fi
	done
}`

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

// guestInject is the guest's lab-inject FAULT [MODEM]: it asks the lab, on
// the console, to make served modem MODEM (default 0) fail (the lab relays it to the modem's
// fault socket, LAB_MODEM_CTL on the host) and gives the host a moment.
// disconnect-session=N: the network ends data session N alone.
const guestInject = `#!/bin/sh
case "$1" in
sys-err|crash|surprise-removal|disconnect-session=[0-9]*) ;;
*) echo "usage: lab-inject sys-err|crash|surprise-removal|disconnect-session=N [MODEM]" >&2; exit 2 ;;
esac
echo "LAB-INJECT $1 ${2:-0}" >/dev/console
sleep 0.5
`
