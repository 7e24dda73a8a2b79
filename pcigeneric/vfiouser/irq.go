package vfiouser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
	"golang.org/x/sys/unix"
)

// irqTable is the function's interrupt state as DEVICE_SET_IRQS sets it,
// and the ep.Interrupter the mock modem raises vectors through:
//
//   - which index is enabled: MSI or MSI-X (one at a time, as on a PCI
//     function), or neither;
//   - per vector an eventfd, or none ("de-assigned": QEMU sends a run of
//     vectors without eventfd as DATA_EVENTFD with no descriptors);
//   - per vector a mask bit and a pending bit: a vector raised while
//     masked is held pending and delivered when unmasked;
//   - per vector counters of what was signalled, lost and held.
//
// With MSI a vector beyond the number the client enabled folds onto
// vector mod that number, as an MSI function granted fewer vectors than
// it uses does (one vector: every ring on vector 0). MSI-X never folds: a
// vector without eventfd is lost and counted.
type irqTable struct {
	mu      sync.Mutex
	index   int    // irqNone, IRQMSI or IRQMSIX
	fds     []int  // per vector; -1: no eventfd
	enabled int    // vectors the client enabled: the highest start+count of its eventfd sets
	masked  uint32 // per vector
	pending uint32 // per vector
	vec     []vectorCounts
	max     int
	scratch [8]byte // eventfd counter I/O, under mu

	raised, lost, held *atomic.Uint64 // the device's totals
}

// irqNone: neither MSI nor MSI-X is enabled.
const irqNone = -1

// vectorCounts are one vector's counters over a session.
type vectorCounts struct {
	signalled, merged, lost, held uint64
}

func newIRQTable(max int, raised, lost, held *atomic.Uint64) *irqTable {
	t := &irqTable{index: irqNone, fds: make([]int, max), vec: make([]vectorCounts, max), max: max,
		raised: raised, lost: lost, held: held}
	for i := range t.fds {
		t.fds[i] = -1
	}
	return t
}

// one is an eventfd write of 1.
var one = func() []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	return b[:]
}()

// Raise implements ep.Interrupter; it never blocks.
func (t *irqTable) Raise(vector int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := vector
	if t.index == protocol.IRQMSI && t.enabled > 0 {
		v %= t.enabled
	}
	if v < 0 || v >= t.max {
		t.lost.Add(1)
		return
	}
	t.fire(v)
}

// fire delivers vector v, or holds it pending when masked; t.mu is held.
func (t *irqTable) fire(v int) {
	if t.masked&(1<<v) != 0 {
		t.pending |= 1 << v
		t.vec[v].held++
		t.held.Add(1)
		return
	}
	fd := t.fds[v]
	if t.index == irqNone || fd < 0 {
		t.vec[v].lost++
		t.lost.Add(1)
		return
	}
	// An eventfd counts signals until the client reads it, and the client
	// injects one interrupt per read that finds it non-zero: a signal
	// written before the client took the previous one merges with it. To
	// know which, the counter is taken (read) and written back one more:
	// a read that finds 0 means the client took everything before, so
	// this signal is a new interrupt. The client reading in between finds
	// 0 and injects nothing, so the count stays exact.
	var taken uint64
	if n, err := unix.Read(fd, t.scratch[:]); err == nil && n == 8 {
		taken = binary.LittleEndian.Uint64(t.scratch[:])
	}
	binary.LittleEndian.PutUint64(t.scratch[:], taken+1)
	if _, err := unix.Write(fd, t.scratch[:]); err != nil {
		if taken > 0 { // give back what was taken, as far as it goes
			binary.LittleEndian.PutUint64(t.scratch[:], taken)
			_, _ = unix.Write(fd, t.scratch[:])
		}
		t.vec[v].lost++
		t.lost.Add(1)
		return
	}
	t.vec[v].signalled++
	if taken > 0 {
		t.vec[v].merged++
	}
	t.raised.Add(1)
}

func irqKind(index int) string {
	switch index {
	case protocol.IRQMSI:
		return "MSI"
	case protocol.IRQMSIX:
		return "MSI-X"
	}
	return "none"
}

// checkRange checks vectors start..start+count of index against the
// vectors the function offers.
func (t *irqTable) checkRange(index, start, count int) error {
	if start < 0 || count < 0 || start+count > t.max {
		return fmt.Errorf("%w: %s vectors %d+%d, the function has %d", errIRQState, irqKind(index), start, count, t.max)
	}
	return nil
}

// enable makes index the enabled one, refusing while the other is; t.mu
// is held.
func (t *irqTable) enable(index int) error {
	if t.index != irqNone && t.index != index {
		return fmt.Errorf("%w: %s vectors set while %s is enabled (disable it first: DATA_NONE|ACTION_TRIGGER, count 0)",
			errIRQState, irqKind(index), irqKind(t.index))
	}
	t.index = index
	return nil
}

// errIRQState: a SET_IRQS request that does not fit the current interrupt
// state (answered EINVAL, not counted as malformed).
var errIRQState = errors.New("vfiouser: interrupt state")

