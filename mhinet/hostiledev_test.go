package mhinet_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/inproc"
	"github.com/gomhi/gomhi/mhi/msi"
	"github.com/gomhi/gomhi/mhi/slab"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// This file is a hostile modem for the network device's tests: the
// project's mock modem (mhi/ep) on host memory (a slab.Slab) seen
// through tamperMem, which lets a test rewrite every transfer event the
// modem writes before the host can read it (lengths, codes, pointers), and
// write any receive buffer at any time, as a bus master under VFIO can.
// hostileTransport joins it to a host controller like mhi/inproc does, and
// says nothing about trust, so mhinet treats its device as untrusted.

// eventHook rewrites a transfer completion the device is about to write
// (not DB_MODE or OOB, which complete no element). tre is the transfer
// element the event names as the device read it from host memory (zero if
// the pointer is outside host memory).
type eventHook func(ev *wire.Element, tre wire.Element)

// tamperMem is the device's view of host memory with a hook on the
// transfer events it writes.
type tamperMem struct {
	slab *slab.Slab

	mu     sync.Mutex
	rings  [][2]uint64 // event rings: [base, end)
	hook   eventHook
	events atomic.Uint64 // transfer events seen
}

func (m *tamperMem) ReadAt(p []byte, iova uint64) error { return m.slab.ReadAt(p, iova) }
func (m *tamperMem) Load32(iova uint64) (uint32, error) { return m.slab.Load32(iova) }
func (m *tamperMem) Store32(iova uint64, v uint32) error {
	return m.slab.Store32(iova, v)
}

func (m *tamperMem) WriteAt(p []byte, iova uint64) error {
	if len(p) == wire.ElementSize {
		m.mu.Lock()
		hook, inRing := m.hook, false
		for _, r := range m.rings {
			inRing = inRing || (iova >= r[0] && iova < r[1])
		}
		m.mu.Unlock()
		if inRing {
			// A DB_MODE (or OOB) event completes no TRE: it points at the
			// device's read pointer, the slot the host fills next, which
			// the host may be writing now. The hooks rewrite completions,
			// so it passes untouched and its slot is not read.
			if ev := wire.ParseElement(p); ev.Type() == wire.PktTxEvent && !noTRE(ev.Code()) {
				m.events.Add(1)
				if hook != nil {
					var raw [wire.ElementSize]byte
					var tre wire.Element
					if m.slab.ReadAt(raw[:], ev.Ptr) == nil {
						tre = wire.ParseElement(raw[:])
					}
					hook(&ev, tre)
					var out [wire.ElementSize]byte
					ev.Put(out[:])
					return m.slab.WriteAt(out[:], iova)
				}
			}
		}
	}
	return m.slab.WriteAt(p, iova)
}

// noTRE reports whether a transfer event with code c completes no TRE.
func noTRE(c wire.CompletionCode) bool { return c == wire.CCDBMode || c == wire.CCOOB }

// setHook installs (or with nil removes) the event hook.
func (m *tamperMem) setHook(h eventHook) {
	m.mu.Lock()
	m.hook = h
	m.mu.Unlock()
}

// hostileTransport is an mhi.Transport whose device is the mock modem on
// tamperMem. It does not implement mhinet.TrustedTransport.
type hostileTransport struct {
	slab *slab.Slab
	mem  *tamperMem
	dev  *ep.Device
	irq  *msi.Deliverer
	once sync.Once
}

const hostileVectors = 32

func newHostileTransport(cfg ep.Config) (*hostileTransport, error) {
	mem := slab.New(inproc.DefaultBase, 32<<20)
	t := &hostileTransport{slab: mem, mem: &tamperMem{slab: mem}, irq: msi.New()}
	dev, err := ep.New(cfg, t.mem, hostileRaiser{t})
	if err != nil {
		t.irq.Close()
		return nil, err
	}
	t.dev = dev
	return t, nil
}

func (t *hostileTransport) Read32(off uint32) (uint32, error) { return t.dev.ReadRegister(off), nil }
func (t *hostileTransport) Write32(off, v uint32) error {
	t.dev.WriteRegister(off, v)
	return nil
}
func (t *hostileTransport) Alloc(size, align int) (mhi.DMABuffer, error) {
	return t.slab.Alloc(size, align)
}
func (t *hostileTransport) Free(b mhi.DMABuffer) error      { return t.slab.Free(b) }
func (t *hostileTransport) Vectors() int                    { return hostileVectors }
func (t *hostileTransport) SetInterruptHandler(h func(int)) { t.irq.SetHandler(h) }
func (t *hostileTransport) Reset() error                    { t.dev.Reset(); return nil }
func (t *hostileTransport) Close() error {
	var err error
	t.once.Do(func() {
		err = t.dev.Close()
		t.irq.Close()
	})
	return err
}

