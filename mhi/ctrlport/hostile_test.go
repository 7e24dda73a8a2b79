package ctrlport_test

import (
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/wire"
	"golang.org/x/sys/unix"
)

// TestHostileControlChannel is the control-channel part of the
// malicious-device suite (docs/RELIABILITY.md, "Control channels"): a
// modem that lies on its MBIM, QMI and AT channels, at the MHI level
// (completion codes, lengths, OVERFLOW chains, missing events) and in what
// it says (unsolicited messages, floods, replies that do not match, lying
// InformationBuffers and TLVs, nonsense addressing, indication storms).
// Every attack checks a clear error or a named counter, bounded time, that
// the port or session answers the next honest exchange, that nothing the
// modem made up reaches the host's configuration, and (runAttacks) that no
// goroutine or descriptor is left behind.
func TestHostileControlChannel(t *testing.T) {
	var all []attack
	all = append(all, pairAttacks()...)
	all = append(all, mbimSessionAttacks()...)
	all = append(all, qmiSessionAttacks()...)
	all = append(all, atAttacks()...)
	runAttacks(t, all)
}

// statCounter reads a counter by its JSON name (as the attribute tree
// names it) from a stats struct; ok is false when there is no such
// counter.
func statCounter(st any, name string) (v uint64, ok bool) {
	b, _ := json.Marshal(st)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	raw, ok := m[name]
	if !ok {
		return 0, false
	}
	err := json.Unmarshal(raw, &v)
	return v, err == nil
}

// wantCounter fails the test unless the named counter of st is want.
func wantCounter(t *testing.T, st any, name string, want uint64) {
	t.Helper()
	v, ok := statCounter(st, name)
	if !ok {
		t.Errorf("no counter %s in %T", name, st)
		return
	}
	if v != want {
		t.Errorf("counter %s = %d, want %d (%+v)", name, v, want, st)
	}
}

// checkConservation: every downlink transfer the pair delivered was
// written to the pseudo-terminal, dropped and counted, or is still queued
// (at most the queue's length).
func checkConservation(t *testing.T, p *ctrlport.Port, queue int) {
	t.Helper()
	st := p.Stats()
	out := st.DLMessages + st.DLWriteTimeouts + st.DLQueueFull
	if out > st.Pair.DLMessages || st.Pair.DLMessages-out > uint64(queue)+1 {
		t.Errorf("conservation: the pair delivered %d, the port wrote %d, timed out %d, queue full %d (queue of %d)",
			st.Pair.DLMessages, st.DLMessages, st.DLWriteTimeouts, st.DLQueueFull, queue)
	}
}

