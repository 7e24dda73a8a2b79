package ctrlport

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// pty is a pseudo-terminal pair: the master the port reads and writes, and
// a slave descriptor the port holds open itself, so that clients can
// open and close the slave as often as they like without the master ever
// seeing a hang-up (EIO) or the slave losing its raw mode.
type pty struct {
	master *os.File // non-blocking, in the runtime poller: deadlines work
	slave  int
	path   string // /dev/pts/N
}

// openPTY allocates a pseudo-terminal and puts its slave in raw mode
// (cfmakeraw: no echo, no line editing, no CR/NL translation, 8 bits), so
// that binary protocols pass unchanged.
func openPTY() (*pty, error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("ctrlport: open /dev/ptmx: %w", err)
	}
	fail := func(what string, err error) (*pty, error) {
		unix.Close(mfd)
		return nil, fmt.Errorf("ctrlport: pseudo-terminal: %s: %w", what, err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlock", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail("slave number", err)
	}
	path := fmt.Sprintf("/dev/pts/%d", n)
	sfd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open "+path, err)
	}
	if err := makeRaw(sfd); err != nil {
		unix.Close(sfd)
		return fail("raw mode", err)
	}
	return &pty{master: os.NewFile(uintptr(mfd), "/dev/ptmx"), slave: sfd, path: path}, nil
}

func makeRaw(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8 | unix.CREAD
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

// unread returns the number of bytes written to the master that no
// client has read from the slave yet.
func (p *pty) unread() (int, error) { return unix.IoctlGetInt(p.slave, unix.TIOCINQ) }

// flushUnread discards what no client has read.
func (p *pty) flushUnread() error { return unix.IoctlSetInt(p.slave, unix.TCFLSH, unix.TCIFLUSH) }

func (p *pty) close() {
	p.master.Close()
	unix.Close(p.slave)
}
