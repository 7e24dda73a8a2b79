package tun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
)

// Bridge defaults.
const (
	// DefaultBatch is the most packets per TUN read and Transmit call.
	DefaultBatch = 64
	// DefaultBufSize is the size of each read buffer: any IP packet fits.
	DefaultBufSize = 65535
	// DefaultBusyTimeout is how long Run retries a busy uplink without
	// progress before it drops the packets it holds.
	DefaultBusyTimeout = 100 * time.Millisecond
)

// BridgeConfig configures a Bridge. The zero value is usable.
type BridgeConfig struct {
	// Batch is the most packets one TUN read takes and one Transmit call
	// gets (default DefaultBatch).
	Batch int
	// BufSize is the size of each read buffer (default DefaultBufSize, so
	// any MTU fits).
	BufSize int
	// BusyTimeout is how long Run retries packets the device refuses with
	// mhinet.ErrBusy without any progress before it drops them (counted
	// in DropBusy). Default DefaultBusyTimeout.
	BusyTimeout time.Duration
	// NoGRO turns off the coalescing of downlink TCP segments and UDP
	// datagrams into super-packets on a TUN with virtio_net_hdr (see
	// Bridge).
	NoGRO bool
	// IPv4Only drops IPv6 packets read from the TUN (counted in DropIPv6),
	// for a link that should carry IPv4 alone. Packets that are neither
	// IPv4 nor IPv6 are always dropped (DropNotIP).
	IPv4Only bool
	// Logger receives the bridge's logs (nil: discard).
	Logger *slog.Logger
	// Session is the data session (its number N, not the wire id) the
	// bridge's uplink goes out on (mhinet.Device.TransmitSession and
	// TransmitGSOSession); with a Mux as the device's Receiver, the
	// bridge is the session's receiver (AddSession) and its counters are
	// the session's (Mux.SessionStats).
	Session uint8
}

// Bridge moves packets between a TUN Device and an mhinet.Device: Run
// reads the TUN and transmits on the uplink; Receive (the Bridge is the
// device's Receiver) writes what the downlink delivers to the TUN.
//
// On a TUN with a virtio_net_hdr (a VnetHdrDevice with a VnetHdrLen, such
// as an Interface opened with OpenOptions.GSO) the uplink hands the
// packets and their headers to mhinet.Device.TransmitGSO, which cuts TCP
// and UDP super-packets into MTU-sized packets just before the ring; the
// downlink puts a header in front of every packet it writes and, unless
// BridgeConfig.NoGRO, first merges consecutive in-order segments of one
// TCP flow within a delivered batch into one super-packet (gso_type
// TCPV4/TCPV6, partial checksum), and, when the TUN accepted the USO
// offloads (an OffloadDevice), consecutive datagrams of one UDP flow
// (gso_type UDP_L4), after checking every packet's checksums, so the
// kernel takes one packet where the modem delivered many.
//
// Construction: b := NewBridge(tun, cfg); dev, _ := mhinet.New(ctrl,
// devCfg, b); b.Attach(dev) — or Connect, which does the three. Run's
// read buffers are reused once Transmit returns, which relies on Transmit
// copying the packets (it does). Methods are safe for concurrent use.
type Bridge struct {
	tun Device
	cfg BridgeConfig
	log *slog.Logger

	dev     atomic.Pointer[mhinet.Device]
	tx      atomic.Pointer[transmitter]    // dev's Transmit (replaced in tests)
	gtx     atomic.Pointer[gsoTransmitter] // dev's TransmitGSO (replaced in tests)
	vnet    int                            // virtio_net_hdr length on the TUN (0: none)
	running atomic.Bool
	mtuMu   sync.Mutex

	rxMu   sync.Mutex
	rxBufs [][]byte
	gro    coalescer // frames for a TUN with virtio_net_hdr
	dl     downlink  // Receive's queue to Run's writer (downlink.go)

	// busyTimer bounds an uplink wait for TransmitReady (Run's).
	busyTimer *time.Timer

	c bridgeCounters
}

