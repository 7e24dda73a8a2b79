package vfiouser_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/internal/qemuguest"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// The ModemManager test: the mock modem, served over vfio-user, is a PCI
// device of a QEMU guest that runs Debian bookworm's own user space —
// udev, the system D-Bus, polkitd and ModemManager 1.20.4 — on Debian's
// 6.1 kernel with its own MHI drivers. ModemManager finds the modem's
// wwan ports (mhi_wwan_ctrl) and its network interface, probes them,
// and the guest then drives it with mmcli as a user would: list, enable,
// simple-connect, configure the interface from the bearer, ping and UDP
// echo through it, simple-disconnect. The guest prints each verdict as
// "CHECK <name> PASS|FAIL <detail>", mmcli's answers between
// "BEGIN <what>" and "END <what>" lines, and "MARK <step>" where the test
// takes the mock's counters; ModemManager's debug log goes to the guest's
// second serial port, a file the test reads.
//
// Requirements: those of the Linux-driver test, plus the root file
// system image internal/labvm/setup/guest-rootfs.sh builds (make test-deps). See
// docs/MODEMMANAGER.md.

var mmShell = flag.Bool("mm.shell", false, "TestModemManager…, TestNetworkManager…: boot the guest, start ModemManager (and NetworkManager) and give its console to the terminal (go test -timeout 0 -run 'TestModemManagerSDX55$' … -args -mm.shell; docs/MODEMMANAGER.md)")

var mmLogDir = flag.String("mm.logdir", "", "TestModemManager…, TestNetworkManager…: copy each guest's serial log, ModemManager's log and NetworkManager's into this folder")

// mmBootModules are what the initramfs loads before it switches to the
// Debian root: the virtio disk.
var mmBootModules = labvm.VirtioBlkModules

// mmInitramfs is the initramfs' /init: it mounts the Debian root file
// system from the virtio disk, copies the test's files into it and
// switches to it, running /gomhi/init.sh there.
const mmInitramfs = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk; do
	insmod /lib/modules/$m.ko || echo "CHECK insmod-$m FAIL"
done
i=0; while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
mkdir -p /newroot
if ! mount -t ext2 /dev/vda /newroot; then
	echo "CHECK rootfs FAIL cannot mount /dev/vda"
	echo "GUEST DONE"
	poweroff -f
