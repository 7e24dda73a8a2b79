// Package loopback is a host-side client of the MHI LOOPBACK channel pair:
// it sends payloads on the uplink channel, receives the device's echo on the
// downlink channel and compares them byte for byte. It plays the part of
// Linux's mhi_loopback test driver (knobs: size, number of elements per
// transfer, count).
package loopback

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// ErrTimeout: an echo did not arrive in time.
var ErrTimeout = errors.New("loopback: timeout")

// ErrInterrupted: the device entered SYS_ERR during a run; the transfers in
// flight were lost (counted as aborted). The client recovers by itself when
// the controller does, and the next Run works again.
var ErrInterrupted = errors.New("loopback: interrupted by SYS_ERR")

// ChannelName is the name of the loopback channel pair.
const ChannelName = "LOOPBACK"

// MaxPayload is the largest payload one transfer carries.
const MaxPayload = 64 << 10

// Options configure a loopback client.
type Options struct {
	// DLBufferSize is the size of each posted downlink buffer (default 32768,
	// at most 65535). Payloads longer than it arrive over several elements.
	DLBufferSize int
	// Window is the number of transfers in flight (default: the uplink ring's
	// capacity divided by the elements per transfer, at most 16).
	Window int
	// Timeout bounds the wait for one echo (default 5s).
	Timeout time.Duration
	// Seed seeds the payload generator (default 1).
	Seed uint64
}

// RunOptions describe one run of transfers.
type RunOptions struct {
	Count int // number of transfers
	// MinSize and MaxSize bound the payload size, chosen uniformly; equal
	// values give a fixed size. 1 ≤ MinSize ≤ MaxSize ≤ MaxPayload.
	MinSize, MaxSize int
	// NumTRE splits each payload into this many chained elements (0: as few
	// as the 65535-byte element limit allows).
	NumTRE int
	// MaxTRE, when positive and NumTRE is 0, splits each payload into a
	// random number of chained elements between the minimum needed and
	// MaxTRE (never more elements than bytes).
	MaxTRE int
	// NoVerify skips the byte comparison (for throughput runs).
	NoVerify bool
}

// Result counts what a run did.
type Result struct {
	Sent       int           `json:"sent"`
	Received   int           `json:"received"`
	Mismatched int           `json:"mismatched"`
	Timeouts   int           `json:"timeouts"`
	Aborted    int           `json:"aborted"`
	Bytes      int64         `json:"bytes"`
	Elements   int           `json:"elements"`
	Elapsed    time.Duration `json:"elapsed_ns"`
}

type expect struct {
	off, size int // payload = pool[off : off+size]
}

// Client drives the LOOPBACK pair of one controller.
type Client struct {
	ctrl     *mhi.Controller
	ul, dl   *mhi.Channel
	opts     Options
	unlisten func() // removes onStatus from the controller's listeners

	pool   []byte // random bytes payloads are cut from
	ulBufs []mhi.DMABuffer
	dlBufs []mhi.DMABuffer
	xfers  []mhi.Transfer // scratch for queueing, used by onDL

	// Run's scratch: the uplink elements and expected echoes of a batch.
	ulXfers  []mhi.Transfer
	ulExpect []expect

	// dlBatch is how many downlink buffers onDL collects before it
	// posts them again with one Queue (one doorbell): a quarter of them,
	// so that three quarters stay posted for the echoes.
	dlBatch int

	mu       sync.Mutex
	cond     *sync.Cond
	fifo     []expect // transfers in flight, oldest first
	head     int
	got      int // bytes of the current echo received so far
	bad      bool
	verify   bool
	received int
	mismatch int
	aborted  int
	ulFree   int // transfers whose uplink buffers are free
	epoch    int // incremented by every SYS_ERR
	broken   bool
	closed   bool
	rng      *rand.Rand

	repostFailed int
	dlFreed      []mhi.Transfer // downlink buffers handled, not yet posted again

	// waitTimer wakes the waiters of waitFor when their timeout passes;
	// made once and reset per wait, so waiting allocates nothing.
	waitTimer *time.Timer
	waker     *waker // waitTimer's link to the client, cut by Close
	waiters   int    // waitFor calls waiting, under mu
}