// pairAttacks lie at the MHI level, on the scripted hostile device.
func pairAttacks() []attack {
	return []attack{
		{"unsolicited bytes on the MBIM channel", 15 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{})
			cl := ctrlport.NewMBIMClient(p.Pair(), ctrlport.MBIMClientOptions{})
			defer cl.Close()
			c := openClient(t, p)
			junk := [][]byte{
				bytes.Repeat([]byte{0xde, 0xad}, 50),
				mbim.AppendOpenDone(nil, 999, mbim.StatusSuccess), // a reply nobody asked for
				mbim.AppendIndicateStatus(nil, 0, mbim.UUID{1, 2, 3}, 77, []byte{1, 2, 3, 4}),
			}
			var want []byte
			for _, j := range junk {
				r.send(t, hMBIMDL, j)
				want = append(want, j...)
			}
			// The port passes the modem's bytes unchanged (the client's
			// protocol stack judges them); the host's own client counts
			// them as stray.
			got := make([]byte, len(want))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the client read % x (%v), want the modem's % x", got, err, want)
			}
			waitFor(t, "the host's client to count the stray messages", func() bool { return cl.Stray() == 2 })
			hExchange(t, r, c, 7)
			wantCounter(t, p.Stats().Pair, "dl_messages", 4)
		}},
		{"OVERFLOW chain longer than MaxDownlink", 15 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{Pair: ctrlport.PairOptions{DLBufferSize: 1024, MaxDownlink: 8 << 10}})
			c := openClient(t, p)
			for range 40 {
				r.complete(t, hMBIMDL, bytes.Repeat([]byte{0x55}, 1024), wire.CCOverflow)
			}
			r.complete(t, hMBIMDL, []byte("end"), wire.CCEOT)
			hExchange(t, r, c, 1)
			st := p.Stats()
			wantCounter(t, st.Pair, "dl_too_large", 1)
			wantCounter(t, st.Pair, "dl_messages", 1)
		}},
		{"OVERFLOW chain that never ends", 20 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			opts := ctrlport.PairOptions{DLBufferSize: 1024, MaxDownlink: 8 << 10}
			setChainTimeout(&opts, 300*time.Millisecond)
			p := openHPort(t, r, "MBIM", ctrlport.Options{Pair: opts})
			c := openClient(t, p)
			// Within the limit, then silence: the next honest answer must
			// not be glued to it.
			for range 5 {
				r.complete(t, hMBIMDL, bytes.Repeat([]byte{0x55}, 1024), wire.CCOverflow)
			}
			time.Sleep(500 * time.Millisecond)
			hExchange(t, r, c, 1)
			// Past the limit, then silence: the next honest answer must
			// not be dropped as the rest of it.
			for range 20 {
				r.complete(t, hMBIMDL, bytes.Repeat([]byte{0x55}, 1024), wire.CCOverflow)
			}
			time.Sleep(500 * time.Millisecond)
			hExchange(t, r, c, 2)
			st := p.Stats()
			wantCounter(t, st.Pair, "dl_chain_stalled", 2)
			wantCounter(t, st.Pair, "dl_too_large", 1)
			wantCounter(t, st.Pair, "dl_messages", 2)
		}},
		{"one-byte OVERFLOW fragments", 20 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{})
			c := openClient(t, p)
			msg := mbim.AppendCommandDone(nil, 5, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.StatusSuccess, make([]byte, 300))
			for _, b := range msg[:len(msg)-1] {
				r.complete(t, hMBIMDL, []byte{b}, wire.CCOverflow)
			}
			r.complete(t, hMBIMDL, msg[len(msg)-1:], wire.CCEOT)
			// Joined by bytes; every element was posted again at once, so
			// the ring never ran dry.
			if m := readMessage(t, c); m.TID != 5 || len(m.Raw) != len(msg) {
				t.Fatalf("the client read TID %d, %d bytes, want the joined %d bytes", m.TID, len(m.Raw), len(msg))
			}
			hExchange(t, r, c, 6)
			wantCounter(t, p.Stats().Pair, "dl_chained", 1)
		}},
		{"zero-length EOT", 15 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{})
			c := openClient(t, p)
			for range 3 {
				r.complete(t, hMBIMDL, nil, wire.CCEOT)
			}
			hExchange(t, r, c, 1)
			// The port counts a message after its write to the
			// pseudo-terminal returns, which may be after the client read
			// it (an empty one written before it would be counted before).
			waitFor(t, "the port to count the message", func() bool { return p.Stats().DLMessages >= 1 })
			st := p.Stats()
			wantCounter(t, st.Pair, "dl_empty", 3)
			wantCounter(t, st.Pair, "dl_messages", 1)
			wantCounter(t, st, "dl_messages", 1) // nothing empty written to the pseudo-terminal
		}},
		{"length past the buffer", 15 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{Pair: ctrlport.PairOptions{DLBufferSize: 1024}})
			c := openClient(t, p)
			r.setDLHook(func(ev *wire.Element) bool {
				*ev = wire.TransferEvent(ev.Ptr, ev.Code(), 0xFFFF, ev.Channel())
				return true
			})
			r.complete(t, hMBIMDL, []byte("0123456789"), wire.CCEOT)
			r.setDLHook(nil)
			// The core clamps to the buffer: the client gets the buffer.
			got := make([]byte, 1024)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || string(got[:10]) != "0123456789" {
				t.Fatalf("read %q…: %v", got[:10], err)
			}
			hExchange(t, r, c, 1)
			if n := r.ctrl.Stats().LengthClamped; n != 1 {
				t.Errorf("length_clamped %d, want 1", n)
			}
		}},
		{"BAD_TRE completions", 20 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{})
			c := openClient(t, p)
			r.setDLHook(func(ev *wire.Element) bool {
				*ev = wire.TransferEvent(ev.Ptr, wire.CCBadTRE, ev.Length(), ev.Channel())
				return true
			})
			n := 2 * hRingElements // more than the ring holds
			for range n {
				r.complete(t, hMBIMDL, []byte("bad"), wire.CCEOT)
			}
			r.setDLHook(nil)
			hExchange(t, r, c, 1)
			wantCounter(t, p.Stats().Pair, "dl_bad_transfers", uint64(n))
		}},
		{"completion codes the pair does not expect", 20 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{Pair: ctrlport.PairOptions{DLBufferSize: 1024}})
			c := openClient(t, p)
			codes := []wire.CompletionCode{0x7F, wire.CCSuccess, wire.CCOOB, wire.CCDBMode}
			for i, code := range codes {
				r.setDLHook(func(ev *wire.Element) bool {
					*ev = wire.TransferEvent(ev.Ptr, code, ev.Length(), ev.Channel())
					return true
				})
				r.complete(t, hMBIMDL, []byte("stale data the modem never reported"), wire.CCEOT)
				r.setDLHook(nil)
				// The element the code left pending is completed by the
				// next event without an event of its own: not a message.
				hExchange(t, r, c, uint32(i+1))
			}
			st := p.Stats()
			wantCounter(t, st.Pair, "dl_unreported", uint64(len(codes)))
			wantCounter(t, st.Pair, "dl_messages", uint64(len(codes)))
			if n := r.ctrl.Stats().BadCode; n != 2 {
				t.Errorf("bad_code %d, want 2 (0x7F and SUCCESS)", n)
			}
		}},
		{"completion without an event of its own", 15 * time.Second, func(t *testing.T) {
			r := newHRig(t)
			p := openHPort(t, r, "MBIM", ctrlport.Options{Pair: ctrlport.PairOptions{DLBufferSize: 1024}})
			c := openClient(t, p)
			r.setDLHook(func(*wire.Element) bool { return false })
			r.complete(t, hMBIMDL, []byte("never reported"), wire.CCEOT)
			r.setDLHook(nil)
			hExchange(t, r, c, 1)
			wantCounter(t, p.Stats().Pair, "dl_unreported", 1)
		}},
		{"flood of unsolicited messages, no client reading", 60 * time.Second, func(t *testing.T) {
			r := newMRig(t, "telit-fn990", "MBIM")
			const queue = 16
			p := r.port(t, "MBIM", ctrlport.Options{WriteTimeout: 50 * time.Millisecond, DLQueue: queue, StaleTimeout: time.Hour})
			host := &fakeHost{}
			s := ctrlport.NewSession(ctrlport.NewMBIMSession(p.Pair()), ctrlport.SessionOptions{Host: host, Timeout: 10 * time.Second})
			defer s.Close()
			c := openClient(t, p) // holds the port, never reads
			var ms0 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			const n = 2000
			ind := mbim.AppendIndicateStatus(nil, 0, mbim.UUID{9}, 1, make([]byte, 2000))
			start := time.Now()
			for range n {
				if err := r.fns["MBIM"].sendUnsolicited(ind); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the flood to reach the pair", func() bool { return p.Stats().Pair.DLMessages >= n })
			t.Logf("%d unsolicited messages in %v: %+v", n, time.Since(start), p.Stats())
			checkConservation(t, p, queue)
			var ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			if grow := int64(ms1.HeapInuse) - int64(ms0.HeapInuse); grow > 16<<20 {
				t.Errorf("the heap grew by %d bytes during the flood", grow)
			}
			st := p.Stats()
			if st.DLWriteTimeouts+st.DLQueueFull == 0 {
				t.Error("no drop counted while nobody read")
			}
			// The host's own session still works on the same pair.
			flushClient(t, c, unix.TCIFLUSH)
			if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "internet"}); err != nil {
				t.Fatalf("connect after the flood: %v", err)
			}
			if a, _ := host.counts(); a != 1 {
				t.Fatalf("host applied %d times", a)
			}
		}},
	}
}
