package genl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomhi/gomhi/sysfs"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

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
	run      RunFile // its content
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
	port := opts.Port
	fallback := port == 0 && opts.RunFile != ""
	if port == 0 {
		port = DefaultPort
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	inflight := opts.MaxInFlight
	if inflight <= 0 {
		inflight = 8
	}
	if opts.RunFile != "" {
		if r, err := ReadRunFile(opts.RunFile); err == nil && r.Live() {
			return nil, fmt.Errorf("%w: %s serves the %q family on port %#x, as %s says",
				ErrPortInUse, Peer{PID: r.PID, UID: r.UID}, FamilyName, r.Port, opts.RunFile)
		}
	}
	s := &Server{tree: t, port: port, log: log, sem: make(chan struct{}, inflight)}
	conn, err := netlink.Dial(unix.NETLINK_USERSOCK, &netlink.Config{PID: port})
	if errors.Is(err, unix.EADDRINUSE) {
		ino, _, _ := portInode(port)
		if ino != 0 {
			s.holders = socketHolders(ino)
		}
		holder := describePeers(s.holders, ino)
		if !fallback || s.holderTrusted() {
			return nil, fmt.Errorf("genl: bind NETLINK_USERSOCK port %#x: %w: held by %s: %w", port, ErrPortInUse, holder, err)
		}
		conn, err = netlink.Dial(unix.NETLINK_USERSOCK, nil)
		if err != nil {
			return nil, fmt.Errorf("genl: port %#x is held by %s, and binding a kernel-assigned port failed: %w", port, holder, err)
		}
		s.port, s.squatted = conn.PID(), true
		log.Warn("genl: the default netlink port is held by another user's process (a squatter?): serving on a kernel-assigned port instead, advertised in the run file",
			"default_port", fmt.Sprintf("%#x", DefaultPort), "holder", holder, "port", fmt.Sprintf("%#x", s.port), "run_file", opts.RunFile)
	} else if err != nil {
		return nil, fmt.Errorf("genl: bind NETLINK_USERSOCK port %#x: %w", port, err)
	}
	s.conn = conn
	rc, err := conn.SyscallConn()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("genl: %w", err)
	}
	s.rc = rc
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
		// A larger receive queue absorbs bursts; the kernel caps it at
		// rmem_max, and failing is harmless.
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	})
	if err := errors.Join(cerr, serr); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("genl: SO_PASSCRED: %w", err)
	}
	if opts.RunFile != "" {
		r, err := newRunFile(s.port)
		if err == nil {
			err = writeRunFile(opts.RunFile, r)
		}
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
		s.runPath, s.run = opts.RunFile, r
	}
	return s, nil
}

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

// RunFile returns the path of the run file the server wrote, "" if none.
func (s *Server) RunFile() string { return s.runPath }

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
	return errors.Join(s.conn.Close(), rerr)
}

// Serve answers requests until ctx is done or Close is called, then waits
// for the requests in progress and returns nil. Any other error is the
// socket failing. The port stays bound until Close. Serve may run once at
// a time.
func (s *Server) Serve(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if s.serving.Swap(true) {
		return errors.New("genl: Serve is already running")
	}
	defer s.serving.Store(false)
	defer s.wg.Wait()
	if err := s.conn.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("genl: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	buf := make([]byte, recvBufSize)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for {
		var (
			n, oobn, rflags int
			from            unix.Sockaddr
			rerr            error
		)
		err := s.rc.Read(func(fd uintptr) bool {
			n, oobn, rflags, from, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_DONTWAIT)
			return rerr != unix.EAGAIN && rerr != unix.EINTR
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			switch {
			case s.closed.Load() || ctx.Err() != nil:
				return nil
			case errors.Is(err, unix.ENOBUFS):
				// The receive queue overran: some requests were dropped
				// and their senders will time out.
				s.log.Warn("genl: receive queue overrun, requests dropped")
				continue
			}
			return fmt.Errorf("genl: receive: %w", err)
		}
		sa, ok := from.(*unix.SockaddrNetlink)
		if !ok || sa.Pid == 0 {
			continue // from the kernel or unknown: nothing to answer
		}
		cred := parseCred(oob[:oobn])
		data := bytes.Clone(buf[:n])
		if rflags&unix.MSG_TRUNC != 0 {
			s.truncated(sa.Pid, data)
			continue
		}
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		s.wg.Add(1)
		go func() {
			defer func() { <-s.sem; s.wg.Done() }()
			s.handle(data, sa.Pid, cred)
		}()
	}
}