var _ mhinet.Receiver = (*Bridge)(nil)

// transmitter is the uplink side of an mhinet.Device.
type transmitter interface {
	Transmit(pkts [][]byte) (int, error)
	// TransmitReady wakes a caller waiting after ErrBusy.
	TransmitReady() <-chan struct{}
}

// gsoTransmitter is the segmenting uplink side of an mhinet.Device.
type gsoTransmitter interface {
	TransmitGSO(pkts []mhinet.GSOPacket) (int, error)
	DropGSOPending() int
	TransmitReady() <-chan struct{}
}

type bridgeCounters struct {
	upPackets, upBytes     atomic.Uint64
	upReads                atomic.Uint64
	downPackets, downBytes atomic.Uint64
	busyRetries            atomic.Uint64
	dropBusy, dropDown     atomic.Uint64
	dropTxError            atomic.Uint64
	dropNotIP, dropIPv6    atomic.Uint64
	dropTooBig             atomic.Uint64
	writeErrors            atomic.Uint64
	upSuper                atomic.Uint64
	dropBadVnet            atomic.Uint64
	dropBusySegments       atomic.Uint64
	downFrames, downSuper  atomic.Uint64
	downCoalesced          atomic.Uint64
	downBatches            atomic.Uint64
	downQueueFull          atomic.Uint64
}

// countBatch adds the packets of a batch to packets and their bytes to
// bytes.
func countBatch(packets, bytes *atomic.Uint64, pkts [][]byte) {
	n := 0
	for _, p := range pkts {
		n += len(p)
	}
	packets.Add(uint64(len(pkts)))
	bytes.Add(uint64(n))
}

// BridgeStats is a snapshot of a Bridge's counters. Uplink is TUN →
// device, downlink is device → TUN. Every packet read from the TUN is in
// UplinkPackets or in one Drop counter; every packet the device delivers
// is in DownlinkPackets or WriteErrors once written (while Run runs it may
// wait in the downlink queue first; Run's end writes the queue).
type BridgeStats struct {
	// UplinkPackets and UplinkBytes count packets read from the TUN and
	// taken by mhinet.Device.Transmit (which itself counts the ones it
	// rejects: TxTooLong, TxEmpty).
	UplinkPackets uint64 `json:"uplink_packets"`
	UplinkBytes   uint64 `json:"uplink_bytes"`
	// UplinkReads counts TUN reads that returned packets (batches).
	UplinkReads uint64 `json:"uplink_reads"`
	// DownlinkPackets and DownlinkBytes count packets written to the TUN.
	DownlinkPackets uint64 `json:"downlink_packets"`
	DownlinkBytes   uint64 `json:"downlink_bytes"`
	// BusyRetries counts Transmit calls repeated after mhinet.ErrBusy.
	BusyRetries uint64 `json:"busy_retries"`
	// DropBusy: uplink packets dropped after BusyTimeout of ErrBusy.
	DropBusy uint64 `json:"drop_busy"`
	// DropDown: uplink packets dropped because the device was down.
	DropDown uint64 `json:"drop_down"`
	// DropTxError: uplink packets dropped on another Transmit error.
	DropTxError uint64 `json:"drop_tx_error"`
	// DropNotIP: packets read from the TUN that are neither IPv4 nor IPv6.
	DropNotIP uint64 `json:"drop_not_ip"`
	// DropIPv6: IPv6 packets dropped with BridgeConfig.IPv4Only.
	DropIPv6 uint64 `json:"drop_ipv6"`
	// DropTooBig: packets larger than the read buffer.
	DropTooBig uint64 `json:"drop_too_big"`
	// WriteErrors: downlink packets the TUN write refused.
	WriteErrors uint64 `json:"write_errors"`

	// UplinkSuperPackets counts the GSO super-packets among UplinkPackets
	// on a TUN with a virtio_net_hdr (mhinet's Stats.GSO counts their
	// segments).
	UplinkSuperPackets uint64 `json:"uplink_super_packets"`
	// DropBadVnetHdr: reads shorter than the virtio_net_hdr.
	DropBadVnetHdr uint64 `json:"drop_bad_vnet_hdr"`
	// DropBusySegments: segments of packets already taken (counted in
	// UplinkPackets) that were still pending in the device when
	// BusyTimeout ran out; they are in mhinet's GSO.DroppedSegments too.
	DropBusySegments uint64 `json:"drop_busy_segments"`
	// DownlinkWrites counts TUN writes: one per packet, or per merged
	// super-packet.
	DownlinkWrites uint64 `json:"downlink_writes"`
	// DownlinkSuperPackets counts the writes that were merged TCP or UDP
	// super-packets (on a TUN with a virtio_net_hdr, without NoGRO).
	DownlinkSuperPackets uint64 `json:"downlink_super_packets"`
	// DownlinkCoalesced counts the downlink packets that went out inside
	// those super-packets.
	DownlinkCoalesced uint64 `json:"downlink_coalesced"`
	// DownlinkBatches counts the batches Run's writer goroutine took from
	// the downlink queue; DownlinkQueueFull the times Receive found the
	// queue full and waited for the writer.
	DownlinkBatches   uint64 `json:"downlink_batches"`
	DownlinkQueueFull uint64 `json:"downlink_queue_full"`
}

