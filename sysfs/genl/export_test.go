package genl

import (
	"time"

	"golang.org/x/sys/unix"
)

// DialUnverified dials port trusting root only, without looking the port's
// holder up in /proc first, so that root's tests reach the check of the
// replies' credentials (which the holder check otherwise pre-empts).
func DialUnverified(port uint32, timeout time.Duration) (*Client, error) {
	return dial(&expected{port: port, uids: []uint32{0}}, timeout)
}

// HandleDatagram answers one received datagram as Serve does, sending the
// answers from the server's socket to port: for the fuzz targets, which
// then read them from their own socket at port.
func (s *Server) HandleDatagram(b []byte, port uint32, cred *unix.Ucred) { s.handle(b, port, cred) }

// NativeUint64 decodes a u64 attribute payload (0 if it is not 8 bytes).
func NativeUint64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return ne.Uint64(b)
}