func parseCred(oob []byte) *unix.Ucred {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for i := range msgs {
		if msgs[i].Header.Level == unix.SOL_SOCKET && msgs[i].Header.Type == unix.SCM_CREDENTIALS {
			if c, err := unix.ParseUnixCredentials(&msgs[i]); err == nil {
				return c
			}
		}
	}
	return nil
}

// truncated answers a datagram larger than the receive buffer.
func (s *Server) truncated(port uint32, data []byte) {
	e := reqErr(unix.EINVAL, 0, "request larger than %d bytes", recvBufSize)
	s.send(port, errorMsg(port, data, e))
}

// handle answers every message of one datagram.
func (s *Server) handle(b []byte, port uint32, cred *unix.Ucred) {
	for len(b) > 0 {
		req, n, err := DecodeRequest(b)
		msg := b[:n]
		b = b[n:]
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				re = &RequestError{Errno: unix.EINVAL, Msg: err.Error()}
			}
			s.send(port, errorMsg(port, msg, re))
			continue
		}
		if req.Ignored() {
			if req.Header.Flags&netlink.Request != 0 && req.Header.Flags&netlink.Acknowledge != 0 {
				s.send(port, errorMsg(port, msg, nil))
			}
			continue
		}
		s.dispatch(port, cred, msg, &req)
	}
}

// reply gathers the messages of one answer into datagrams.
type reply struct {
	s     *Server
	port  uint32
	req   *Request
	dgram []byte
	multi bool
}

func (r *reply) flush() {
	if len(r.dgram) > 0 {
		r.s.send(r.port, r.dgram)
		r.dgram = r.dgram[:0]
	}
}

// add appends one message of the request's family with the given
// generic-netlink command and attribute payload.
func (r *reply) add(cmd, version uint8, attrs []byte) {
	if len(r.dgram) > 0 && len(r.dgram)+nlHdrLen+genlHdrLen+len(attrs) > maxDatagram {
		r.flush()
	}
	var flags uint16
	if r.multi {
		flags = uint16(netlink.Multi)
	}
	start := len(r.dgram)
	r.dgram = appendHeader(r.dgram, uint16(r.req.Header.Type), flags, r.req.Header.Sequence, r.port)
	r.dgram = append(r.dgram, cmd, version, 0, 0)
	r.dgram = append(r.dgram, attrs...)
	r.dgram = finishMsg(r.dgram, start)
}

// done ends a multipart answer with NLMSG_DONE and sends it.
func (r *reply) done() {
	start := len(r.dgram)
	r.dgram = appendHeader(r.dgram, uint16(netlink.Done), uint16(netlink.Multi), r.req.Header.Sequence, r.port)
	r.dgram = ne.AppendUint32(r.dgram, 0)
	r.dgram = finishMsg(r.dgram, start)
	r.flush()
}

// finish sends a single-message answer, with an ACK if the request asked
// for one (as the kernel does after a doit).
func (r *reply) finish(msg []byte) {
	if r.req.Header.Flags&netlink.Acknowledge != 0 {
		r.dgram = append(r.dgram, errorMsg(r.port, msg, nil)...)
	}
	r.flush()
}

