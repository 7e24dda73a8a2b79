package genl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// This file holds the server's receive loop: one datagram at a time,
// answered on a goroutine of its own within MaxInFlight.

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
		n, oobn, rflags, from, err := recvmsg(s.rc, buf, oob)
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
