package mhi

// Registers gives 32-bit access to the MHI BAR. Offsets are bytes from the
// start of the BAR. Implementations must perform each access as a single
// ordered 32-bit access.
type Registers interface {
	Read32(off uint32) (uint32, error)
	Write32(off uint32, v uint32) error
}

// PairWriter is an optional extension of Registers for transports where
// every access is a message to another process (vfio-user): WritePair32
// performs Write32(hiOff, hi) and then Write32(loOff, lo), two ordered
// 32-bit accesses exactly as the device would see them from two Write32
// calls, but may hand both to the bus in one operation. The Controller
// uses it for 64-bit register pairs (doorbells, context pointers), which
// it writes high half first.
type PairWriter interface {
	WritePair32(hiOff, hi, loOff, lo uint32) error
}

// DMABuffer is a block of coherent host memory that the device reaches at IOVA.
// Bytes aliases the memory; its length is the requested size.
type DMABuffer struct {
	IOVA  uint64
	Bytes []byte
}

// DMAMemory allocates coherent host memory with device-visible addresses.
type DMAMemory interface {
	// Alloc returns size bytes of zeroed memory whose IOVA is a multiple of
	// align (a power of two; 0 or 1 means no constraint).
	Alloc(size, align int) (DMABuffer, error)
	// Free returns a buffer obtained from Alloc.
	Free(DMABuffer) error
}

// Interrupts delivers the device's MSI vectors to the host.
type Interrupts interface {
	// Vectors is the number of vectors available (at least 1).
	Vectors() int
	// SetInterruptHandler installs h, called (from any goroutine) once per
	// interrupt raised on a vector. Passing nil stops delivery (a call in
	// progress may still finish; the Controller tolerates that).
	SetInterruptHandler(h func(vector int))
}

// Transport is what the host stack needs from the bus: the MHI BAR, DMA
// memory, interrupts and a reset.
type Transport interface {
	Registers
	DMAMemory
	Interrupts
	// Reset performs a function-level (or SoC) reset of the device.
	Reset() error
	// Close releases the transport.
	Close() error
}