func (s *Server) dispatch(port uint32, cred *unix.Ucred, msg []byte, req *Request) {
	r := &reply{s: s, port: port, req: req}
	var err error
	if req.Ctrl() {
		err = s.getFamily(r)
	} else {
		switch req.Command {
		case CmdGetDevice:
			err = s.getDevice(r)
		case CmdSetDevice:
			err = s.setDevice(r, cred)
		case CmdGetStats:
			err = s.getStats(r)
		case CmdDumpChannels:
			err = s.dumpChannels(r)
		case CmdConnect:
			err = s.connect(r, cred)
		case CmdDisconnect:
			err = s.disconnect(r, cred)
		case CmdGetSession:
			err = s.getSession(r)
		case CmdDumpPorts:
			err = s.dumpPorts(r)
		default: // DecodeRequest rejects these; kept for safety
			err = reqErr(unix.EOPNOTSUPP, 0, "unknown command %d", req.Command)
		}
	}
	if err != nil {
		var re *RequestError
		if !errors.As(err, &re) {
			re = &RequestError{Errno: unix.EIO, Msg: err.Error(), Err: err}
		}
		s.log.Debug("genl: request refused", "port", port, "cmd", cmdName(req.Command), "err", re)
		s.send(port, errorMsg(port, msg, re))
		return
	}
	if !r.multi {
		r.finish(msg)
	}
}

// errorMsg builds an NLMSG_ERROR answering req (the request's bytes): an
// ACK when e is nil. Like the kernel (without NETLINK_CAP_ACK) an error
// echoes the whole request; an ACK, a request too large to echo or one
// whose header is broken echoes the header only and sets NLM_F_CAPPED. An
// echoed header whose payload is left out gets nlmsg_len 16, so parsers that
// ignore NLM_F_CAPPED still find the TLVs (the kernel keeps the original
// length there). The TLVs are NLMSGERR_ATTR_MSG, NLMSGERR_ATTR_OFFS and
// NLMSGERR_ATTR_MISS_TYPE, flagged with NLM_F_ACK_TLVS.
func errorMsg(port uint32, req []byte, e *RequestError) []byte {
	var hdr [nlHdrLen]byte
	copy(hdr[:], req)
	seq := ne.Uint32(hdr[8:])
	wellFormed := len(req) >= nlHdrLen && int(ne.Uint32(req)) <= len(req) && ne.Uint32(req) >= nlHdrLen
	var flags uint16
	var echo []byte
	switch {
	case e == nil:
		flags |= uint16(netlink.Capped)
		echo = hdr[:]
	case wellFormed && len(req) <= maxEcho:
		echo = req[:ne.Uint32(req)]
	default:
		flags |= uint16(netlink.Capped)
		ne.PutUint32(hdr[0:], nlHdrLen)
		echo = hdr[:]
	}
	var tlv []byte
	if e != nil {
		tlv = appendAttr(tlv, nlmsgerrAttrMsg, append([]byte(e.Msg), 0))
		if e.Offset > 0 {
			tlv = appendAttr(tlv, nlmsgerrAttrOffs, ne.AppendUint32(nil, uint32(e.Offset)))
		}
		if e.Missing != 0 {
			tlv = appendAttr(tlv, nlmsgerrAttrMissType, ne.AppendUint32(nil, uint32(e.Missing)))
		}
		flags |= uint16(netlink.AcknowledgeTLVs)
	}
	b := make([]byte, 0, nlHdrLen+4+align4(len(echo))+len(tlv))
	b = appendHeader(b, uint16(netlink.Error), flags, seq, port)
	var errno int32
	if e != nil {
		errno = -int32(e.Errno)
	}
	b = ne.AppendUint32(b, uint32(errno))
	b = append(b, echo...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, tlv...)
	ne.PutUint32(b[0:], uint32(len(b)))
	return b
}

// send delivers one datagram to port without blocking the server on a
// client whose receive queue is full: it retries for a short while and
// then drops the answer (the client times out).
func (s *Server) send(port uint32, b []byte) {
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}
	deadline := time.Now().Add(sendRetryTime)
	delay := 20 * time.Microsecond
	for {
		var err error
		if cerr := s.rc.Control(func(fd uintptr) {
			err = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		}); cerr != nil {
			err = cerr
		}
		switch {
		case err == nil:
			return
		case err == unix.EAGAIN || err == unix.ENOBUFS || err == unix.EINTR:
			if time.Now().After(deadline) {
				s.log.Warn("genl: client not reading, answer dropped", "port", port)
				return
			}
			time.Sleep(delay)
			delay = min(2*delay, 5*time.Millisecond)
		default:
			// ECONNREFUSED: the client went away.
			s.log.Debug("genl: send", "port", port, "err", err)
			return
		}
	}
}

