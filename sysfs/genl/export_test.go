package genl

import "golang.org/x/sys/unix"

// HandleDatagram answers one received datagram as Serve does, sending the
// answers from the server's socket to port: for the fuzz targets, which
// then read them from their own socket at port.
func (s *Server) HandleDatagram(b []byte, port uint32, cred *unix.Ucred) { s.handle(b, port, cred) }