fi
mkdir -p /newroot/gomhi
cp -a /gomhi/. /newroot/gomhi/
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh /gomhi/init.sh
`

// mmGuestInit is /gomhi/init.sh, run by Debian's /bin/sh once the root is
// the Debian image: the common boot, the wait for the modem, then
// ModemManager's checks with mmcli. Parameters come from the kernel
// command line (gomhi.iface=wwan0|mhi_hwip0, gomhi.apn=…, gomhi.shell=1).
const mmGuestInit = mmGuestBoot + mmGuestListed + mmGuestSteps

// mmGuestBoot begins every ModemManager guest's init.sh (the
// NetworkManager test's too): mounts, the helpers the steps use, udev and
// the MHI modules, D-Bus, then ModemManager logging to /dev/ttyS1. Its
// finish stops the daemons in $nmpid and $mmpid and powers off.
const mmGuestBoot = `#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/dbus /run/lock
mount -t tmpfs tmpfs /tmp
hostname gomhi
ip link set lo up
arg() { sed -n "s/.*gomhi\.$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
iface=$(arg iface)
apn=$(arg apn)
shell=$(arg shell)
uptime() { cut -d' ' -f1 /proc/uptime; }
check() { if [ "$2" = 0 ]; then echo "CHECK $1 PASS $3"; else echo "CHECK $1 FAIL $3"; fi; }
finish() {
	echo "INFO uptime $(uptime) s at finish"
	# Stop NetworkManager (if it runs) and ModemManager before the kernel
	# tears the modem down at power-off.
	for p in $nmpid $mmpid; do
		kill $p; i=0; while kill -0 $p 2>/dev/null && [ $i -lt 40 ]; do sleep 0.1; i=$((i+1)); done
	done
	echo "--- kernel log ---"; dmesg | grep -iE 'mhi|wwan' | grep -vE 'insmod|Loading'
	echo "GUEST DONE"; sync; busybox poweroff -f
}
# within SECONDS COMMAND...: run the command every half second until it
# succeeds (0) or SECONDS of uptime have passed (1).
within() {
	end=$(($(cut -d. -f1 /proc/uptime) + $1)); shift
	while :; do
		"$@" && return 0
		[ "$(cut -d. -f1 /proc/uptime)" -ge $end ] && return 1
		sleep 0.5
	done
}
# console MESSAGE: with gomhi.shell=1, give the console to a shell.
console() {
	[ "$shell" = 1 ] || return 0
	echo "$1 busybox poweroff -f (or Ctrl-A X) ends the guest."
	exec setsid -c /bin/bash -l </dev/ttyS0 >/dev/ttyS0 2>&1
}
# stats IFACE: the interface's counters.
stats() { for f in rx_packets tx_packets rx_bytes tx_bytes rx_errors tx_errors rx_dropped tx_dropped; do printf '%s=%s ' $f $(cat /sys/class/net/$1/statistics/$f); done; }
# block NAME COMMAND...: run the command, its output between BEGIN and
# END; returns the command's status. The output goes through a file: not
# a terminal, so nmcli neither pages nor wraps it.
block() { n=$1; shift; echo "BEGIN $n"; "$@" >/tmp/block 2>&1; brc=$?; cat /tmp/block; echo "RC $n $brc"; echo "END $n"; return $brc; }
# key FILE KEY: the value of one "key : value" line of mmcli -K.
key() { sed -n "s/^$2 *: *//p" "$1" | head -n1; }
# waitstate STATE SECONDS: until modem $mi reports STATE.
mi=0
waitstate() {
	i=0
	while [ $i -lt $(($2*4)) ]; do
		mmcli -m $mi -K >/tmp/m0 2>&1 && [ "$(key /tmp/m0 modem.generic.state)" = "$1" ] && return 0
		sleep 0.25; i=$((i+1))
	done
	return 1
}
echo "MARK boot"
echo "INFO $(uname -r), ModemManager $(ModemManager --version | head -n1)"
/lib/systemd/systemd-udevd --daemon
for m in mhi wwan mhi_pci_generic mhi_net mhi_wwan_ctrl mhi_wwan_mbim; do
	insmod /gomhi/$m.ko || echo "CHECK insmod-$m FAIL"
done
udevadm trigger --action=add
udevadm settle --timeout=60
echo "INFO wwan ports: $(ls /dev | grep '^wwan' | tr '\n' ' '); net: $(ls /sys/class/net | tr '\n' ' ')"
for p in /sys/class/wwan/*; do
	[ -e "$p/type" ] && echo "INFO udev $(basename $p): $(udevadm info -q property -p $p | grep ID_MM | tr '\n' ' ')"
done
systemd-machine-id-setup >/dev/null 2>&1 || dbus-uuidgen --ensure
dbus-daemon --system --fork
ModemManager --debug --log-level=DEBUG --log-relative-timestamps --log-file=/dev/ttyS1 &
mmpid=$!
echo "MARK mm-started"
`

// mmGuestListed waits until ModemManager has created the modem.
const mmGuestListed = `# The modem appears once ModemManager has probed every port.
i=0; found=1
while [ $i -lt 480 ]; do
	if mmcli -L 2>/dev/null | grep -q '/Modem/'; then found=0; break; fi
	sleep 0.25; i=$((i+1))
done
block mmcli-list mmcli -L
check modem-listed $found "after $(uptime) s of uptime"
[ $found = 0 ] || finish
`

// mmGuestSteps are ModemManager's checks: enable, connect, disconnect,
// SYS_ERR and recovery, driven with mmcli.
const mmGuestSteps = `# connect NAME: simple-connect modem $mi, check it, configure the data
# interface from the bearer (as NetworkManager would) and ping the
# gateway COUNT times; sets b (bearer index), dev, gw.
connect() {
	block mmcli-connect$1 mmcli -m $mi --simple-connect="apn=$apn"
	mmcli -m $mi -K >/tmp/m0 2>&1
	st=$(key /tmp/m0 modem.generic.state)
	[ "$st" = connected ]; rc=$?
	check connected$1 $rc "state $st at $(uptime) s"
	[ $rc = 0 ] || finish
	bearer=$(key /tmp/m0 'modem.generic.bearers.value\[1\]')
	b=${bearer##*/}
	echo "INFO bearer $bearer"
	[ -n "$b" ] || finish
	block mmcli-bearer-k$1 mmcli -b "$b" -K
	mmcli -b "$b" -K >/tmp/b0 2>&1
	dev=$(key /tmp/b0 bearer.status.interface)
	addr=$(key /tmp/b0 bearer.ipv4-config.address)
	prefix=$(key /tmp/b0 bearer.ipv4-config.prefix)
	gw=$(key /tmp/b0 bearer.ipv4-config.gateway)
	mtu=$(key /tmp/b0 bearer.ipv4-config.mtu)
	[ "$dev" = "$iface" ]; check bearer-interface$1 $? "bearer on $dev (want $iface)"
	# The bearer is IPv4: no IPv6 link traffic (router and neighbour
	# solicitations), so the interface's counters match the modem's.
	echo 1 >/proc/sys/net/ipv6/conf/$dev/disable_ipv6
	ip link set "$dev" up
	ip addr replace "$addr/$prefix" dev "$dev"
	[ -n "$mtu" ] && [ "$mtu" != "--" ] && ip link set "$dev" mtu "$mtu"
	block ip-addr$1 ip addr show dev "$dev"
	out=$(ping -c $2 -W 2 "$gw" 2>&1)
	echo "$out" | grep -q " $2 received"; check ping-gateway$1 $? "$(echo "$out" | grep transmitted)"
}
# Initialisation ends in "disabled" (or an error state).
waitstate disabled 90; rc=$?
check modem-initialized $rc "state $(key /tmp/m0 modem.generic.state) at $(uptime) s"
block mmcli-m0-k-disabled mmcli -m 0 -K
echo "MARK probed"
console "The modem is /org/freedesktop/ModemManager1/Modem/0 (mmcli -m 0); ModemManager logs to /dev/ttyS1 (the file the test names)."
[ $rc = 0 ] || finish
block mmcli-enable mmcli -m 0 --enable
waitstate registered 60; rc=$?
check registered $rc "state $(key /tmp/m0 modem.generic.state) at $(uptime) s"
[ $rc = 0 ] || finish
echo "MARK registered"
connect "" 5
/gomhi/guestprobe udp -name udp-echo -to "$gw:7" -count 10 -size 1000
# A quiet moment for the counts compared with the modem's: the interface's
# counters unchanged over 0.5 s (a loaded host can let a last packet leave
# after the echoes are done), at most 20 rounds.
n=0; while [ $n -lt 20 ]; do a=$(stats $dev); sleep 0.5; [ "$a" = "$(stats $dev)" ] && break; n=$((n+1)); done
echo "STATS $(stats $dev)"
echo "MARK connected"
block mmcli-m0 mmcli -m 0
block mmcli-bearer mmcli -b "$b"
block mmcli-disconnect mmcli -m 0 --simple-disconnect
mmcli -m 0 -K >/tmp/m0 2>&1
st=$(key /tmp/m0 modem.generic.state)
[ "$st" = registered ]; check disconnected $? "state $st"
out=$(ping -c 3 -W 1 "$gw" 2>&1)
echo "$out" | grep -q ' 0 received'; check ping-fails-disconnected $? "$(echo "$out" | grep transmitted)"
echo "MARK disconnected"
# SYS_ERR while connected: the modem crashes, Linux's driver resets it and
# re-creates its ports and interface; ModemManager must see the modem go
# and come back, and connect again.
connect -again 3
echo "MARK syserr"
i=0; gone=1
while [ $i -lt 120 ]; do
	mmcli -m $mi >/dev/null 2>&1 || { gone=0; break; }
	sleep 0.25; i=$((i+1))