// getFamily answers nlctrl CTRL_CMD_GETFAMILY for this family only.
func (s *Server) getFamily(r *reply) error {
	req := r.req
	if !req.Dump() {
		if req.FamilyName != "" && req.FamilyName != FamilyName {
			return reqErr(unix.ENOENT, req.AttrOffset(unix.CTRL_ATTR_FAMILY_NAME),
				"no generic netlink family %q here (only %q)", req.FamilyName, FamilyName)
		}
		if req.FamilyID != 0 && req.FamilyID != FamilyID {
			return reqErr(unix.ENOENT, req.AttrOffset(unix.CTRL_ATTR_FAMILY_ID),
				"no generic netlink family with id %#x here", req.FamilyID)
		}
	}
	ae := netlink.NewAttributeEncoder()
	ae.Uint16(unix.CTRL_ATTR_FAMILY_ID, FamilyID)
	ae.String(unix.CTRL_ATTR_FAMILY_NAME, FamilyName)
	ae.Uint32(unix.CTRL_ATTR_VERSION, FamilyVersion)
	ae.Uint32(unix.CTRL_ATTR_HDRSIZE, 0)
	ae.Uint32(unix.CTRL_ATTR_MAXATTR, uint32(AttrMax))
	ae.Nested(unix.CTRL_ATTR_OPS, func(nae *netlink.AttributeEncoder) error {
		for i, op := range []struct {
			cmd   uint8
			flags uint32
		}{
			{CmdGetDevice, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL},
			{CmdSetDevice, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL | unix.GENL_ADMIN_PERM},
			{CmdGetStats, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL},
			{CmdDumpChannels, unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL},
			{CmdConnect, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL | unix.GENL_ADMIN_PERM},
			{CmdDisconnect, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL | unix.GENL_ADMIN_PERM},
			{CmdGetSession, unix.GENL_CMD_CAP_DO | unix.GENL_CMD_CAP_HASPOL},
			{CmdDumpPorts, unix.GENL_CMD_CAP_DUMP | unix.GENL_CMD_CAP_HASPOL},
		} {
			nae.Nested(uint16(i+1), func(oe *netlink.AttributeEncoder) error {
				oe.Uint32(unix.CTRL_ATTR_OP_ID, uint32(op.cmd))
				oe.Uint32(unix.CTRL_ATTR_OP_FLAGS, op.flags)
				return nil
			})
		}
		return nil
	})
	b, err := ae.Encode()
	if err != nil {
		return err
	}
	r.multi = req.Dump()
	r.add(unix.CTRL_CMD_NEWFAMILY, ctrlVersion, b)
	if r.multi {
		r.done()
	}
	return nil
}

// devicePath checks that devices/<name> exists.
func (s *Server) devicePath(req *Request) (string, error) {
	p := "devices/" + req.DevName
	if _, err := s.tree.LookupDir(p); err != nil {
		return "", &RequestError{Errno: unix.ENODEV, Offset: req.AttrOffset(AttrDevName), Err: err,
			Msg: fmt.Sprintf("no MHI device %q", req.DevName)}
	}
	return p, nil
}

func (s *Server) deviceNames() []string {
	d, err := s.tree.LookupDir("devices")
	if err != nil {
		return nil
	}
	var names []string
	for _, sub := range d.Dirs() {
		names = append(names, sub.Name)
	}
	return names
}