// arm sets the eventfds of vectors start..start+count of index, taking
// ownership of fds (closed on error). fds is either count eventfds or
// none: none de-assigns those vectors (their eventfds are closed, they
// stay enabled). Each descriptor must be an eventfd; it is made
// non-blocking (QEMU and this package's client create them so), so that
// Raise never blocks on one whose counter the client filled. A client
// that clears O_NONBLOCK again can still block its own session's
// interrupts.
func (t *irqTable) arm(index, start, count int, fds []int) error {
	if err := t.checkRange(index, start, count); err != nil {
		protocol.CloseFDs(fds)
		return err
	}
	if len(fds) != 0 && len(fds) != count {
		protocol.CloseFDs(fds)
		return fmt.Errorf("%w: %d eventfds for %d vectors", protocol.ErrMalformed, len(fds), count)
	}
	for _, fd := range fds {
		if err := prepareEventfd(fd); err != nil {
			protocol.CloseFDs(fds)
			return fmt.Errorf("vfiouser: %s vectors %d..%d: %w", irqKind(index), start, start+count-1, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.enable(index); err != nil {
		protocol.CloseFDs(fds)
		return err
	}
	for i := range count {
		v := start + i
		if old := t.fds[v]; old >= 0 {
			_ = unix.Close(old)
		}
		t.fds[v] = -1
		if len(fds) > 0 {
			t.fds[v] = fds[i]
		}
	}
	t.enabled = max(t.enabled, start+count)
	return nil
}

// disable turns index off: every eventfd is closed, mask and pending bits
// cleared. Disabling an index that is not enabled changes nothing. It
// reports whether index was enabled.
func (t *irqTable) disable(index int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.index != index {
		return false
	}
	t.resetLocked()
	return true
}

func (t *irqTable) resetLocked() {
	for v, fd := range t.fds {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		t.fds[v] = -1
	}
	t.index, t.enabled, t.masked, t.pending = irqNone, 0, 0, 0
}

// trigger raises the vectors of start..start+count of index whose sel
// byte is non-zero (all of them when sel is nil), as the client asks with
// DATA_NONE or DATA_BOOL and ACTION_TRIGGER: a loopback through the same
// path as the device's own interrupts (masked vectors are held pending).
func (t *irqTable) trigger(index, start, count int, sel []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.index != index {
		return fmt.Errorf("%w: %s trigger while %s is enabled", errIRQState, irqKind(index), irqKind(t.index))
	}
	if start+count > t.enabled {
		return fmt.Errorf("%w: %s trigger of vectors %d+%d, %d enabled", errIRQState, irqKind(index), start, count, t.enabled)
	}
	for i := range count {
		if sel == nil || sel[i] != 0 {
			t.fire(start + i)
		}
	}
	return nil
}

// mask sets (on) or clears the mask bit of the selected vectors (sel as
// for trigger), as the client asks with DATA_NONE or DATA_BOOL and
// ACTION_MASK or ACTION_UNMASK. Unmasking a vector that was raised while
// masked delivers it once.
func (t *irqTable) mask(index, start, count int, sel []byte, on bool) error {
	if err := t.checkRange(index, start, count); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.index != index {
		return fmt.Errorf("%w: %s mask/unmask while %s is enabled", errIRQState, irqKind(index), irqKind(t.index))
	}
	for i := range count {
		if sel != nil && sel[i] == 0 {
			continue
		}
		v := start + i
		bit := uint32(1) << v
		if on {
			t.masked |= bit
			continue
		}
		t.masked &^= bit
		if t.pending&bit != 0 {
			t.pending &^= bit
			t.fire(v)
		}
	}
	return nil
}

// pendingBits returns the pending bits (the MSI-X PBA's first word).
func (t *irqTable) pendingBits() uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.index != protocol.IRQMSIX {
		return 0
	}
	return t.pending
}

// clear closes every eventfd and disables both indices (session end).
func (t *irqTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked()
}

// stats returns the table's state and counters.
func (t *irqTable) stats() IRQStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := IRQStats{Index: irqKind(t.index), Enabled: t.enabled, Vectors: make([]VectorStats, t.max)}
	if t.index == irqNone {
		s.Index = ""
	}
	for v := range t.max {
		bit := uint32(1) << v
		s.Vectors[v] = VectorStats{Armed: t.fds[v] >= 0, Masked: t.masked&bit != 0, Pending: t.pending&bit != 0,
			Signalled: t.vec[v].signalled, Merged: t.vec[v].merged, Lost: t.vec[v].lost, Held: t.vec[v].held}
	}
	return s
}

// IRQStats is the interrupt state of a session: the index the client
// enabled and, per vector the function offers, its state and counters
// since the session began.
type IRQStats struct {
	// Index is "MSI" or "MSI-X", or empty when neither is enabled.
	Index string
	// Enabled is the number of vectors the client enabled (the highest
	// vector it set an eventfd for, or de-assigned, plus one).
	Enabled int
	Vectors []VectorStats
}

// VectorStats is one vector's state and counters.
type VectorStats struct {
	// Armed: the vector has an eventfd.
	Armed bool
	// Masked and Pending are the vector's mask and pending bits.
	Masked, Pending bool
	// Signalled counts the interrupts signalled (eventfd written).
	Signalled uint64
	// Merged counts those written while the client had not yet taken the
	// previous one: the client injects one interrupt for both. The guest
	// sees Signalled - Merged interrupts (Delivered).
	Merged uint64
	// Lost counts the interrupts raised on the vector while it had no
	// eventfd (or the write failed).
	Lost uint64
	// Held counts the interrupts raised while it was masked (held
	// pending; one delivery on unmask stands for all of them).
	Held uint64
}

// Delivered is the number of interrupts the client injected for the
// vector: one per eventfd read that found signals.
func (v VectorStats) Delivered() uint64 { return v.Signalled - v.Merged }

// prepareEventfd checks that fd is an eventfd (when /proc tells) and
// makes it non-blocking. A pipe or file passed as an interrupt could block
// a write forever (a pipe nobody reads fills up).
func prepareEventfd(fd int) error {
	if target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && target != "anon_inode:[eventfd]" {
		return fmt.Errorf("%w: descriptor %s is not an eventfd", protocol.ErrMalformed, target)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil && fl&unix.O_NONBLOCK == 0 {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_NONBLOCK)
	}
	if err != nil {
		return fmt.Errorf("%w: eventfd flags: %w", protocol.ErrMalformed, err)
	}
	return nil
}