done
check syserr-modem-gone $gone "modem $mi gone at $(uptime) s"
[ $gone = 0 ] || finish
i=0; mi=
while [ $i -lt 480 ]; do
	mi=$(mmcli -L 2>/dev/null | sed -n 's|.*/Modem/\([0-9]*\) .*|\1|p' | head -n1)
	[ -n "$mi" ] && break
	sleep 0.25; i=$((i+1))
done
[ -n "$mi" ]; check syserr-modem-back $? "modem ${mi:-none} at $(uptime) s"
[ -n "$mi" ] || {
	echo "INFO after SYS_ERR: mhi devices: $(ls /sys/bus/mhi/devices | tr '\n' ' '); wwan ports: $(ls /dev | grep '^wwan' | tr '\n' ' '); net: $(ls /sys/class/net | tr '\n' ' ')"
	finish
}
waitstate disabled 90; rc=$?
check syserr-modem-initialized $rc "state $(key /tmp/m0 modem.generic.state) at $(uptime) s"
[ $rc = 0 ] || finish
block mmcli-enable-recovered mmcli -m $mi --enable
waitstate registered 60; rc=$?
check syserr-registered $rc "state $(key /tmp/m0 modem.generic.state) at $(uptime) s"
[ $rc = 0 ] || finish
connect -recovered 3
echo "MARK recovered"
finish
`

// mmCrashReboot is how long the crashed modem stays in RESET after the
// host's reset (Linux waits up to the model's 8 s timeout for READY). A
// real modem reboots its firmware after a crash; the mock without this
// came back at once, and its ports could reappear before udev had told
// ModemManager that the old ones were gone: ModemManager 1.20.4 then added
// them to the old device, reprobed its stale port list and gave up ("could
// not grab port wwan0qmi0: … unhandled port type", "could not recreate
// modem: Failed to find primary AT port"), so no modem came back — a CI
// failure, and once in a make test here, both under load.
const mmCrashReboot = 3 * time.Second

// mmModel is one modem model under ModemManager.
type mmModel struct {
	name   string // device-table model
	iface  string // the data interface Linux creates
	format framing.Format
	// identity overrides what mock.Identity derives from the
	// device table (non-empty fields win).
	identity modem.Identity
	// mbim: ModemManager drives the model over MBIM. ModemManager 1.20.4
	// does not ask an MBIM modem for its manufacturer and model: it takes
	// the physical device's sysfs manufacturer and product (a PCI function
	// has neither) or else the plugin's name and "MBIM [VID:PID]"
	// (mm-broadband-modem-mbim.c), which mmManufacturer and mmModel hold;
	// the hardware revision is DEVICE_CAPS' HardwareInfo (the model and
	// the hardware revision). Over QMI all three come from the modem.
	mbim                    bool
	mmManufacturer, mmModel string
}

// mmModels are the models under test. The FN990's firmware revision
// starts with 45.00, as a real FN990's does: ModemManager's Telit plugin
// picks the FN990's band format by that prefix.
var mmModels = map[string]mmModel{
	"telit-fn990": {name: "telit-fn990", iface: "wwan0", format: framing.NTB16,
		identity: modem.Identity{Firmware: "45.00.003-B012-P0H.000042", MSISDN: "+15555550142"},
		mbim:     true, mmManufacturer: "telit", mmModel: "MBIM [17CB:0308]"},
	"qcom-sdx55m": {name: "qcom-sdx55m", iface: "mhi_hwip0", format: framing.RawIP,
		identity: modem.Identity{MSISDN: "+15555550155"}},
}

// want returns what mmcli must show as manufacturer, model and hardware
// revision for a mock reporting id.
func (m mmModel) want(id modem.Identity) (manufacturer, model, hardware string) {
	if !m.mbim {
		return id.Manufacturer, id.Model, id.Hardware
	}
	hw := id.Hardware
	if !strings.Contains(hw, id.Model) {
		hw = strings.TrimSpace(id.Model + " " + hw)
	}
	return m.mmManufacturer, m.mmModel, hw
}

// mmSnap is the mock's counters at a guest's MARK line.
type mmSnap struct {
	at      time.Duration // since QEMU started
	device  ep.Stats      // the MHI side (resets, SYS_ERRs)
	modem   modem.Stats
	session modem.Session
	ip      ipdata.Stats
	mbim    modem.MBIMStats
	qmi     modem.QMIStats
	at_     modem.ATStats
}

// mmRun is one boot of the ModemManager guest.
type mmRun struct {
	model mmModel
	// mangleMBIM, if set, changes every MBIM message the mock sends from
	// the guest's first MARK on (the broken-on-purpose test).
	mangleMBIM func([]byte)
	// script is the guest's /gomhi/init.sh: mmGuestInit if empty.
	script string
	// nm: NetworkManager runs in the guest too, logging to ttyS2, which
	// the run keeps in nmLog.
	nm bool
	// timeout bounds QEMU's run: 6 minutes if zero.
	timeout time.Duration
	// cmdline is added to the guest kernel's command line.
	cmdline string

	dev *vfiouser.ServerDevice
	// fns are the session's functions (the server forgets them when the
	// session ends).
	fns atomic.Pointer[mock.Functions]

	mu      sync.Mutex
	marks   map[string]mmSnap
	serial  string
	mmLog   string
	nmLog   string
	elapsed time.Duration
	events  *eventLog
}

// functions returns the session's functions, keeping them for after the
// session.
func (r *mmRun) functions() *mock.Functions {
	if f := r.dev.Functions(); f != nil {
		if r.fns.Swap(f) == nil && r.mangleMBIM != nil && f.MBIM != nil {
			f.MBIM.SetMangle(r.mangleMBIM)
		}
		return f
	}
	return r.fns.Load()
}

// snapshot records the mock's counters at a guest's MARK line.
func (r *mmRun) snapshot(step string, at time.Duration) {
	s := mmSnap{at: at}
	if d := r.dev.Modem(); d != nil {
		s.device = d.Stats()
	}
	if f := r.functions(); f != nil {
		s.modem, s.session, s.ip = f.Modem.Stats(), f.Modem.Session(), f.IPData.Stats()
		if f.MBIM != nil {
			s.mbim = f.MBIM.Stats()
		}
		if f.QMI != nil {
			s.qmi = f.QMI.Stats()
		}
		if f.AT != nil {
			s.at_ = f.AT.Stats()
		}
	}
	r.mu.Lock()
	r.marks[step] = s
	r.mu.Unlock()
}

func (r *mmRun) mark(t *testing.T, step string) mmSnap {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.marks[step]
	if !ok {
		r.fatal(t, fmt.Sprintf("%s: the guest never reached MARK %s", r.model.name, step))
	}
	return s
}

// run serves the modem, boots the guest and collects its logs.
func (r *mmRun) run(t *testing.T) {
	t.Helper()
	env := qemuguest.Find(t, labvm.Options{VFIOUser: true, Modules: append(slices.Clone(linuxModules), mmBootModules...)})
	image := qemuguest.FindRootFS(t)
	dir := t.TempDir()
	initPath := filepath.Join(dir, "init.sh")
	script := r.script
	if script == "" {
		script = mmGuestInit
	}
	if err := os.WriteFile(initPath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"gomhi/init.sh": initPath}
	for _, m := range linuxModules {
		files["gomhi/"+filepath.Base(m)] = filepath.Join(env.Modules, m)
	}
	initrd := env.Build(t, dir, labvm.Initramfs{
		Init:     mmInitramfs,
		Modules:  mmBootModules,
		Files:    files,
		Programs: map[string]string{"gomhi/guestprobe": "./pcigeneric/vfiouser/internal/guestprobe"},
	})

	r.events = &eventLog{}
	r.marks = map[string]mmSnap{}
	// The mock as mhictl modem serve builds it (mock.NewConfig:
	// MBIM, QMI and AT on the model's pairs, one modem.Modem, IP data gated
	// by the session).
	dev, err := vfiouser.NewServerDevice(vfiouser.DeviceOptions{
		Model:  r.model.name,
		Logger: slog.New(slog.NewTextHandler(r.events, nil)),
		IPData: &ipdata.Config{Format: r.model.format, Responder: true},
		Modem:  modem.Config{Identity: r.model.identity, RequireConnect: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.dev = dev
	sock := filepath.Join(dir, "mhi.sock")
	defer serve(t, sock, dev)()

	// The daemons' logs: ModemManager's on ttyS1, NetworkManager's on
	// ttyS2.
	logPath := func(name, what string) string {
		if !*mmShell {
			return filepath.Join(dir, name+".log")
		}
		// The log outlives the test, for reading after the session.
		f, err := os.CreateTemp("", "gomhi-"+name+"-*.log")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		// On the terminal: go test holds the test's own output back.
		out := os.Stderr
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			out = tty
		}
		fmt.Fprintf(out, "%s's log: %s (tail -f it from another terminal)\n", what, f.Name())
		return f.Name()
	}
	mmLogPath := logPath("modemmanager", "ModemManager")
	args := []string{"-machine", "q35,memory-backend=mem", "-accel", "tcg",
		"-object", "memory-backend-memfd,id=mem,size=512M,share=on", "-m", "512", "-smp", "1",
		"-device", fmt.Sprintf(`{"driver":"vfio-user-pci","id":"mhi0","socket":{"type":"unix","path":%q}}`, sock)}
	args = append(args, labvm.DiskArgs(image)...)
	args = append(args, labvm.SerialFileArgs(mmLogPath)...)
	var nmLogPath string
	if r.nm {
		nmLogPath = logPath("networkmanager", "NetworkManager")
		args = append(args, labvm.SerialPortFileArgs(2, nmLogPath)...)
	}
	appendArgs := strings.TrimSpace(fmt.Sprintf("gomhi.iface=%s gomhi.apn=internet %s", r.model.iface, r.cmdline))

	if *mmShell {
		err := env.RunInteractive(context.Background(), labvm.Boot{Args: args, Initrd: initrd, Append: appendArgs + " gomhi.shell=1"})
		t.Logf("QEMU: %v; ModemManager's log is in %s", errText(err), mmLogPath)
		return
	}
	timeout := r.timeout
	if timeout == 0 {
		timeout = 6 * time.Minute
	}

	start := time.Now()
	res := env.Run(context.Background(), labvm.Boot{
		Args:    args,
		Initrd:  initrd,
		Append:  appendArgs,
		Timeout: timeout,
		OnLine: func(line string) {
			step, ok := strings.CutPrefix(line, "MARK ")
			if !ok {
				return
			}
			step, _, _ = strings.Cut(strings.TrimSpace(step), " ")
			if m := r.dev.Modem(); step == "syserr" && m != nil {
				// The baseband crashes: its cellular state restarts, the
				// MHI side raises SYS_ERR and, as a real modem's firmware
				// reboots, it is not READY again for mmCrashReboot after
				// the host's reset.
				if f := r.functions(); f != nil {
					f.Modem.Restart()
				}
				m.SetNeverReady(true)
				m.InjectSysErr()
				time.AfterFunc(mmCrashReboot, func() { m.SetNeverReady(false) })
			}
			r.snapshot(step, time.Since(start))
		},
	})
	r.serial, r.elapsed = res.Serial, res.Elapsed
	if b, err := os.ReadFile(mmLogPath); err == nil {
		r.mmLog = strings.ReplaceAll(string(b), "\r", "")
	}
	logs := map[string]string{"serial": r.serial, "modemmanager": r.mmLog}
	if r.nm {
		if b, err := os.ReadFile(nmLogPath); err == nil {
			r.nmLog = strings.ReplaceAll(string(b), "\r", "")
		}
		logs["networkmanager"] = r.nmLog
	}
	if *mmLogDir != "" {
		for name, text := range logs {
			p := filepath.Join(*mmLogDir, t.Name()+"-"+name+".log")
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	t.Logf("%s: boot, ModemManager and checks %v (qemu: %v)", r.model.name, res.Elapsed.Round(time.Millisecond), errText(res.Err))
	if res.Err != nil || !strings.Contains(res.Serial, "GUEST DONE") {
		r.fatal(t, fmt.Sprintf("%s: guest did not finish (qemu: %v)\nqemu output:\n%s", r.model.name, errText(res.Err), res.Stderr))
	}
}

// mmDigestLine picks the lines of ModemManager's log that tell a modem's
// life: warnings and errors, modems created, exported, invalidated,
// reprobed or removed, SIM events, probing results, failures and
// timeouts.
var mmDigestLine = regexp.MustCompile(`(?i)^<(warn|err|error|crit|critical)>|reprob|recreat|creating modem|exported modem|no longer valid|sim (identifier|imsi) has changed|hot.?swap|slot status|timed out|timeout|probing finished|port '.*' grabbed|port .* released|(QMI|MBIM)-powered|caught signal|couldn't|not supported|unsupported|failed`)

