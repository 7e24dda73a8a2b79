package mhinet_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/logbuf"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// newQuirkRig is newIPRig with the mock reproducing quirks (its IP data
// function loops back in the pair's framing).
func newQuirkRig(t *testing.T, model, quirks string, dc *ipdata.Config, cfg mhinet.Config) *rig {
	t.Helper()
	set, err := quirk.Parse(quirks)
	if err != nil {
		t.Fatal(err)
	}
	rx := newCollector()
	r := mhinettest.New(t, mhinettest.Options{Model: model, IPData: dc, Quirks: set, Net: &cfg, Receiver: rx})
	return &rig{mock: r.Mock, dev: r.Net, rx: rx}
}

// TestQuirkSDX72Mux112: the modem sends the session as mux id 112; the
// host delivers it and its uplink follows to 112.
func TestQuirkSDX72Mux112(t *testing.T) {
	for _, f := range []framing.Format{framing.NTB16, framing.QMAP} {
		t.Run(f.String(), func(t *testing.T) {
			r := newQuirkRig(t, "foxconn-t99w640", "sdx72-mux-112", &ipdata.Config{Format: f}, mhinet.Config{Format: f, FollowSession: true})
			const n = 20
			var pkts [][]byte
			for i := range n {
				pkts = append(pkts, ipv4(200, uint32(i)))
			}
			transmitAll(t, r.dev, pkts)
			if !r.rx.waitFor(t, n) {
				r.dump(t)
				t.FailNow()
			}
			st := r.dev.Stats()
			if st.TxSession != 112 || st.TxSessionFollows != 1 || st.RxPackets != n {
				t.Fatalf("host: tx_session %d, follows %d, rx %d; want 112, 1, %d", st.TxSession, st.TxSessionFollows, st.RxPackets, n)
			}
			// The second batch goes out on 112 and comes back.
			transmitAll(t, r.dev, pkts)
			if !r.rx.waitFor(t, 2*n) {
				r.dump(t)
			}
			if ms := r.mock.IPData.Stats(); ms.Dropped() != 0 {
				t.Errorf("modem dropped %d packets", ms.Dropped())
			}
		})
	}
}

// TestQuirkNTBSequenceGlitch: the modem's NTB numbering skips ahead every
// other NTB; the host delivers every datagram, counts every gap and logs
// them once (rate-limited), not once per gap.
func TestQuirkNTBSequenceGlitch(t *testing.T) {
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r := newQuirkRig(t, "foxconn-t99w640", "ntb-sequence-glitch=2", nil, mhinet.Config{Format: framing.NTB16, Logger: log})
	const n = 60
	for i := range n {
		// One packet at a time: one NTB each.
		transmitAll(t, r.dev, [][]byte{ipv4(100, uint32(i))})
		if !r.rx.waitFor(t, i+1) {
			r.dump(t)
			t.FailNow()
		}
	}
	glitches := r.mock.IPData.Stats().NTBSequenceGlitches
	st := r.dev.Stats()
	if glitches < n/2-1 || st.RxNTBSequenceGaps != glitches || st.RxPackets != n || st.RxErrors != 0 {
		t.Fatalf("modem glitched %d NTBs; host counted %d gaps, %d packets, %d errors", glitches, st.RxNTBSequenceGaps, st.RxPackets, st.RxErrors)
	}
	if k := strings.Count(logs.String(), "NTB sequence number glitches"); k != 1 {
		t.Fatalf("%d glitch log lines for %d glitches, want 1 (rate-limited):\n%s", k, glitches, logs.String())
	}
}

// TestQuirkMTU1400: the network behind the modem drops uplink packets
// longer than 1400 bytes and counts them.
func TestQuirkMTU1400(t *testing.T) {
	r := newQuirkRig(t, mock.DefaultModel, "mtu-1400", nil, mhinet.Config{})
	transmitAll(t, r.dev, [][]byte{ipv4(1400, 1), ipv4(1401, 2), ipv4(1500, 3), ipv4(1000, 4)})
	if !r.rx.waitFor(t, 2) {
		r.dump(t)
		t.FailNow()
	}
	if ms := r.mock.IPData.Stats(); ms.DroppedOverMTU != 2 || ms.ULPackets != 4 {
		t.Fatalf("modem: dropped_over_mtu %d of %d uplink packets, want 2 of 4", ms.DroppedOverMTU, ms.ULPackets)
	}
	if got := r.mock.Modem.Addressing().MTU; got != 1400 {
		t.Errorf("session MTU %d, want 1400", got)
	}
}
