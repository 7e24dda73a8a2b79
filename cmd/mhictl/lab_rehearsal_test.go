package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/cmd/mhictl/internal/lab"
)

// The real-modem rehearsal: gomhi's own host drives the served mock modem
// through a guest kernel's real VFIO (vfio-pci behind an emulated Intel
// IOMMU) — 'mhictl bind', 'mhictl up --device' and the rest in the guest,
// exactly as a user runs them on a real Telit or Quectel modem. Each step
// prints a CHECK line the test requires to pass.

// labChecks are the guest scripts' helpers: check NAME STATUS DETAIL,
// pingn COUNT [SIZE], upsaid TEXT SECONDS (waits for mhictl up's log).
const labChecks = `check() { if [ "$2" = 0 ]; then echo "CHECK $1 PASS $3"; else echo "CHECK $1 FAIL $3"; fi; }
pingn() { ping -c $1 -W 5 ${2:+-s $2} "$LAB_PEER" 2>&1 | grep transmitted; }
upsaid() { i=0; while [ $i -lt $(($2*10)) ]; do grep -q "$1" $LAB_UP_LOG && return 0; sleep 0.1; i=$((i+1)); done; return 1; }
upstops() {
	kill -TERM $LAB_UP_PID; i=0
	while kill -0 $LAB_UP_PID 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
	! kill -0 $LAB_UP_PID 2>/dev/null; check $1 $? "mhictl up ended $i tenths of a second after SIGTERM"
}
`

// labJourney: a modem served with --require-connect. Connect over MBIM,
// traffic, set-mru under load, suspend and resume, SYS_ERR while
// connected and its recovery, disconnect, and the modem falling off the
// bus: up notices, stops its channels and ends on SIGTERM.
const labJourney = labChecks + `drv=$(basename "$(readlink /sys/bus/pci/devices/$LAB_DEVICE/driver)"); [ "$drv" = vfio-pci ]; check bound $? "$LAB_DEVICE on $drv"
out=$(pingn 2); echo "$out" | grep -q " 0 packets received"; check gated $? "before connect: $out"
mhictl connect mhi0 --apn internet >/tmp/c.txt 2>&1; check connect $? "$(tr '\n' ' ' </tmp/c.txt)"
out=$(pingn 3); echo "$out" | grep -q " 3 packets received"; check ping $? "$out"
st=$(mhictl status mhi0 2>&1); rc=$?; echo "$st" | grep -q "host PM M0"; check status $((rc+$?)) "$(echo "$st" | head -n 2 | tr '\n' ' ')"
stat() { mhictl stats mhi0 | awk -v k="$1" '$1 == k { print $2 }'; }
drops() { mhictl stats mhi0 | awk '$1 ~ /^net\/.*drop/ && $1 !~ /bytes/ { n += $2 } END { print n + 0 }'; }
rx0=$(stat net/rx_packets); d0=$(drops)
ping -i 0.05 -c 60 -W 5 "$LAB_PEER" >/tmp/load.txt 2>&1 &
lp=$!
sleep 0.5; mhictl set-mru mhi0 16384; r1=$?; sleep 0.5; mhictl set-mru mhi0 4096; r2=$?
wait $lp
sleep 2
# Every echo reply the modem sent reached the interface (a late one
# counts: ping may give up on it first) or was counted as dropped: by the
# host (here) or by the modem (the test checks its counters).
delivered=$(($(stat net/rx_packets) - rx0)); hostdrops=$(($(drops) - d0))
echo "MRU-LOAD delivered=$delivered host_drops=$hostdrops"
[ "$delivered" -ge 50 ]; r3=$?
check set-mru-under-load $((r1+r2+r3)) "$(grep transmitted /tmp/load.txt); $delivered replies reached mhi0, $hostdrops host drops; mru now $(mhictl get mhi0 mru)"
out=$(pingn 3 1400); echo "$out" | grep -q " 3 packets received"; check ping-1400 $? "$out"
s1=$(mhictl suspend mhi0 2>&1); rs=$?; s2=$(mhictl resume mhi0 2>&1); rr=$?
echo "$s1" | grep -q M3; rs3=$?; echo "$s2" | grep -q M0; rr0=$?
check suspend-resume $((rs+rr+rs3+rr0)) "$s1; $s2"
out=$(pingn 3); echo "$out" | grep -q " 3 packets received"; check ping-after-resume $? "$out"
lab-inject sys-err
upsaid "recovered from SYS_ERR" 30; check syserr-recovered $? "$(grep -i 'sys_err' $LAB_UP_LOG | tail -n 2 | tr '\n' ' ')"
out=$(ping -c 3 -W 10 "$LAB_PEER" 2>&1 | grep transmitted); echo "$out" | grep -q " 3 packets received"; check ping-after-syserr $? "$out"
mhictl disconnect mhi0 >/dev/null; check disconnect $? ""
out=$(pingn 2); echo "$out" | grep -q " 0 packets received"; check gated-after-disconnect $? "$out"
lab-inject surprise-removal
upsaid "LINK_DOWN" 20; check link-down-reported $? "$(grep LINK_DOWN $LAB_UP_LOG | tail -n 1)"
st=$(mhictl status mhi0 2>&1); rc=$?; [ $rc = 1 ] && echo "$st" | grep -q "LINK_DOWN"; check status-says-gone $? "exit $rc: $(echo "$st" | grep -i 'link_down' | tr '\n' ' ')"
upstops up-stops-after-removal
`

