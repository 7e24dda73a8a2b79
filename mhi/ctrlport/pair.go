// Package ctrlport is the host side of the modem's control channels (MBIM,
// QMI, AT): what Linux's mhi_wwan_ctrl driver does with /dev/wwan0mbim0
// and friends. A Pair drives one control channel pair of an
// mhi.Controller — downlink buffers kept posted, overflow pieces joined
// into whole transfers, one uplink transfer per message. A Port exposes a
// Pair to user space as a raw pseudo-terminal, so that unmodified tools
// (mbimcli, qmicli, a terminal program for AT) open it like a wwan port,
// cutting their byte stream into messages with a per-protocol Framer.
// MBIMClient runs MBIM transactions over either, for gomhi's own use
// (mhictl connect).
//
// Typical use, after ctrl.PowerUp():
//
//	p, err := ctrlport.Open(ctrl, "MBIM", ctrlport.Options{Link: "/run/gomhi/wwan0mbim0"})
//	// mbimcli -d /run/gomhi/wwan0mbim0 --query-device-caps
//	fmt.Println(p.Path(), p.Stats())
//	p.Close()
package ctrlport

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Limits and defaults.
const (
	// MaxMTU is the largest message a control port passes in one
	// transfer (Linux's MHI_WWAN_MAX_MTU).
	MaxMTU = 32768
	// DefaultDLBufferSize is the size of each posted downlink buffer, as
	// mhi_wwan_ctrl posts them.
	DefaultDLBufferSize = 32768
	// DefaultMaxDownlink bounds a downlink transfer joined from overflow
	// pieces; longer ones are dropped and counted.
	DefaultMaxDownlink = 256 << 10
	// DefaultSendTimeout bounds the wait for a free uplink buffer or for
	// the channel to run again (after SYS_ERR).
	DefaultSendTimeout = 5 * time.Second
	// DefaultChainTimeout: a downlink transfer being joined from OVERFLOW
	// pieces (or skipped for its size) whose next piece does not come
	// within this time is given up, so that the next transfer does not
	// join it. A device writes the pieces of one transfer back to back.
	DefaultChainTimeout = time.Second
	// warnInterval spaces the Warn records of downlink anomalies a device
	// can repeat at will.
	warnInterval = 10 * time.Second
)

// Errors of a Pair or Port.
var (
	// ErrClosed: the pair or port is closed.
	ErrClosed = errors.New("ctrlport: closed")
	// ErrMessageSize: a message is empty or larger than MaxMTU.
	ErrMessageSize = errors.New("ctrlport: message size")
	// ErrTimeout: no uplink buffer became free, or the channel did not
	// run again, in time.
	ErrTimeout = errors.New("ctrlport: timeout")
)

// PairOptions configure a Pair.
type PairOptions struct {
	// DLBufferSize is the size of each downlink buffer (default
	// DefaultDLBufferSize, at most wire.MaxTRELength).
	DLBufferSize int
	// DLBuffers is the number of downlink buffers kept posted (default:
	// as many as the ring holds).
	DLBuffers int
	// ULBuffers is the number of uplink messages in flight (default: the
	// ring's capacity, at most 8).
	ULBuffers int
	// MaxDownlink bounds a joined downlink transfer (default
	// DefaultMaxDownlink).
	MaxDownlink int
	// SendTimeout bounds Send's waits (default DefaultSendTimeout).
	SendTimeout time.Duration
	// ChainTimeout bounds the gap between two pieces of one downlink
	// transfer (default DefaultChainTimeout).
	ChainTimeout time.Duration
	// Logger receives Warn records for drops and errors (nil: discard).
	Logger *slog.Logger
}

