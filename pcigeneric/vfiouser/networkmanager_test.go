package vfiouser_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/testenv"
)

// The NetworkManager test: the ModemManager guest (modemmanager_test.go)
// with Debian bookworm's NetworkManager 1.42 running beside ModemManager,
// as on a desktop. The guest adds a mobile broadband connection with
// nmcli and brings it up; NetworkManager has ModemManager connect the
// bearer and configures the data interface itself from the bearer's IP
// configuration; the guest pings the gateway through it. Then the modem
// crashes (baseband restart and SYS_ERR, injected from the host at MARK
// syserr) and NetworkManager must bring the connection back by itself
// (the connection's autoconnect). Before the connection is up, pings from
// the address the mock will assign to its gateway must all be dropped by
// the mock's gate. NetworkManager logs to the guest's third serial port,
// a file the test reads. See docs/MODEMMANAGER.md, "NetworkManager: the desktop
// journey".

// nmGuestInit is the NetworkManager guest's /gomhi/init.sh: the common
// boot, NetworkManager, the wait for the modem, then the steps with
// nmcli. Parameters from the kernel command line besides the
// ModemManager guest's: gomhi.addr (the address the mock will assign,
// with its prefix) and gomhi.gw (the mock's gateway), for the pings before
// the connection is up.
const nmGuestInit = mmGuestBoot + nmGuestStart + mmGuestListed + nmGuestSteps

// nmGuestStart starts NetworkManager as a desktop's boot does, without
// systemd: in the background, logging (--debug: to its standard error)
// to the third serial port. Its configuration: the keyfile plugin only
// (Debian's NetworkManager.conf also names ifupdown, whose package is not
// installed), the internal DHCP client, debug logging.
const nmGuestStart = `if ! command -v NetworkManager >/dev/null; then
	check networkmanager 1 "no NetworkManager in the root file system (rebuild it with internal/labvm/setup/guest-rootfs.sh)"
	finish
fi
mkdir -p /etc/NetworkManager/conf.d /run/NetworkManager /var/lib/NetworkManager
# Debian's dispatcher script 01-ifupdown runs the ifupdown hook folders,
# which the ifupdown package (on every Debian desktop, not in this image)
# creates; without them it fails at every event.
mkdir -p /etc/network/if-pre-up.d /etc/network/if-up.d /etc/network/if-down.d /etc/network/if-post-down.d
cat >/etc/NetworkManager/conf.d/90-gomhi.conf <<'EOF'
[main]
plugins=keyfile
dhcp=internal

[logging]
level=DEBUG
EOF
echo "INFO NetworkManager $(NetworkManager --version)"
NetworkManager --debug >/dev/ttyS2 2>&1 &
nmpid=$!
echo "MARK nm-started"
`