// mmDigestMax bounds the digest's length.
const mmDigestMax = 80

// fatal fails the test with msg, the guest's serial log and ModemManager's
// log, and then, last (CI keeps only the tail of a long output), a digest
// of ModemManager's log, the guest's CHECK and MARK lines and msg again.
func (r *mmRun) fatal(t *testing.T, msg string) {
	t.Helper()
	digest := logDigest(r.mmLog, mmDigestLine)
	var nm string
	if r.nm {
		nm = fmt.Sprintf("\nNetworkManager log:\n%s\n--- digest of NetworkManager's log:\n%s", r.nmLog, strings.Join(logDigest(r.nmLog, nmDigestLine), "\n"))
	}
	var steps []string
	for _, l := range strings.Split(r.serial, "\n") {
		if strings.HasPrefix(l, "CHECK ") || strings.HasPrefix(l, "MARK ") || strings.HasPrefix(l, "INFO ") {
			steps = append(steps, l)
		}
	}
	// CI shows only the last lines of a failure: the kernel's last MHI
	// and WWAN lines and ModemManager's last digest lines come just
	// before msg, so that a failure there says where it stopped.
	t.Fatalf("%s\nserial log:\n%s\nModemManager log:\n%s\n--- digest of ModemManager's log:\n%s%s\n--- the guest's steps:\n%s\n--- ModemManager, last lines of the digest:\n%s\n--- the kernel, last lines:\n%s\n--- %s",
		msg, r.serial, r.mmLog, strings.Join(digest, "\n"), nm, strings.Join(steps, "\n"),
		strings.Join(lastLines(digest, mmTailLines), "\n"), strings.Join(lastLines(kernelLines(r.serial), mmTailLines), "\n"), msg)
}