// PairStats are a Pair's counters.
type PairStats struct {
	ULMessages uint64 `json:"ul_messages"` // uplink transfers queued
	ULBytes    uint64 `json:"ul_bytes"`
	ULDone     uint64 `json:"ul_done"`    // completed by the device
	ULAborted  uint64 `json:"ul_aborted"` // lost to a channel reset, SYS_ERR or close
	ULDropped  uint64 `json:"ul_dropped"` // not queued: Send failed (timeout, closed)
	DLMessages uint64 `json:"dl_messages"`
	DLBytes    uint64 `json:"dl_bytes"`
	DLChained  uint64 `json:"dl_chained"` // transfers joined from overflow pieces
	// DLTooLarge counts downlink transfers dropped for exceeding
	// MaxDownlink; DLCut those cut short by SYS_ERR or a reset.
	DLTooLarge uint64 `json:"dl_too_large"`
	DLCut      uint64 `json:"dl_cut"`
	// DLChainStalled counts downlink transfers given up because their
	// next piece did not come within ChainTimeout.
	DLChainStalled uint64 `json:"dl_chain_stalled"`
	// DLEmpty counts downlink elements the device completed with no data
	// (a transfer of nothing is not passed on).
	DLEmpty uint64 `json:"dl_empty"`
	// DLUnreported counts downlink elements the device completed without
	// an event of their own (an event naming a later element completed
	// them): their length is unknown, so they and the transfer they ended
	// are dropped.
	DLUnreported uint64 `json:"dl_unreported"`
	// DLBadTransfers counts downlink elements the device failed (BAD_TRE);
	// their buffers are posted again.
	DLBadTransfers uint64 `json:"dl_bad_transfers"`
	RepostErrors   uint64 `json:"repost_errors"`
	SysErrs        uint64 `json:"sys_errs"`
	Recoveries     uint64 `json:"recoveries"`
}

// Pair drives one control channel pair: downlink buffers stay posted and
// every downlink transfer (overflow pieces joined) goes to the
// subscribers; Send queues one uplink transfer per message.
type Pair struct {
	ctrl     *mhi.Controller
	name     string
	ul, dl   *mhi.Channel
	opts     PairOptions
	log      *slog.Logger
	unlisten func() // removes onStatus from the controller's listeners

	mu       sync.Mutex
	cond     *sync.Cond
	ulBufs   []mhi.DMABuffer
	ulFree   []int
	dlBufs   []mhi.DMABuffer
	dlPosted []bool
	join     []byte // downlink transfer being joined
	joining  bool
	cut      bool      // drop pieces until the end of the current transfer
	lastDL   time.Time // when the last downlink piece came
	warned   map[string]time.Time
	subs     map[int]func([]byte)
	nextSub  int
	// downSubs hear that the device crashed or went away (OnDown).
	downSubs map[int]func(error)
	down     bool // SYS_ERR until recovery
	closed   bool
	stats    PairStats
}

