// Package vutest holds what the tests of the vfio-user packages share
// (protocol, client and the server): a connected socket pair, and the
// record format of FuzzClient's scripts, which the server's tests record
// from real sessions. It imports none of them, so that their own tests
// can import it.
package vutest

import (
	"encoding/binary"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// SocketPair returns two connected unix stream sockets.
func SocketPair(tb testing.TB) (*net.UnixConn, *net.UnixConn) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	conv := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			tb.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conv(fds[0]), conv(fds[1])
}

// Script record flags of FuzzClient (pcigeneric/vfiouser/client): a
// record is [flags][length, 16 bits little-endian][bytes].
const (
	RecAnswer    = 0x01 // wait for the client's next command expecting a reply; answer it
	RecPatchID   = 0x02 // patch the message ID with the command's
	RecPatchCmd  = 0x04 // patch the command with the command's
	RecPatchSize = 0x08 // patch the size field with the record's length
)

// ScriptRecord returns msg, a whole message with nfds descriptors, as a
// FuzzClient script record: an answer with its ID, command and size
// patched for a reply, sent at once for anything else.
func ScriptRecord(msg []byte, nfds int, reply bool) []byte {
	flags := byte(RecPatchSize)
	if reply {
		flags |= RecAnswer | RecPatchID | RecPatchCmd
	}
	flags |= byte(min(nfds, 7)) << 4
	rec := []byte{flags, 0, 0}
	binary.LittleEndian.PutUint16(rec[1:], uint16(len(msg)))
	return append(rec, msg...)
}
