package genl

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomhi/gomhi/sysfs"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// This file holds the Server itself: its options, how it binds its port
// (moving aside for a squatter) and advertises it, and its lifecycle. The
// receive loop is in loop.go, the framing of answers in replies.go, the
// command handlers in handlers.go and handlers_session.go, who may change
// things in auth.go, and the mapping of tree errors in treeerr.go.

// ErrPortInUse: another socket (most likely another running instance)
// already holds the server's port id.
var ErrPortInUse = errors.New("genl: netlink port id already in use (is another instance running?)")

// ErrClosed: the server was closed.
var ErrClosed = errors.New("genl: server closed")

// ServerOptions configure NewServer.
type ServerOptions struct {
	// Port is the NETLINK_USERSOCK port id to bind. 0 means DefaultPort,
	// and, when RunFile is set and DefaultPort is held by a process of
	// another user than root and this one (a squatter), a kernel-assigned
	// port instead, advertised in the run file (see Squatted). Any other
	// port held by anyone fails with ErrPortInUse, naming the holder.
	Port uint32
	// RunFile, if set, is where the server advertises itself while it
	// runs (RunFile: pid, uid, port, start time; DefaultRunFile is the
	// usual place): written atomically once the port is bound, mode 0644
	// whatever the umask, in a directory that must be owned by root or
	// this user and writable by nobody else; removed by Close. If it
	// names a live server already, NewServer fails with ErrPortInUse; a
	// stale one (its process gone) is replaced.
	RunFile string
	// Device, with RunFile, is the device the server's tree holds (the
	// name `mhictl up --name` gives it). The server then also advertises
	// it in DeviceRunFile(RunFile, Device), and when another live server
	// already holds RunFile (or DefaultPort) — another `mhictl up`, for
	// another modem — it serves on a kernel-assigned port advertised only
	// there instead of failing. A live server that advertises the same
	// device fails NewServer with ErrPortInUse.
	Device string
	// Logger receives diagnostics (nil: discard).
	Logger *slog.Logger
	// MaxInFlight bounds the requests handled concurrently (0: 8).
	MaxInFlight int
}

const (
	recvBufSize   = 64 << 10 // largest request accepted
	maxDatagram   = 16 << 10 // replies are packed into datagrams up to this size
	maxEcho       = 4 << 10  // errors echo requests up to this size in full
	sendRetryTime = 200 * time.Millisecond
)

// Server answers the "mhi" family (and nlctrl GETFAMILY for it) on a
// NETLINK_USERSOCK socket, reading and writing through a sysfs.Tree.
type Server struct {
	tree *sysfs.Tree
	conn *netlink.Conn
	rc   syscall.RawConn
	port uint32
	log  *slog.Logger
	sem  chan struct{}

	runPath  string  // run file written, "" if none
	devPath  string  // per-device run file written, "" if none
	run      RunFile // their content
	beside   bool    // another instance holds DefaultPort: served on a kernel-assigned port
	squatted bool    // DefaultPort was held by another user
	holders  []Peer  // who held it (empty: unidentified)

	wg      sync.WaitGroup
	closed  atomic.Bool
	serving atomic.Bool
}

// NewServer binds the server's socket at opts.Port (DefaultPort if 0) and
// asks the kernel for each sender's credentials (SO_PASSCRED). Call Serve
// to answer requests and Close to release the port. A port already taken
// gives an error wrapping ErrPortInUse that names the holder, unless it is
// DefaultPort, held by another user, and opts.RunFile is set: then the
// server binds a kernel-assigned port, says so in a Warn log naming the
// holder, and advertises the port in the run file (see ServerOptions).
func NewServer(t *sysfs.Tree, opts ServerOptions) (*Server, error) {
	if t == nil {
		return nil, errors.New("genl: NewServer needs a tree")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	inflight := opts.MaxInFlight
	if inflight <= 0 {
		inflight = 8
	}
	s := &Server{tree: t, log: log, sem: make(chan struct{}, inflight)}
	general, devFile := opts.RunFile, DeviceRunFile(opts.RunFile, opts.Device)
	if devFile != "" {
		if r, err := ReadRunFile(devFile); err == nil && r.Live() {
			return nil, fmt.Errorf("%w: %s serves device %q on port %#x, as %s says",
				ErrPortInUse, Peer{PID: r.PID, UID: r.UID}, opts.Device, r.Port, devFile)
		}
	}
	if general != "" {
		if r, err := ReadRunFile(general); err == nil && r.Live() {
			if devFile == "" {
				return nil, fmt.Errorf("%w: %s serves the %q family on port %#x, as %s says",
					ErrPortInUse, Peer{PID: r.PID, UID: r.UID}, FamilyName, r.Port, general)
			}
			// Another instance, for another device: serve beside it.
			s.beside, general = true, ""
		}
	}
	if err := s.bind(opts.Port, general, devFile); err != nil {
		return nil, err
	}
	if s.beside {
		general = ""
	}
	if err := s.advertise(general, devFile); err != nil {
		_ = s.conn.Close()
		return nil, err
	}
	return s, nil
}

// advertise writes the run files: general (unless "") and the
// per-device one (unless ""); a failure removes what it wrote.
func (s *Server) advertise(general, devFile string) error {
	if general == "" && devFile == "" {
		return nil
	}
	r, err := newRunFile(s.port)
	if err != nil {
		return err
	}
	if general != "" {
		if err := writeRunFile(general, r); err != nil {
			return err
		}
		s.runPath = general
	}
	if devFile != "" {
		if err := writeRunFile(devFile, r); err != nil {
			if s.runPath != "" {
				_ = removeRunFile(s.runPath, r)
				s.runPath = ""
			}
			return err
		}
		s.devPath = devFile
	}
	s.run = r
	return nil
}

// bind binds the server's socket at port as NewServer describes (a
// kernel-assigned port when port is 0, a run file is set and another user
// holds DefaultPort, or when another instance does and devFile is set; at
// once when s.beside) and asks for the senders' credentials.
func (s *Server) bind(port uint32, runFile, devFile string) error {
	fallback := port == 0 && (runFile != "" || devFile != "")
	if port == 0 {
		port = DefaultPort
	}
	s.port = port
	var conn *netlink.Conn
	var err error
	if s.beside && fallback {
		conn, err = s.bindBeside(devFile)
	} else {
		conn, err = netlink.Dial(unix.NETLINK_USERSOCK, &netlink.Config{PID: port})
		if errors.Is(err, unix.EADDRINUSE) {
			conn, err = s.bindAside(err, fallback, runFile, devFile)
		} else if err != nil {
			err = fmt.Errorf("genl: bind NETLINK_USERSOCK port %#x: %w", port, err)
		}
	}
	if err != nil {
		return err
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("genl: %w", err)
	}
	if err := passCred(rc); err != nil {
		_ = conn.Close()
		return err
	}
	// A larger receive queue absorbs bursts; the kernel caps it at
	// rmem_max, and failing is harmless.
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	})
	s.conn, s.rc = conn, rc
	return nil
}