type hostileRaiser struct{ t *hostileTransport }

func (r hostileRaiser) Raise(v int) {
	if v < 0 || v >= hostileVectors {
		v = 0
	}
	r.t.irq.Raise(v)
}

// hostileRig is a network device on a hostile modem.
type hostileRig struct {
	tr     *hostileTransport
	ctrl   *mhi.Controller
	ipd    *ipdata.Function
	dev    *mhinet.Device
	rx     *collector
	dlNum  uint8
	ulNum  uint8
	warns  *warnCounter
	inUse0 int           // slab bytes in use before the device came up
	pushed atomic.Uint64 // downlink transfers queued on the modem by push
}

// warnCounter is a slog handler that counts Warn records by message.
type warnCounter struct {
	mu   sync.Mutex
	msgs map[string]int
}

func (w *warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnCounter) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	w.msgs[r.Message]++
	w.mu.Unlock()
	return nil
}
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnCounter) WithGroup(string) slog.Handler      { return w }
func (w *warnCounter) count(msg string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.msgs[msg]
}

// newHostileRig starts a hostile modem impersonating model with ipd on its
// data pair, powers the controller up and brings a device with cfg up.
func newHostileRig(t testing.TB, model string, ipd ipdata.Config, cfg mhinet.Config) *hostileRig {
	t.Helper()
	return newHostileRigRx(t, model, ipd, cfg, nil)
}

// newHostileRigRx is newHostileRig with rx as the device's receiver (nil:
// the rig's collector).
func newHostileRigRx(t testing.TB, model string, ipd ipdata.Config, cfg mhinet.Config, rx mhinet.Receiver) *hostileRig {
	t.Helper()
	info, ok := pcigeneric.Model(model)
	if !ok {
		t.Fatalf("model %q", model)
	}
	mcfg := info.Config.WithLoopback()
	pair := pcigeneric.DataPair(mcfg)
	f, err := ipdata.New(ipd)
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New32a()
	h.Write([]byte(info.Name))
	tr, err := newHostileTransport(ep.Config{MHI: mcfg, SerialNumber: h.Sum32(), Functions: map[string]ep.Function{pair: f}})
	if err != nil {
		t.Fatal(err)
	}
	warns := &warnCounter{msgs: map[string]int{}}
	ctrl, err := mhi.NewController(tr, mcfg, mhi.Options{Name: "hostile0"})
	if err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ctrl.PowerDown()
		_ = tr.Close()
	})
	if err := ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	var rings [][2]uint64
	for _, er := range ctrl.Status().EventRings {
		rings = append(rings, [2]uint64{er.RingBase, er.RingBase + uint64(er.Elements*wire.ElementSize)})
	}
	tr.mem.mu.Lock()
	tr.mem.rings = rings
	tr.mem.mu.Unlock()
	ul, dl, err := ctrl.ChannelPair(pair)
	if err != nil {
		t.Fatal(err)
	}
	r := &hostileRig{tr: tr, ctrl: ctrl, ipd: f, rx: newCollector(), dlNum: dl.Num(), ulNum: ul.Num(), warns: warns}
	cfg.Pair = pair
	cfg.Logger = slog.New(warns)
	if rx == nil {
		rx = r.rx
	}
	if r.dev, err = mhinet.New(ctrl, cfg, rx); err != nil {
		t.Fatal(err)
	}
	r.inUse0 = tr.slab.InUse()
	if err := r.dev.Up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.dev.Down() })
	return r
}

// onDL installs a hook for the downlink channel's transfer events.
func (r *hostileRig) onDL(h eventHook) {
	if h == nil {
		r.tr.mem.setHook(nil)
		return
	}
	r.tr.mem.setHook(func(ev *wire.Element, tre wire.Element) {
		if ev.Channel() == r.dlNum {
			h(ev, tre)
		}
	})
}

// push makes the modem send one downlink transfer.
func (r *hostileRig) push(data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.tr.dev.QueueDL(ctx, r.dlNum, data); err != nil {
		return err
	}
	r.pushed.Add(1)
	return nil
}

