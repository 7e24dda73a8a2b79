package tun

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhinet/gso"
)

// ChannelQueue is the capacity of a ChannelTUN's channels.
const ChannelQueue = 1024

// ChannelTUN is a Device over Go channels, standing in for a TUN in tests
// that run without root: the test plays the host IP stack. Packets sent on
// FromStack are what Read returns (the stack transmitting into the TUN);
// packets the Bridge writes arrive, copied, on ToStack (the TUN delivering
// to the stack).
type ChannelTUN struct {
	// FromStack carries packets for Read. The ChannelTUN copies them into
	// the reader's buffers; the sender may reuse them once Read returned.
	// Never closed by the ChannelTUN; closing it makes Read fail with
	// ErrClosed.
	FromStack chan []byte
	// ToStack receives a copy of every packet written. Write blocks while
	// it is full, until Close. Never closed by the ChannelTUN.
	ToStack chan []byte
	// VnetHdr makes the ChannelTUN a VnetHdrDevice with a 10-byte
	// virtio_net_hdr in front of every packet, as an Interface opened with
	// OpenOptions.GSO: the test puts the header on what it sends on
	// FromStack and finds one on what arrives on ToStack. Set it before
	// the Bridge is built.
	VnetHdr bool

	mtu    atomic.Int64
	closed chan struct{}
	once   sync.Once

	dmu      sync.Mutex
	deadline time.Time
	changed  chan struct{} // closed and replaced when the deadline changes
}

var (
	_ VnetHdrDevice = (*ChannelTUN)(nil)
	_ OffloadDevice = (*ChannelTUN)(nil)
)

// NewChannelTUN returns a ChannelTUN with an MTU of 1500 and channels of
// ChannelQueue packets.
func NewChannelTUN() *ChannelTUN {
	c := &ChannelTUN{
		FromStack: make(chan []byte, ChannelQueue),
		ToStack:   make(chan []byte, ChannelQueue),
		closed:    make(chan struct{}),
		changed:   make(chan struct{}),
	}
	c.mtu.Store(1500)
	return c
}

// Read waits for a packet on FromStack (up to the read deadline), then
// takes as many more as are queued, up to min(len(bufs), len(sizes)). A
// packet longer than its buffer is dropped and reported with ErrTooBig
// after the packets read before it.
func (c *ChannelTUN) Read(bufs [][]byte, sizes []int) (int, error) {
	want := min(len(bufs), len(sizes))
	if want == 0 {
		return 0, nil
	}
	var first []byte
	for first == nil {
		c.dmu.Lock()
		deadline, changed := c.deadline, c.changed
		c.dmu.Unlock()
		var timeout <-chan time.Time
		var timer *time.Timer
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return 0, fmt.Errorf("tun: channel read: %w", os.ErrDeadlineExceeded)
			}
			timer = time.NewTimer(d)
			timeout = timer.C
		}
		select {
		case <-c.closed:
			return 0, fmt.Errorf("tun: channel read: %w", ErrClosed)
		default:
		}
		select {
		case p, ok := <-c.FromStack:
			if !ok {
				return 0, fmt.Errorf("tun: channel read: FromStack closed: %w", ErrClosed)
			}
			first = p
			if first == nil {
				first = []byte{}
			}
		case <-c.closed:
			return 0, fmt.Errorf("tun: channel read: %w", ErrClosed)
		case <-timeout:
		case <-changed:
		}
		if timer != nil {
			timer.Stop()
		}
	}
	n := 0
	p := first
	for {
		if len(p) > len(bufs[n]) {
			return n, fmt.Errorf("tun: channel read: packet of %d bytes, buffer of %d: %w", len(p), len(bufs[n]), ErrTooBig)
		}
		sizes[n] = copy(bufs[n], p)
		n++
		if n == want {
			return n, nil
		}
		var ok bool
		select {
		case p, ok = <-c.FromStack:
			if !ok {
				return n, nil
			}
		default:
			return n, nil
		}
	}
}

// Write copies each packet to ToStack, waiting while it is full.
func (c *ChannelTUN) Write(bufs [][]byte) (int, error) {
	for n, b := range bufs {
		p := append([]byte(nil), b...)
		select {
		case <-c.closed:
			return n, fmt.Errorf("tun: channel write: %w", ErrClosed)
		default:
		}
		select {
		case c.ToStack <- p:
		case <-c.closed:
			return n, fmt.Errorf("tun: channel write: %w", ErrClosed)
		}
	}
	return len(bufs), nil
}

// VnetHdrLen returns gso.VirtioNetHdrLen with VnetHdr, else 0.
func (c *ChannelTUN) VnetHdrLen() int {
	if c.VnetHdr {
		return gso.VirtioNetHdrLen
	}
	return 0
}

// Offloads returns GSOOffloads with VnetHdr (what an Interface opened with
// OpenOptions.GSO has on Linux 6.2 and later), else 0.
func (c *ChannelTUN) Offloads() Offloads {
	if c.VnetHdr {
		return GSOOffloads
	}
	return 0
}

// MTU returns the MTU (1500 until SetMTU).
func (c *ChannelTUN) MTU() int { return int(c.mtu.Load()) }

// SetMTU sets the MTU; nothing enforces it.
func (c *ChannelTUN) SetMTU(n int) error {
	if err := validateMTU(n); err != nil {
		return fmt.Errorf("tun: channel: %w", err)
	}
	c.mtu.Store(int64(n))
	return nil
}

// SetReadDeadline bounds pending and future Reads (zero: no bound).
func (c *ChannelTUN) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	c.deadline = t
	close(c.changed)
	c.changed = make(chan struct{})
	c.dmu.Unlock()
	return nil
}

// Close wakes pending Reads and Writes; later ones fail with ErrClosed.
func (c *ChannelTUN) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
