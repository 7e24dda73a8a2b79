package main

import (
	"strings"
	"testing"
)

// The guest side of the mock's quirks (docs/QUIRKS.md, "Against Linux and
// ModemManager"): Linux's MHI drivers and ModemManager in the lab's guest
// meet a field failure on purpose, and these tests pin what they did when
// the table there was filled in. Each guest script prints CHECK lines
// (labChecks) that requireLabChecks requires to pass.

// labQuirkMux112 pings the peer and counts mhi_wwan_mbim's "bad packet
// session (112)" lines; $1 says what the model's table entry makes of
// the modem's session 112: "lost" (no mux-id base: every reply dropped,
// one line each) or "delivered" (the base 112 set: every reply arrives).
const labQuirkMux112 = labChecks + `out=$(ping -c 5 -i 0.2 -W 2 "$LAB_PEER" 2>&1 | grep transmitted)
n=$(dmesg | grep -c 'bad packet session (112)')
echo "MUX112 $LAB_MODEL $LAB_KERNEL: $n bad-session lines; $out"
if [ "$1" = lost ]; then
	echo "$out" | grep -q " 0 packets received"; check pings-lost $? "$out"
	[ "$n" -ge 5 ]; check bad-packet-session $? "$n lines"
else
	echo "$out" | grep -q " 5 packets received"; check pings-pass $? "$out"
	[ "$n" = 0 ]; check no-bad-packet-session $? "$n lines"
fi
`

// TestLabQuirkSDX72Mux112: the modem numbers its data session from mux id
// 112. Linux's table entries for the Foxconn T99W640 (and DW5934e) set
// the mux-id base 112 and 6.12 delivers the traffic; the Telit FN990's
// has none, and even 7.3 (as 6.1) logs "bad packet session (112)" for
// every downlink packet and drops it.
func TestLabQuirkSDX72Mux112(t *testing.T) {
	needLab(t)
	script := writeScript(t, labQuirkMux112)
	for _, c := range []struct{ model, kernel, want string }{
		{"telit-fn990", "6.1", "lost"},
		{"telit-fn990", "7.3", "lost"},
		{"foxconn-t99w640", "6.12", "delivered"},
	} {
		t.Run(c.model+"-"+c.kernel, func(t *testing.T) {
			_, out, errOut := labRun(t, "--json", "--kernel", c.kernel, "--model", c.model, "--quirk", "sdx72-mux-112", "--timeout", "3m", script, c.want)
			if c.want == "lost" {
				requireLabChecks(t, out, errOut, "pings-lost", "bad-packet-session")
			} else {
				requireLabChecks(t, out, errOut, "pings-pass", "no-bad-packet-session")
			}
		})
	}
}

// labQuirkNoM3 lets the modem idle until runtime PM's autosuspend asks
// for M3, which the modem ignores, then pings.
const labQuirkNoM3 = labChecks + `out=$(pingn 2); echo "$out" | grep -q " 2 packets received"; check ping-before $? "$out"
i=0; while [ $i -lt 300 ] && ! dmesg | grep -q 'failed to suspend device'; do sleep 0.1; i=$((i+1)); done
l=$(dmesg | grep -E 'Did not enter M3|failed to suspend' | tr '\n' ' ')
dmesg | grep -q 'Did not enter M3 state, MHI state: M0'; check m3-not-entered $? "$l"
dmesg | grep -q 'failed to suspend device: -5'; check suspend-failed $? "after $i tenths: $l"
d=$(ls -d /sys/bus/pci/devices/*/mhi0 | head -n 1); st=$(cat ${d%/mhi0}/power/runtime_status)
[ "$st" = active ]; check runtime-active $? "runtime_status $st"
out=$(ping -c 3 -i 0.2 -W 2 "$LAB_PEER" 2>&1 | grep transmitted); echo "$out" | grep -q " 0 packets received"; check data-path-lost $? "$out"
`

