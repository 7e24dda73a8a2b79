package vfiouser_test

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// The kernel-matrix half of the Linux-driver tests: what differs between
// the kernels (interrupts, IP_SW0) and what must not (a clean vfio-user
// session).

// ipSW0 is the SDX55's second IP data pair (channels 46/47).
const ipSW0 = "IP_SW0"

// What each kernel of the matrix does with the mock, as observed
// (docs/LINUX-DRIVER.md): Linux 6.12 and later bind IP_SW0 on the SDX55
// (mhi_swip0); 7.x enables MSI-X, one vector per event ring and one for
// BHI, where 6.1 and 6.12 share one MSI vector.
var (
	kernelHasSWIP  = map[string]bool{"trixie": true, "trixie-backports": true}
	kernelUsesMSIX = map[string]bool{"trixie-backports": true}
)

// checkServerClean fails the test if the vfio-user session saw any
// protocol error: an error reply, a malformed message, a DMA fault, or a
// warning in the server's log.
func checkServerClean(t *testing.T, r *guestRun) {
	t.Helper()
	st := r.dev.Stats()
	var warns []string
	for _, l := range strings.Split(r.events.String(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			warns = append(warns, l)
		}
	}
	if st.ErrorReplies != 0 || st.Malformed != 0 || st.DMAFaults != 0 || len(warns) > 0 {
		t.Errorf("vfio-user session on %s: %d error replies, %d malformed messages, %d DMA faults; warnings:\n%s",
			r.kernel.env.Release, st.ErrorReplies, st.Malformed, st.DMAFaults, strings.Join(warns, "\n"))
	}
	var irqSetup []string
	for _, l := range strings.Split(r.events.String(), "\n") {
		if strings.Contains(l, "msg=irq_setup") || strings.Contains(l, "msg=irq_disable") {
			irqSetup = append(irqSetup, strings.TrimSpace(l[strings.Index(l, "msg="):]))
		}
	}
	t.Logf("server: %d messages, %d SET_IRQS requests, %d interrupts signalled, %d lost, %d held while masked",
		st.Messages, len(irqSetup), st.Interrupts, st.IRQsLost, st.IRQsHeld)
	if testing.Verbose() {
		t.Logf("SET_IRQS requests in order:\n%s", strings.Join(irqSetup, "\n"))
	}
}

// guestIRQ is one /proc/interrupts line of the guest for the MHI device.
type guestIRQ struct {
	irq    int
	count  uint64
	vector int    // the MSI or MSI-X entry (the hardware irq's low 11 bits)
	names  string // bhi, mhi...
}

var irqLineRe = regexp.MustCompile(`^(\d+):\s+(\d+)\s+.*?(\d+)-(?:edge|level)\s+(.+)$`)

// guestIRQs parses the guest's "<label> <line of /proc/interrupts>" lines
// (one CPU), by vector.
func guestIRQs(t *testing.T, serial, label string) map[int]guestIRQ {
	t.Helper()
	out := map[int]guestIRQ{}
	for _, l := range strings.Split(serial, "\n") {
		rest, ok := strings.CutPrefix(l, label+" ")
		if !ok {
			continue
		}
		m := irqLineRe.FindStringSubmatch(strings.TrimSpace(rest))
		if m == nil {
			t.Fatalf("unparsable interrupt line %q", l)
		}
		irq, _ := strconv.Atoi(m[1])
		n, _ := strconv.ParseUint(m[2], 10, 64)
		hw, _ := strconv.Atoi(m[3])
		// x86's PCI-MSI domain numbers a device's vectors as
		// (devid << 11) | entry; per-device domains number them by entry.
		v := hw & 0x7ff
		if _, dup := out[v]; dup {
			t.Fatalf("two interrupt lines for vector %d:\n%s", v, serial)
		}
		out[v] = guestIRQ{irq: irq, count: n, vector: v, names: m[4]}
	}
	return out
}