// OpenPair starts the channel pair name ("MBIM", "QMI", "DUN"…) of ctrl,
// which must be powered up, and posts its downlink buffers.
func OpenPair(ctrl *mhi.Controller, name string, opts PairOptions) (*Pair, error) {
	ul, dl, err := ctrl.ChannelPair(name)
	if err != nil {
		return nil, err
	}
	if opts.DLBufferSize == 0 {
		opts.DLBufferSize = DefaultDLBufferSize
	}
	if opts.DLBufferSize < 1 || opts.DLBufferSize > wire.MaxTRELength {
		return nil, fmt.Errorf("ctrlport: %s %s: downlink buffers of %d bytes, want 1..%d", ctrl.Name(), name, opts.DLBufferSize, wire.MaxTRELength)
	}
	if n := dl.Config().Elements - 1; opts.DLBuffers <= 0 || opts.DLBuffers > n {
		opts.DLBuffers = n
	}
	if n := ul.Config().Elements - 1; opts.ULBuffers <= 0 || opts.ULBuffers > n {
		opts.ULBuffers = min(n, 8)
	}
	if opts.DLBuffers < 1 || opts.ULBuffers < 1 {
		return nil, fmt.Errorf("ctrlport: %s %s: rings of %d/%d elements are too small", ctrl.Name(), name, ul.Config().Elements, dl.Config().Elements)
	}
	if opts.MaxDownlink <= 0 {
		opts.MaxDownlink = DefaultMaxDownlink
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = DefaultSendTimeout
	}
	if opts.ChainTimeout <= 0 {
		opts.ChainTimeout = DefaultChainTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pair{ctrl: ctrl, name: name, ul: ul, dl: dl, opts: opts, subs: map[int]func([]byte){}, warned: map[string]time.Time{},
		log: log.With("dev", ctrl.Name(), "pair", name)}
	p.cond = sync.NewCond(&p.mu)
	mem := ctrl.Transport()
	for i := range opts.ULBuffers {
		b, err := mem.Alloc(MaxMTU, 64)
		if err != nil {
			p.free()
			return nil, fmt.Errorf("ctrlport: %s %s: uplink buffer: %w", ctrl.Name(), name, err)
		}
		p.ulBufs = append(p.ulBufs, b)
		p.ulFree = append(p.ulFree, i)
	}
	for range opts.DLBuffers {
		b, err := mem.Alloc(opts.DLBufferSize, 64)
		if err != nil {
			p.free()
			return nil, fmt.Errorf("ctrlport: %s %s: downlink buffer: %w", ctrl.Name(), name, err)
		}
		p.dlBufs = append(p.dlBufs, b)
	}
	p.dlPosted = make([]bool, len(p.dlBufs))
	if err := ul.Start(p.onUL); err != nil {
		p.free()
		return nil, err
	}
	if err := dl.Start(p.onDL); err != nil {
		_ = ul.Reset()
		p.free()
		return nil, err
	}
	if err := p.postDL(); err != nil {
		p.Close()
		return nil, err
	}
	p.unlisten = ctrl.OnStatus(p.onStatus)
	return p, nil
}

// Name returns the channel pair's name.
func (p *Pair) Name() string { return p.name }

// Controller returns the controller the pair belongs to.
func (p *Pair) Controller() *mhi.Controller { return p.ctrl }

// postDL queues every downlink buffer not posted.
func (p *Pair) postDL() error {
	p.mu.Lock()
	var xs []mhi.Transfer
	var idx []int
	for i, b := range p.dlBufs {
		if !p.dlPosted[i] {
			xs = append(xs, mhi.Transfer{IOVA: b.IOVA, Len: len(b.Bytes), Flags: mhi.FlagEOT, Cookie: uint64(i)})
			idx = append(idx, i)
		}
	}
	for _, i := range idx {
		p.dlPosted[i] = true
	}
	p.mu.Unlock()
	if len(xs) == 0 {
		return nil
	}
	if err := p.dl.Queue(xs); err != nil {
		p.mu.Lock()
		for _, i := range idx {
			p.dlPosted[i] = false
		}
		p.stats.RepostErrors++
		p.mu.Unlock()
		return fmt.Errorf("ctrlport: %s %s: posting %d downlink buffers: %w", p.ctrl.Name(), p.name, len(xs), err)
	}
	return nil
}

func (p *Pair) onStatus(ev mhi.StatusEvent) {
	switch ev.Kind {
	case mhi.StatusSysErr, mhi.StatusLinkDown:
		// The device is gone for now (SYS_ERR until StatusRecovered) or for
		// good (off the bus until power-down).
		p.mu.Lock()
		p.down = true
		if ev.Kind == mhi.StatusSysErr {
			p.stats.SysErrs++
		}
		p.abandonJoinLocked()
		p.cond.Broadcast()
		fs := make([]func(error), 0, len(p.downSubs))
		for _, f := range p.downSubs {
			fs = append(fs, f)
		}
		p.mu.Unlock()
		cause := ErrDeviceDown
		if ev.Err != nil {
			cause = fmt.Errorf("%w: %w", ErrDeviceDown, ev.Err)
		}
		for _, f := range fs {
			f(cause)
		}
	case mhi.StatusRecovered:
		p.mu.Lock()
		p.down = false
		p.stats.Recoveries++
		closed := p.closed
		p.cond.Broadcast()
		p.mu.Unlock()
		if !closed {
			if err := p.postDL(); err != nil {
				p.log.Warn("control channel: reposting downlink buffers after recovery", "err", err)
			}
		}
	}
}

func (p *Pair) onUL(c mhi.Completion) {
	if !c.End && c.Err == nil {
		return
	}
	p.mu.Lock()
	if c.Err != nil {
		p.stats.ULAborted++
	} else {
		p.stats.ULDone++
	}
	p.ulFree = append(p.ulFree, int(c.Cookie))
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *Pair) onDL(c mhi.Completion) {
	i := int(c.Cookie)
	now := time.Now()
	p.mu.Lock()
	if i < 0 || i >= len(p.dlBufs) {
		p.mu.Unlock()
		return
	}
	p.dlPosted[i] = false
	if c.Err != nil {
		p.abandonJoinLocked()
		bad := errors.Is(c.Err, mhi.ErrBadDevice)
		if bad {
			p.stats.DLBadTransfers++
		}
		p.mu.Unlock()
		if bad {
			// The device failed the element (BAD_TRE): nothing arrived
			// in it. The buffer goes back, or the ring would run dry.
			p.warn("bad", "control channel: the device failed a downlink element; buffer posted again", "err", c.Err)
			p.repost(i)
		}
		// Otherwise reset, SYS_ERR or close: reposted on recovery; freed
		// on close.
		return
	}
	if (p.joining || p.cut) && now.Sub(p.lastDL) > p.opts.ChainTimeout {
		p.stats.DLChainStalled++
		p.resetJoinLocked()
		p.warnLocked("stalled", "control channel: downlink transfer whose next piece never came; dropped", "timeout", p.opts.ChainTimeout)
	}
	p.lastDL = now
	if !c.End && c.Code != wire.CCOverflow {
		// Completed by an event that named a later element: the buffers
		// are posted with IEOT and without CHAIN, so this one ended a
		// transfer whose length the device never said (Len is the whole
		// buffer). Drop it, and the transfer it ended.
		p.stats.DLUnreported++
		p.abandonJoinLocked()
		p.warnLocked("unreported", "control channel: downlink element completed without an event of its own; dropped", "buffer", i)
		p.mu.Unlock()
		p.repost(i)
		return
	}
	last := c.Code != wire.CCOverflow
	msg := p.joinPieceLocked(p.dlBufs[i].Bytes[:c.Len], last)
	fs := p.deliveryLocked(msg)
	p.mu.Unlock()
	for _, f := range fs {
		f(msg)
	}
	p.mu.Lock()
	if last {
		p.join, p.joining = p.join[:0], false
	}
	p.mu.Unlock()
	p.repost(i)
}

// joinPieceLocked adds one downlink piece (the last of its transfer, or
// one ended by OVERFLOW) to the transfer being joined and returns the
// whole message once last completes it: the piece itself for a transfer
// of one buffer, the join buffer otherwise, nil while the transfer goes
// on or is being cut (it grew past MaxDownlink). p.mu must be held.
func (p *Pair) joinPieceLocked(piece []byte, last bool) (msg []byte) {
	if len(piece) == 0 {
		p.stats.DLEmpty++
	}
	switch {
	case p.cut:
	case !p.joining && last:
		msg = piece // the common case: one buffer, no copy
	case len(p.join)+len(piece) > p.opts.MaxDownlink:
		p.stats.DLTooLarge++
		p.warnLocked("large", "control channel: downlink transfer larger than the limit; dropped", "limit", p.opts.MaxDownlink)
		p.join, p.joining, p.cut = p.join[:0], false, !last
	default:
		p.join = append(p.join, piece...)
		p.joining = true
		if last {
			msg = p.join
			p.stats.DLChained++
		}
	}
	if last {
		p.cut = false
	}
	return msg
}

// deliveryLocked counts a complete downlink message and returns the
// subscribers to hand it to (none for an empty one). p.mu must be held.
func (p *Pair) deliveryLocked(msg []byte) []func([]byte) {
	if len(msg) == 0 {
		return nil
	}
	p.stats.DLMessages++
	p.stats.DLBytes += uint64(len(msg))
	var fs []func([]byte)
	for _, f := range p.subs {
		fs = append(fs, f)
	}
	return fs
}

// abandonJoinLocked drops a downlink transfer being joined, counting it in
// DLCut, and any cut in progress. p.mu must be held.
func (p *Pair) abandonJoinLocked() {
	if p.joining {
		p.stats.DLCut++
	}
	p.resetJoinLocked()
}

// resetJoinLocked forgets the downlink transfer being joined or cut.
// p.mu must be held.
func (p *Pair) resetJoinLocked() {
	p.join, p.joining, p.cut = p.join[:0], false, false
}

// repost queues downlink buffer i again, unless the pair is closed.
func (p *Pair) repost(i int) {
	p.mu.Lock()
	if p.closed || i >= len(p.dlBufs) {
		p.mu.Unlock()
		return
	}
	b := p.dlBufs[i]
	p.dlPosted[i] = true
	p.mu.Unlock()
	if err := p.dl.Queue([]mhi.Transfer{{IOVA: b.IOVA, Len: len(b.Bytes), Flags: mhi.FlagEOT, Cookie: uint64(i)}}); err != nil {
		// A reset or SYS_ERR is under way: recovery reposts it.
		p.mu.Lock()
		p.dlPosted[i] = false
		p.stats.RepostErrors++
		p.mu.Unlock()
	}
}

// warn logs a downlink anomaly of kind what at most once per warnInterval
// (a device can repeat one at will); the counters count every one.
func (p *Pair) warn(what, msg string, args ...any) {
	p.mu.Lock()
	ok := p.allowWarnLocked(what)
	p.mu.Unlock()
	if ok {
		p.log.Warn(msg, args...)
	}
}

// warnLocked is warn with p.mu held (the record is written under it).
func (p *Pair) warnLocked(what, msg string, args ...any) {
	if p.allowWarnLocked(what) {
		p.log.Warn(msg, args...)
	}
}

func (p *Pair) allowWarnLocked(what string) bool {
	now := time.Now()
	if t, ok := p.warned[what]; ok && now.Sub(t) < warnInterval {
		return false
	}
	p.warned[what] = now
	return true
}

// Subscribe calls f with every downlink transfer, from the controller's
// event goroutine; msg is valid only during the call and f must not
// block. It returns a function that removes f.
func (p *Pair) Subscribe(f func(msg []byte)) (cancel func()) {
	p.mu.Lock()
	id := p.nextSub
	p.nextSub++
	p.subs[id] = f
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.subs, id)
		p.mu.Unlock()
	}
}