// nmGuestSteps are the NetworkManager steps: the modem device, the gate
// before the connection, connection add and up, the interface
// NetworkManager configured, the crash and the reconnection, and the
// connection down.
const nmGuestSteps = `addr=$(arg addr)
mockgw=$(arg gw)
# nmgsm: NetworkManager's modem device (type gsm, named after the modem's
# primary control port): sets gsm and nmst (its state); fails if none.
nmgsm() {
	l=$(nmcli -t -f DEVICE,TYPE,STATE device status 2>/dev/null | grep -m1 ':gsm:') || return 1
	gsm=${l%%:*}; nmst=${l##*:}
}
# nmgsmin STATE: the modem device is in STATE.
nmgsmin() { nmgsm && [ "$nmst" = "$1" ]; }
# nmactive: the connection gomhi is activated.
nmactive() { [ "$(nmcli -g GENERAL.STATE connection show gomhi 2>/dev/null)" = activated ]; }
nminactive() { ! nmactive; }
# nmip NAME COUNT: what NetworkManager configured for the connection;
# checks its IP interface and pings its gateway COUNT times.
nmip() {
	nmgsm
	block nmcli-device$1 nmcli device show "$gsm"
	ipif=$(nmcli -g GENERAL.IP-IFACE device show "$gsm" 2>/dev/null)
	[ "$ipif" = "$iface" ]; check nm-ip-iface$1 $? "device $gsm, IP interface ${ipif:-none} (want $iface)"
	gw=$(nmcli -g IP4.GATEWAY device show "$gsm" 2>/dev/null)
	block ip-addr$1 ip addr show dev "$iface"
	block ip-route$1 ip route
	block resolv-conf$1 cat /etc/resolv.conf
	out=$(ping -c $2 -W 2 "${gw:-$mockgw}" 2>&1)
	echo "$out" | grep -q " $2 received"; check ping-gateway$1 $? "to ${gw:-none}: $(echo "$out" | grep transmitted)"
	# The bearer is IPv4v6 (NetworkManager asks for both): the IPv6
	# gateway too (nmcli -g escapes the colons).
	gw6=$(nmcli -g IP6.GATEWAY device show "$gsm" 2>/dev/null | sed 's/\\//g')
	out=$(ping -6 -c $2 -W 2 "${gw6:-none}" 2>&1)
	echo "$out" | grep -q " $2 received"; check ping6-gateway$1 $? "to ${gw6:-none}: $(echo "$out" | grep transmitted)"
}
# NetworkManager finds the modem over D-Bus, enables it (WWAN is on) and
# offers it for a connection: device state "disconnected".
within 180 nmgsmin disconnected; rc=$?
check nm-device $rc "device ${gsm:-none} ${nmst:-absent} at $(uptime) s"
block nmcli-general nmcli general
block nmcli-devices nmcli device status
block mmcli-m0 mmcli -m 0
echo "MARK probed"
console "NetworkManager's modem is $gsm (nmcli device); NetworkManager logs to /dev/ttyS2, ModemManager to /dev/ttyS1 (the files the test names)."
[ $rc = 0 ] || finish
# Nothing passes before the connection is up: the data interface, up with
# the address the mock will assign, sends 3 pings to the mock's gateway;
# the mock's gate drops them (the test counts them there). Then the
# address goes and the link is down again, as NetworkManager found it.
ip link set "$iface" up
ip addr add "$addr" dev "$iface"
out=$(ping -c 3 -W 1 "$mockgw" 2>&1)
echo "$out" | grep -q ' 0 received'; check ping-fails-before-up $? "to $mockgw: $(echo "$out" | grep transmitted)"
ip addr flush dev "$iface"; ip link set "$iface" down
echo "MARK gated"
# The connection, as a user adds it; autoconnect off until it has been
# brought up by hand (on, NetworkManager would start it at once).
block nmcli-add nmcli connection add type gsm ifname '*' con-name gomhi apn "$apn" connection.autoconnect no
check nm-add $? "at $(uptime) s"
t0=$(uptime)
block nmcli-up nmcli --wait 180 connection up gomhi; rc=$?
check nm-up $rc "asked at $t0 s, up at $(uptime) s"
echo "MARK up"
[ $rc = 0 ] || finish
nmactive; check nm-activated $? "connection gomhi $(nmcli -g GENERAL.STATE connection show gomhi 2>/dev/null)"
nmip "" 5
n=0; while [ $n -lt 20 ]; do a=$(stats $iface); sleep 0.5; [ "$a" = "$(stats $iface)" ] && break; n=$((n+1)); done
echo "STATS $(stats $iface)"
echo "MARK connected"
block nmcli-connection nmcli -f GENERAL,IP4,IP6 connection show gomhi
# From now on NetworkManager alone: after the crash it must bring the
# connection back by itself.
block nmcli-autoconnect nmcli connection modify gomhi connection.autoconnect yes
check nm-autoconnect $? "$(nmcli -g connection.autoconnect connection show gomhi 2>/dev/null)"
tcrash=$(uptime)
echo "MARK syserr"
within 120 nminactive; rc=$?
check syserr-nm-down $rc "connection gomhi down at $(uptime) s (crash at $tcrash s)"
[ $rc = 0 ] || finish
within 300 nmactive; rc=$?
check nm-reconnected $rc "connection gomhi activated again at $(uptime) s (crash at $tcrash s)"
echo "MARK reconnected"
[ $rc = 0 ] || finish
nmip -recovered 3
echo "MARK recovered"
block nmcli-down nmcli connection down gomhi
check nm-down $? "at $(uptime) s"
echo "MARK down"
finish
`

