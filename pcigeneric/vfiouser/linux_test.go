package vfiouser_test

import (
	"context"
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
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/internal/qemuguest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// The Linux-driver test: the mock modem, served over vfio-user by this
// package, is a PCI device of a QEMU guest running Debian's kernel, and
// Linux's own MHI stack (mhi, mhi_pci_generic, mhi_net, mhi_wwan_mbim,
// mhi_wwan_ctrl) drives it. The guest's /init checks what it sees and prints one
// "CHECK <name> PASS|FAIL <detail>" line per check on the serial console;
// the test reacts to its "MARK <step>" lines (injecting SYS_ERR, starting
// the generator, taking the modem's counters) and gives the verdict from
// the guest's checks and the modem's counters together.
//
// Each test runs on a kernel matrix (labvm.Kernels): Debian
// bookworm's 6.1, trixie's 6.12 and the newest of trixie-backports (7.x),
// one subtest per kernel, sharing one initramfs per kernel. The kernels
// differ in what they ask of the device: 6.12 and later bind IP_SW0 as
// mhi_swip0 on the SDX55, and 7.x enables MSI-X with one vector per event
// ring where 6.1 and 6.12 share one MSI vector; the tests check each.
//
// Requirements: QEMU >= 10.1 with vfio-user-pci, the kernels and a static
// busybox; make test-deps (run by make test) unpacks trixie-backports'
// QEMU 11.1, bookworm's busybox and the three kernels into
// labvm.CacheDir, no root needed. Without them the tests skip saying
// what is missing; with CI=true they fail. See docs/LINUX-DRIVER.md.

// linuxModules are the kernel's MHI and WWAN modules, in insmod order
// (qemuguest.Env.WithDependencies adds what a kernel's build of them needs
// besides, such as gnss for wwan where CONFIG_GNSS is set).
var linuxModules = []string{
	"kernel/drivers/bus/mhi/host/mhi.ko",
	"kernel/drivers/net/wwan/wwan.ko",
	"kernel/drivers/bus/mhi/host/mhi_pci_generic.ko",
	"kernel/drivers/net/mhi_net.ko",
	"kernel/drivers/net/wwan/mhi_wwan_ctrl.ko",
	"kernel/drivers/net/wwan/mhi_wwan_mbim.ko",
}

// Traffic of the fn990 profile: the generator's downlink run.
const (
	dlPackets    = 3200
	dlPacketSize = 1000
)

// linuxInit is the guest's /init. The profile comes from the kernel
// command line (gomhi.profile=sdx55|fn990).
const linuxInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "BOOTED $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
profile=$(sed -n 's/.*gomhi\.profile=\([^ ]*\).*/\1/p' /proc/cmdline)
dlcount=$(sed -n 's/.*gomhi\.dl=\([0-9]*\).*/\1/p' /proc/cmdline)
stopafter=$(sed -n 's/.*gomhi\.stop=\([^ ]*\).*/\1/p' /proc/cmdline)
check() { if [ "$2" = 0 ]; then echo "CHECK $1 PASS $3"; else echo "CHECK $1 FAIL $3"; fi; }
# waitfor PATH SECONDS / waitgone PATH SECONDS
waitfor() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -ge $(($2*20)) ] && return 1; sleep 0.05; done; return 0; }
waitgone() { i=0; while [ -e "$1" ]; do i=$((i+1)); [ $i -ge $(($2*20)) ] && return 1; sleep 0.05; done; return 0; }
stats() { for f in rx_packets tx_packets rx_bytes tx_bytes rx_errors tx_errors rx_dropped tx_dropped; do printf '%%s=%%s ' $f $(cat /sys/class/net/$1/statistics/$f); done; echo; }
kernlog() { dmesg | grep -iE 'mhi|wwan' | grep -vE 'insmod|Loading' ; }
# pingcheck NAME COUNT ADDRESS: ping and check every echo came back. A
# loaded host can delay an echo past 2 s (counted by the interface, not by
# ping; seen once past 5 s with the machine at a load of 20): wait 10 s
# unless the modem is broken on purpose (gomhi.stop).
pingwait=10; [ -n "$stopafter" ] && pingwait=2
pingcheck() { out=$(ping -c $2 -W $pingwait $3 2>&1); echo "$out" | grep -q " $2 packets received"; check $1 $? "$(echo "$out" | grep -E 'transmitted|bad|unreach')"; }
# ctlports NODE…: the wwan ports exist (check node-NODE) with their types.
ctlports() {
	for n in "$@"; do waitfor /dev/$n 10; check node-$n $? "/dev/$n ($(cat /sys/class/wwan/$n/type 2>/dev/null))"; done
	echo "INFO wwan class: $(ls /sys/class/wwan | tr '\n' ' ')"
}
# irqs LABEL: the MHI interrupt lines of /proc/interrupts (bhi: the BHI
# and state-change vector; mhi: the event rings').
irqs() { grep -wE 'bhi|mhi' /proc/interrupts | while read -r l; do echo "$1 $l"; done; }
# irqquiet: waits (at most 20 rounds of 0.3 s) until no MHI interrupt
# arrives for 0.3 s: on a loaded host the last echo's interrupts can land
# late, and a count taken then would not be a quiet moment's.
irqquiet() {
	n=0
	while [ $n -lt 20 ]; do a=$(irqs Q); sleep 0.3; [ "$a" = "$(irqs Q)" ] && return; n=$((n+1)); done
	echo "INFO interrupts never quiet for 0.3 s"
}
# irqstart, irqend: the interrupt counts before and after request/response
# traffic (pings, UDP echoes), at quiet moments (checked: the counts must
# not move over the 0.3 s after the MARK).
# pmstayon: keeps the modem out of runtime suspend. mhi_pci_generic allows
# it at mission mode (2 s autosuspend, the function being PME-capable from
# D3hot): an M3 entry between the marks would add its interrupts to the
# counts compared with the mock's. TestLinuxDriverBootsFromPBL tests
# runtime PM.
pmstayon() { for p in /sys/bus/pci/drivers/mhi-pci-generic/0000:*; do [ -e "$p/power/control" ] && echo on > "$p/power/control"; done; }
irqstart() { pmstayon; irqquiet; irqs IRQ-START; echo "MARK irq-start"; sleep 0.3; irqs IRQ-START-AFTER; }
irqend() { pmstayon; irqquiet; irqs IRQ; echo "MARK irq-end"; sleep 0.3; irqs IRQ-AFTER; }
# quiet6 IF: no stray IPv6 traffic (router or MLD solicitations) on IF, so
# the guest's counters can be compared with the modem's exactly.
quiet6() {
	sysctl -qw net.ipv6.conf.$1.accept_ra=0 net.ipv6.conf.$1.router_solicitations=0 \
		net.ipv6.conf.$1.mldv1_unsolicited_report_interval=0 net.ipv6.conf.$1.mldv2_unsolicited_report_interval=0 2>/dev/null
}
# mark STEP: let the test take the modem's counters at a quiet moment.
mark() { sleep 0.2; echo "MARK $1"; sleep 0.3; }
finish() { echo "--- kernel log ---"; kernlog; echo "GUEST DONE"; poweroff -f; }
addrs() {
	ip link set $1 up
	ip addr add 192.0.2.1 peer 192.0.2.2 dev $1
	ip -6 addr add 2001:db8::1 peer 2001:db8::2 dev $1
}
# gomhi.debug=1 turns on the MHI core's debug messages (dynamic debug).
dbg=; grep -q 'gomhi\.debug=1' /proc/cmdline && dbg=dyndbg=+p
for m in %s; do
	case $m in mhi.ko|mhi_pci_generic.ko) a=$dbg ;; *) a= ;; esac
	insmod /lib/modules/$m $a || echo "CHECK insmod-$m FAIL"