// labBootAndCrash: a modem that boots from its primary boot loader (the
// boot loader image downloaded over BHI from --firmware), on a single MSI
// vector, crashes into RAM-dump mode: up collects the dump, 'mhictl dump'
// fetches it, the modem recovers; then up stops, 'mhictl unbind' gives
// the modem back and Linux's own driver takes it over.
const labBootAndCrash = labChecks + `upsaid "in M0, EE AMSS" 1; check booted-from-pbl $? "$(grep -i 'bhi\|firmware\|EE AMSS' $LAB_UP_LOG | tr '\n' ' ')"
n=$(grep -c vfio /proc/interrupts); [ "$n" -ge 1 ]; check interrupts $? "$(grep vfio /proc/interrupts | tr -s ' ' | tr '\n' ';')"
out=$(pingn 3); echo "$out" | grep -q " 3 packets received"; check ping $? "$out"
lab-inject crash
upsaid "RAM dump of" 60; check crashed-into-rddm $? "$(grep -i 'sys_err' $LAB_UP_LOG | tail -n 2 | tr '\n' ' ')"
mhictl dump mhi0 --out /tmp/dump.bin >/tmp/d.txt 2>&1; rc=$?
[ $rc = 0 ] && [ -s /tmp/dump.bin ]; check dump-fetched $? "$(tr '\n' ' ' </tmp/d.txt) ($(wc -c </tmp/dump.bin 2>/dev/null) bytes)"
out=$(ping -c 3 -W 10 "$LAB_PEER" 2>&1 | grep transmitted); echo "$out" | grep -q " 3 packets received"; check ping-after-crash $? "$out"
upstops up-stops
mhictl unbind $LAB_DEVICE >/dev/null 2>&1; check unbind $? "driver now: $(basename $(readlink /sys/bus/pci/devices/$LAB_DEVICE/driver 2>/dev/null) 2>/dev/null)"
for m in $LAB_LINUX_MODULES; do insmod $m; done
i=0; while [ ! -e /sys/class/net/mhi_hwip0 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
[ -e /sys/class/net/mhi_hwip0 ]; check linux-takes-over $? "driver $(basename $(readlink /sys/bus/pci/devices/$LAB_DEVICE/driver) 2>/dev/null), mhi_hwip0 after $i tenths"
ip link set mhi_hwip0 up; ip addr add 192.0.2.11 peer 192.0.2.12 dev mhi_hwip0
out=$(ping -c 3 -W 5 192.0.2.12 2>&1 | grep transmitted); echo "$out" | grep -q " 3 packets received"; check linux-ping $? "$out"
`

