package genl

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/sysfs"
)

// This file holds the RAM-dump command of the family (GET_DUMP): its
// attributes, the request checks and the server's handler, which reads the
// dump through sysfs.Tree.Dump and sends it as a multipart answer. The
// client's side is in rddm_client.go.

// CmdGetDump: DEV_NAME and optionally DUMP_CRASH (with DUMP_WAIT_MS) → the
// device's last RAM dump as a multipart answer: a summary message
// (DEV_NAME, DUMP_SIZE, DUMP_SHA256, DUMP_TIME and DUMP_CRASH when this
// request forced the crash), then one message per chunk of at most
// DumpChunkSize bytes (DUMP_OFFSET, DUMP_DATA) in offset order, then
// NLMSG_DONE. With DUMP_CRASH the server first makes the device crash into
// RDDM and waits for the dump the running controller collects before it
// recovers the device. Needs uid 0 or CAP_NET_ADMIN: a dump holds the
// modem's memory.
const CmdGetDump uint8 = 9

// Attributes of GET_DUMP (top-level "mhi" set).
const (
	// AttrDumpCrash (flag): in a request, crash the device into RDDM
	// first; in the summary, this request did.
	AttrDumpCrash uint16 = 18
	// AttrDumpWaitMs (u32, 1..MaxDumpWaitMs): with DUMP_CRASH, how long
	// the server waits for the new dump (default DefaultDumpWait).
	AttrDumpWaitMs uint16 = 19
	// AttrDumpSize (u64): the dump's size in bytes.
	AttrDumpSize uint16 = 20
	// AttrDumpSHA256 (binary, 32 bytes): the dump's SHA-256.
	AttrDumpSHA256 uint16 = 21
	// AttrDumpTime (u64): when the host collected the dump, in
	// nanoseconds since the Unix epoch.
	AttrDumpTime uint16 = 22
	// AttrDumpOffset (u64): where the chunk's bytes start in the dump.
	AttrDumpOffset uint16 = 23
	// AttrDumpData (binary, 1..DumpChunkSize bytes): one chunk.
	AttrDumpData uint16 = 24
)

// Limits of GET_DUMP.
const (
	// DumpChunkSize is the largest DUMP_DATA the server sends: one chunk
	// message fills most of a datagram.
	DumpChunkSize = 8 << 10
	// MaxDumpWaitMs bounds DUMP_WAIT_MS (ten minutes).
	MaxDumpWaitMs = 600000
	// DefaultDumpWait is the server's wait for a forced crash's dump
	// when the request names none.
	DefaultDumpWait = 20 * time.Second
	// dumpSendPatience is how long the server waits for a client whose
	// receive queue is full before it gives a dump answer up.
	dumpSendPatience = 5 * time.Second
)

// decodeDumpAttr decodes GET_DUMP's request attributes.
func (r *Request) decodeDumpAttr(typ uint16, name string, p []byte, off int) error {
	switch typ {
	case AttrDumpCrash:
		if len(p) != 0 {
			return reqErr(unix.EINVAL, off, "%s: a flag attribute carries no payload, this one has %d bytes", name, len(p))
		}
		r.DumpCrash = true
	case AttrDumpWaitMs:
		v, err := parseU32(name, p, off)
		if err != nil {
			return err
		}
		if v == 0 || v > MaxDumpWaitMs {
			return reqErr(unix.ERANGE, off, "%s: %d outside the valid range 1..%d", name, v, MaxDumpWaitMs)
		}
		r.DumpWaitMs = &v
	default:
		return reqErr(unix.EINVAL, off, "attribute %s is not valid in %s requests", name, cmdName(r.Command))
	}
	return nil
}

// getDump answers GET_DUMP.
func (s *Server) getDump(r *reply, cred *unix.Ucred) error {
	req := r.req
	if err := authorize(cred); err != nil {
		var re *RequestError
		if errors.As(err, &re) {
			re.Msg = strings.Replace(re.Msg, "changing device settings", "reading a RAM dump (the modem's memory)", 1)
		}
		return err
	}
	if req.DumpWaitMs != nil && !req.DumpCrash {
		return reqErr(unix.EINVAL, req.AttrOffset(AttrDumpWaitMs), "%s applies only with %s (waiting for a forced crash's dump)",
			attrName(AttrDumpWaitMs), attrName(AttrDumpCrash))
	}
	if _, err := s.devicePath(req); err != nil {
		return err
	}
	wait := DefaultDumpWait
	if req.DumpWaitMs != nil {
		wait = time.Duration(*req.DumpWaitMs) * time.Millisecond
	}
	d, err := s.tree.Dump(req.DevName, req.DumpCrash, wait)
	if err != nil {
		return dumpError(err, req)
	}
	s.log.Info("genl: sending a RAM dump", "dev", req.DevName, "bytes", len(d.Data), "crashed", d.Crashed, "port", r.port)
	s.sendDump(r, d)
	return nil
}