done
case $profile in
sdx55)
	waitfor /sys/class/net/mhi_hwip0 20; rc=$?; check netdev $rc "mhi_hwip0 (mhi_net on IP_HW0)"
	[ $rc = 0 ] || finish
	pmstayon
	echo "INFO $(cat /sys/bus/mhi/devices/mhi0/serial_number 2>&1)"
	echo "INFO channels: $(ls /sys/bus/mhi/devices | tr '\n' ' ')"
	# IP_SW0 (channels 46/47): Linux 6.12 and later bind it as mhi_swip0.
	swip=; [ -e /sys/bus/mhi/devices/mhi0_IP_SW0 ] && { waitfor /sys/class/net/mhi_swip0 10; swip=mhi_swip0; }
	echo "INFO netdevs: $(ls /sys/class/net | tr '\n' ' ')"
	quiet6 mhi_hwip0
	addrs mhi_hwip0
	if [ -n "$swip" ]; then
		quiet6 mhi_swip0
		ip link set mhi_swip0 up
		ip addr add 198.51.100.1 peer 198.51.100.2 dev mhi_swip0
	fi
	irqstart
	echo "MARK traffic"
	pingcheck ping4 5 192.0.2.2
	[ "$stopafter" = ping4 ] && finish
	pingcheck ping6 5 2001:db8::2
	/bin/guestprobe udp -name udp4-echo -to 192.0.2.2:7 -count 10 -size 1200
	/bin/guestprobe udp -name udp6-echo -to [2001:db8::2]:7 -count 10 -size 1200
	if [ -n "$swip" ]; then
		pingcheck swip-ping4 3 198.51.100.2
		/bin/guestprobe udp -name swip-udp4-echo -to 198.51.100.2:7 -count 10 -size 1200
	fi
	sleep 1
	echo "STATS $(stats mhi_hwip0)"
	[ -n "$swip" ] && echo "STATS-SW $(stats mhi_swip0)"
	echo "MARK stats"
	sleep 0.5
	echo "STATS-AFTER $(stats mhi_hwip0)"
	[ -n "$swip" ] && echo "STATS-SW-AFTER $(stats mhi_swip0)"
	irqend
	# Linux's control ports (mhi_wwan_ctrl): MBIM and QMI.
	ctlports wwan0mbim0 wwan0qmi0
	/bin/guestprobe mbim -dev /dev/wwan0mbim0 -observe
	/bin/guestprobe qmi -dev /dev/wwan0qmi0
	mark ctl
	# After SYS_ERR the driver destroys the channels' devices and creates
	# them again once the modem is back in mission mode: mhi_hwip0 comes
	# back as a new interface (another ifindex), perhaps within one poll.
	idx=$(cat /sys/class/net/mhi_hwip0/ifindex)
	echo "MARK syserr"
	i=0; while [ "$(cat /sys/class/net/mhi_hwip0/ifindex 2>/dev/null)" = "$idx" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
	[ "$(cat /sys/class/net/mhi_hwip0/ifindex 2>/dev/null)" != "$idx" ]; check syserr-teardown $? "mhi_hwip0 (ifindex $idx) removed after SYS_ERR"
	waitfor /sys/class/net/mhi_hwip0 30; check syserr-recovered $? "mhi_hwip0 back (ifindex $(cat /sys/class/net/mhi_hwip0/ifindex 2>/dev/null)) after SYS_ERR recovery"
	pmstayon
	addrs mhi_hwip0
	pingcheck ping4-after-syserr 3 192.0.2.2
	# The MBIM port is created again too, and the modem answers on it.
	waitfor /dev/wwan0mbim0 10
	/bin/guestprobe mbim -dev /dev/wwan0mbim0 -name mbim-after-syserr -quick
	echo "MARK recovered"
	;;
fn990)
	waitfor /sys/class/net/wwan0 20; rc=$?; check netdev $rc "wwan0 (mhi_wwan_mbim on IP_HW0_MBIM)"
	[ $rc = 0 ] || finish
	pmstayon
	echo "INFO channels: $(ls /sys/bus/mhi/devices | tr '\n' ' ')"
	# mhi_wwan_mbim hands each datagram to netif_rx: a whole run arrives
	# faster than the emulated CPU drains the backlog, whose overflow
	# counts in rx_dropped. A deeper backlog keeps every datagram.
	sysctl -qw net.core.netdev_max_backlog=$((dlcount + 1000))
	quiet6 wwan0
	ip link set wwan0 up
	echo "STATS-BEFORE $(stats wwan0)"
	echo "MARK dl"
	# Wait for the whole run (the test starts the generator on MARK dl),
	# then for the count to settle.
	i=0; while [ $(cat /sys/class/net/wwan0/statistics/rx_packets) -lt $dlcount ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
	sleep 0.5
	echo "STATS $(stats wwan0)"
	echo "MARK stats"
	irqstart
	# The uplink: Linux's own NTB16 framing, parsed by the modem.
	addrs wwan0
	pingcheck ping4 3 192.0.2.2
	/bin/guestprobe udp -name udp4-echo -to 192.0.2.2:7 -count 10 -size 1400
	sleep 0.5
	irqend
	# Linux's control ports (mhi_wwan_ctrl): MBIM, DUN and DUN2.
	ctlports wwan0mbim0 wwan0at0 wwan0at1
	/bin/guestprobe mbim -dev /dev/wwan0mbim0 -observe
	/bin/guestprobe at -dev /dev/wwan0at0 -name at0
	/bin/guestprobe at -dev /dev/wwan0at1 -name at1 -long
	mark ctl
	;;
*)
	echo "CHECK profile FAIL unknown profile '$profile'"
	;;