// encodeDevice writes a device's attributes (flat) into ae.
func (s *Server) encodeDevice(ae *netlink.AttributeEncoder, name string) error {
	base := "devices/" + name + "/"
	ae.String(AttrDevName, name)
	for _, a := range []struct {
		typ  uint16
		file string
	}{{AttrState, "state"}, {AttrEE, "ee"}, {AttrModel, "model"}, {AttrSerial, "serial_number"}} {
		v, err := s.tree.Get(base + a.file)
		if errors.Is(err, sysfs.ErrNotFound) {
			continue
		}
		if err != nil {
			return treeError(err, 0, name)
		}
		ae.String(a.typ, v)
	}
	for _, a := range []struct {
		typ  uint16
		file string
	}{{AttrMRU, "mru"}, {AttrMTU, "mtu"}, {AttrTimeoutMs, "timeout_ms"}, {AttrAutosuspendMs, "autosuspend_ms"}} {
		v, err := s.tree.Get(base + a.file)
		if errors.Is(err, sysfs.ErrNotFound) {
			continue // e.g. no network device: no mru/mtu
		}
		if err != nil {
			return treeError(err, 0, name)
		}
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			return reqErr(unix.EIO, 0, "%s: %s: %q is not a number", name, a.file, v)
		}
		ae.Uint32(a.typ, uint32(min(n, math.MaxUint32)))
	}
	return nil
}

func (s *Server) getDevice(r *reply) error {
	req := r.req
	if !req.Dump() {
		if _, err := s.devicePath(req); err != nil {
			return err
		}
		ae := netlink.NewAttributeEncoder()
		if err := s.encodeDevice(ae, req.DevName); err != nil {
			return err
		}
		return r.addEncoded(CmdGetDevice, ae)
	}
	names := s.deviceNames()
	if req.DevName != "" {
		if _, err := s.devicePath(req); err != nil {
			return err
		}
		names = []string{req.DevName}
	}
	// Build every device first so that an error replaces the whole dump.
	var nests [][]byte
	for _, name := range names {
		ae := netlink.NewAttributeEncoder()
		if err := s.encodeDevice(ae, name); err != nil {
			if errors.Is(err, unix.ENODEV) {
				continue // removed meanwhile
			}
			return err
		}
		b, err := ae.Encode()
		if err != nil {
			return err
		}
		nests = append(nests, b)
	}
	r.multi = true
	var payload []byte
	for _, b := range nests {
		if len(payload) > 0 && len(payload)+nlaHdrLen+len(b) > maxDatagram-nlHdrLen-genlHdrLen {
			r.add(CmdGetDevice, FamilyVersion, payload)
			payload = nil
		}
		payload = appendAttr(payload, AttrDevice|nlaFNested, b)
	}
	if len(payload) > 0 {
		r.add(CmdGetDevice, FamilyVersion, payload)
	}
	r.done()
	return nil
}

func (r *reply) addEncoded(cmd uint8, ae *netlink.AttributeEncoder) error {
	b, err := ae.Encode()
	if err != nil {
		return reqErr(unix.EMSGSIZE, 0, "%s: reply does not fit: %v", cmdName(cmd), err)
	}
	r.add(cmd, FamilyVersion, b)
	return nil
}

// setDevice applies MRU, MTU and TIMEOUT_MS, in that order, through
// Tree.Set. It stops at the first failure; the values before it stay
// applied and the message says so.
func (s *Server) setDevice(r *reply, cred *unix.Ucred) error {
	req := r.req
	if err := authorize(cred); err != nil {
		return err
	}
	base, err := s.devicePath(req)
	if err != nil {
		return err
	}
	var applied []string
	for _, a := range []struct {
		typ  uint16
		file string
		v    *uint32
	}{{AttrMRU, "mru", req.MRU}, {AttrMTU, "mtu", req.MTU}, {AttrTimeoutMs, "timeout_ms", req.TimeoutMs},
		{AttrAutosuspendMs, "autosuspend_ms", req.AutosuspendMs}, {AttrPMRequest, "pm", req.PMRequest}} {
		if a.v == nil {
			continue
		}
		off := req.AttrOffset(a.typ)
		file, val := a.file, strconv.FormatUint(uint64(*a.v), 10)
		if a.typ == AttrPMRequest {
			// The tree's action attributes: devices/<dev>/suspend, resume.
			file, val = "suspend", "1"
			if *a.v == PMRequestResume {
				file = "resume"
			}
		}
		err := s.tree.Set(base+"/"+file, val)
		if err != nil {
			var e *RequestError
			if errors.Is(err, sysfs.ErrNotFound) {
				if _, derr := s.tree.LookupDir(base); derr != nil {
					e = &RequestError{Errno: unix.ENODEV, Offset: req.AttrOffset(AttrDevName), Err: err,
						Msg: fmt.Sprintf("no MHI device %q", req.DevName)}
				} else {
					e = &RequestError{Errno: unix.EOPNOTSUPP, Offset: off, Err: err,
						Msg: fmt.Sprintf("%s has no %s (is its network device up?)", req.DevName, a.file)}
				}
			} else {
				e = treeError(err, off, req.DevName)
			}
			if len(applied) > 0 {
				e.Msg += " (already applied: " + strings.Join(applied, ", ") + ")"
			}
			return e
		}
		applied = append(applied, a.file)
	}
	ae := netlink.NewAttributeEncoder()
	if err := s.encodeDevice(ae, req.DevName); err != nil {
		return err
	}
	return r.addEncoded(CmdSetDevice, ae)
}