// nmDigestLine picks the lines of NetworkManager's log that tell the
// connection's life: warnings and errors, device and activation state
// changes, the modem's states, the IP configuration and autoconnect.
var nmDigestLine = regexp.MustCompile(`(?i)^<(warn|error)>|state change|activation|modem-broadband|\bmodem\[|policy|autoconnect|ip4|ipv4|bearer|l3cfg.*(address|route)`)

// nmLogLine is one line of NetworkManager's --debug log: level,
// timestamp, message.
var nmLogLine = regexp.MustCompile(`^<(\w+)>\s+\[([0-9.]+)\]\s+(.*)$`)

// nmKeys parses nmcli's "KEY:   value" lines.
func nmKeys(out string) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return kv
}

// needNetworkManagerImage skips (fails under CI) unless the root file
// system image lists network-manager among its packages (an image built
// before NetworkManager was added has none).
func needNetworkManagerImage(t *testing.T) {
	t.Helper()
	if testing.Short() {
		return // qemuguest.Find skips
	}
	list := filepath.Join(filepath.Dir(labvm.RootFSImage()), "packages.txt")
	b, err := os.ReadFile(list)
	if err != nil {
		return // $GOMHI_MM_ROOTFS without a list: the guest checks
	}
	if !regexp.MustCompile(`(?m)^network-manager `).Match(b) {
		err = fmt.Errorf("%s lists no network-manager", list)
	}
	testenv.Need(t, "a root file system with NetworkManager (rebuild it: "+labvm.SetupCommand+")", err)
}