esac
finish
`

// linuxKernel is one kernel of the matrix with what its boots need: QEMU,
// busybox, the kernel and the initramfs built for it (its modules,
// /init, the guest probe).
type linuxKernel struct {
	labvm.Kernel
	env    *qemuguest.Env
	initrd string
}

// guestImages caches each kernel's environment and initramfs for the
// tests of the run; the folder goes when every test has finished.
var guestImages struct {
	sync.Mutex
	dir     string
	kernels map[string]*linuxKernel
}

// kernelSet selects kernels of the matrix.
type kernelSet int

const (
	allKernels          kernelSet = iota
	oldestNewestKernels           // the first and the last of labvm.Kernels
)

// forEachKernel runs f as a subtest per kernel of set (named after its
// Debian suite), each with that kernel's environment and initramfs.
func forEachKernel(t *testing.T, set kernelSet, f func(t *testing.T, k *linuxKernel)) {
	ks := labvm.Kernels()
	for i, k := range ks {
		if set == oldestNewestKernels && i != 0 && i != len(ks)-1 {
			continue
		}
		t.Run(k.Name, func(t *testing.T) { f(t, linuxKernelEnv(t, k)) })
	}
}

// linuxKernelEnv finds QEMU with vfio-user, kernel k with the MHI modules
// and busybox (or skips, failing under CI=true), and builds the guest's
// initramfs for k once per run.
func linuxKernelEnv(t *testing.T, k labvm.Kernel) *linuxKernel {
	t.Helper()
	env := qemuguest.Find(t, labvm.Options{VFIOUser: true, Modules: linuxModules, KernelDir: k.Dir})
	guestImages.Lock()
	defer guestImages.Unlock()
	if lk := guestImages.kernels[k.Name]; lk != nil && lk.env.Kernel == env.Kernel {
		return lk
	}
	if guestImages.dir == "" {
		dir, err := os.MkdirTemp("", "gomhi-linux-guests-")
		if err != nil {
			t.Fatal(err)
		}
		guestImages.dir, guestImages.kernels = dir, map[string]*linuxKernel{}
		vfiouser.AfterTests(func() { os.RemoveAll(dir) })
	}
	mods, err := env.WithDependencies(linuxModules)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(mods))
	for i, m := range mods {
		names[i] = filepath.Base(m)
	}
	dir := filepath.Join(guestImages.dir, k.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	initrd := env.Build(t, dir, labvm.Initramfs{
		Init:     fmt.Sprintf(linuxInit, strings.Join(names, " ")),
		Modules:  mods,
		Programs: map[string]string{"bin/guestprobe": "./pcigeneric/vfiouser/internal/guestprobe"},
	})
	t.Logf("kernel %s: %s, modules %s", k.Name, env.Release, strings.Join(names, " "))
	lk := &linuxKernel{Kernel: k, env: env, initrd: initrd}
	guestImages.kernels[k.Name] = lk
	return lk
}

// guestRun is one boot of the guest against a served mock modem.
type guestRun struct {
	model   string
	profile string
	ipdata  ipdata.Config
	// onMark reacts to a "MARK <step>" line of the guest.
	onMark func(r *guestRun, step string)
	// modem setup for each session (faults)
	device func(*ep.Config)

	// ctlID, if set, attaches the MBIM, QMI and AT functions the model
	// has channels for, answering as this identity.
	ctlID *modem.Identity

	// swip, if set, answers on IP_SW0 (a second responder) when the
	// model has that pair.
	swip *ipdata.Function

	kernel *linuxKernel
	dev    *vfiouser.ServerDevice
	ipd    atomic.Pointer[ipdata.Function]
	ctl    atomic.Pointer[ctlSetup]
	events *eventLog

	mu      sync.Mutex
	regs    []vfiouser.RegisterAccess
	marks   map[string]markSnap
	serial  string
	elapsed time.Duration
	booted  time.Duration // QEMU start to the guest's /init
	qemuLog string        // QEMU's log file (-D): its trace of injected MSIs
}

// markSnap is the modem's view at a guest's MARK line.
type markSnap struct {
	ip     ipdata.Stats
	swip   ipdata.Stats // the IP_SW0 responder's, if any
	irq    vfiouser.IRQStats
	modem  ep.Stats
	status ep.Status
	ctl    *ctlSnap  // nil without control functions
	regs   int       // register accesses logged so far
	at     time.Time // when the line arrived
}

// eventLog collects the server's event log records.
type eventLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *eventLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.recs = append(l.recs, strings.TrimSpace(string(p)))
	l.mu.Unlock()
	return len(p), nil
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.recs, "\n")
}

// ipData returns the session's IP data function, waiting for the session.
func (r *guestRun) ipData() *ipdata.Function { return r.ipd.Load() }

// run serves the modem, boots the guest on kernel k and returns the serial
// log.
func (r *guestRun) run(t *testing.T, k *linuxKernel, extraAppend string) {
	t.Helper()
	r.kernel = k
	r.events = &eventLog{}
	r.marks = map[string]markSnap{}
	dev, err := vfiouser.NewServerDevice(vfiouser.DeviceOptions{
		Model:  r.model,
		Logger: slog.New(slog.NewTextHandler(r.events, nil)),
		IPData: &r.ipdata,
		Device: func(c *ep.Config) {
			// The main data pair's function (the mock also serves IP_SW0).
			if ipd, ok := c.Functions[pcigeneric.DataPair(c.MHI)].(*ipdata.Function); ok {
				r.ipd.Store(ipd)
			}
			if r.swip != nil && slices.ContainsFunc(c.MHI.Channels, func(ch wire.ChannelConfig) bool { return ch.Name == ipSW0 }) {
				c.Functions[ipSW0] = r.swip
			}
			if r.ctlID != nil {
				s, err := newCtlSetup(c, *r.ctlID)
				if err != nil {
					t.Errorf("control functions: %v", err)
				} else {
					r.ctl.Store(s)
				}
			}
			if r.device != nil {
				r.device(c)
			}
		},
		OnRegister: func(a vfiouser.RegisterAccess) {
			r.mu.Lock()
			r.regs = append(r.regs, a)
			r.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.dev = dev
	sock := filepath.Join(t.TempDir(), "mhi.sock")
	r.qemuLog = filepath.Join(t.TempDir(), "qemu.log")
	defer serve(t, sock, dev)()

	qctx, qcancel := context.WithCancel(context.Background())
	defer qcancel()
	start := time.Now()
	res := k.env.Run(qctx, labvm.Boot{
		Args: []string{"-machine", "q35,memory-backend=mem", "-accel", "tcg",
			"-object", "memory-backend-memfd,id=mem,size=256M,share=on", "-m", "256", "-smp", "1",
			"-device", fmt.Sprintf(`{"driver":"vfio-user-pci","id":"mhi0","socket":{"type":"unix","path":%q}}`, sock),
			// QEMU's own count of the MSIs it injects (checkInjected).
			"-trace", "vfio_msi_interrupt", "-D", r.qemuLog},
		Initrd:  k.initrd,
		Append:  "gomhi.profile=" + r.profile + " " + extraAppend,
		Timeout: 90 * time.Second,
		OnLine: func(line string) {
			if strings.HasPrefix(line, "BOOTED ") {
				r.mu.Lock()
				r.booted = time.Since(start)
				r.mu.Unlock()
			}
			step, ok := strings.CutPrefix(line, "MARK ")
			if !ok {
				return
			}
			step = strings.TrimSpace(step)
			if r.onMark != nil {
				r.onMark(r, step)
			}
			r.snapshot(step)
		},
	})
	r.serial, r.elapsed = res.Serial, res.Elapsed
	if _, klog, ok := strings.Cut(res.Serial, "--- kernel log ---\n"); ok && testing.Verbose() {
		klog, _, _ = strings.Cut(klog, "GUEST DONE")
		t.Logf("%s: guest kernel log (MHI and WWAN lines):\n%s", r.profile, klog)
	}
	t.Logf("%s on %s: /init after %v, boot + checks %v (qemu: %v)", r.profile, k.env.Release,
		r.booted.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond), errText(res.Err))
	if res.Err != nil || !strings.Contains(res.Serial, "GUEST DONE") {
		t.Fatalf("guest did not finish (qemu: %v)\nserial log:\n%s\nqemu output:\n%s\nserver log:\n%s",
			errText(res.Err), res.Serial, res.Stderr, r.events)
	}
}

// snapshot records the modem's counters at a guest's MARK line.
func (r *guestRun) snapshot(step string) {
	s := markSnap{at: time.Now()}
	if ipd := r.ipData(); ipd != nil {
		s.ip = ipd.Stats()
	}
	if r.swip != nil {
		s.swip = r.swip.Stats()
	}
	s.irq = r.dev.Interrupts()
	if m := r.dev.Modem(); m != nil {
		s.modem = m.Stats()
		s.status = m.Status()
	}
	if c := r.ctl.Load(); c != nil {
		cs := c.snapshot()
		s.ctl = &cs
	}
	r.mu.Lock()
	s.regs = len(r.regs)
	r.marks[step] = s
	r.mu.Unlock()
}

func (r *guestRun) mark(t *testing.T, step string) markSnap {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.marks[step]
	if !ok {
		t.Fatalf("the guest never reached MARK %s; serial log:\n%s", step, r.serial)
	}
	return s
}

// serve runs vfiouser.ListenAndServe for dev on the socket path sock and
// waits until the socket is there. stop ends the server and fails the
// test if it returned an error; serve calls it itself when it fails.
func serve(t *testing.T, sock string, dev *vfiouser.ServerDevice) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- vfiouser.ListenAndServe(ctx, sock, dev) }()
	stop = func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("server: %v", err)
		}
	}
	up := false
	defer func() {
		if !up {
			stop()
		}
	}()
	waitSocket(t, sock)
	up = true
	return stop
}

// waitSocket waits up to 2 s for a socket to appear at path.
func waitSocket(t *testing.T, path string) {
	t.Helper()
	poll.Wait(t, 2*time.Second, func() bool {
		fi, err := os.Stat(path)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}, func() string { return fmt.Sprintf("server socket %s never appeared", path) })
}

func errText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

var (
	checkLine   = regexp.MustCompile(`(?m)^CHECK (\S+) (PASS|FAIL)(.*)$`)
	infoLine    = regexp.MustCompile(`(?m)^INFO .*$`)
	statsFields = regexp.MustCompile(`(\w+)=(\d+)`)
)

// checks returns the guest's verdicts by check name.
func checks(serial string) map[string]string {
	out := map[string]string{}
	for _, m := range checkLine.FindAllStringSubmatch(serial, -1) {
		out[m[1]] = m[2] + m[3]
	}
	return out
}

// guestStats parses the guest's "<prefix> rx_packets=… …" line.
func guestStats(t *testing.T, serial, prefix string) map[string]uint64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + ` (.*)$`)
	m := re.FindStringSubmatch(serial)
	if m == nil {
		t.Fatalf("no %q line in the serial log:\n%s", prefix, serial)
	}
	out := map[string]uint64{}
	for _, f := range statsFields.FindAllStringSubmatch(m[1], -1) {
		v, _ := strconv.ParseUint(f[2], 10, 64)
		out[f[1]] = v
	}
	return out
}

// failedChecks returns, sorted, what is wrong with the guest's verdicts
// got: each named check that is missing or did not pass, and each other
// check that failed.
func failedChecks(got map[string]string, names []string) []string {
	var bad []string
	for _, n := range names {
		if v, ok := got[n]; !ok {
			bad = append(bad, n+": missing")
		} else if !strings.HasPrefix(v, "PASS") {
			bad = append(bad, n+": "+v)
		}
	}
	for n, v := range got {
		if strings.HasPrefix(v, "FAIL") && !slices.Contains(names, n) {
			bad = append(bad, n+": "+v)
		}
	}
	slices.Sort(bad)
	return bad
}

// requireChecks fails unless every named check passed and no check failed.
func requireChecks(t *testing.T, r *guestRun, names ...string) {
	t.Helper()
	got := checks(r.serial)
	if bad := failedChecks(got, names); len(bad) > 0 {
		t.Fatalf("guest checks failed:\n  %s\nserial log:\n%s\nserver log:\n%s", strings.Join(bad, "\n  "), r.serial, r.events)
	}
	for _, n := range slices.Sorted(maps.Keys(got)) {
		t.Logf("guest: CHECK %s %s", n, got[n])
	}
	for _, l := range infoLine.FindAllString(r.serial, -1) {
		t.Logf("guest: %s", l)
	}
}

// TestLinuxDriverSDX55 boots the guest with the mock modem as a Qualcomm
// SDX55 (17cb:0306): mhi_pci_generic must power it up to M0 in mission
// mode, mhi_net must bind IP_HW0 and its mhi_hwip0 must exchange ICMP and
// UDP echoes with the modem's responder (IPv4 and IPv6) with counters that
// match the modem's; then the modem raises SYS_ERR and the driver must
// tear the channels down, reset the modem and bring it back to mission
// mode, with traffic flowing again. Before the SYS_ERR, the guest probe
// speaks MBIM on /dev/wwan0mbim0 and QMI on /dev/wwan0qmi0 (mhi_wwan_ctrl)
// to the modem's control functions, and after it MBIM once more
// (linux_ctl_test.go).
func TestLinuxDriverSDX55(t *testing.T) {
	forEachKernel(t, allKernels, testLinuxDriverSDX55)
}

func testLinuxDriverSDX55(t *testing.T, k *linuxKernel) {
	swip, err := ipdata.New(ipdata.Config{Format: framing.RawIP, Responder: true})
	if err != nil {
		t.Fatal(err)
	}
	r := &guestRun{model: "qcom-sdx55m", profile: "sdx55",
		ipdata: ipdata.Config{Format: framing.RawIP, Responder: true},
		ctlID:  &sdx55Identity,
		swip:   swip,
		onMark: func(r *guestRun, step string) {
			if step == "syserr" {
				r.dev.Modem().InjectSysErr()
			}
		},
	}
	r.run(t, k, os.Getenv("GOMHI_LINUX_APPEND"))
	want := slices.Concat([]string{"netdev", "ping4", "ping6", "udp4-echo", "udp6-echo",
		"syserr-teardown", "syserr-recovered", "ping4-after-syserr", "node-wwan0mbim0"},
		mbimChecks, qmiChecks, afterSysErrChecks)
	if kernelHasSWIP[k.Name] {
		want = append(want, "swip-ping4", "swip-udp4-echo")
	}
	requireChecks(t, r, want...)
	checkServerClean(t, r)
	checkInterrupts(t, r)
	checkInjected(t, r)
	checkSWIP(t, r)
	// The SYS_ERR comes with the BHI interrupt: on MSI-X, vector 0.
	if b, a := r.mark(t, "ctl").irq, r.mark(t, "recovered").irq; a.Index == "MSI-X" {
		t.Logf("vector 0 (bhi): %d interrupts before SYS_ERR, %d after the recovery", vecDelivered(b, 0), vecDelivered(a, 0))
		if vecDelivered(a, 0) <= vecDelivered(b, 0) {
			t.Errorf("SYS_ERR raised no interrupt on vector 0 (BHI, INTVEC)")
		}
	}

	// The guest's interface counters against the modem's, at the same
	// quiet moment: every packet the guest sent reached the modem's data
	// function, every answer it sent reached the guest.
	g := guestStats(t, r.serial, "STATS")
	after := guestStats(t, r.serial, "STATS-AFTER")
	if !maps.Equal(g, after) {
		t.Fatalf("guest counters moved while the modem's were taken: %v then %v", g, after)
	}
	m := r.mark(t, "stats").ip
	t.Logf("guest mhi_hwip0: %v", g)
	t.Logf("modem IP_HW0: uplink %d packets (%d transfers, %d bytes), answered %d, not answered %d; downlink %d packets (%d bytes)",
		m.ULPackets, m.ULTransfers, m.ULBytes, m.Answered, m.DroppedNotAnswered, m.DLPackets, m.DLBytes)
	if g["tx_packets"] != m.ULPackets || g["tx_bytes"] != m.ULBytes {
		t.Errorf("guest sent %d packets (%d bytes), the modem received %d (%d bytes)", g["tx_packets"], g["tx_bytes"], m.ULPackets, m.ULBytes)
	}
	if g["rx_packets"] != m.DLPackets || g["rx_bytes"] != m.DLBytes {
		t.Errorf("modem sent %d packets (%d bytes), the guest received %d (%d bytes)", m.DLPackets, m.DLBytes, g["rx_packets"], g["rx_bytes"])
	}
	// 5 + 5 pings and 10 + 10 UDP echoes at least.
	if m.Answered < 30 || g["rx_errors"] != 0 || g["tx_errors"] != 0 || g["rx_dropped"] != 0 {
		t.Errorf("answered %d (want >= 30), guest errors rx %d tx %d, rx dropped %d", m.Answered, g["rx_errors"], g["tx_errors"], g["rx_dropped"])
	}
	if st := r.mark(t, "stats").status; st.State != wire.StateM0 || st.EE != wire.EEAMSS {
		t.Errorf("modem in %v/%v before SYS_ERR, want M0/AMSS", st.State, st.EE)
	}
	if s := r.mark(t, "syserr").modem; s.FaultsInjected == 0 {
		t.Errorf("no fault injected at MARK syserr")
	}
	// The facts sheet: on SYS_ERR the host resets the device
	// (MHICTRL.RESET), destroys the client devices and runs the READY
	// transition again; mhi_pci_generic reports "firmware crashed".
	if !strings.Contains(r.serial, "firmware crashed") {
		t.Errorf("kernel log lacks the driver's SYS_ERR report \"firmware crashed\"")
	}
	before, rec := r.mark(t, "syserr").modem, r.mark(t, "recovered")
	if rec.modem.Resets <= before.Resets {
		t.Errorf("the driver did not reset the modem after SYS_ERR (resets %d before, %d after)", before.Resets, rec.modem.Resets)
	}
	if rec.status.State != wire.StateM0 || rec.status.EE != wire.EEAMSS {
		t.Errorf("modem in %v/%v after recovery, want M0/AMSS", rec.status.State, rec.status.EE)
	}
	t.Logf("modem: %d resets before SYS_ERR, %d after recovery; state %v, EE %v", before.Resets, rec.modem.Resets, rec.status.State, rec.status.EE)

	// Linux's control ports: MBIM and QMI through mhi_wwan_ctrl.
	checkMBIMPort(t, r, sdx55Identity)
	checkQMIPort(t, r, sdx55Identity)
	checkMBIMAfterSysErr(t, r, sdx55Identity)
	ctlSummary(t, r)
	r.logRegisters(t)
}

// logRegisters prints the guest driver's register accesses, by register
// in order of first access (the table in docs/LINUX-DRIVER.md), and the
// writes to registers other than doorbells in the order they came.
func (r *guestRun) logRegisters(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type tally struct {
		name          string
		reads, writes int
		values        []uint32 // distinct values written, in order
	}
	var order []uint32
	by := map[uint32]*tally{}
	var seq []string
	for _, a := range r.regs {
		x := by[a.Offset]
		if x == nil {
			x = &tally{name: ep.RegisterName(a.Offset)}
			by[a.Offset] = x
			order = append(order, a.Offset)
		}
		if !a.Write {
			x.reads++
			continue
		}
		x.writes++
		if !slices.Contains(x.values, a.Value) {
			x.values = append(x.values, a.Value)
		}
		if !strings.Contains(x.name, "DB") {
			seq = append(seq, fmt.Sprintf("%s=0x%x", x.name, a.Value))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d register accesses by the Linux driver:\n| offset | register | reads | writes | values written |\n|---|---|---|---|---|\n", len(r.regs))
	for _, off := range order {
		x := by[off]
		vals := make([]string, 0, 3)
		for i, v := range x.values {
			if i == 3 {
				vals = append(vals, fmt.Sprintf("… (%d distinct)", len(x.values)))
				break
			}
			vals = append(vals, fmt.Sprintf("0x%x", v))
		}
		fmt.Fprintf(&b, "| 0x%03x | %s | %d | %d | %s |\n", off, x.name, x.reads, x.writes, strings.Join(vals, ", "))
	}
	fmt.Fprintf(&b, "writes other than doorbells, in order:\n%s\n", strings.Join(seq, " "))
	t.Log(b.String())
}

// TestLinuxDriverFN990 boots the guest with the mock modem as a Telit
// FN990 (17cb:0308, subsystem 1c5d:2010): mhi_wwan_mbim must bind
// IP_HW0_MBIM, and a downlink run of the modem's generator, aggregated as
// MBIM NTB16 of up to 32 datagrams in the driver's 32 KiB buffers, must
// arrive whole: the guest's rx_packets equals what the modem sent, with no
// receive errors or drops. Pings and UDP echoes through wwan0 then check
// the uplink: NTB16 built by Linux, parsed by the modem. Last, the guest
// probe speaks MBIM on /dev/wwan0mbim0 and AT on /dev/wwan0at0 and
// /dev/wwan0at1 (mhi_wwan_ctrl) to the modem's control functions
// (linux_ctl_test.go).
func TestLinuxDriverFN990(t *testing.T) {
	forEachKernel(t, allKernels, testLinuxDriverFN990)
}

func testLinuxDriverFN990(t *testing.T, k *linuxKernel) {
	var genErr atomic.Value
	r := &guestRun{model: "telit-fn990", profile: "fn990",
		ipdata: ipdata.Config{Format: framing.NTB16, Responder: true},
		ctlID:  &fn990Identity,
		onMark: func(r *guestRun, step string) {
			if step != "dl" {
				return
			}
			ipd := r.ipData()
			err := ipd.StartGenerator(ipdata.GeneratorConfig{Count: dlPackets, Sizes: []int{dlPacketSize},
				Src: [4]byte{198, 51, 100, 1}, Dst: [4]byte{192, 0, 2, 1}})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err = ipd.WaitGenerator(ctx)
				cancel()
			}
			if err != nil {
				genErr.Store(err)
			}
		},
	}
	r.run(t, k, fmt.Sprintf("gomhi.dl=%d", dlPackets))
	requireChecks(t, r, slices.Concat([]string{"netdev", "ping4", "udp4-echo", "node-wwan0mbim0"}, mbimChecks, atChecks)...)
	checkServerClean(t, r)
	checkInterrupts(t, r)
	checkInjected(t, r)
	if err, _ := genErr.Load().(error); err != nil {
		t.Fatalf("generator: %v", err)
	}
	g := guestStats(t, r.serial, "STATS")
	g0 := guestStats(t, r.serial, "STATS-BEFORE")
	m := r.mark(t, "stats").ip
	t.Logf("guest wwan0: %v", g)
	t.Logf("modem IP_HW0_MBIM: generated %d, downlink %d packets in %d NTB16 (%.1f per NTB, %d bytes), full %d, size %d, idle %d, timer %d",
		m.GenPackets, m.DLPackets, m.DLAggregates, m.AvgDatagrams(), m.DLBytes, m.FlushFull, m.FlushSize, m.FlushIdle, m.FlushTimer)
	if m.GenPackets != dlPackets {
		t.Errorf("modem generated %d packets, want %d", m.GenPackets, dlPackets)
	}
	if got := g["rx_packets"] - g0["rx_packets"]; got != m.GenPackets || m.DLPackets-m.Answered != m.GenPackets {
		t.Errorf("guest received %d datagrams, the modem sent %d (downlink %d incl. %d answers)", got, m.GenPackets, m.DLPackets, m.Answered)
	}
	if want := uint64(dlPackets * dlPacketSize); g["rx_bytes"]-g0["rx_bytes"] != want {
		t.Errorf("guest received %d bytes, want %d", g["rx_bytes"]-g0["rx_bytes"], want)
	}
	if g["rx_errors"] != 0 || g["rx_dropped"] != 0 {
		t.Errorf("guest rx_errors %d, rx_dropped %d; want 0", g["rx_errors"], g["rx_dropped"])
	}
	if m.FlushFull == 0 || m.AvgDatagrams() > ipdata.DefaultMaxDatagrams {
		t.Errorf("no full 32-datagram NTB, or more than 32 per NTB (%.1f average)", m.AvgDatagrams())
	}
	if m.DeaggErrors() != 0 {
		t.Errorf("modem found %d malformed uplink NTBs", m.DeaggErrors())
	}
	// The driver's receive buffers are its MRU: the FN990 entry's 32 KiB.
	for _, c := range r.mark(t, "stats").status.Channels {
		if c.Name == ipdata.MBIMName && c.Dir == wire.Downlink {
			t.Logf("downlink channel %d: host buffers of %d bytes", c.Num, c.HostBufferLen)
			if c.HostBufferLen != 32768 {
				t.Errorf("host buffers of %d bytes on channel %d, want 32768 (mhi_pci_generic's mru_default for the FN990)", c.HostBufferLen, c.Num)
			}
		}
	}

	// Linux's control ports: MBIM, DUN and DUN2 through mhi_wwan_ctrl.
	checkMBIMPort(t, r, fn990Identity)
	checkATPorts(t, r, fn990Identity)
	ctlSummary(t, r)
}

// TestLinuxDriverCatchesBrokenModem breaks the mock modem on purpose: from
// the first echo on, every transfer completion it posts carries a
// completion code no MHI device uses (0x7F). Linux's driver must reject
// those events, so the guest's ping must fail: a test of the mock against
// Linux that cannot fail would prove nothing. It runs on the oldest and
// the newest kernel of the matrix.
func TestLinuxDriverCatchesBrokenModem(t *testing.T) {
	forEachKernel(t, oldestNewestKernels, testLinuxDriverCatchesBrokenModem)
}

func testLinuxDriverCatchesBrokenModem(t *testing.T, k *linuxKernel) {
	r := &guestRun{model: "qcom-sdx55m", profile: "sdx55",
		ipdata: ipdata.Config{Format: framing.RawIP, Responder: true},
		onMark: func(r *guestRun, step string) {
			if step != "traffic" {
				return
			}
			for i := 0; i < 1000; i++ {
				if err := r.dev.Modem().CorruptNextEvent(ep.CorruptCompletionCode); err != nil {
					t.Error(err)
					return
				}
			}
		},
	}
	r.run(t, k, "gomhi.stop=ping4")
	got := checks(r.serial)
	if !strings.HasPrefix(got["netdev"], "PASS") {
		t.Fatalf("the guest failed before the fault was armed (netdev %q); serial log:\n%s", got["netdev"], r.serial)
	}
	if v := got["ping4"]; !strings.HasPrefix(v, "FAIL") {
		t.Fatalf("broken modem not caught: ping4 %q; serial log:\n%s", v, r.serial)
	}
	t.Logf("guest, as expected: CHECK ping4 %s", got["ping4"])
	if !regexp.MustCompile(`(?i)unknown event 0x7f`).MatchString(r.serial) {
		t.Errorf("kernel log does not name the bad completion code; serial log:\n%s", r.serial)
	}
	for _, l := range regexp.MustCompile(`(?m)^.*[Uu]nknown event.*$`).FindAllString(r.serial, 2) {
		t.Logf("guest kernel: %s", strings.TrimSpace(l))
	}
	checkServerClean(t, r)
	checkInjected(t, r)
}