// UplinkDropped sums the uplink drop counters (in packets read from the
// TUN; DropBusySegments counts segments and is not included).
func (s BridgeStats) UplinkDropped() uint64 {
	return s.DropBusy + s.DropDown + s.DropTxError + s.DropNotIP + s.DropIPv6 + s.DropTooBig + s.DropBadVnetHdr
}

// NewBridge returns a Bridge on tun. Pass it as the Receiver to
// mhinet.New, then Attach the device.
func NewBridge(tun Device, cfg BridgeConfig) *Bridge {
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	vnet := 0
	if v, ok := tun.(VnetHdrDevice); ok {
		vnet = v.VnetHdrLen()
	}
	if cfg.BufSize <= 0 {
		cfg.BufSize = DefaultBufSize
		if vnet > 0 {
			cfg.BufSize = vnet + maxSuperPacket
		}
	}
	if cfg.BusyTimeout <= 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bridge{tun: tun, cfg: cfg, log: log, vnet: vnet, rxBufs: make([][]byte, 0, cfg.Batch)}
	if o, ok := tun.(OffloadDevice); ok && vnet > 0 {
		b.gro.udp4 = o.Offloads()&OffloadUSO4 != 0
		b.gro.udp6 = o.Offloads()&OffloadUSO6 != 0
	}
	b.dl.init()
	b.busyTimer = time.NewTimer(time.Hour)
	b.busyTimer.Stop()
	return b
}

// Connect builds a bridge and its device in one go: NewBridge, mhinet.New
// with the bridge as Receiver (devCfg.MTU, when zero, becomes the TUN's
// MTU, capped at mhinet.MaxMTU), Attach. The device is down; call Up on
// it, then Run the bridge.
func Connect(tun Device, ctrl *mhi.Controller, devCfg mhinet.Config, cfg BridgeConfig) (*Bridge, *mhinet.Device, error) {
	b := NewBridge(tun, cfg)
	if devCfg.MTU == 0 {
		devCfg.MTU = min(tun.MTU(), mhinet.MaxMTU)
	}
	dev, err := mhinet.New(ctrl, devCfg, b)
	if err != nil {
		return nil, nil, fmt.Errorf("tun: bridge: %w", err)
	}
	b.Attach(dev)
	return b, dev, nil
}

// Attach sets the device Run transmits on, on BridgeConfig.Session. It
// must be the device built with b as its Receiver, or with a Mux that has
// b as the session's receiver (AddSession).
func (b *Bridge) Attach(dev *mhinet.Device) {
	s := &sessionTx{dev: dev, n: b.cfg.Session, ready: dev.TransmitReadySession(b.cfg.Session)}
	var tx transmitter = s
	b.tx.Store(&tx)
	var gtx gsoTransmitter = s
	b.gtx.Store(&gtx)
	b.dev.Store(dev)
}