// mmTailLines is how many lines of each log the end of a failure repeats.
const mmTailLines = 6

// lastLines returns the last n of lines.
func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// kernelLines returns the kernel log the guest printed as it finished
// (between "--- kernel log ---" and "GUEST DONE").
func kernelLines(serial string) []string {
	_, rest, ok := strings.Cut(serial, "--- kernel log ---\n")
	if !ok {
		return []string{"(the guest printed no kernel log)"}
	}
	rest, _, _ = strings.Cut(rest, "GUEST DONE")
	return strings.Split(strings.TrimRight(rest, "\n"), "\n")
}

// logDigest returns the lines of a daemon's log that re matches, the last
// mmDigestMax of them.
func logDigest(log string, re *regexp.Regexp) []string {
	var digest []string
	for _, l := range strings.Split(log, "\n") {
		if re.MatchString(l) {
			digest = append(digest, l)
		}
	}
	if len(digest) > mmDigestMax {
		digest = append([]string{fmt.Sprintf("(%d earlier lines left out)", len(digest)-mmDigestMax)}, digest[len(digest)-mmDigestMax:]...)
	}
	return digest
}

var (
	mmANSI    = regexp.MustCompile("\x1b\\[[0-9;]*m")
	mmKeyLine = regexp.MustCompile(`(?m)^(\S+)\s+:\s?(.*)$`)
)

// mmBlock returns the output the guest printed between BEGIN name and
// END name.
func mmBlock(serial, name string) (string, bool) {
	_, rest, ok := strings.Cut(serial, "BEGIN "+name+"\n")
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, "\nEND "+name+"\n")
	return mmANSI.ReplaceAllString(body, ""), ok
}

// mmKeys parses mmcli -K output.
func mmKeys(out string) map[string]string {
	kv := map[string]string{}
	for _, m := range mmKeyLine.FindAllStringSubmatch(out, -1) {
		kv[m[1]] = strings.TrimSpace(m[2])
	}
	return kv
}

// mmStats parses the guest's "STATS rx_packets=… …" line.
func mmStats(serial string) map[string]uint64 {
	out := map[string]uint64{}
	if m := regexp.MustCompile(`(?m)^STATS (.*)$`).FindStringSubmatch(serial); m != nil {
		for _, f := range regexp.MustCompile(`(\w+)=(\d+)`).FindAllStringSubmatch(m[1], -1) {
			v, _ := strconv.ParseUint(f[2], 10, 64)
			out[f[1]] = v
		}
	}
	return out
}

// mustModel returns the device table's channel configuration of model.
func mustModel(t *testing.T, model string) wire.ControllerConfig {
	info, ok := pcigeneric.Model(model)
	if !ok {
		t.Fatalf("no model %q", model)
	}
	return info.Config
}

// requireMMChecks fails unless every named check passed and none failed.
func (r *mmRun) requireChecks(t *testing.T, names ...string) {
	t.Helper()
	got := checks(r.serial)
	if bad := failedChecks(got, names); len(bad) > 0 {
		r.fatal(t, fmt.Sprintf("%s: guest checks failed:\n  %s", r.model.name, strings.Join(bad, "\n  ")))
	}
	for _, n := range slices.Sorted(maps.Keys(got)) {
		t.Logf("%s: guest: CHECK %s %s", r.model.name, n, got[n])
	}
}