// testNetworkManager runs the NetworkManager guest for one model and
// checks what NetworkManager configured against what the mock assigned.
func testNetworkManager(t *testing.T, model string) *mmRun {
	needNetworkManagerImage(t)
	r := &mmRun{model: mmModels[model], script: nmGuestInit, nm: true, timeout: 8 * time.Minute,
		cmdline: fmt.Sprintf("gomhi.addr=%s gomhi.gw=%s", modem.DefaultIPv4, modem.DefaultGateway4)}
	r.run(t)
	if *mmShell {
		return r
	}
	r.requireChecks(t, "modem-listed", "nm-device", "ping-fails-before-up", "nm-add", "nm-up", "nm-activated",
		"nm-ip-iface", "ping-gateway", "ping6-gateway", "nm-autoconnect", "syserr-nm-down", "nm-reconnected",
		"nm-ip-iface-recovered", "ping-gateway-recovered", "ping6-gateway-recovered", "nm-down")
	fns := r.fns.Load()
	addr := fns.Modem.Addressing()
	if addr.IPv4 != modem.DefaultIPv4 || addr.Gateway4 != modem.DefaultGateway4 {
		t.Errorf("%s: the mock assigned %v via %v, the guest's pings before the connection used %v via %v",
			model, addr.IPv4, addr.Gateway4, modem.DefaultIPv4, modem.DefaultGateway4)
	}

	// What NetworkManager configured, against what the mock assigned.
	for _, step := range []string{"", "-recovered"} {
		out, ok := mmBlock(r.serial, "nmcli-device"+step)
		if !ok {
			r.fatal(t, "no nmcli device show output"+step)
		}
		kv := nmKeys(out)
		for k, want := range map[string]string{
			"GENERAL.TYPE":   "gsm",
			"GENERAL.STATE":  "100 (connected)",
			"IP4.ADDRESS[1]": addr.IPv4.String(),
			"IP4.GATEWAY":    addr.Gateway4.String(),
			"IP4.DNS[1]":     addr.DNS4[0].String(),
			"IP6.ADDRESS[1]": addr.IPv6.String(),
			"IP6.GATEWAY":    addr.Gateway6.String(),
		} {
			if kv[k] != want {
				t.Errorf("%s: nmcli device show%s: %s = %q, the mock assigned %q", model, step, k, kv[k], want)
			}
		}
		if resolv, _ := mmBlock(r.serial, "resolv-conf"+step); !strings.Contains(resolv, "nameserver "+addr.DNS4[0].String()+"\n") {
			t.Errorf("%s: NetworkManager's /etc/resolv.conf%s names no nameserver %v:\n%s", model, step, addr.DNS4[0], resolv)
		}
		ipaddr, _ := mmBlock(r.serial, "ip-addr"+step)
		if !strings.Contains(ipaddr, "inet "+addr.IPv4.String()+" ") {
			t.Errorf("%s: %s has no address %v after NetworkManager's configuration%s:\n%s", model, r.model.iface, addr.IPv4, step, ipaddr)
		}
		if m := regexp.MustCompile(`\bmtu (\d+)`).FindStringSubmatch(ipaddr); m == nil || m[1] != strconv.Itoa(addr.MTU) {
			t.Logf("%s: %s's MTU after NetworkManager%s: %v (the bearer's: %d)", model, r.model.iface, step, m, addr.MTU)
		}
	}

	// The mock's counters: the gate before the connection, the traffic
	// while connected, the crash and the new session, the disconnect.
	probed, gated, conn := r.mark(t, "probed"), r.mark(t, "gated"), r.mark(t, "connected")
	if probed.session.Active || gated.session.Active {
		t.Errorf("%s: a session was active before nmcli connection up: %+v, %+v", model, probed.session, gated.session)
	}
	if d := gated.ip.DroppedGated - probed.ip.DroppedGated; d < 3 || gated.ip.Answered != probed.ip.Answered {
		t.Errorf("%s: before the connection the gate dropped %d packets (want >= 3, the pings) and the mock answered %d",
			model, d, gated.ip.Answered-probed.ip.Answered)
	}
	if !conn.session.Active || conn.session.APN != "internet" {
		t.Errorf("%s: the mock's session while connected: %+v", model, conn.session)
	}
	if a := conn.ip.Answered - gated.ip.Answered; a < 10 {
		t.Errorf("%s: the mock answered %d packets while connected, want >= 10 (the pings)", model, a)
	}
	// The guest's data interface against the modem's data function, at
	// a quiet moment: every packet the guest sent (the gated pings
	// included) reached the modem, every packet the modem sent reached
	// the guest.
	g := mmStats(r.serial)
	if g["tx_packets"] != conn.ip.ULPackets || g["rx_packets"] != conn.ip.DLPackets {
		t.Errorf("%s: guest sent %d and received %d packets; the modem received %d and sent %d", model,
			g["tx_packets"], g["rx_packets"], conn.ip.ULPackets, conn.ip.DLPackets)
	}
	if g["rx_errors"]+g["tx_errors"]+g["rx_dropped"]+g["tx_dropped"] != 0 {
		t.Errorf("%s: guest interface errors or drops: %v", model, g)
	}
	crash, back, rec, down := r.mark(t, "syserr"), r.mark(t, "reconnected"), r.mark(t, "recovered"), r.mark(t, "down")
	if rec.device.Resets <= crash.device.Resets || rec.modem.Restarts != 1 {
		t.Errorf("%s: resets %d before SYS_ERR, %d after; baseband restarts %d", model, crash.device.Resets, rec.device.Resets, rec.modem.Restarts)
	}
	if !back.session.Active || back.session.ID <= crash.session.ID {
		t.Errorf("%s: session when NetworkManager reconnected %+v (at the crash %+v), want a new active one", model, back.session, crash.session)
	}
	if a := rec.ip.Answered - back.ip.Answered; a < 6 {
		t.Errorf("%s: the mock answered %d packets after the reconnection, want >= 6 (the pings)", model, a)
	}
	if down.session.Active {
		t.Errorf("%s: the mock's session still active after nmcli connection down: %+v", model, down.session)
	}
	t.Logf("%s: guest %s while connected: %v; modem: uplink %d, answered %d, gated %d (%d before the connection), downlink %d",
		model, r.model.iface, g, conn.ip.ULPackets, conn.ip.Answered, conn.ip.DroppedGated, gated.ip.DroppedGated-probed.ip.DroppedGated, conn.ip.DLPackets)
	t.Logf("%s: boot to NetworkManager's modem device %v, nmcli connection up %v, boot to connected %v; crash to reconnected %v (MHI resets %d → %d, session %d → %d)",
		model, probed.at.Round(time.Millisecond), (r.mark(t, "up").at - gated.at).Round(time.Millisecond), conn.at.Round(time.Millisecond),
		(back.at - crash.at).Round(time.Millisecond), crash.device.Resets, rec.device.Resets, crash.session.ID, back.session.ID)
	for _, n := range []string{"nm-up", "nm-reconnected"} {
		t.Logf("%s: guest: CHECK %s %s", model, n, checks(r.serial)[n])
	}
	r.logNetworkManager(t)
	r.checkLogWarnings(t)
	return r
}