// labTwoModems: two modems in one guest, each bound and driven by its own
// mhictl up (the shipped mhictl@.service runs one instance per modem):
// both carry traffic, and set-mru reaches the instance that serves the
// device it names.
const labTwoModems = labChecks + `set -- $LAB_NETDEVS
[ "$1 $2" = "mhi0 mhi1" ]; check two-interfaces $? "$LAB_NETDEVS on $LAB_DEVICES"
out=$(ping -c 3 -W 5 192.0.2.2 2>&1 | grep transmitted); echo "$out" | grep -q " 3 packets received"; check ping-modem0 $? "$out"
out=$(ping -c 3 -W 5 192.0.2.18 2>&1 | grep transmitted); echo "$out" | grep -q " 3 packets received"; check ping-modem1 $? "$out"
mhictl set-mru mhi1 8192 >/dev/null; r=$?; m0=$(mhictl get mhi0 mru); m1=$(mhictl get mhi1 mru)
[ $r = 0 ] && [ "$m0" = 32768 ] && [ "$m1" = 8192 ]; check set-mru-reaches-mhi1 $? "mhi0 $m0, mhi1 $m1"
st=$(mhictl status mhi1 2>&1 | head -n 1); echo "$st" | grep -q "^mhi1: .*host PM M0"; check status-mhi1 $? "$st"
`

var labCheckLine = regexp.MustCompile(`(?m)^CHECK (\S+) (PASS|FAIL)(.*)$`)

// vfioUserErrors returns, for the lab's JSON summary (the output's last
// line), the vfio-user errors every served modem logged: QEMU and the
// guest's kernel drove it, so there must be none.
func vfioUserErrors(t *testing.T, out string) []string {
	t.Helper()
	sum := labSummary(t, out)
	var bad []string
	for i, m := range append([]lab.ModemReport{sum.Modem}, sum.Modems...) {
		if m.VFIOUserErrors != 0 {
			bad = append(bad, fmt.Sprintf("modem report %d: %d vfio-user errors: %s", i, m.VFIOUserErrors, strings.Join(m.Errors, "; ")))
		}
	}
	return bad
}

// requireLabChecks fails unless every named check passed.
func requireLabChecks(t *testing.T, out, errOut string, names ...string) {
	t.Helper()
	got := map[string]string{}
	for _, m := range labCheckLine.FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2] + m[3]
	}
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
	bad = append(bad, vfioUserErrors(t, out)...)
	if len(bad) > 0 {
		t.Fatalf("guest checks failed:\n%s\n--- console:\n%s\n--- lab:\n%s\n--- failed: %s", strings.Join(bad, "\n"), out, errOut, strings.Join(bad, "; "))
	}
	for _, n := range names {
		t.Logf("CHECK %s %s", n, got[n])
	}
}