// jsonText renders counters for the log.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// testModemManager runs the whole sequence for one model and checks what
// ModemManager reports against what the mock assigned.
func testModemManager(t *testing.T, model string) *mmRun {
	r := &mmRun{model: mmModels[model]}
	r.run(t)
	if *mmShell {
		return r
	}
	r.requireChecks(t, "modem-listed", "modem-initialized", "registered", "connected", "bearer-interface",
		"ping-gateway", "udp-echo", "disconnected", "ping-fails-disconnected",
		"connected-again", "bearer-interface-again", "ping-gateway-again",
		"syserr-modem-gone", "syserr-modem-back", "syserr-modem-initialized", "syserr-registered",
		"connected-recovered", "bearer-interface-recovered", "ping-gateway-recovered")
	fns := r.fns.Load()
	id := fns.Modem.Identity()
	addr := fns.Modem.Addressing()
	wantManufacturer, wantModel, wantHardware := r.model.want(id)

	// What mmcli reports about the modem, against the mock's identity.
	kout, ok := mmBlock(r.serial, "mmcli-m0-k-disabled")
	if !ok {
		t.Fatalf("no mmcli -m 0 -K output")
	}
	kv := mmKeys(kout)
	t.Logf("%s: ModemManager: plugin %q, drivers %q, primary port %q, manufacturer %q, model %q, revision %q, h/w revision %q, equipment id %q",
		model, kv["modem.generic.plugin"], kv["modem.generic.drivers.value[1]"], kv["modem.generic.primary-port"],
		kv["modem.generic.manufacturer"], kv["modem.generic.model"], kv["modem.generic.revision"],
		kv["modem.generic.hardware-revision"], kv["modem.generic.equipment-identifier"])
	for k, want := range map[string]string{
		"modem.generic.manufacturer":         wantManufacturer,
		"modem.generic.model":                wantModel,
		"modem.generic.revision":             id.Firmware,
		"modem.generic.hardware-revision":    wantHardware,
		"modem.generic.equipment-identifier": id.IMEI,
		"modem.3gpp.imei":                    id.IMEI,
		"modem.generic.own-numbers.value[1]": id.MSISDN,
	} {
		if kv[k] != want {
			t.Errorf("%s: mmcli %s = %q, the mock reports %q", model, k, kv[k], want)
		}
	}

	// The bearer's IP configuration, against what the mock assigned.
	bout, ok := mmBlock(r.serial, "mmcli-bearer-k")
	if !ok {
		t.Fatalf("no mmcli -b -K output")
	}
	bk := mmKeys(bout)
	want := map[string]string{
		"bearer.status.connected":         "yes",
		"bearer.status.interface":         r.model.iface,
		"bearer.ipv4-config.method":       "static",
		"bearer.ipv4-config.address":      addr.IPv4.Addr().String(),
		"bearer.ipv4-config.prefix":       strconv.Itoa(addr.IPv4.Bits()),
		"bearer.ipv4-config.gateway":      addr.Gateway4.String(),
		"bearer.ipv4-config.mtu":          strconv.Itoa(addr.MTU),
		"bearer.ipv4-config.dns.value[1]": addr.DNS4[0].String(),
	}
	for k, v := range want {
		if bk[k] != v {
			t.Errorf("%s: bearer %s = %q, the mock assigned %q", model, k, bk[k], v)
		}
	}

	conn, disc := r.mark(t, "connected"), r.mark(t, "disconnected")
	if !conn.session.Active || conn.session.APN != "internet" {
		t.Errorf("%s: the mock's session while connected: %+v", model, conn.session)
	}
	if disc.session.Active {
		t.Errorf("%s: the mock's session still active after simple-disconnect", model)
	}
	// The guest's data interface against the modem's data function, at
	// the same quiet moment: every packet the guest sent reached the
	// modem, every packet the modem sent reached the guest.
	g := mmStats(r.serial)
	t.Logf("%s: guest %s: %v", model, r.model.iface, g)
	t.Logf("%s: modem %s: uplink %d packets (%d bytes), answered %d, not answered %d, gated %d; downlink %d packets (%d bytes)",
		model, pcigeneric.DataPair(mustModel(t, model)), conn.ip.ULPackets, conn.ip.ULBytes, conn.ip.Answered, conn.ip.DroppedNotAnswered,
		conn.ip.DroppedGated, conn.ip.DLPackets, conn.ip.DLBytes)
	if g["tx_packets"] != conn.ip.ULPackets || g["rx_packets"] != conn.ip.DLPackets {
		t.Errorf("%s: guest sent %d and received %d packets; the modem received %d and sent %d", model,
			g["tx_packets"], g["rx_packets"], conn.ip.ULPackets, conn.ip.DLPackets)
	}
	if g["rx_errors"]+g["tx_errors"]+g["rx_dropped"]+g["tx_dropped"] != 0 {
		t.Errorf("%s: guest interface errors or drops: %v", model, g)
	}
	// 5 pings and 10 UDP echoes answered while connected; the pings after
	// the disconnect reached the mock and were dropped by its gate.
	if conn.ip.Answered < 15 {
		t.Errorf("%s: the mock answered %d packets while connected, want >= 15", model, conn.ip.Answered)
	}
	if g := disc.ip.DroppedGated - conn.ip.DroppedGated; g < 3 {
		t.Errorf("%s: %d packets dropped by the gate after the disconnect, want >= 3 (the pings)", model, g)
	}
	// SYS_ERR while connected: the driver reset the modem, ModemManager
	// connected a new session after the recovery.
	crash, rec := r.mark(t, "syserr"), r.mark(t, "recovered")
	if rec.device.Resets <= crash.device.Resets || rec.modem.Restarts != 1 {
		t.Errorf("%s: resets %d before SYS_ERR, %d after; baseband restarts %d", model, crash.device.Resets, rec.device.Resets, rec.modem.Restarts)
	}
	if !rec.session.Active || rec.session.ID <= crash.session.ID {
		t.Errorf("%s: session after the recovery %+v (at the crash %+v), want a new active one", model, rec.session, crash.session)
	}
	t.Logf("%s: SYS_ERR to connected again %v (MHI resets %d → %d, session %d → %d)", model, (rec.at - crash.at).Round(time.Millisecond),
		crash.device.Resets, rec.device.Resets, crash.session.ID, rec.session.ID)
	if testing.Verbose() {
		if out, ok := mmBlock(r.serial, "mmcli-m0"); ok {
			t.Logf("%s: mmcli -m 0 while connected:\n%s", model, out)
		}
		if out, ok := mmBlock(r.serial, "mmcli-bearer"); ok {
			t.Logf("%s: mmcli -b while connected:\n%s", model, out)
		}
		if out, ok := mmBlock(r.serial, "ip-addr"); ok {
			t.Logf("%s: the guest's data interface:\n%s", model, out)
		}
		for _, step := range []string{"probed", "registered", "connected", "disconnected", "syserr", "recovered"} {
			s := r.mark(t, step)
			t.Logf("%s: at MARK %s (%v after QEMU started): session %+v, modem %s, IP data %s, MBIM %s, QMI %s, AT %s",
				model, step, s.at.Round(time.Millisecond), s.session, jsonText(s.modem), jsonText(s.ip), jsonText(s.mbim), jsonText(s.qmi), jsonText(s.at_))
		}
	}
	t.Logf("%s: boot to connected %v, to probed %v", model, conn.at.Round(time.Millisecond), r.mark(t, "probed").at.Round(time.Millisecond))
	r.logUnsupported(t)
	r.checkLogWarnings(t)
	return r
}

