package ep

import (
	"encoding/binary"
	"fmt"

	"github.com/gomhi/gomhi/mhi/wire"
)

// ringGeometry is where a ring lives in host memory: n elements of 16
// bytes from base.
type ringGeometry struct {
	base uint64
	n    uint64
}

// newRingGeometry validates a ring's base and length as read from a
// context: rlen a non-zero multiple of 16, base 16-byte aligned, and the
// whole ring inside host memory.
func (d *Device) newRingGeometry(rbase, rlen uint64) (ringGeometry, error) {
	if rlen == 0 || rlen%wire.ElementSize != 0 {
		return ringGeometry{}, fmt.Errorf("%w: ring length %d is not a non-zero multiple of %d",
			wire.ErrBounds, rlen, wire.ElementSize)
	}
	if rbase%wire.ElementSize != 0 {
		return ringGeometry{}, fmt.Errorf("%w: ring base 0x%x is not %d-byte aligned",
			wire.ErrBounds, rbase, wire.ElementSize)
	}
	if rbase+rlen < rbase {
		return ringGeometry{}, fmt.Errorf("%w: ring 0x%x+0x%x wraps the address space", wire.ErrBounds, rbase, rlen)
	}
	var probe [1]byte
	if err := d.mem.ReadAt(probe[:], rbase); err != nil {
		return ringGeometry{}, fmt.Errorf("ring base 0x%x: %w", rbase, err)
	}
	if err := d.mem.ReadAt(probe[:], rbase+rlen-1); err != nil {
		return ringGeometry{}, fmt.Errorf("ring end 0x%x: %w", rbase+rlen-1, err)
	}
	return ringGeometry{base: rbase, n: rlen / wire.ElementSize}, nil
}

// index converts a ring pointer (IOVA of an element) to an element index;
// ok is false when ptr is outside the ring or not on an element boundary.
func (g ringGeometry) index(ptr uint64) (uint64, bool) {
	if ptr < g.base || ptr >= g.end() || (ptr-g.base)%wire.ElementSize != 0 {
		return 0, false
	}
	return (ptr - g.base) / wire.ElementSize, true
}

// addr returns the IOVA of element idx.
func (g ringGeometry) addr(idx uint64) uint64 { return g.base + idx*wire.ElementSize }

// end returns the first IOVA after the ring.
func (g ringGeometry) end() uint64 { return g.base + g.n*wire.ElementSize }

// next returns the index after idx, wrapping.
func (g ringGeometry) next(idx uint64) uint64 {
	idx++
	if idx == g.n {
		return 0
	}
	return idx
}

// pending returns the number of elements from rd up to (not including) wr.
func (g ringGeometry) pending(rd, wr uint64) uint64 {
	if wr >= rd {
		return wr - rd
	}
	return g.n - rd + wr
}

// readContext reads and decodes the 44-byte context at iova. Contexts are
// shared with the host, which updates some of their words at any time, so
// every word is read with a single atomic load.
func (d *Device) readContext(iova uint64, scratch *[wire.ContextSize]byte) (wire.Context, error) {
	for off := 0; off < wire.ContextSize; off += 4 {
		w, err := d.mem.Load32(iova + uint64(off))
		if err != nil {
			return wire.Context{}, fmt.Errorf("context at 0x%x: %w", iova, err)
		}
		binary.LittleEndian.PutUint32(scratch[off:], w)
	}
	return wire.ParseContext(scratch[:]), nil
}

// readElement reads the ring element at iova.
func (d *Device) readElement(iova uint64, scratch *[wire.ElementSize]byte) (wire.Element, error) {
	if err := d.mem.ReadAt(scratch[:], iova); err != nil {
		return wire.Element{}, fmt.Errorf("ring element at 0x%x: %w", iova, err)
	}
	return wire.ParseElement(scratch[:]), nil
}

// store64 writes a 64-bit context field as two atomic 32-bit stores, high
// half first, the order the host's readers expect.
func (d *Device) store64(iova, v uint64) error {
	if err := d.mem.Store32(iova+4, uint32(v>>32)); err != nil {
		return err
	}
	return d.mem.Store32(iova, uint32(v))
}

// load64 reads a 64-bit context field as two atomic 32-bit loads, high half
// first.
func (d *Device) load64(iova uint64) (uint64, error) {
	hi, err := d.mem.Load32(iova + 4)
	if err != nil {
		return 0, err
	}
	lo, err := d.mem.Load32(iova)
	if err != nil {
		return 0, err
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// setChannelStateInContext writes CHSTATE into the chcfg word of the host's
// channel context, keeping the other fields.
func (d *Device) setChannelStateInContext(ctxIOVA uint64, st wire.ChannelState) error {
	cfg, err := d.mem.Load32(ctxIOVA + wire.CtxCfg)
	if err != nil {
		return err
	}
	return d.mem.Store32(ctxIOVA+wire.CtxCfg, cfg&^wire.ChCfgStateMask|uint32(st))
}