// pushAsync sends every transfer in order from another goroutine; the
// channel gets the first error, or nil.
func (r *hostileRig) pushAsync(transfers ...[]byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i, d := range transfers {
			if err := r.push(d); err != nil {
				done <- fmt.Errorf("transfer %d of %d: %w", i, len(transfers), err)
				return
			}
		}
		done <- nil
	}()
	return done
}

// pushAll sends every transfer in order, failing the test on an error.
func (r *hostileRig) pushAll(t testing.TB, transfers ...[]byte) {
	t.Helper()
	for i, d := range transfers {
		if err := r.push(d); err != nil {
			t.Fatalf("transfer %d of %d: %v", i, len(transfers), err)
		}
	}
}

// quiesce waits until the modem has written every transfer pushed to it,
// the host has handled every event the modem posted, and then the
// device's counters hold still over five polls. A pause alone would not
// do: a modem not scheduled for the pause has written nothing yet.
func (r *hostileRig) quiesce(t testing.TB) mhinet.Stats {
	t.Helper()
	var last mhinet.Stats
	var lastEvents uint64
	stable := 0
	if !poll.Until(10*time.Second, func() bool {
		events, drained := r.eventsDrained()
		s := r.dev.Stats()
		if !drained || r.tr.dev.Stats().DLTransfers < r.pushed.Load() {
			stable = 0
			return false
		}
		if s.RxElements == last.RxElements && s.RxPackets == last.RxPackets && s.RxPosted == last.RxPosted && events == lastEvents {
			stable++
		} else {
			stable = 0
		}
		last, lastEvents = s, events
		return stable >= 5
	}) {
		t.Fatalf("device never settled (the modem wrote %d of %d pushed transfers, events posted/handled %s): %+v",
			r.tr.dev.Stats().DLTransfers, r.pushed.Load(), r.eventsString(), r.dev.Stats())
	}
	return last
}

// eventsDrained reports the events the modem posted and whether the host
// has handled all of them: its read pointer at the modem's on every event
// ring. Controller.Status excludes the event goroutines' passes, so a
// handler that ran has finished.
func (r *hostileRig) eventsDrained() (posted uint64, drained bool) {
	for _, n := range r.tr.dev.Stats().EventsPosted {
		posted += n
	}
	drained = true
	for _, er := range r.ctrl.Status().EventRings {
		drained = drained && er.HostRP == er.DeviceRP
	}
	return posted, drained
}

// eventsString names each event ring's host and device read pointers.
func (r *hostileRig) eventsString() string {
	var b strings.Builder
	for _, er := range r.ctrl.Status().EventRings {
		fmt.Fprintf(&b, "[ring %d: host rp %#x, device rp %#x, %d handled]", er.Index, er.HostRP, er.DeviceRP, er.Events)
	}
	return b.String()
}

// shortTransferModel is the model the receive tests impersonate: raw IP
// on IP_HW0.
const shortTransferModel = mock.DefaultModel

// rawPackets returns n raw IPv4 transfers of size bytes numbered from seq.
func rawPackets(n, size int, seq uint32) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = ipv4(size, seq+uint32(i))
	}
	return out
}

// checkPoolWhole fails unless every buffer of the pool is free or posted:
// nothing leaked, nothing pinned.
func checkPoolWhole(t testing.TB, s mhinet.Stats) {
	t.Helper()
	if s.PoolFree+s.RxPosted != s.PoolBuffers {
		t.Fatalf("pool: %d free + %d posted of %d buffers: %d pinned", s.PoolFree, s.RxPosted, s.PoolBuffers,
			s.PoolBuffers-s.PoolFree-s.RxPosted)
	}
}

// hostileString names a stats snapshot's receive counters for messages.
func hostileString(s mhinet.Stats) string {
	return fmt.Sprintf("rx %d pkts %d transfers %d elements; chains %d too-long %d aborted %d unreported %d busy %d; "+
		"dropped %d fragments %d bytes; empty %d bad %d; free %d posted %d of %d; starved %d",
		s.RxPackets, s.RxTransfers, s.RxElements, s.RxChains, s.RxChainTooLong, s.RxChainAborted, s.RxUnreported,
		s.RxReassemblyBusy, s.RxDroppedFragments, s.RxDroppedBytes, s.RxEmpty, s.RxBadPacket,
		s.PoolFree, s.RxPosted, s.PoolBuffers, s.RefillStarved)
}