// OnDown calls f (from the controller's status listener; it must not
// block) when the device crashes (SYS_ERR) or goes away: a request in
// flight will not be answered. It returns a function that removes f.
func (p *Pair) OnDown(f func(error)) (cancel func()) {
	p.mu.Lock()
	if p.downSubs == nil {
		p.downSubs = map[int]func(error){}
	}
	id := p.nextSub
	p.nextSub++
	p.downSubs[id] = f
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.downSubs, id)
		p.mu.Unlock()
	}
}

// Send queues msg as one uplink transfer (copied: the caller may reuse
// it). It waits up to SendTimeout for a free uplink buffer and for the
// channel to run (during SYS_ERR recovery); it does not wait for the
// device to consume the message.
func (p *Pair) Send(msg []byte) error {
	if len(msg) == 0 || len(msg) > MaxMTU {
		p.mu.Lock()
		p.stats.ULDropped++
		p.mu.Unlock()
		return fmt.Errorf("ctrlport: %s %s: %w: %d bytes, want 1..%d", p.ctrl.Name(), p.name, ErrMessageSize, len(msg), MaxMTU)
	}
	deadline := time.Now().Add(p.opts.SendTimeout)
	t := time.AfterFunc(p.opts.SendTimeout, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer t.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			p.stats.ULDropped++
			return fmt.Errorf("ctrlport: %s %s: %w", p.ctrl.Name(), p.name, ErrClosed)
		}
		if !p.down && len(p.ulFree) > 0 {
			i := p.ulFree[len(p.ulFree)-1]
			b := p.ulBufs[i]
			copy(b.Bytes, msg)
			err := p.ul.Queue([]mhi.Transfer{{IOVA: b.IOVA, Len: len(msg), Flags: mhi.FlagEOT, Cookie: uint64(i)}})
			if err == nil {
				p.ulFree = p.ulFree[:len(p.ulFree)-1]
				p.stats.ULMessages++
				p.stats.ULBytes += uint64(len(msg))
				return nil
			}
			if !errors.Is(err, wire.ErrRingFull) && !errors.Is(err, wire.ErrChannelState) {
				p.stats.ULDropped++
				return err
			}
		}
		if !time.Now().Before(deadline) {
			p.stats.ULDropped++
			return fmt.Errorf("ctrlport: %s %s: no uplink buffer or channel not running for %v: %w", p.ctrl.Name(), p.name, p.opts.SendTimeout, ErrTimeout)
		}
		if len(p.ulFree) > 0 && !p.down {
			// The ring is full or the channel briefly not running:
			// poll, the completion that frees it may not wake us.
			p.mu.Unlock()
			time.Sleep(time.Millisecond)
			p.mu.Lock()
			continue
		}
		p.cond.Wait()
	}
}

// Stats returns the pair's counters.
func (p *Pair) Stats() PairStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close resets both channels (the device forgets their rings) and frees
// the buffers.
func (p *Pair) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.unlisten()
	err := p.ul.Reset()
	if e := p.dl.Reset(); err == nil {
		err = e
	}
	p.free()
	if errors.Is(err, wire.ErrChannelState) || errors.Is(err, mhi.ErrPoweredDown) {
		err = nil // already reset by a power-down
	}
	return err
}

func (p *Pair) free() {
	mem := p.ctrl.Transport()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.ulBufs {
		_ = mem.Free(b)
	}
	for _, b := range p.dlBufs {
		_ = mem.Free(b)
	}
	p.ulBufs, p.dlBufs, p.ulFree = nil, nil, nil
}