// sessionTx is a device's uplink on one session, with the session's own
// TransmitReady channel (several bridges wait on one device).
type sessionTx struct {
	dev   *mhinet.Device
	n     uint8
	ready <-chan struct{}
}

func (s *sessionTx) Transmit(pkts [][]byte) (int, error) { return s.dev.TransmitSession(s.n, pkts) }

func (s *sessionTx) TransmitGSO(pkts []mhinet.GSOPacket) (int, error) {
	return s.dev.TransmitGSOSession(s.n, pkts)
}

func (s *sessionTx) DropGSOPending() int { return s.dev.DropGSOPending() }

func (s *sessionTx) TransmitReady() <-chan struct{} { return s.ready }

// Session returns the session the bridge transmits on
// (BridgeConfig.Session).
func (b *Bridge) Session() uint8 { return b.cfg.Session }

// SessionCounts returns the bridge's counters as its session's (it
// implements SessionCounter): its uplink, and the downlink packets the
// TUN refused.
func (b *Bridge) SessionCounts() SessionStats {
	s := b.Stats()
	return SessionStats{TxPackets: s.UplinkPackets, TxBytes: s.UplinkBytes, TxDropped: s.UplinkDropped(), RxDropped: s.WriteErrors}
}

// Device returns the attached device (nil before Attach).
func (b *Bridge) Device() *mhinet.Device { return b.dev.Load() }

// TUN returns the bridge's TUN side.
func (b *Bridge) TUN() Device { return b.tun }

// Run moves packets from the TUN to the device until ctx is done (it
// returns ctx.Err()) or the TUN fails (it returns the error; ErrClosed
// once the TUN is closed). Each read batch goes to one Transmit call; when
// the device answers ErrBusy the rest waits for the device's
// TransmitReady (a completion) and is retried, and dropped, counted,
// after BusyTimeout without progress. While Run runs, the packets the
// device delivers are written to the TUN by a writer goroutine of Run's
// (see Receive); Run returns once it has written what was queued. One Run
// at a time.
func (b *Bridge) Run(ctx context.Context) error {
	txp := b.tx.Load()
	if txp == nil {
		return ErrNotAttached
	}
	tx := *txp
	var gtx gsoTransmitter
	if p := b.gtx.Load(); p != nil {
		gtx = *p
	}
	if b.vnet > 0 && gtx == nil {
		return ErrNotAttached
	}
	if !b.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer b.running.Store(false)
	if err := ctx.Err(); err != nil {
		return err
	}
	// A cancelled context ends a pending read through the deadline; a
	// previous Run's cancellation may have left one in the past.
	if err := b.tun.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("tun: bridge: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = b.tun.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	b.startWriter()
	defer b.stopWriter()

	slab := make([]byte, b.cfg.Batch*b.cfg.BufSize)
	bufs := make([][]byte, b.cfg.Batch)
	for i := range bufs {
		bufs[i] = slab[i*b.cfg.BufSize : (i+1)*b.cfg.BufSize : (i+1)*b.cfg.BufSize]
	}
	sizes := make([]int, b.cfg.Batch)
	pkts := make([][]byte, 0, b.cfg.Batch)
	var gpkts []mhinet.GSOPacket
	if b.vnet > 0 {
		gpkts = make([]mhinet.GSOPacket, 0, b.cfg.Batch)
	}
	for {
		n, err := b.tun.Read(bufs, sizes)
		if n > 0 {
			b.c.upReads.Add(1)
			if b.vnet > 0 {
				gpkts = b.filterVnet(bufs[:n], sizes[:n], gpkts[:0])
				b.transmitGSO(ctx, gtx, gpkts)
				clear(gpkts) // drop the references into the read buffers
			} else {
				pkts = b.filter(bufs[:n], sizes[:n], pkts[:0])
				b.transmit(ctx, tx, pkts)
			}
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, ErrTooBig):
				b.c.dropTooBig.Add(1)
				continue
			}
			return fmt.Errorf("tun: bridge: %w", err)
		}
	}
}

