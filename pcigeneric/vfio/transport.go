package vfio

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi"
	"golang.org/x/sys/unix"
)

// Transport is mhi.Transport on a VFIO device: registers on a mapped BAR,
// DMA memory from AllocDMA/FreeDMA, MSI-X or MSI vectors delivered by one
// polling goroutine, and VFIO_DEVICE_RESET. It owns the Device: Close
// closes it.
type Transport struct {
	dev      *Device
	bar      *BAR
	irqIndex int
	vecs     []*Vector

	handler atomic.Pointer[func(int)]
	active  atomic.Pointer[pollLoop] // the loop allowed to call the handler

	mu      sync.Mutex
	closed  bool
	cur     *pollLoop   // the running interrupt goroutine, nil if none
	retired []*pollLoop // stopped loops whose stop eventfd is not closed yet
}

var (
	_ mhi.Transport = (*Transport)(nil)
	_ mhi.BARSizer  = (*Transport)(nil)
)

// pollLoop is one interrupt goroutine and its stop eventfd.
type pollLoop struct {
	stopFD int
	done   chan struct{}
}

// NewTransport builds an mhi.Transport on d: it maps BAR bar (the MHI BAR),
// enables bus mastering, and enables vectors interrupt vectors (at least
// 1) on MSI-X when the device offers that many, otherwise on MSI; it fails
// with ErrInvalid when neither offers enough. On failure d is left open
// (but with the BAR unmapped and interrupts off) and still belongs to the
// caller; on success the Transport owns it.
func NewTransport(d *Device, bar int, vectors int) (*Transport, error) {
	if vectors < 1 {
		vectors = 1
	}
	b, err := d.MapBAR(bar)
	if err != nil {
		return nil, err
	}
	index := -1
	var offered []string
	for _, idx := range []int{IRQIndexMSIX, IRQIndexMSI} {
		irq, err := d.IRQInfo(idx)
		if err != nil {
			offered = append(offered, fmt.Sprintf("index %d: %v", idx, err))
			continue
		}
		offered = append(offered, fmt.Sprintf("%s %d", irqName(idx), irq.Count))
		if uint64(irq.Count) >= uint64(vectors) && irq.Flags&IRQFlagEventfd != 0 {
			index = idx
			break
		}
	}
	if index < 0 {
		_ = b.Unmap()
		return nil, errf(d.addr, ErrInvalid, "%d interrupt vectors wanted, the device offers %v", vectors, offered)
	}
	if err := d.EnableBusMaster(); err != nil {
		_ = b.Unmap()
		return nil, err
	}
	vecs, err := d.EnableIRQs(index, vectors)
	if err != nil {
		_ = b.Unmap()
		return nil, err
	}
	d.log.Info("vfio transport ready", "bar", bar, "irq", irqName(index), "vectors", vectors)
	return &Transport{dev: d, bar: b, irqIndex: index, vecs: vecs}, nil
}

func irqName(index int) string {
	switch index {
	case IRQIndexINTx:
		return "INTx"
	case IRQIndexMSI:
		return "MSI"
	case IRQIndexMSIX:
		return "MSI-X"
	}
	return fmt.Sprintf("IRQ%d", index)
}

// Device returns the underlying device.
func (t *Transport) Device() *Device { return t.dev }

// BAR returns the mapped MHI BAR.
func (t *Transport) BAR() *BAR { return t.bar }

// IRQIndex returns the IRQ index in use (IRQIndexMSIX or IRQIndexMSI).
func (t *Transport) IRQIndex() int { return t.irqIndex }

// BARSize implements mhi.BARSizer: the size of the mapped MHI BAR.
func (t *Transport) BARSize() uint64 { return uint64(t.bar.Size()) }

// Read32 implements mhi.Registers: one 32-bit load from the BAR.
func (t *Transport) Read32(off uint32) (uint32, error) { return t.bar.CheckedRead32(off) }

// Write32 implements mhi.Registers: one 32-bit store to the BAR.
func (t *Transport) Write32(off uint32, v uint32) error { return t.bar.CheckedWrite32(off, v) }

// Alloc implements mhi.DMAMemory with Device.AllocDMA.
func (t *Transport) Alloc(size, align int) (mhi.DMABuffer, error) {
	return t.dev.AllocDMA(size, align)
}

// Free implements mhi.DMAMemory with Device.FreeDMA.
func (t *Transport) Free(b mhi.DMABuffer) error {
	return t.dev.FreeDMA(b)
}