// TestLabQuirkNoM3: a modem that ignores M3 on a kernel whose table does
// not say no_m3 (the SDX55 on 6.1): runtime PM's suspend fails with -EIO
// ("Did not enter M3 state"), the device stays active, and the data path
// is dead from then on — the MHI core is left in its M3 entry with the
// doorbells blocked, hence the report's "necessitating the disabling of
// runtime PM".
func TestLabQuirkNoM3(t *testing.T) {
	needLab(t)
	_, out, errOut := labRun(t, "--json", "--kernel", "6.1", "--model", "qcom-sdx55m", "--quirk", "no-m3", "--timeout", "3m", writeScript(t, labQuirkNoM3))
	requireLabChecks(t, out, errOut, "ping-before", "m3-not-entered", "suspend-failed", "runtime-active", "data-path-lost")
	if !strings.Contains(out+errOut, "host requested M3, which this device does not support") {
		t.Errorf("the served modem did not say it ignored an M3 request:\n%s\n%s", out, errOut)
	}
}

// labQuirkSlowReady: $1 "gives-up" (the probe failed waiting for READY)
// or "waits" (the interface came up and carries traffic).
const labQuirkSlowReady = labChecks + `l=$(dmesg | grep -iE 'power on|power up|probe of|READY|Fatal' | tr '\n' ' ')
if [ "$1" = gives-up ]; then
	dmesg | grep -q 'failed to power up MHI controller'; check power-up-failed $? "$l"
	dmesg | grep -q 'probe of .* failed with error -110'; check probe-timed-out $? "$l"
	! ls /sys/class/net | grep -q mhi_hwip; check no-interface $? "$(ls /sys/class/net | tr '\n' ' ')"
else
	out=$(pingn 3); echo "$out" | grep -q " 3 packets received"; check ping $? "$out; netdev '$LAB_NETDEV'; $l"
fi
`

// TestLabQuirkSlowReady: READY 16 s after the modem starts. Linux 6.1
// gives up on the SDX55 (its table's 8 s timeout_ms: "failed to power up MHI
// controller", the probe fails with -ETIMEDOUT, no interface); 7.3 waits
// it out on the SDX75, whose table entry has had ready_timeout_ms (50 s)
// since 6.8, and the interface carries traffic. (7.3 gives up on the
// SDX55 as 6.1 does: docs/QUIRKS.md.)
func TestLabQuirkSlowReady(t *testing.T) {
	needLab(t)
	script := writeScript(t, labQuirkSlowReady)
	for _, c := range []struct{ kernel, model, want string }{
		{"6.1", "qcom-sdx55m", "gives-up"},
		{"7.3", "qcom-sdx75m", "waits"},
	} {
		t.Run(c.model+"-"+c.kernel, func(t *testing.T) {
			_, out, errOut := labRun(t, "--json", "--kernel", c.kernel, "--model", c.model, "--quirk", "slow-ready=16s", "--timeout", "3m", script, c.want)
			if c.want == "gives-up" {
				requireLabChecks(t, out, errOut, "power-up-failed", "probe-timed-out", "no-interface")
			} else {
				requireLabChecks(t, out, errOut, "ping")
			}
		})
	}
}

// labQuirkFCCLocked: ModemManager enables an FCC-locked Quectel EM120R-GL
// (1eac:1001) before and after the administrator links the unlock script
// ModemManager ships for it into /etc/ModemManager/fcc-unlock.d, then
// connects and pings.
const labQuirkFCCLocked = labChecks + `state() { mmcli -m "$LAB_MM_MODEM" -K | sed -n 's/^modem.generic.state *: *//p'; }
out=$(mmcli -m "$LAB_MM_MODEM" --enable 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q 'Invalid transition'; check enable-refused $? "exit $rc: $out; state $(state)"
grep -q "fcc-unlock.d/1eac:1001: file doesn't exist" "$LAB_MM_LOG"; check unlock-script-missing $? "$(grep -i 'fcc unlock' "$LAB_MM_LOG" | tail -n 1)"
ln -s /usr/share/ModemManager/fcc-unlock.available.d/1eac:1001 /etc/ModemManager/fcc-unlock.d/1eac:1001
out=$(mmcli -m "$LAB_MM_MODEM" --enable 2>&1); check enable-unlocked $? "$out"
i=0; while [ $i -lt 120 ] && [ "$(state)" != registered ]; do sleep 0.5; i=$((i+1)); done
out=$(mmcli -m "$LAB_MM_MODEM" --simple-connect="apn=internet" 2>&1); check connect $? "$out; state $(state)"
out=$(ping -c 3 -W 5 "$LAB_PEER" 2>&1 | grep transmitted); echo "$out" | grep -q " 3 received"; check ping $? "$out"
`