// Open starts the LOOPBACK channels of ctrl (which must be powered up) and
// posts the downlink buffers.
func Open(ctrl *mhi.Controller, opts Options) (*Client, error) {
	ul, dl, err := ctrl.ChannelPair(ChannelName)
	if err != nil {
		return nil, err
	}
	if opts.DLBufferSize == 0 {
		opts.DLBufferSize = 32768
	}
	if opts.DLBufferSize < 1 || opts.DLBufferSize > wire.MaxTRELength {
		return nil, fmt.Errorf("loopback: downlink buffer of %d bytes, want 1..%d", opts.DLBufferSize, wire.MaxTRELength)
	}
	if opts.Window == 0 {
		opts.Window = min(16, (ul.Config().Elements-1)/2)
	}
	if opts.Window < 1 {
		opts.Window = 1
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	c := &Client{ctrl: ctrl, ul: ul, dl: dl, opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x6d6869))}
	c.cond = sync.NewCond(&c.mu)
	c.pool = make([]byte, 2*MaxPayload)
	for i := range c.pool {
		c.pool[i] = byte(c.rng.Uint32())
	}
	mem := ctrl.Transport()
	for range opts.Window {
		b, err := mem.Alloc(MaxPayload, 64)
		if err != nil {
			c.free()
			return nil, err
		}
		c.ulBufs = append(c.ulBufs, b)
	}
	for range dl.Config().Elements - 1 {
		b, err := mem.Alloc(opts.DLBufferSize, 64)
		if err != nil {
			c.free()
			return nil, err
		}
		c.dlBufs = append(c.dlBufs, b)
	}
	c.ulFree = opts.Window
	c.dlBatch = max(1, len(c.dlBufs)/4)
	c.dlFreed = make([]mhi.Transfer, 0, len(c.dlBufs))
	c.xfers = make([]mhi.Transfer, 0, len(c.dlBufs))
	c.ulXfers = make([]mhi.Transfer, 0, ul.Config().Elements-1)
	c.ulExpect = make([]expect, 0, opts.Window)
	if err := ul.Start(c.onUL); err != nil {
		c.free()
		return nil, err
	}
	if err := dl.Start(c.onDL); err != nil {
		_ = ul.Reset()
		c.free()
		return nil, err
	}
	if err := c.postDL(); err != nil {
		c.Close()
		return nil, err
	}
	c.unlisten = ctrl.OnStatus(c.onStatus)
	return c, nil
}

// onStatus follows the controller through SYS_ERR: the transfers in flight
// are lost (the device reset dropped them), and after recovery the downlink
// buffers, all returned aborted, are posted again.
func (c *Client) onStatus(ev mhi.StatusEvent) {
	switch ev.Kind {
	case mhi.StatusSysErr, mhi.StatusLinkDown:
		c.mu.Lock()
		c.epoch++
		c.broken = true
		c.aborted += len(c.fifo) - c.head
		c.fifo, c.head, c.got, c.bad = c.fifo[:0], 0, 0, false
		c.dlFreed = c.dlFreed[:0] // the recovery posts every buffer again
		c.cond.Broadcast()
		c.mu.Unlock()
	case mhi.StatusRecovered:
		c.mu.Lock()
		c.ulFree = c.opts.Window
		c.broken = false
		closed := c.closed
		c.cond.Broadcast()
		c.mu.Unlock()
		if !closed {
			_ = c.postDL()
		}
	}
}

// postDL queues every downlink buffer.
func (c *Client) postDL() error {
	xs := make([]mhi.Transfer, len(c.dlBufs))
	for i, b := range c.dlBufs {
		xs[i] = mhi.Transfer{IOVA: b.IOVA, Len: len(b.Bytes), Flags: mhi.FlagEOT, Cookie: uint64(i)}
	}
	if err := c.dl.Queue(xs); err != nil && !errors.Is(err, mhi.ErrDoorbell) {
		return err // ErrDoorbell: queued all the same
	}
	return nil
}