// dumpError maps Tree.Dump's errors to errnos: no dump ENOENT, collection
// off EOPNOTSUPP, no dump in time ETIMEDOUT, a device that cannot crash
// now EBUSY, no device ENODEV, anything else EIO.
func dumpError(err error, req *Request) *RequestError {
	e := &RequestError{Err: err, Msg: humanize(err)}
	for _, t := range []error{sysfs.ErrNoDump, sysfs.ErrDumpsOff, sysfs.ErrDumpTimeout} {
		e.Msg = strings.ReplaceAll(e.Msg, ": "+t.Error(), "")
	}
	switch {
	case errors.Is(err, sysfs.ErrNotFound):
		e.Errno, e.Offset = unix.ENODEV, req.AttrOffset(AttrDevName)
		e.Msg = fmt.Sprintf("no MHI device %q", req.DevName)
	case errors.Is(err, sysfs.ErrDumpsOff):
		e.Errno = unix.EOPNOTSUPP
	case errors.Is(err, sysfs.ErrDumpTimeout):
		e.Errno, e.Offset = unix.ETIMEDOUT, req.AttrOffset(AttrDumpWaitMs)
	case errors.Is(err, sysfs.ErrNoDump):
		e.Errno = unix.ENOENT
	case errors.Is(err, sysfs.ErrBusy):
		e.Errno = unix.EBUSY
	default:
		e.Errno = unix.EIO
	}
	return e
}

// dumpMsgOverhead is the framing of one chunk message: netlink and
// generic-netlink headers, DUMP_OFFSET and DUMP_DATA's header.
const dumpMsgOverhead = nlHdrLen + genlHdrLen + nlaHdrLen + 8 + nlaHdrLen

// sendDump sends the summary, the chunks and NLMSG_DONE, packed into
// datagrams of up to maxDatagram bytes. A client that stops reading for
// dumpSendPatience, or goes away, ends the answer early: it then lacks
// NLMSG_DONE and its request times out.
func (s *Server) sendDump(r *reply, d sysfs.RAMDump) {
	r.multi = true // the answer is sent here; dispatch adds nothing
	typ, seq := uint16(r.req.Header.Type), r.req.Header.Sequence
	dgram := make([]byte, 0, maxDatagram)
	var u64 [8]byte
	begin := func() int {
		start := len(dgram)
		dgram = appendHeader(dgram, typ, uint16(netlink.Multi), seq, r.port)
		return start
	}
	putU64 := func(t uint16, v uint64) {
		ne.PutUint64(u64[:], v)
		dgram = appendAttr(dgram, t, u64[:])
	}
	flush := func() bool {
		ok := s.sendPatiently(r.port, dgram)
		dgram = dgram[:0]
		return ok
	}

	start := begin()
	dgram = append(dgram, CmdGetDump, FamilyVersion, 0, 0)
	dgram = appendAttr(dgram, AttrDevName, append([]byte(r.req.DevName), 0))
	putU64(AttrDumpSize, uint64(len(d.Data)))
	dgram = appendAttr(dgram, AttrDumpSHA256, d.SHA256[:])
	putU64(AttrDumpTime, uint64(max(d.At.UnixNano(), 0)))
	if d.Crashed {
		dgram = appendAttr(dgram, AttrDumpCrash, nil)
	}
	dgram = finishMsg(dgram, start)
	for off := 0; off < len(d.Data); off += DumpChunkSize {
		chunk := d.Data[off:min(off+DumpChunkSize, len(d.Data))]
		if len(dgram)+dumpMsgOverhead+align4(len(chunk)) > maxDatagram && !flush() {
			return
		}
		start := begin()
		dgram = append(dgram, CmdGetDump, FamilyVersion, 0, 0)
		putU64(AttrDumpOffset, uint64(off))
		dgram = appendAttr(dgram, AttrDumpData, chunk)
		dgram = finishMsg(dgram, start)
	}
	start = len(dgram)
	dgram = appendHeader(dgram, uint16(netlink.Done), uint16(netlink.Multi), seq, r.port)
	dgram = ne.AppendUint32(dgram, 0)
	dgram = finishMsg(dgram, start)
	flush()
}

// sendPatiently is send for the datagrams of a dump answer: a client
// receiving hundreds of them may fall behind for a while, so it waits up
// to dumpSendPatience for room in the client's queue. It reports whether
// the datagram was sent.
func (s *Server) sendPatiently(port uint32, b []byte) bool {
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}
	deadline := time.Now().Add(dumpSendPatience)
	delay := 50 * time.Microsecond
	for {
		var err error
		if cerr := s.rc.Control(func(fd uintptr) {
			err = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		}); cerr != nil {
			err = cerr
		}
		switch {
		case err == nil:
			return true
		case (err == unix.EAGAIN || err == unix.ENOBUFS || err == unix.EINTR) && !s.closed.Load():
			if time.Now().After(deadline) {
				s.log.Warn("genl: client not reading the RAM dump, rest of the answer dropped", "port", port, "patience", dumpSendPatience)
				return false
			}
			time.Sleep(delay)
			delay = min(2*delay, 10*time.Millisecond)
		default:
			s.log.Debug("genl: send of a RAM dump answer", "port", port, "err", err)
			return false
		}
	}
}