// filter keeps the IP packets of a read batch (and drops IPv6 with
// IPv4Only), appending them to out.
func (b *Bridge) filter(bufs [][]byte, sizes []int, out [][]byte) [][]byte {
	for i, buf := range bufs {
		if p := buf[:sizes[i]]; b.ipVersionOK(p) {
			out = append(out, p)
		}
	}
	return out
}

// ipVersionOK counts and reports false for a packet the uplink does not
// take: not IPv4 or IPv6, or IPv6 with IPv4Only.
func (b *Bridge) ipVersionOK(p []byte) bool {
	v := byte(0)
	if len(p) > 0 {
		v = p[0] >> 4
	}
	switch {
	case v == 4:
	case v == 6 && b.cfg.IPv4Only:
		b.c.dropIPv6.Add(1)
		return false
	case v == 6:
	default:
		b.c.dropNotIP.Add(1)
		return false
	}
	return true
}

// filterVnet splits the frames of a read batch into virtio_net_hdr and
// packet, keeping the IP packets (as filter does).
func (b *Bridge) filterVnet(bufs [][]byte, sizes []int, out []mhinet.GSOPacket) []mhinet.GSOPacket {
	for i, buf := range bufs {
		f := buf[:sizes[i]]
		var h gso.VirtioNetHdr
		if len(f) < b.vnet || h.Decode(f) != nil {
			b.c.dropBadVnet.Add(1)
			continue
		}
		p := f[b.vnet:]
		if !b.ipVersionOK(p) {
			continue
		}
		out = append(out, mhinet.GSOPacket{Hdr: h, Data: p})
	}
	return out
}

// transmitGSO hands pkts to the device's segmenting transmit, retrying on
// ErrBusy until everything is taken and no segment is left pending.
func (b *Bridge) transmitGSO(ctx context.Context, dev gsoTransmitter, pkts []mhinet.GSOPacket) {
	var since time.Time
	for {
		n, err := dev.TransmitGSO(pkts)
		if n > 0 {
			bytes, super := 0, 0
			for _, p := range pkts[:n] {
				bytes += len(p.Data)
				if p.Hdr.GSOType != gso.GSONone {
					super++
				}
			}
			b.c.upPackets.Add(uint64(n))
			b.c.upBytes.Add(uint64(bytes))
			b.c.upSuper.Add(uint64(super))
			pkts = pkts[n:]
			since = time.Time{}
		}
		if err == nil {
			if len(pkts) == 0 {
				return
			}
			continue
		}
		if !b.retryAfter(ctx, err, len(pkts), &since, dev.TransmitReady(), dev.DropGSOPending) {
			return
		}
	}
}

// transmit hands pkts to the device, retrying on ErrBusy.
func (b *Bridge) transmit(ctx context.Context, dev transmitter, pkts [][]byte) {
	var since time.Time // start of the current stretch without progress
	for len(pkts) > 0 {
		n, err := dev.Transmit(pkts)
		if n > 0 {
			countBatch(&b.c.upPackets, &b.c.upBytes, pkts[:n])
			pkts = pkts[n:]
			since = time.Time{}
		}
		if err == nil || len(pkts) == 0 {
			return
		}
		if !b.retryAfter(ctx, err, len(pkts), &since, dev.TransmitReady(), nil) {
			return
		}
	}
}

