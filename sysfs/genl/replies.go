package genl

import (
	"errors"
	"os"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// This file holds how the server frames its answers: the messages of one
// reply packed into datagrams, NLMSG_DONE, ACKs and NLMSG_ERROR with its
// extended acknowledgement, and the send that never blocks the server.

// reply gathers the messages of one answer into datagrams.
type reply struct {
	s     *Server
	port  uint32
	req   *Request
	dgram []byte
	multi bool
}

// flush sends the datagram gathered so far, if any.
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

// dump sends msgs, the attribute payloads of a multipart answer, one
// message each, and NLMSG_DONE.
func (r *reply) dump(cmd uint8, msgs [][]byte) {
	r.multi = true
	for _, b := range msgs {
		r.add(cmd, FamilyVersion, b)
	}
	r.done()
}

// finish sends a single-message answer, with an ACK if the request asked
// for one (as the kernel does after a doit).
func (r *reply) finish(msg []byte) {
	if r.req.Header.Flags&netlink.Acknowledge != 0 {
		r.dgram = append(r.dgram, errorMsg(r.port, msg, nil)...)
	}
	r.flush()
}

// addEncoded adds one message with the attributes ae holds; attributes
// too large for a message fail the request with EMSGSIZE.
func (r *reply) addEncoded(cmd uint8, ae *netlink.AttributeEncoder) error {
	b, err := ae.Encode()
	if err != nil {
		return reqErr(unix.EMSGSIZE, 0, "%s: reply does not fit: %v", cmdName(cmd), err)
	}
	r.add(cmd, FamilyVersion, b)
	return nil
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
	err := sendRetry(s.rc, port, b, time.Now().Add(sendRetryTime))
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.log.Warn("genl: client not reading, answer dropped", "port", port)
	default:
		// ECONNREFUSED: the client went away.
		s.log.Debug("genl: send", "port", port, "err", err)
	}
}
