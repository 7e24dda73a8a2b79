package ep

import (
	"context"
	"fmt"

	"github.com/gomhi/gomhi/mhi/simclock"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Function is the service behind a channel pair: LOOPBACK, an IP data
// channel, and so on. The device hands it every complete uplink transfer;
// it answers through the Pipe's Send.
type Function interface {
	// Receive handles one complete uplink transfer (the concatenation of a
	// chain of TREs). transfer is valid only during the call; the device
	// reuses its memory. Receive may block to apply backpressure: the
	// transfer is not completed to the host until Receive returns. It must
	// return promptly once ctx is done (channel stopped or reset, MHI
	// reset, SYS_ERR, Close); an error returned while ctx is done leaves
	// the transfer unconsumed, to be delivered again when the channel
	// runs again. Any other error drops the transfer (it is counted).
	Receive(ctx context.Context, p *Pipe, transfer []byte) error
}

// PipeObserver may be implemented by a Function that wants to know when the
// channels of its pair change state (to start or stop a generator, say).
// It is called from the device's control goroutine and must not block.
type PipeObserver interface {
	PipeStateChanged(p *Pipe, dir wire.Direction, state wire.ChannelState)
}

// Pipe is a Function's handle on its channel pair: the uplink and downlink
// channels sharing one name.
type Pipe struct {
	d    *Device
	name string
	ul   *channel // nil when the pair has no uplink channel
	dl   *channel // nil when the pair has no downlink channel
	fn   Function
}

// Name returns the channel pair's name, e.g. "LOOPBACK".
func (p *Pipe) Name() string { return p.name }

// Send queues data as one downlink transfer. It copies data, so the caller
// may reuse it at once. It blocks while the downlink queue is full or the
// downlink channel is not started, until ctx is done or the device closes.
// The device writes the transfer into as many host buffers as it needs,
// with OVERFLOW completions for all but the last piece and EOT for it.
func (p *Pipe) Send(ctx context.Context, data []byte) error {
	if p.dl == nil {
		return fmt.Errorf("ep: pipe %s: %w: no downlink channel", p.name, wire.ErrNoChannel)
	}
	return p.dl.enqueue(ctx, data, true)
}

// TrySend is Send without blocking: it fails with an error wrapping
// wire.ErrRingFull when the downlink queue is full, or wire.ErrChannelState
// when the downlink channel is not started.
func (p *Pipe) TrySend(data []byte) error {
	if p.dl == nil {
		return fmt.Errorf("ep: pipe %s: %w: no downlink channel", p.name, wire.ErrNoChannel)
	}
	return p.dl.enqueue(context.Background(), data, false)
}

// DownlinkState returns the state of the pair's downlink channel.
func (p *Pipe) DownlinkState() wire.ChannelState {
	if p.dl == nil {
		return wire.ChannelDisabled
	}
	return p.dl.channelState()
}

// UplinkState returns the state of the pair's uplink channel.
func (p *Pipe) UplinkState() wire.ChannelState {
	if p.ul == nil {
		return wire.ChannelDisabled
	}
	return p.ul.channelState()
}

// Idler may be implemented by a Function that batches uplink data (an
// aggregating modem, say). The uplink channel's worker calls Idle when it
// has delivered at least one transfer and finds no further complete
// transfer in the ring, so a lone packet can be answered at once while a
// burst still fills whole aggregates. Idle runs on the uplink worker and
// should not block.
type Idler interface {
	Idle(p *Pipe)
}

// PipeAttacher may be implemented by a Function that needs its Pipe before
// the first uplink transfer (to run a generator, say). New calls Attach once
// per pair the Function is configured for, before the device starts.
type PipeAttacher interface {
	Attach(p *Pipe)
}

// DLBuffer is a downlink transfer being built in place: a slot in the
// pair's downlink queue and the buffer that will become the transfer. Get
// one from Pipe.Reserve, fill Buf, and hand it to Pipe.Commit or
// Pipe.Release exactly once.
type DLBuffer struct {
	// Buf is the buffer to fill; its length is the size reserved.
	Buf []byte
	c   *channel
	gen uint64
	// Units is what the transfer carries in its producer's terms (an IP
	// data aggregate: its packets), counted if the device drops the
	// queued transfer (Pipe.DLDroppedUnits).
	Units int
	// headerBytes is what the modem's CPU handles of the transfer's
	// packets in virtual time: the sum over its packets of their first
	// Timing.HeaderWindow bytes (AddPacket).
	headerBytes int
}

// AddPacket accounts for a packet of n bytes written into b, for the
// modem's per-packet header cost in virtual time (Timing.HeaderWindow).
func (b *DLBuffer) AddPacket(n int) {
	if w := b.c.d.cfg.Timing.HeaderWindow; w > 0 {
		b.headerBytes += min(n, w)
	}
}

// Reserve takes a slot in the downlink queue and a buffer of size bytes
// (reused from earlier transfers when one is large enough), so that a
// Function can build a transfer in place without a second copy. It blocks
// like Send while the queue (transfers plus reservations) is full or the
// downlink channel is not started, until ctx is done or the device closes.
func (p *Pipe) Reserve(ctx context.Context, size int) (DLBuffer, error) {
	if p.dl == nil {
		return DLBuffer{}, fmt.Errorf("ep: pipe %s: %w: no downlink channel", p.name, wire.ErrNoChannel)
	}
	return p.dl.reserve(ctx, size, true)
}

// TryReserve is Reserve without blocking; it fails as TrySend does.
func (p *Pipe) TryReserve(size int) (DLBuffer, error) {
	if p.dl == nil {
		return DLBuffer{}, fmt.Errorf("ep: pipe %s: %w: no downlink channel", p.name, wire.ErrNoChannel)
	}
	return p.dl.reserve(context.Background(), size, false)
}

// Commit queues b.Buf[:n] as one downlink transfer; n == 0 releases b. It
// never blocks. It fails with an error wrapping wire.ErrAborted when an MHI
// reset dropped the downlink queue after b was reserved (the transfer is
// dropped and counted in Stats.DLDroppedOnReset), and with wire.ErrBounds
// when n exceeds len(b.Buf) (b is released).
func (p *Pipe) Commit(b DLBuffer, n int) error {
	if b.c == nil {
		return fmt.Errorf("ep: pipe %s: commit of an empty reservation: %w", p.name, wire.ErrChannelState)
	}
	return b.c.commit(b, n, false)
}

// Release gives an unused reservation back.
func (p *Pipe) Release(b DLBuffer) {
	if b.c != nil {
		b.c.release(b)
	}
}

// SendFunc queues one downlink transfer of at most maxLen bytes built in
// place: fill writes into the queue's buffer and returns the length used
// (0 sends nothing). It blocks like Send.
func (p *Pipe) SendFunc(ctx context.Context, maxLen int, fill func(buf []byte) int) error {
	b, err := p.Reserve(ctx, maxLen)
	if err != nil {
		return err
	}
	return p.Commit(b, fill(b.Buf))
}

// Done returns a channel closed when the device closes, for goroutines a
// Function runs on its own.
func (p *Pipe) Done() <-chan struct{} { return p.d.ctx.Done() }

// Context returns the device's context, done when the device closes.
func (p *Pipe) Context() context.Context { return p.d.ctx }

// Go runs fn on a goroutine of the device's, which Close waits for; fn
// gets the device's context. It returns false, running nothing, once the
// device closes.
func (p *Pipe) Go(fn func(ctx context.Context)) bool { return p.d.goFunc(fn) }

// Clock returns the device's clock (Config.Clock), nil in real time.
func (p *Pipe) Clock() *simclock.Scheduler { return p.d.cfg.Clock }

// HostMemory returns the host memory the device reads and writes.
func (p *Pipe) HostMemory() HostMemory { return p.d.mem }

// DLDroppedUnits returns the units (DLBuffer.Units) of queued downlink
// transfers the device dropped: all of them at an MHI reset, a partly
// written one at a channel reset.
func (p *Pipe) DLDroppedUnits() uint64 {
	if p.dl == nil {
		return 0
	}
	return p.dl.droppedUnits.Load()
}

// DLQueued returns the number of transfers in the downlink queue.
func (p *Pipe) DLQueued() int {
	if p.dl == nil {
		return 0
	}
	p.dl.mu.Lock()
	defer p.dl.mu.Unlock()
	return p.dl.qCount
}

// OnDLSpace sets fn (nil: none) to be called, without the queue's lock,
// whenever a transfer leaves the downlink queue.
func (p *Pipe) OnDLSpace(fn func()) {
	if p.dl == nil {
		return
	}
	p.dl.mu.Lock()
	p.dl.onSpace = fn
	p.dl.mu.Unlock()
}

// ULElement returns, during Receive, the transfer ring element of the
// uplink transfer being delivered when the transfer is that one element
// (not a chain). It must be called on the uplink worker (from Receive).
func (p *Pipe) ULElement() (wire.Element, bool) {
	if p.ul == nil || len(p.ul.ulTREs) != 1 {
		return wire.Element{}, false
	}
	return p.ul.ulTREs[0].el, true
}

// RunDLWithoutHost marks the pair's downlink channel running with no host
// behind it, for benchmarks of a Function alone: the device never writes
// its transfers; drain drops every queued one as the channel's worker does
// after writing it, recycling the buffers.
func (p *Pipe) RunDLWithoutHost() (drain func()) {
	c := p.dl
	c.setState(wire.ChannelRunning)
	return func() {
		c.mu.Lock()
		n := c.qCount
		c.mu.Unlock()
		for range n {
			c.popDL()
		}
	}
}