// retryAfter decides what follows a transmit call that failed with err
// and left left packets: on ErrBusy it waits for ready (the device's
// TransmitReady: a completion freed room) and reports true (retry) until
// BusyTimeout passes without progress (since is the start of that
// stretch, reset by the caller on progress) or ctx ends; otherwise, and
// then, it counts the packets as dropped under their reason, with the
// segments dropPending discards (GSO), and reports false.
func (b *Bridge) retryAfter(ctx context.Context, err error, left int, since *time.Time, ready <-chan struct{}, dropPending func() int) bool {
	switch {
	case errors.Is(err, mhinet.ErrBusy):
		now := time.Now()
		if since.IsZero() {
			*since = now
		}
		if wait := b.cfg.BusyTimeout - now.Sub(*since); wait > 0 && ctx.Err() == nil {
			b.c.busyRetries.Add(1)
			b.busyTimer.Reset(wait)
			select {
			case <-ready:
			case <-ctx.Done():
			case <-b.busyTimer.C:
			}
			b.busyTimer.Stop()
			return true
		}
		b.c.dropBusy.Add(uint64(left))
		segs := 0
		if dropPending != nil {
			segs = dropPending()
			b.c.dropBusySegments.Add(uint64(segs))
		}
		b.log.Warn("uplink busy: packets dropped", "packets", left, "segments", segs, "busy_for", now.Sub(*since))
	case errors.Is(err, mhinet.ErrDown):
		b.c.dropDown.Add(uint64(left))
	default:
		b.c.dropTxError.Add(uint64(left))
		b.log.Warn("uplink transmit failed: packets dropped", "packets", left, "err", err)
	}
	return false
}

// MTU returns the TUN's MTU.
func (b *Bridge) MTU() int { return b.tun.MTU() }

// SetMTU sets the MTU of the TUN and of the attached device (in the order
// that keeps the TUN's MTU within the device's throughout), and restores
// the first one if the second fails.
func (b *Bridge) SetMTU(n int) error {
	if err := mhinet.ValidateMTU(n); err != nil {
		return fmt.Errorf("tun: bridge: %w", err)
	}
	b.mtuMu.Lock()
	defer b.mtuMu.Unlock()
	dev := b.dev.Load()
	if dev == nil {
		return b.tun.SetMTU(n)
	}
	oldTUN, oldDev := b.tun.MTU(), dev.MTU()
	if n < oldTUN {
		if err := b.tun.SetMTU(n); err != nil {
			return err
		}
		if err := dev.SetMTU(n); err != nil {
			return errors.Join(fmt.Errorf("tun: bridge: device MTU %d: %w", n, err), b.tun.SetMTU(oldTUN))
		}
		return nil
	}
	if err := dev.SetMTU(n); err != nil {
		return fmt.Errorf("tun: bridge: device MTU %d: %w", n, err)
	}
	if err := b.tun.SetMTU(n); err != nil {
		return errors.Join(err, dev.SetMTU(oldDev))
	}
	return nil
}

// Stats returns a snapshot of the bridge's counters.
func (b *Bridge) Stats() BridgeStats {
	c := &b.c
	return BridgeStats{
		UplinkPackets:   c.upPackets.Load(),
		UplinkBytes:     c.upBytes.Load(),
		UplinkReads:     c.upReads.Load(),
		DownlinkPackets: c.downPackets.Load(),
		DownlinkBytes:   c.downBytes.Load(),
		BusyRetries:     c.busyRetries.Load(),
		DropBusy:        c.dropBusy.Load(),
		DropDown:        c.dropDown.Load(),
		DropTxError:     c.dropTxError.Load(),
		DropNotIP:       c.dropNotIP.Load(),
		DropIPv6:        c.dropIPv6.Load(),
		DropTooBig:      c.dropTooBig.Load(),
		WriteErrors:     c.writeErrors.Load(),

		UplinkSuperPackets:   c.upSuper.Load(),
		DropBadVnetHdr:       c.dropBadVnet.Load(),
		DropBusySegments:     c.dropBusySegments.Load(),
		DownlinkWrites:       c.downFrames.Load(),
		DownlinkSuperPackets: c.downSuper.Load(),
		DownlinkCoalesced:    c.downCoalesced.Load(),
		DownlinkBatches:      c.downBatches.Load(),
		DownlinkQueueFull:    c.downQueueFull.Load(),
	}
}
