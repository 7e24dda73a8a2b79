package wire

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Fields that host and device both write (context read and write pointers,
// the channel state word) are accessed with single 32-bit atomic
// operations, the way MMIO-coherent memory is accessed on real hardware:
// by the host on its own memory, by the device side's memory accessors
// (the in-process slab, the vfio-user server's regions). Offsets must be
// multiples of 4.

// Load32 atomically loads the little-endian 32-bit word at b[off:].
func Load32(b []byte, off int) uint32 {
	w := b[off : off+4 : off+4] // bounds check without touching the memory
	v := atomic.LoadUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(w))))
	return le32(v)
}

// Store32 atomically stores v as a little-endian 32-bit word at b[off:].
func Store32(b []byte, off int, v uint32) {
	w := b[off : off+4 : off+4]
	atomic.StoreUint32((*uint32)(unsafe.Pointer(unsafe.SliceData(w))), le32(v))
}

// Load64 loads a 64-bit pointer field as two atomic 32-bit loads, high half
// first, so a writer that stores low then high is never seen half-updated
// in the low half.
func Load64(b []byte, off int) uint64 {
	hi := Load32(b, off+4)
	lo := Load32(b, off)
	return uint64(hi)<<32 | uint64(lo)
}

// Store64 stores a 64-bit pointer field as two atomic 32-bit stores, high
// half first.
func Store64(b []byte, off int, v uint64) {
	Store32(b, off+4, uint32(v>>32))
	Store32(b, off, uint32(v))
}

var littleEndianHost = func() bool {
	var x uint16 = 1
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// le32 converts between host order and little-endian for a word that was
// loaded or is to be stored in host order.
func le32(v uint32) uint32 {
	if littleEndianHost {
		return v
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.LittleEndian.Uint32(b[:])
}