func (c *Client) onUL(comp mhi.Completion) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if comp.Err != nil {
		return // buffers come back in Recovered or Close
	}
	if comp.End && comp.Code == wire.CCEOT {
		c.ulFree++
		c.cond.Broadcast()
	}
}

func (c *Client) onDL(comp mhi.Completion) {
	if comp.Err != nil {
		return
	}
	buf := c.dlBufs[comp.Cookie]
	c.mu.Lock()
	if c.head < len(c.fifo) {
		e := c.fifo[c.head]
		frag := buf.Bytes[:comp.Len]
		if c.verify && !c.bad {
			if c.got+len(frag) > e.size || !bytes.Equal(frag, c.pool[e.off+c.got:e.off+c.got+len(frag)]) {
				c.bad = true
			}
		}
		c.got += len(frag)
		if comp.End && comp.Code != wire.CCOverflow {
			if c.got != e.size {
				c.bad = true
			}
			if c.bad {
				c.mismatch++
			}
			c.received++
			c.head++
			c.got, c.bad = 0, false
			c.cond.Broadcast()
		}
	} else {
		c.mismatch++ // an echo nobody sent
	}
	// The buffer goes back with the next batch (one doorbell per batch).
	c.dlFreed = append(c.dlFreed, mhi.Transfer{IOVA: buf.IOVA, Len: len(buf.Bytes), Flags: mhi.FlagEOT, Cookie: comp.Cookie})
	if len(c.dlFreed) < c.dlBatch {
		c.mu.Unlock()
		return
	}
	xs := append(c.xfers[:0], c.dlFreed...)
	c.xfers, c.dlFreed = xs, c.dlFreed[:0]
	c.mu.Unlock()
	if err := c.dl.Queue(xs); err != nil && !errors.Is(err, mhi.ErrDoorbell) {
		// The channel is being reset or recovered; Recovered and Close
		// account for the buffers.
		c.mu.Lock()
		c.repostFailed += len(xs)
		c.mu.Unlock()
	}
}

// Run sends ro.Count payloads and waits for every echo. Payloads go out in
// batches, as many at a time as there are free uplink buffers (at most
// Options.Window) and room in the ring, with one doorbell per batch; the
// downlink buffers go back in batches too (see onDL). Run is not safe for
// concurrent use.
func (c *Client) Run(ro RunOptions) (Result, error) {
	var res Result
	if err := ro.check(c.ul.Config().Elements - 1); err != nil {
		return res, err
	}
	c.mu.Lock()
	c.verify = !ro.NoVerify
	startRecv, startMis, startAb := c.received, c.mismatch, c.aborted
	epoch, broken := c.epoch, c.broken
	c.mu.Unlock()
	if broken {
		return res, fmt.Errorf("loopback: the controller is recovering from SYS_ERR: %w", ErrInterrupted)
	}
	start := time.Now()
	ulCap := c.ul.Config().Elements - 1
	slot := 0
	var carry payload // drawn, not yet queued
	for sent := 0; sent < ro.Count; {
		// Wait for a free uplink buffer.
		if err := c.waitFor(epoch, func() bool { return c.ulFree > 0 }); err != nil {
			if !errors.Is(err, ErrInterrupted) {
				res.Timeouts++
			}
			return c.finish(res, start, startRecv, startMis, startAb), err
		}
		c.mu.Lock()
		free := c.ulFree
		c.mu.Unlock()
		// As many payloads as there are free buffers, within the ring,
		// queued with one doorbell.
		xs, exps := c.ulXfers[:0], c.ulExpect[:0]
		var bytes int64
		for len(exps) < free && sent+len(exps) < ro.Count {
			p := carry
			if p.nt == 0 {
				p.off, p.size, p.nt = c.pickPayload(ro)
			}
			if len(xs)+p.nt > ulCap {
				carry = p // the first always fits: ro.check bounds nt
				break
			}
			carry = payload{}
			buf := c.ulBufs[slot]
			slot = (slot + 1) % len(c.ulBufs)
			copy(buf.Bytes, c.pool[p.off:p.off+p.size])
			xs = appendChain(xs, buf.IOVA, p.size, p.nt)
			exps = append(exps, expect{off: p.off, size: p.size})
			bytes += int64(p.size)
		}
		c.ulXfers, c.ulExpect = xs, exps
		if err := c.queueExpected(epoch, xs, exps); err != nil {
			return c.finish(res, start, startRecv, startMis, startAb), err
		}
		sent += len(exps)
		res.Sent += len(exps)
		res.Bytes += bytes
		res.Elements += len(xs)
	}
	err := c.waitFor(epoch, func() bool { return c.head == len(c.fifo) })
	if err != nil && !errors.Is(err, ErrInterrupted) {
		res.Timeouts++
	}
	return c.finish(res, start, startRecv, startMis, startAb), err
}

