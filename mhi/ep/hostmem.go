package ep

// HostMemory is the device's view of host memory: every access names an IOVA
// and is checked against the memory the host has made visible. An access
// that falls outside it returns an error wrapping wire.ErrBounds and touches
// nothing.
type HostMemory interface {
	// ReadAt copies len(p) bytes at iova into p.
	ReadAt(p []byte, iova uint64) error
	// WriteAt copies p into host memory at iova.
	WriteAt(p []byte, iova uint64) error
	// Load32 atomically reads the little-endian word at iova (4-byte aligned).
	Load32(iova uint64) (uint32, error)
	// Store32 atomically writes the little-endian word at iova (4-byte aligned).
	Store32(iova uint64, v uint32) error
}

// Interrupter raises the host's MSI vectors.
type Interrupter interface {
	// Raise signals vector to the host. It must not block.
	Raise(vector int)
}