// TestLabQuirkFCCLocked: ModemManager 1.20 against a modem that keeps its
// radio FCC-locked. Enabling fails ("Invalid transition", the MBIM
// RADIO_STATE set refused) after ModemManager looked for an unlock
// script for the modem's vid:pid and found none linked; once Debian's
// shipped Quectel script (mbimcli --quectel-set-radio-state=on) is linked
// in, the next enable runs it, the radio comes on, the modem registers,
// connects and carries traffic.
func TestLabQuirkFCCLocked(t *testing.T) {
	needLab(t)
	_, out, errOut := labRun(t, "--json", "--userland", "modemmanager", "--model", "quectel-em1xx", "--quirk", "fcc-locked", "--timeout", "4m", writeScript(t, labQuirkFCCLocked))
	requireLabChecks(t, out, errOut, "enable-refused", "unlock-script-missing", "enable-unlocked", "connect", "ping")
}

// labQuirkCrashOnConnect: ModemManager connects a modem whose firmware
// crashes on the first CONNECT (mmcli's timeout cut to 10 s: by default the
// first connect hangs for 30 s), then enables and connects the modem it
// re-creates, and pings.
const labQuirkCrashOnConnect = labChecks + `state() { mmcli -m "$1" -K | sed -n 's/^modem.generic.state *: *//p'; }
m=$LAB_MM_MODEM
mmcli -m $m --enable >/dev/null; check enable $? "$(state $m)"
i=0; while [ $i -lt 120 ] && [ "$(state $m)" != registered ]; do sleep 0.5; i=$((i+1)); done
out=$(mmcli --timeout=10 -m $m --simple-connect="apn=internet" 2>&1); [ $? != 0 ]; check first-connect-fails $? "$out"
dmesg | grep -q 'firmware crashed'; check kernel-saw-crash $? "$(dmesg | grep 'firmware crashed' | tr '\n' ' ')"
grep -q "no longer controllable, reprobing" "$LAB_MM_LOG"; check reprobed $? "$(grep -m 1 'no longer controllable' "$LAB_MM_LOG")"
i=0; while [ $i -lt 60 ]; do n=$(mmcli -L | grep -o 'Modem/[0-9]*' | cut -d/ -f2 | tail -n 1); [ -n "$n" ] && [ "$n" != "$m" ] && [ -n "$(state $n)" ] && break; sleep 0.5; i=$((i+1)); done
[ -n "$n" ] && [ "$n" != "$m" ]; check modem-recreated $? "Modem/$n, $(state $n), after $i half seconds more"
mmcli -m $n --enable >/dev/null; check enable-again $? ""
i=0; while [ $i -lt 120 ] && [ "$(state $n)" != registered ]; do sleep 0.5; i=$((i+1)); done
out=$(mmcli -m $n --simple-connect="apn=internet" 2>&1); check second-connect $? "$out; $(state $n)"
nd=$(ls /sys/class/net | grep -E 'mhi_hwip|wwan' | head -n 1); ip link set $nd up; ip addr add 192.0.2.1 peer "$LAB_PEER" dev $nd 2>/dev/null
out=$(ping -c 3 -W 5 "$LAB_PEER" 2>&1 | grep transmitted); echo "$out" | grep -q " 3 received"; check ping $? "$out"
`

// TestLabQuirkCrashOnConnect: ModemManager 1.20 against firmware that
// crashes on the first CONNECT. Linux logs "firmware crashed" and recovers
// the device; ModemManager finds its MBIM port "no longer controllable",
// drops the modem and re-creates it (a new index, disabled), but the
// connect in flight gets no answer and fails only when mmcli's call times
// out. Enabling and connecting the new modem succeed and it carries
// traffic. On Linux 7.3 (6.1 and 6.12 behave the same, docs/QUIRKS.md),
// which also keeps the ModemManager user land booting on a kernel that
// builds virtio in (labvm.Env.VirtioBlkModules).
func TestLabQuirkCrashOnConnect(t *testing.T) {
	needLab(t)
	_, out, errOut := labRun(t, "--json", "--userland", "modemmanager", "--kernel", "7.3", "--model", "telit-fn990", "--quirk", "crash-on-connect", "--timeout", "4m", writeScript(t, labQuirkCrashOnConnect))
	requireLabChecks(t, out, errOut, "enable", "first-connect-fails", "kernel-saw-crash", "reprobed", "modem-recreated", "enable-again", "second-connect", "ping")
}