// mmKnownWarning is a ModemManager warning the test accepts, and why.
type mmKnownWarning struct {
	re     *regexp.Regexp
	models []string // empty: every model
	why    string
}

// mmKnownWarnings are the warnings ModemManager 1.20.4 logs about the mock
// that the test accepts, each with its reason (docs/MODEMMANAGER.md,
// "What remains"). Any other warning or error fails the test.
var mmKnownWarnings = []mmKnownWarning{
	{regexp.MustCompile(`couldn't load carrier config: QMI PDC not supported`), nil,
		"the mock has no QMI PDC service (neither on the QMI port nor QMI over MBIM); a real SDX55 has one"},
	{regexp.MustCompile(`couldn't query SIM slots: NoDeviceSupport`), []string{"telit-fn990"},
		"MBIMEx SYS_CAPS is not answered; a real single-SIM modem that answers it gets \"Only one SIM slot is supported\", also a warning"},
	{regexp.MustCompile(`couldn't load EID: NoDeviceSupport`), []string{"telit-fn990"},
		"the mock has no MS UICC low-level access service; a real modem with a plain (not embedded) SIM also fails to read an EID"},
	{regexp.MustCompile(`couldn't load initial EPS bearer settings: LTE attach status info is unsupported`), []string{"telit-fn990"},
		"ModemManager's own: MBIMEx LTE_ATTACH_INFO is not in the mock's device services"},
	{regexp.MustCompile(`couldn't load 5GNR registration settings: 5GNR registration settings are unsupported`), []string{"telit-fn990"},
		"ModemManager's own: needs MBIMEx v3, which the mock does not offer"},
	{regexp.MustCompile(`(SIM hot swap setup failed|couldn't query SIM slots|couldn't load GID[12]): Couldn't peek client for service 'uim'`), []string{"qcom-sdx55m"},
		"the mock has no QMI UIM service (SIM state comes from DMS); a real SDX55 has one"},
	{regexp.MustCompile(`couldn't load (list of emergency numbers|UE mode of operation for EPS): No AT port available to run command`), []string{"qcom-sdx55m"},
		"Linux 6.1's SDX55 configuration has no DUN channel, so a real SDX55 on this kernel has no AT port either"},
	{regexp.MustCompile(`^Cannot read from istream: connection broken$`), []string{"qcom-sdx55m"},
		"the QMI port disappears with the modem's SYS_ERR (the crash the test injects)"},
	{regexp.MustCompile(`^\[modem\d+/bearer\d+\] reloading stats failed: Transaction timed out$`), []string{"telit-fn990", "qcom-sdx55m"},
		"a statistics query ModemManager sent just before the crash the test injects is never answered (seen: MBIM PACKET_STATISTICS sent 0.85 s before the port hung up, reported 10 s after it was sent, when the connection had lasted 30 s, as under load)"},
}

var (
	mmWarnLine     = regexp.MustCompile(`(?m)^<(warn|err|error|crit|critical)>\s+\[[0-9.]+\]\s+(.*)$`)
	mmObjectPrefix = regexp.MustCompile(`^\[modem\d+(/sim\d+)?\] `)
)

// mmWarnings sorts ModemManager's warnings and errors in log into the
// known ones (counted by mmKnownWarnings index) and the others.
func mmWarnings(log, model string) (known map[int]int, unknown []string) {
	known = map[int]int{}
	for _, m := range mmWarnLine.FindAllStringSubmatch(log, -1) {
		msg := mmObjectPrefix.ReplaceAllString(m[2], "")
		i := slices.IndexFunc(mmKnownWarnings, func(k mmKnownWarning) bool {
			return k.re.MatchString(msg) && (len(k.models) == 0 || slices.Contains(k.models, model))
		})
		if i < 0 {
			unknown = append(unknown, "<"+m[1]+"> "+m[2])
			continue
		}
		known[i]++
	}
	return known, unknown
}

// checkLogWarnings fails on ModemManager warnings and errors that are not
// known, and logs the known ones with their reasons.
func (r *mmRun) checkLogWarnings(t *testing.T) {
	t.Helper()
	known, unknown := mmWarnings(r.mmLog, r.model.name)
	for _, i := range slices.Sorted(maps.Keys(known)) {
		t.Logf("%s: known ModemManager warning ×%d: %s (%s)", r.model.name, known[i], mmKnownWarnings[i].re, mmKnownWarnings[i].why)
	}
	if len(unknown) > 0 {
		t.Errorf("%s: ModemManager logged %d warnings or errors the mock should not cause:\n  %s", r.model.name, len(unknown), strings.Join(unknown, "\n  "))
	}
}