// checkInterrupts compares the guest's interrupt counts of the MHI
// vectors (/proc/interrupts) with the mock's per-vector counters, both
// taken at the same quiet moments: MARK irq-start, before request/response
// traffic (pings, UDP echoes), and MARK irq-end, after it. The mock counts
// what QEMU injected: its signals less those merged in the eventfd, an
// exact count (checkInjected holds it to QEMU's own trace). The guest can
// lose an interrupt on the way: an MSI that arrives while the same vector
// is still pending is not taken again. That happens in bursts — the
// control ring's events at power-up, the FN990's downlink run, every
// ring's on a shared MSI vector — and, seldom, during the traffic too
// (one of 13 under -race); so the guest may count fewer, never more, and
// every vector the mock raised during the traffic must reach the guest.
// It also checks that the mock raised each event ring's interrupts on the
// vector the ring's context names, and on the MSI-X kernel that Linux uses
// several vectors.
func checkInterrupts(t *testing.T, r *guestRun) {
	t.Helper()
	start, snap := r.mark(t, "irq-start"), r.mark(t, "irq-end")
	irq, irq0 := snap.irq, start.irq
	guest, after := guestIRQs(t, r.serial, "IRQ"), guestIRQs(t, r.serial, "IRQ-AFTER")
	guest0, after0 := guestIRQs(t, r.serial, "IRQ-START"), guestIRQs(t, r.serial, "IRQ-START-AFTER")
	if len(guest) == 0 || len(guest0) == 0 {
		t.Fatalf("no MHI interrupt line in the guest's /proc/interrupts; serial log:\n%s", r.serial)
	}
	var lines []string
	for _, v := range slices.Sorted(maps.Keys(guest)) {
		g, vs := guest[v], irq.Vectors[v]
		lines = append(lines, fmt.Sprintf("vector %d (irq %d, %s): guest %d, mock %d (%d signals, %d merged); over the traffic guest %d, mock %d",
			v, g.irq, g.names, g.count, vs.Delivered(), vs.Signalled, vs.Merged, g.count-guest0[v].count, vs.Delivered()-vecDelivered(irq0, v)))
	}
	t.Logf("%s on %s: %s, %d vectors enabled;\n%s", r.profile, r.kernel.env.Release, irq.Index, irq.Enabled, strings.Join(lines, "\n"))

	wantIndex := "MSI"
	if kernelUsesMSIX[r.kernel.Name] {
		wantIndex = "MSI-X"
	}
	if irq.Index != wantIndex {
		t.Errorf("%s enabled %q, want %s", r.kernel.env.Release, irq.Index, wantIndex)
	}
	for _, q := range []struct {
		mark          string
		before, after map[int]guestIRQ
	}{{"irq-start", guest0, after0}, {"irq-end", guest, after}} {
		for v, g := range q.before {
			if a, ok := q.after[v]; !ok || a.count != g.count {
				t.Errorf("vector %d: the guest's count moved from %d to %d after MARK %s: not a quiet moment", v, g.count, a.count, q.mark)
			}
		}
	}
	for v, g := range guest {
		d, d0 := vecDelivered(irq, v), vecDelivered(irq0, v)
		g0 := guest0[v].count
		if g.count > d || g0 > d0 {
			t.Errorf("vector %d (%s): the guest counted %d interrupts (%d before the traffic), more than the mock delivered, %d (%d)",
				v, g.names, g.count, g0, d, d0)
		}
		if d-d0 > 0 && g.count-g0 == 0 {
			t.Errorf("vector %d (%s): over the traffic the mock delivered %d interrupts, the guest counted none", v, g.names, d-d0)
		}
		if g.count-g0 != d-d0 {
			t.Logf("vector %d (%s): over the traffic the guest counted %d of the %d interrupts QEMU injected (the rest arrived while the vector was still pending in the guest)",
				v, g.names, g.count-g0, d-d0)
		}
	}
	var lost, held uint64
	used := 0
	for v, vs := range irq.Vectors {
		lost += vs.Lost
		held += vs.Held
		if vs.Signalled > 0 {
			used++
			if _, ok := guest[v]; !ok {
				t.Errorf("the mock signalled %d interrupts on vector %d, which the guest has no MHI handler on", vs.Signalled, v)
			}
		}
	}
	if lost != 0 || held != 0 {
		t.Errorf("the mock lost %d interrupts (no eventfd for the vector) and held %d (masked)", lost, held)
	}

	// The event rings: each raises its interrupts on the vector its
	// context names (pci_generic: ring index + 1 when Linux got a vector
	// per ring, else 0), BHI and state changes on vector 0.
	posted := snap.modem.EventsPosted
	byVector := map[int]uint64{} // events posted on the rings naming each vector
	var rings []string
	for _, er := range snap.status.EventRings {
		if !er.Loaded || er.Index >= len(posted) {
			continue
		}
		v := er.Vector
		if irq.Index == "MSI" && irq.Enabled > 0 {
			v %= irq.Enabled
		}
		byVector[v] += posted[er.Index]
		rings = append(rings, fmt.Sprintf("ring %d: msivec %d, %d events", er.Index, er.Vector, posted[er.Index]))
		want := er.Index + 1
		if irq.Index == "MSI" {
			want = 0
		}
		if er.Vector != want {
			t.Errorf("event ring %d names vector %d, want %d (%s)", er.Index, er.Vector, want, irq.Index)
		}
		if posted[er.Index] > 0 && vecSignalled(irq, v) == 0 {
			t.Errorf("event ring %d posted %d events, vector %d (its msivec %d) no interrupt", er.Index, posted[er.Index], v, er.Vector)
		}
	}
	t.Logf("event rings: %s", strings.Join(rings, "; "))
	for v, vs := range irq.Vectors {
		if v == 0 || vs.Signalled == 0 {
			continue
		}
		// Moderation lets one interrupt stand for several events, never
		// the other way round.
		if vs.Signalled > byVector[v] {
			t.Errorf("vector %d: %d interrupts for %d events on the rings naming it", v, vs.Signalled, byVector[v])
		}
	}
	if irq.Index == "MSI-X" && used < 2 {
		t.Errorf("MSI-X with interrupts on %d vector(s); want one per event ring in use and BHI's", used)
	}
}