// bindAside handles s.port being held (inUse is the bind's EADDRINUSE):
// it names the holders and, when fallback allows it and the holder is
// another user (a squatter), binds a kernel-assigned port instead and
// says so in a Warn log; otherwise it fails with ErrPortInUse.
func (s *Server) bindAside(inUse error, fallback bool, runFile, devFile string) (*netlink.Conn, error) {
	port := s.port
	ino, _, _ := portInode(port)
	if ino != 0 {
		s.holders = socketHolders(ino)
	}
	holder := describePeers(s.holders, ino)
	if fallback && devFile != "" && s.holderTrusted() {
		// Another instance (root's or ours) holds it: serve beside it.
		s.holders, s.beside = nil, true
		return s.bindBeside(devFile)
	}
	if !fallback || s.holderTrusted() {
		return nil, fmt.Errorf("genl: bind NETLINK_USERSOCK port %#x: %w: held by %s: %w", port, ErrPortInUse, holder, inUse)
	}
	conn, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		return nil, fmt.Errorf("genl: port %#x is held by %s, and binding a kernel-assigned port failed: %w", port, holder, err)
	}
	s.port, s.squatted = conn.PID(), true
	s.log.Warn("genl: the default netlink port is held by another user's process (a squatter?): serving on a kernel-assigned port instead, advertised in the run file",
		"default_port", fmt.Sprintf("%#x", DefaultPort), "holder", holder, "port", fmt.Sprintf("%#x", s.port), "run_file", runFile)
	return conn, nil
}

// bindBeside binds a kernel-assigned port for a server whose device is
// advertised in devFile while another instance holds DefaultPort.
func (s *Server) bindBeside(devFile string) (*netlink.Conn, error) {
	conn, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		return nil, fmt.Errorf("genl: another instance serves port %#x, and binding a kernel-assigned port failed: %w", DefaultPort, err)
	}
	s.port = conn.PID()
	s.log.Info("genl: another instance serves the default netlink port: serving this device on a kernel-assigned port, advertised in its run file",
		"port", fmt.Sprintf("%#x", s.port), "run_file", devFile)
	return conn, nil
}

// Beside reports whether the server serves on a kernel-assigned port
// because another instance (for another device) holds DefaultPort; its
// clients find it through its per-device run file.
func (s *Server) Beside() bool { return s.beside }

// holderTrusted reports whether a process found holding the port is root
// or this server's user: another instance, not a squatter.
func (s *Server) holderTrusted() bool {
	for _, h := range s.holders {
		if h.UID == 0 || h.UID == uint32(os.Getuid()) || h.UID == uint32(os.Geteuid()) {
			return true
		}
	}
	return false
}

// Squatted reports whether the server serves on a kernel-assigned port
// because another user's process held DefaultPort, and names that
// process (holders is empty when it could not be identified).
func (s *Server) Squatted() (holders []Peer, squatted bool) {
	return s.holders, s.squatted
}

// RunFile returns the path of the run file the server wrote, "" if none:
// the general one, or the per-device one of a server beside another.
func (s *Server) RunFile() string {
	if s.runPath == "" {
		return s.devPath
	}
	return s.runPath
}

// Port returns the port id the server is bound to.
func (s *Server) Port() uint32 { return s.port }

// Close releases the port, removes the run file (if it still names this
// server) and makes Serve return.
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	var rerr error
	if s.runPath != "" {
		rerr = removeRunFile(s.runPath, s.run)
	}
	if s.devPath != "" {
		rerr = errors.Join(rerr, removeRunFile(s.devPath, s.run))
	}
	return errors.Join(s.conn.Close(), rerr)
}