// TestModemManagerLogWarnings checks the sorting of ModemManager's log
// (no guest needed).
func TestModemManagerLogWarnings(t *testing.T) {
	log := `<info>  [000000.024561] ModemManager (version 1.20.4) starting in system bus...
<warn>  [000004.409481] [modem0] couldn't load carrier config: QMI PDC not supported
<warn>  [000004.526199] [modem0] couldn't query SIM slots: NoDeviceSupport
<warn>  [000006.378101] [modem1] couldn't query SIM slots: Couldn't peek client for service 'uim'
<warn>  [000004.716735] [modem0/sim0] couldn't load list of emergency numbers: Unknown error
<err>   [000005.000000] [modem0] something broke
<debug> [000005.100000] [modem0] couldn't load EID: NoDeviceSupport
<warn>  [000074.102128] [modem0/bearer0] reloading stats failed: Transaction timed out
`
	for _, c := range []struct {
		model   string
		known   int
		unknown []string
	}{
		{"telit-fn990", 3, []string{
			"<warn> [modem1] couldn't query SIM slots: Couldn't peek client for service 'uim'",
			"<warn> [modem0/sim0] couldn't load list of emergency numbers: Unknown error",
			"<err> [modem0] something broke"}},
		{"qcom-sdx55m", 3, []string{
			"<warn> [modem0] couldn't query SIM slots: NoDeviceSupport",
			"<warn> [modem0/sim0] couldn't load list of emergency numbers: Unknown error",
			"<err> [modem0] something broke"}},
	} {
		known, unknown := mmWarnings(log, c.model)
		n := 0
		for _, v := range known {
			n += v
		}
		if n != c.known || !slices.Equal(unknown, c.unknown) {
			t.Errorf("%s: %d known, unknown %q; want %d, %q", c.model, n, unknown, c.known, c.unknown)
		}
	}
}

// logUnsupported prints what ModemManager asked that the mock answered
// "not supported".
func (r *mmRun) logUnsupported(t *testing.T) {
	ss := r.fns.Load()
	if ss.MBIM != nil {
		for _, u := range ss.MBIM.Stats().Unsupported {
			t.Logf("%s: MBIM not supported: %s CID %d %s ×%d", r.model.name, u.Service, u.CID, u.Command, u.Count)
		}
	}
	if ss.QMI != nil {
		for _, u := range ss.QMI.Stats().Unsupported {
			t.Logf("%s: QMI not supported: %s 0x%04x ×%d", r.model.name, u.Service, u.Message, u.Count)
		}
	}
	if ss.AT != nil {
		for name, n := range ss.AT.Stats().Unknown {
			t.Logf("%s: AT not supported: %s ×%d", r.model.name, name, n)
		}
	}
}

// TestModemManagerFN990: ModemManager drives the mock as a Telit FN990
// (MBIM control on /dev/wwan0mbim0, AT on /dev/wwan0at0/at1, data on
// wwan0 through mhi_wwan_mbim).
func TestModemManagerFN990(t *testing.T) {
	testModemManager(t, "telit-fn990")
}

// TestModemManagerSDX55: ModemManager drives the mock as a Qualcomm SDX55
// (MBIM and QMI control ports, data on mhi_hwip0 through mhi_net).
func TestModemManagerSDX55(t *testing.T) {
	testModemManager(t, "qcom-sdx55m")
}

// TestModemManagerCatchesBrokenConnect breaks the mock on purpose: every
// CONNECT answer and notification of its MBIM function says the session
// is "deactivated", whatever happened. ModemManager must then refuse to
// call the bearer connected, and the guest's connect check must fail: a
// test of the mock against ModemManager that cannot fail would prove
// nothing.
func TestModemManagerCatchesBrokenConnect(t *testing.T) {
	var mangled atomic.Int64
	r := &mmRun{model: mmModels["telit-fn990"], mangleMBIM: breakConnect(&mangled)}
	r.run(t)
	got := checks(r.serial)
	for _, n := range []string{"modem-listed", "modem-initialized", "registered"} {
		if !strings.HasPrefix(got[n], "PASS") {
			r.fatal(t, fmt.Sprintf("the guest failed before the connect (%s: %q)", n, got[n]))
		}
	}
	if mangled.Load() == 0 {
		t.Fatalf("no CONNECT answer was broken: ModemManager never sent CONNECT; serial log:\n%s", r.serial)
	}
	if v := got["connected"]; !strings.HasPrefix(v, "FAIL") {
		t.Fatalf("broken CONNECT not caught: connected %q; serial log:\n%s", v, r.serial)
	}
	t.Logf("guest, as expected: CHECK connected %s (%d CONNECT messages broken)", got["connected"], mangled.Load())
	out, _ := mmBlock(r.serial, "mmcli-connect")
	if !strings.Contains(out, "couldn't connect") {
		t.Errorf("mmcli --simple-connect did not report a failed connect:\n%s", out)
	}
	t.Logf("mmcli --simple-connect said:\n%s", out)
}

// breakConnect returns an MBIM mangler that rewrites every CONNECT answer
// and notification to say the session is "deactivated", counting them in
// mangled.
func breakConnect(mangled *atomic.Int64) func([]byte) {
	return func(msg []byte) {
		m, err := mbim.ParseMessage(msg)
		if err != nil || m.Service != mbim.ServiceBasicConnect || m.CID != mbim.CIDConnect || m.Fragmented() {
			return
		}
		var off int
		switch {
		case m.Type == mbim.TypeCommandDone && m.Status == mbim.StatusSuccess:
			off = mbim.CommandHeaderLen
		case m.Type == mbim.TypeIndicateStatus:
			off = mbim.IndicateStatusHeaderLen
		default:
			return
		}
		if len(msg) >= off+8 {
			binary.LittleEndian.PutUint32(msg[off+4:], mbim.ActivationStateDeactivated)
			mangled.Add(1)
		}
	}
}
