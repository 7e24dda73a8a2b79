package ctrlport

import (
	"github.com/gomhi/gomhi/mhi/proto/qmi"
	"golang.org/x/sys/unix"
)

// ParseWDSSettings exposes parseWDSSettings to the fuzz target.
func ParseWDSSettings(t []byte, family uint8, cfg *SessionConfig) error {
	return parseWDSSettings(qmi.TLVs(t), family, cfg)
}

// UplinkUnread returns the bytes clients wrote that the port has not read
// yet (the master's input queue).
func (p *Port) UplinkUnread() (int, error) {
	rc, err := p.pty.master.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
		return 0, err
	}
	return n, ierr
}