var injectedRe = regexp.MustCompile(`(?m)^vfio_msi_interrupt .* vector (\d+) `)

// checkInjected compares, over the whole session, the interrupts the mock
// counted as delivered per vector (its signals less those merged in the
// eventfd) with QEMU's own trace of the MSIs it injected into the guest
// (vfio_msi_interrupt, one line per eventfd read that found signals):
// they must be equal.
func checkInjected(t *testing.T, r *guestRun) {
	t.Helper()
	b, err := os.ReadFile(r.qemuLog)
	if err != nil {
		t.Fatalf("QEMU's log: %v", err)
	}
	injected := map[int]uint64{}
	for _, m := range injectedRe.FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.Atoi(m[1])
		injected[v]++
	}
	last := r.dev.LastInterrupts()
	var lines []string
	for v, vs := range last.Vectors {
		if vs.Signalled == 0 && injected[v] == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("vector %d: QEMU injected %d, the mock delivered %d (%d signals, %d merged)", v, injected[v], vs.Delivered(), vs.Signalled, vs.Merged))
		if injected[v] != vs.Delivered() {
			t.Errorf("vector %d: QEMU injected %d MSIs, the mock counted %d delivered (%d signals, %d merged)", v, injected[v], vs.Delivered(), vs.Signalled, vs.Merged)
		}
	}
	for v := range injected {
		if v >= len(last.Vectors) {
			t.Errorf("QEMU injected %d MSIs on vector %d, beyond the function's", injected[v], v)
		}
	}
	if len(lines) == 0 {
		t.Errorf("no interrupt in the whole session (QEMU's log %d bytes)", len(b))
	}
	t.Logf("whole session: %s", strings.Join(lines, "; "))
}

func vecSignalled(s vfiouser.IRQStats, v int) uint64 {
	if v < 0 || v >= len(s.Vectors) {
		return 0
	}
	return s.Vectors[v].Signalled
}

func vecDelivered(s vfiouser.IRQStats, v int) uint64 {
	if v < 0 || v >= len(s.Vectors) {
		return 0
	}
	return s.Vectors[v].Delivered()
}

// checkSWIP checks IP_SW0 where the kernel binds it (mhi_swip0): the
// guest's pings and UDP echoes through it were answered by the modem's
// second responder, and the guest's counters equal the responder's at
// the same quiet moment. Where the kernel does not, mhi_swip0 must not
// exist.
func checkSWIP(t *testing.T, r *guestRun) {
	t.Helper()
	netdevs := regexp.MustCompile(`(?m)^INFO netdevs: (.*)$`).FindStringSubmatch(r.serial)
	if netdevs == nil {
		t.Fatalf("no INFO netdevs line; serial log:\n%s", r.serial)
	}
	t.Logf("%s: netdevs %s", r.kernel.env.Release, strings.TrimSpace(netdevs[1]))
	has := slices.Contains(strings.Fields(netdevs[1]), "mhi_swip0")
	if !kernelHasSWIP[r.kernel.Name] {
		if has {
			t.Errorf("%s created mhi_swip0; the matrix says it does not (kernelHasSWIP)", r.kernel.env.Release)
		}
		return
	}
	if !has {
		t.Fatalf("%s did not create mhi_swip0 (IP_SW0); serial log:\n%s", r.kernel.env.Release, r.serial)
	}
	g, after := guestStats(t, r.serial, "STATS-SW"), guestStats(t, r.serial, "STATS-SW-AFTER")
	if !maps.Equal(g, after) {
		t.Fatalf("mhi_swip0 counters moved while the modem's were taken: %v then %v", g, after)
	}
	m := r.mark(t, "stats").swip
	t.Logf("guest mhi_swip0: %v", g)
	t.Logf("modem IP_SW0: uplink %d packets (%d bytes), answered %d, not answered %d; downlink %d packets (%d bytes)",
		m.ULPackets, m.ULBytes, m.Answered, m.DroppedNotAnswered, m.DLPackets, m.DLBytes)
	if g["tx_packets"] != m.ULPackets || g["tx_bytes"] != m.ULBytes {
		t.Errorf("mhi_swip0 sent %d packets (%d bytes), the modem's IP_SW0 received %d (%d bytes)", g["tx_packets"], g["tx_bytes"], m.ULPackets, m.ULBytes)
	}
	if g["rx_packets"] != m.DLPackets || g["rx_bytes"] != m.DLBytes {
		t.Errorf("the modem's IP_SW0 sent %d packets (%d bytes), mhi_swip0 received %d (%d bytes)", m.DLPackets, m.DLBytes, g["rx_packets"], g["rx_bytes"])
	}
	// 3 pings and 10 UDP echoes at least.
	if m.Answered < 13 || g["rx_errors"] != 0 || g["tx_errors"] != 0 || g["rx_dropped"] != 0 {
		t.Errorf("IP_SW0: answered %d (want >= 13), guest errors rx %d tx %d, rx dropped %d", m.Answered, g["rx_errors"], g["tx_errors"], g["rx_dropped"])
	}
}