// logNetworkManager prints NetworkManager's warnings and errors and, with
// -v, the digest of its log.
func (r *mmRun) logNetworkManager(t *testing.T) {
	t.Helper()
	var warns []string
	for _, l := range strings.Split(r.nmLog, "\n") {
		if m := nmLogLine.FindStringSubmatch(l); m != nil && (m[1] == "warn" || m[1] == "error") {
			warns = append(warns, l)
		}
	}
	t.Logf("%s: NetworkManager logged %d warnings and errors:\n  %s", r.model.name, len(warns), strings.Join(warns, "\n  "))
	if testing.Verbose() {
		for _, b := range []string{"nmcli-general", "nmcli-devices", "nmcli-up", "nmcli-device", "ip-addr", "ip-route", "resolv-conf", "nmcli-connection", "nmcli-device-recovered"} {
			if out, ok := mmBlock(r.serial, b); ok {
				t.Logf("%s: %s:\n%s", r.model.name, b, out)
			}
		}
		t.Logf("%s: NetworkManager's log, digest:\n%s", r.model.name, strings.Join(logDigest(r.nmLog, nmDigestLine), "\n"))
	}
}

// TestNetworkManagerFN990: NetworkManager, through ModemManager, brings
// up a mobile broadband connection on the mock as a Telit FN990 (MBIM,
// data on wwan0) and brings it back after a modem crash.
func TestNetworkManagerFN990(t *testing.T) {
	testNetworkManager(t, "telit-fn990")
}

// TestNetworkManagerSDX55: the same on the mock as a Qualcomm SDX55
// reference (ModemManager picks QMI; data on mhi_hwip0). After the crash
// NetworkManager asks for the connection while ModemManager is still
// enabling the new modem, so ModemManager registers with NAS
// SET_SYSTEM_SELECTION_PREFERENCE first; the mock answered it
// InvalidQmiCommand until 2026-12-06, and ModemManager then held the
// packet service idle: every autoconnect ended in "Too much time waiting
// to get to a final packet service state" (docs/MODEMMANAGER.md).
func TestNetworkManagerSDX55(t *testing.T) {
	testNetworkManager(t, "qcom-sdx55m")
}