// TestLabRehearsal runs the real-modem journey through the guest's VFIO
// on each kernel of the matrix.
func TestLabRehearsal(t *testing.T) {
	needLab(t)
	fw := filepath.Join(t.TempDir(), "sbl1.mbn")
	img := make([]byte, 64<<10)
	if _, err := rand.Read(img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fw, img, 0o644); err != nil {
		t.Fatal(err)
	}
	journey, crash, two := writeScript(t, labJourney), writeScript(t, labBootAndCrash), writeScript(t, labTwoModems)
	for _, k := range []string{"6.1", "6.12", "7.3"} {
		t.Run(k, func(t *testing.T) {
			t.Run("journey", func(t *testing.T) {
				status, out, errOut := labRun(t, "--json", "--kernel", k, "--driver", "gomhi", "--serve-args", "--require-connect", "--timeout", "8m", journey)
				requireLabChecks(t, out, errOut, "bound", "gated", "connect", "ping", "status", "set-mru-under-load", "ping-1400", "suspend-resume",
					"ping-after-resume", "syserr-recovered", "ping-after-syserr", "disconnect", "gated-after-disconnect",
					"link-down-reported", "status-says-gone", "up-stops-after-removal")
				sum := labSummary(t, out)
				if status != 0 || sum.Modem.VFIOUserErrors != 0 || sum.Modem.Malformed != 0 {
					t.Errorf("exit %d; the served modem: %d vfio-user errors %v, %d malformed", status, sum.Modem.VFIOUserErrors, sum.Modem.Errors, sum.Modem.Malformed)
				}
				// Conservation across the MRU changes: every echo reply
				// that did not reach the interface was counted as dropped,
				// by the host or by the modem.
				var delivered, hostDrops int
				if m := regexp.MustCompile(`(?m)^MRU-LOAD delivered=(\d+) host_drops=(\d+)$`).FindStringSubmatch(out); m != nil {
					delivered, _ = strconv.Atoi(m[1])
					hostDrops, _ = strconv.Atoi(m[2])
				} else {
					t.Errorf("no MRU-LOAD line in the console")
				}
				modemDrops := 0
				for k, v := range sum.Modem.IPData {
					n, ok := v.(float64)
					counted := strings.HasPrefix(k, "Dropped") && k != "DroppedGated" && k != "DroppedNotAnswered" || k == "DLDroppedQueued"
					if ok && counted {
						modemDrops += int(n)
					}
				}
				lost := 60 - delivered
				if lost > hostDrops+modemDrops {
					t.Errorf("%d echo replies of 60 missing after the MRU changes, %d host drops and %d modem drops counted: %v", lost, hostDrops, modemDrops, sum.Modem.IPData)
				}
				t.Logf("%s: boot to the script %.1f s, run %.1f s; MRU changes under load: %d of 60 replies delivered, %d host and %d modem drops", sum.Kernel, sum.BootS, sum.DurationS, delivered, hostDrops, modemDrops)
			})
			t.Run("two-modems", func(t *testing.T) {
				status, out, errOut := labRun(t, "--json", "--kernel", k, "--driver", "gomhi", "--modems", "2", "--timeout", "5m", two)
				requireLabChecks(t, out, errOut, "two-interfaces", "ping-modem0", "ping-modem1", "set-mru-reaches-mhi1", "status-mhi1")
				sum := labSummary(t, out)
				if status != 0 || len(sum.Modems) != 2 {
					t.Fatalf("exit %d, %d modems in the summary", status, len(sum.Modems))
				}
				for i, m := range sum.Modems {
					if a, _ := m.IPData["Answered"].(float64); a < 3 || m.VFIOUserErrors != 0 {
						t.Errorf("modem %d answered %v packets (want >= 3), %d vfio-user errors", i, m.IPData["Answered"], m.VFIOUserErrors)
					}
				}
			})
			t.Run("boot-crash-takeover", func(t *testing.T) {
				status, out, errOut := labRun(t, "--json", "--kernel", k, "--driver", "gomhi",
					"--serve-args", "--boot-ee pbl --rddm --vectors 1",
					"--up-args", "--firmware /lab/fw --rddm-size 4194304",
					"--file", fw+":/lab/fw/qcom/sdx55m/sbl1.mbn", "--file", fw+":/lib/firmware/qcom/sdx55m/sbl1.mbn",
					"--timeout", "8m", crash)
				requireLabChecks(t, out, errOut, "booted-from-pbl", "interrupts", "ping", "crashed-into-rddm", "dump-fetched",
					"ping-after-crash", "up-stops", "unbind", "linux-takes-over", "linux-ping")
				sum := labSummary(t, out)
				if status != 0 || sum.Modem.VFIOUserErrors != 0 || sum.Modem.Malformed != 0 {
					t.Errorf("exit %d; the served modem: %d vfio-user errors %v, %d malformed", status, sum.Modem.VFIOUserErrors, sum.Modem.Errors, sum.Modem.Malformed)
				}
			})
		})
	}
}