// Vectors implements mhi.Interrupts: the number of enabled vectors.
func (t *Transport) Vectors() int { return len(t.vecs) }

// SetInterruptHandler implements mhi.Interrupts. A non-nil h is called
// from one goroutine that polls all the vectors' eventfds, once per
// vector that fired (interrupts that arrive before the handler runs are
// coalesced, like a pending MSI). nil stops the goroutine: no call starts
// after SetInterruptHandler(nil) returns (it does not wait for a call in
// progress, so the handler itself may call it).
func (t *Transport) SetInterruptHandler(h func(vector int)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h == nil {
		t.handler.Store(nil)
		t.stopLocked()
		return
	}
	t.handler.Store(&h)
	if t.cur != nil || t.closed {
		return
	}
	t.reapLocked()
	fd, err := t.dev.sys.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.dev.log.Error("interrupt delivery not started", "err", opErr(t.dev.addr, "eventfd", err))
		return
	}
	l := &pollLoop{stopFD: fd, done: make(chan struct{})}
	t.cur = l
	t.active.Store(l)
	go t.loop(l)
}

// stopLocked signals the running loop to stop, without waiting.
func (t *Transport) stopLocked() {
	if t.cur == nil {
		return
	}
	var one [8]byte
	ne.PutUint64(one[:], 1)
	if _, err := t.dev.sys.Write(t.cur.stopFD, one[:]); err != nil {
		t.dev.log.Error("cannot stop the interrupt goroutine", "err", err)
	}
	t.retired = append(t.retired, t.cur)
	t.active.Store(nil)
	t.cur = nil
}

// reapLocked closes the stop eventfds of loops that have exited.
func (t *Transport) reapLocked() {
	keep := t.retired[:0]
	for _, l := range t.retired {
		select {
		case <-l.done:
			_ = t.dev.sys.Close(l.stopFD)
		default:
			keep = append(keep, l)
		}
	}
	t.retired = keep
}

// loop polls the vectors' eventfds and the stop eventfd.
func (t *Transport) loop(l *pollLoop) {
	defer close(l.done)
	sys := t.dev.sys
	fds := make([]unix.PollFd, len(t.vecs)+1)
	for i, v := range t.vecs {
		fds[i] = unix.PollFd{Fd: int32(v.fd), Events: unix.POLLIN}
	}
	stop := len(t.vecs)
	fds[stop] = unix.PollFd{Fd: int32(l.stopFD), Events: unix.POLLIN}
	for {
		for i := range fds {
			fds[i].Revents = 0
		}
		_, err := sys.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.dev.log.Error("interrupt poll failed; delivery stopped", "err", err)
			return
		}
		if fds[stop].Revents != 0 {
			return
		}
		for i := 0; i < stop; i++ {
			re := fds[i].Revents
			if re&(unix.POLLNVAL|unix.POLLERR) != 0 {
				t.dev.log.Error("interrupt eventfd invalid; delivery stopped", "vector", i, "revents", re)
				return
			}
			if re&unix.POLLIN == 0 {
				continue
			}
			if t.active.Load() != l {
				return // stopped or replaced: leave the interrupt to the next loop
			}
			if _, err := readCounter(sys, int(fds[i].Fd)); err != nil {
				if err == unix.EAGAIN {
					continue
				}
				t.dev.log.Error("interrupt eventfd read failed; delivery stopped", "vector", i, "err", err)
				return
			}
			if h := t.handler.Load(); h != nil {
				(*h)(i)
			}
		}
	}
}

// Reset implements mhi.Transport with Device.Reset (VFIO_DEVICE_RESET),
// then enables bus mastering again.
func (t *Transport) Reset() error {
	if err := t.dev.Reset(); err != nil {
		return err
	}
	return t.dev.EnableBusMaster()
}

// Close implements mhi.Transport: it stops the interrupt goroutine and
// waits for it (so it must not be called from the handler), disables the
// interrupts, frees the DMA buffers still allocated, unmaps the BAR and
// closes the device. Calling it again returns nil.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.handler.Store(nil)
	t.stopLocked()
	loops := t.retired
	t.retired = nil
	t.mu.Unlock()

	for _, l := range loops {
		<-l.done
		_ = t.dev.sys.Close(l.stopFD)
	}
	var errs []error
	if err := t.dev.DisableIRQs(t.irqIndex); err != nil {
		errs = append(errs, err)
	}
	// Device.Close unmaps and frees the DMA buffers still allocated.
	if err := t.dev.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