// check validates ro's payload sizes and element counts against the uplink
// ring's capacity of maxTRE elements per transfer.
func (ro RunOptions) check(maxTRE int) error {
	if ro.MinSize < 1 || ro.MaxSize < ro.MinSize || ro.MaxSize > MaxPayload {
		return fmt.Errorf("loopback: payload sizes %d..%d, want 1 ≤ min ≤ max ≤ %d", ro.MinSize, ro.MaxSize, MaxPayload)
	}
	if ro.NumTRE < 0 || ro.NumTRE > maxTRE || (ro.NumTRE > 0 && ro.NumTRE > ro.MinSize) {
		return fmt.Errorf("loopback: %d elements per transfer, want 0..%d and at most the smallest payload", ro.NumTRE, maxTRE)
	}
	if ro.MaxTRE < 0 || ro.MaxTRE > maxTRE {
		return fmt.Errorf("loopback: up to %d elements per transfer, want 0..%d", ro.MaxTRE, maxTRE)
	}
	return nil
}

// pickPayload draws the next payload: its size (MinSize..MaxSize), its
// offset in the pattern pool, and the number of elements it is sent in
// (NumTRE, or at random between the fewest that hold it and MaxTRE).
func (c *Client) pickPayload(ro RunOptions) (off, size, nt int) {
	size = ro.MinSize
	if ro.MaxSize > ro.MinSize {
		size += c.rng.IntN(ro.MaxSize - ro.MinSize + 1)
	}
	off = c.rng.IntN(len(c.pool) - size + 1)
	nt = ro.NumTRE
	if nt == 0 {
		nt = (size + wire.MaxTRELength - 1) / wire.MaxTRELength
		if hi := min(ro.MaxTRE, size); hi > nt {
			nt += c.rng.IntN(hi - nt + 1)
		}
	}
	return off, size, nt
}

// appendChain appends to dst the nt elements of one uplink transfer of
// size bytes at iova: equal pieces (the last takes the rest), chained, EOT
// on the last.
func appendChain(dst []mhi.Transfer, iova uint64, size, nt int) []mhi.Transfer {
	per, pos := size/nt, 0
	for k := 0; k < nt; k++ {
		n := per
		if k == nt-1 {
			n = size - pos
		}
		fl := mhi.FlagChain
		if k == nt-1 {
			fl = mhi.FlagEOT
		}
		dst = append(dst, mhi.Transfer{IOVA: iova + uint64(pos), Len: n, Flags: fl})
		pos += n
	}
	return dst
}

// payload is one drawn payload: pool[off:off+size] in nt elements.
type payload struct{ off, size, nt int }

