package vfio

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Vector is one interrupt vector of an IRQ index, signalled through an
// eventfd registered with VFIO_DEVICE_SET_IRQS.
type Vector struct {
	dev    *Device
	index  int // IRQ index (IRQIndexMSI, …)
	number int // vector number within the index
	fd     int

	mu     sync.Mutex
	closed bool
}

// IRQInfo returns the info of IRQ index (IRQIndexINTx, IRQIndexMSI,
// IRQIndexMSIX, …). An index beyond the device's fails with ErrNoRegion.
func (d *Device) IRQInfo(index int) (IRQ, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.irqInfoLocked(index)
}

func (d *Device) irqInfoLocked(index int) (IRQ, error) {
	if err := d.checkOpen(); err != nil {
		return IRQ{}, err
	}
	if index < 0 || uint32(index) >= d.info.NumIRQs {
		return IRQ{}, errf(d.addr, ErrNoRegion, "IRQ index %d (the device has %d)", index, d.info.NumIRQs)
	}
	b := irqInfoArg(index)
	if _, err := d.sys.IoctlPtr(d.deviceFD, ioctlDeviceGetIRQInfo, b); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return IRQ{}, errf(d.addr, ErrNoRegion, "IRQ index %d: %w", index, err)
		}
		return IRQ{}, opErr(d.addr, fmt.Sprintf("VFIO_DEVICE_GET_IRQ_INFO(%d)", index), err)
	}
	irq := decodeIRQInfo(b)
	irq.Index = index
	return irq, nil
}

// EnableIRQs creates count eventfds and attaches them to vectors 0…count-1
// of IRQ index with VFIO_DEVICE_SET_IRQS (DATA_EVENTFD|ACTION_TRIGGER).
// Vectors already enabled on index are disabled first. count must be
// between 1 and the index's IRQ.Count (ErrInvalid otherwise). For MSI and
// MSI-X, vfio-pci also programs the capability and enables it.
func (d *Device) EnableIRQs(index, count int) ([]*Vector, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	irq, err := d.irqInfoLocked(index)
	if err != nil {
		return nil, err
	}
	if count < 1 || uint64(count) > uint64(irq.Count) {
		return nil, errf(d.addr, ErrInvalid, "IRQ index %d: %d vectors requested, the device offers %d", index, count, irq.Count)
	}
	if irq.Flags&IRQFlagEventfd == 0 {
		return nil, errf(d.addr, ErrInvalid, "IRQ index %d cannot signal an eventfd (flags %#x)", index, irq.Flags)
	}
	if _, ok := d.irqs[index]; ok {
		if err := d.disableIRQsLocked(index); err != nil {
			return nil, err
		}
	}
	vecs := make([]*Vector, 0, count)
	fds := make([]int32, 0, count)
	cleanup := func() {
		for _, v := range vecs {
			_ = d.sys.Close(v.fd)
		}
	}
	for i := 0; i < count; i++ {
		fd, err := d.sys.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			cleanup()
			return nil, opErr(d.addr, "eventfd", err)
		}
		vecs = append(vecs, &Vector{dev: d, index: index, number: i, fd: fd})
		fds = append(fds, int32(fd))
	}
	arg := irqSetArg(irqSetDataEventfd|irqSetActionTrigger, index, 0, count, fds)
	if _, err := d.sys.IoctlPtr(d.deviceFD, ioctlDeviceSetIRQs, arg); err != nil {
		cleanup()
		return nil, opErr(d.addr, fmt.Sprintf("VFIO_DEVICE_SET_IRQS(index %d, %d eventfds)", index, count), err)
	}
	d.irqs[index] = vecs
	d.log.Debug("IRQs enabled", "index", index, "count", count)
	return append([]*Vector(nil), vecs...), nil
}

// DisableIRQs detaches all vectors of IRQ index (SET_IRQS
// DATA_NONE|ACTION_TRIGGER, count 0) and closes their eventfds. Do not call
// it while a Vector.Wait of that index runs.
func (d *Device) DisableIRQs(index int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpen(); err != nil {
		return err
	}
	if index < 0 || uint32(index) >= d.info.NumIRQs {
		return errf(d.addr, ErrNoRegion, "IRQ index %d (the device has %d)", index, d.info.NumIRQs)
	}
	return d.disableIRQsLocked(index)
}

func (d *Device) disableIRQsLocked(index int) error {
	arg := irqSetArg(irqSetDataNone|irqSetActionTrigger, index, 0, 0, nil)
	_, err := d.sys.IoctlPtr(d.deviceFD, ioctlDeviceSetIRQs, arg)
	for _, v := range d.irqs[index] {
		v.mu.Lock()
		if !v.closed {
			v.closed = true
			_ = d.sys.Close(v.fd)
		}
		v.mu.Unlock()
	}
	delete(d.irqs, index)
	if err != nil {
		return opErr(d.addr, fmt.Sprintf("VFIO_DEVICE_SET_IRQS(index %d, disable)", index), err)
	}
	return nil
}

// Index returns the IRQ index of the vector.
func (v *Vector) Index() int { return v.index }

// Number returns the vector number within its index.
func (v *Vector) Number() int { return v.number }

// FD returns the eventfd (for callers that poll many vectors themselves).
// It is closed by DisableIRQs and Device.Close.
func (v *Vector) FD() int { return v.fd }

// Wait waits for the vector to fire and returns the eventfd counter (the
// number of interrupts since the last Wait, at least 1), resetting it. A
// negative timeout waits forever; 0 only checks. It fails with ErrTimeout
// when nothing arrived in time and with ErrClosed once the vector is
// disabled.
func (v *Vector) Wait(timeout time.Duration) (uint64, error) {
	d := v.dev
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		v.mu.Lock()
		closed, fd := v.closed, v.fd
		v.mu.Unlock()
		if closed {
			return 0, errf(d.addr, ErrClosed, "IRQ %d vector %d disabled", v.index, v.number)
		}
		ms := -1
		switch {
		case timeout == 0:
			ms = 0
		case timeout > 0:
			left := time.Until(deadline)
			if left < 0 {
				left = 0
			}
			ms = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := d.sys.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, opErr(d.addr, fmt.Sprintf("poll IRQ %d vector %d", v.index, v.number), err)
		}
		if n == 0 {
			if timeout >= 0 {
				return 0, errf(d.addr, ErrTimeout, "IRQ %d vector %d: no interrupt within %v", v.index, v.number, timeout)
			}
			continue
		}
		if pfd[0].Revents&(unix.POLLNVAL|unix.POLLERR) != 0 {
			return 0, errf(d.addr, ErrClosed, "IRQ %d vector %d: eventfd invalid (revents %#x)", v.index, v.number, pfd[0].Revents)
		}
		c, err := readCounter(d.sys, fd)
		if err == unix.EAGAIN {
			continue // another reader took it
		}
		if err != nil {
			return 0, opErr(d.addr, fmt.Sprintf("read IRQ %d vector %d eventfd", v.index, v.number), err)
		}
		return c, nil
	}
}

// readCounter reads (and resets) an eventfd counter.
func readCounter(sys sysCalls, fd int) (uint64, error) {
	var b [8]byte
	for {
		n, err := sys.Read(fd, b[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n != 8 {
			return 0, fmt.Errorf("eventfd read of %d bytes", n)
		}
		return ne.Uint64(b[:]), nil
	}
}
