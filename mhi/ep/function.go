package ep

import (
	"context"
	"fmt"

	"github.com/gomhi/gomhi/mhi"
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
	PipeStateChanged(p *Pipe, dir mhi.Direction, state mhi.ChannelState)
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
		return fmt.Errorf("ep: pipe %s: %w: no downlink channel", p.name, mhi.ErrNoChannel)
	}
	return p.dl.enqueue(ctx, data, true)
}

// TrySend is Send without blocking: it fails with an error wrapping
// mhi.ErrRingFull when the downlink queue is full, or mhi.ErrChannelState
// when the downlink channel is not started.
func (p *Pipe) TrySend(data []byte) error {
	if p.dl == nil {
		return fmt.Errorf("ep: pipe %s: %w: no downlink channel", p.name, mhi.ErrNoChannel)
	}
	return p.dl.enqueue(context.Background(), data, false)
}

// DownlinkState returns the state of the pair's downlink channel.
func (p *Pipe) DownlinkState() mhi.ChannelState {
	if p.dl == nil {
		return mhi.ChannelDisabled
	}
	return p.dl.channelState()
}

// UplinkState returns the state of the pair's uplink channel.
func (p *Pipe) UplinkState() mhi.ChannelState {
	if p.ul == nil {
		return mhi.ChannelDisabled
	}
	return p.ul.channelState()
}