// queueExpected queues uplink transfers (with one doorbell) and records
// the echoes they expect, one per transfer, all under the lock, so that a
// SYS_ERR cannot fall between the two and leave an echo nobody expects. It
// retries while the ring is full and fails with ErrInterrupted once the
// epoch has moved on.
func (c *Client) queueExpected(epoch int, xfers []mhi.Transfer, exps []expect) error {
	for {
		c.mu.Lock()
		if c.epoch != epoch {
			c.mu.Unlock()
			return ErrInterrupted
		}
		err := c.ul.Queue(xfers)
		if err == nil || errors.Is(err, mhi.ErrDoorbell) { // ErrDoorbell: queued all the same
			c.ulFree -= len(exps)
			if c.head > 0 && c.head == len(c.fifo) {
				c.fifo, c.head = c.fifo[:0], 0
			}
			c.fifo = append(c.fifo, exps...)
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
		if !errors.Is(err, wire.ErrRingFull) {
			return err
		}
		time.Sleep(10 * time.Microsecond)
	}
}

func (c *Client) finish(res Result, start time.Time, r0, m0, a0 int) Result {
	res.Elapsed = time.Since(start)
	c.mu.Lock()
	res.Received = c.received - r0
	res.Mismatched = c.mismatch - m0
	res.Aborted = c.aborted - a0
	c.mu.Unlock()
	return res
}

// waitFor waits until cond (called with c.mu held) holds, the timeout
// passes with no progress, or a SYS_ERR ends the epoch.
func (c *Client) waitFor(epoch int, cond func() bool) error {
	c.mu.Lock()
	ok := cond() && c.epoch == epoch
	c.mu.Unlock()
	if ok {
		return nil // the common case: no timer needed
	}
	deadline := time.Now().Add(c.opts.Timeout)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waitTimer == nil {
		// The timer's function reaches the client through waker only:
		// the runtime may keep a stopped timer (and its function) until
		// it next tidies its timer heap, and a closed client must not be
		// kept alive by it (TestCloseReleasesTheClient).
		w := &waker{c: c}
		c.waker = w
		c.waitTimer = time.AfterFunc(c.opts.Timeout, w.wake)
	} else {
		c.waitTimer.Reset(c.opts.Timeout)
	}
	c.waiters++
	defer func() {
		if c.waiters--; c.waiters == 0 {
			c.waitTimer.Stop()
		}
	}()
	t := c.waitTimer
	last := c.received
	for !cond() || c.epoch != epoch {
		if c.epoch != epoch {
			return fmt.Errorf("loopback: %d transfers lost: %w", len(c.fifo)-c.head, ErrInterrupted)
		}
		if c.received != last {
			last = c.received
			deadline = time.Now().Add(c.opts.Timeout)
			t.Reset(c.opts.Timeout)
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("loopback: no echo within %v (%d in flight): %w", c.opts.Timeout, len(c.fifo)-c.head, ErrTimeout)
		}
		c.cond.Wait()
	}
	return nil
}

// waker is waitTimer's function's only way to the client; Close cuts it.
type waker struct {
	mu sync.Mutex
	c  *Client
}

// wake wakes the client's waiters, unless the client is closed.
func (w *waker) wake() {
	w.mu.Lock()
	c := w.c
	w.mu.Unlock()
	if c != nil {
		c.wakeWaiters()
	}
}

// wakeWaiters is waitTimer's function: waitFor's waiters check their
// deadlines.
func (c *Client) wakeWaiters() {
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// Close resets the channels and frees the buffers.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	if w := c.waker; w != nil {
		c.waitTimer.Stop()
		w.mu.Lock()
		w.c = nil
		w.mu.Unlock()
	}
	c.mu.Unlock()
	if c.unlisten != nil {
		c.unlisten()
	}
	_ = c.ul.Reset()
	_ = c.dl.Reset()
	c.free()
}

func (c *Client) free() {
	mem := c.ctrl.Transport()
	for _, b := range c.ulBufs {
		_ = mem.Free(b)
	}
	for _, b := range c.dlBufs {
		_ = mem.Free(b)
	}
	c.ulBufs, c.dlBufs = nil, nil
}