// statEntry is one counter under devices/<name>/stats.
type statEntry struct {
	name  string
	value uint64
}

func collectStats(prefix string, d *sysfs.Dir, out []statEntry) []statEntry {
	for _, a := range d.Attrs() {
		v, err := a.Read()
		if err != nil {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64)
		if err != nil {
			continue
		}
		out = append(out, statEntry{prefix + a.Name, n})
	}
	for _, sub := range d.Dirs() {
		out = collectStats(prefix+sub.Name+"/", sub, out)
	}
	return out
}

func (s *Server) getStats(r *reply) error {
	req := r.req
	base, err := s.devicePath(req)
	if err != nil {
		return err
	}
	var stats []statEntry
	if d, err := s.tree.LookupDir(base + "/stats"); err == nil {
		stats = collectStats("", d, nil)
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, req.DevName)
	ae.Nested(AttrStats, func(nae *netlink.AttributeEncoder) error {
		for _, st := range stats {
			nae.Nested(StatsAttrEntry, func(ee *netlink.AttributeEncoder) error {
				ee.String(StatAttrName, st.name)
				ee.Uint64(StatAttrValue, st.value)
				return nil
			})
		}
		return nil
	})
	return r.addEncoded(CmdGetStats, ae)
}

func (s *Server) dumpChannels(r *reply) error {
	req := r.req
	base, err := s.devicePath(req)
	if err != nil {
		return err
	}
	var msgs [][]byte
	if d, err := s.tree.LookupDir(base + "/channels"); err == nil {
		for _, ch := range d.Dirs() {
			b, err := encodeChannel(req.DevName, ch)
			if err != nil {
				return err
			}
			msgs = append(msgs, b)
		}
	}
	r.multi = true
	for _, b := range msgs {
		r.add(CmdDumpChannels, FamilyVersion, b)
	}
	r.done()
	return nil
}

// encodeChannel encodes DEV_NAME and a CHANNEL nest for the channel
// directory ch ("<num>_<name>").
func encodeChannel(dev string, ch *sysfs.Dir) ([]byte, error) {
	numStr, chName, _ := strings.Cut(ch.Name, "_")
	num, err := strconv.ParseUint(numStr, 10, 32)
	if err != nil {
		return nil, reqErr(unix.EIO, 0, "%s: channel directory %q has no number", dev, ch.Name)
	}
	read := func(file string) (string, bool) {
		a, ok := ch.Attr(file)
		if !ok {
			return "", false
		}
		v, err := a.Read()
		return v, err == nil
	}
	ae := netlink.NewAttributeEncoder()
	ae.String(AttrDevName, dev)
	ae.Nested(AttrChannel, func(nae *netlink.AttributeEncoder) error {
		nae.Uint32(ChanAttrNum, uint32(num))
		nae.String(ChanAttrName, chName)
		for _, a := range []struct {
			typ  uint16
			file string
		}{{ChanAttrDir, "dir"}, {ChanAttrState, "state"}, {ChanAttrCtxState, "ctx_state"}} {
			if v, ok := read(a.file); ok {
				nae.String(a.typ, v)
			}
		}
		for _, a := range []struct {
			typ  uint16
			file string
		}{
			{ChanAttrElements, "elements"}, {ChanAttrPending, "pending"}, {ChanAttrCompleted, "completed"},
			{ChanAttrBytes, "bytes"}, {ChanAttrHostRP, "host_rp"}, {ChanAttrHostWP, "host_wp"},
			{ChanAttrCtxRP, "ctx_rp"}, {ChanAttrCtxWP, "ctx_wp"},
		} {
			if v, ok := read(a.file); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64); err == nil {
					nae.Uint64(a.typ, n)
				}
			}
		}
		return nil
	})
	return ae.Encode()
}

// sentinelTexts are stripped from tree errors for the extended ack, which
// already carries an errno.
var sentinelTexts = []string{
	sysfs.ErrInvalid.Error(), sysfs.ErrReadOnly.Error(), sysfs.ErrWriteOnly.Error(),
	sysfs.ErrNotFound.Error(), sysfs.ErrBusy.Error(),
}

func humanize(err error) string {
	s := err.Error()
	for _, t := range sentinelTexts {
		s = strings.ReplaceAll(s, ": "+t, "")
		s = strings.ReplaceAll(s, t+": ", "")
	}
	return s
}

// treeError maps a tree error to an errno: ErrInvalid → EINVAL,
// ErrReadOnly/ErrWriteOnly → EPERM, ErrBusy → EBUSY, ErrNotFound → ENODEV,
// anything else → EIO.
func treeError(err error, off int, dev string) *RequestError {
	e := &RequestError{Offset: off, Err: err, Msg: humanize(err)}
	switch {
	case errors.Is(err, sysfs.ErrInvalid):
		e.Errno = unix.EINVAL
	case errors.Is(err, sysfs.ErrReadOnly), errors.Is(err, sysfs.ErrWriteOnly):
		e.Errno = unix.EPERM
	case errors.Is(err, sysfs.ErrBusy):
		e.Errno = unix.EBUSY
		e.Msg = dev + ": " + e.Msg
	case errors.Is(err, sysfs.ErrNotFound):
		e.Errno = unix.ENODEV
	default:
		e.Errno = unix.EIO
		e.Msg = dev + ": " + e.Msg
	}
	return e
}

// capNetAdmin is CAP_NET_ADMIN's bit in CapEff.
const capNetAdmin = 12

// authorize lets a SET through when the kernel-stamped credentials say
// uid 0, or when the sending process holds CAP_NET_ADMIN. The capability is
// read from /proc/<pid>/status after the message arrived, so it is subject
// to a race: the sender may have exited and its pid been reused, or changed
// its capabilities since. To narrow it the process found at the pid must
// still have the credential's real uid; an exited sender is refused.
func authorize(cred *unix.Ucred) error {
	if cred == nil {
		return reqErr(unix.EPERM, 0, "changing device settings needs root or CAP_NET_ADMIN (no sender credentials)")
	}
	if cred.Uid == 0 || hasCapNetAdmin(cred.Pid, cred.Uid) {
		return nil
	}
	return reqErr(unix.EPERM, 0, "changing device settings needs root or CAP_NET_ADMIN (sender uid %d, pid %d)", cred.Uid, cred.Pid)
}

func hasCapNetAdmin(pid int32, uid uint32) bool {
	if pid <= 0 {
		return false
	}
	f, err := os.Open("/proc/" + strconv.Itoa(int(pid)) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	var (
		capEff  uint64
		haveCap bool
		uidOK   bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		switch key {
		case "Uid":
			uidOK = fields[0] == strconv.FormatUint(uint64(uid), 10)
		case "CapEff":
			v, err := strconv.ParseUint(fields[0], 16, 64)
			capEff, haveCap = v, err == nil
		}
	}
	return uidOK && haveCap && capEff&(1<<capNetAdmin) != 0
}
