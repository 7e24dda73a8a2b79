package genl

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// This file holds the socket calls the server and the client share: a
// receive that waits in the runtime's poller, and a send that never blocks
// on a full receive queue.

// Backoff between the retries of a send to a full receive queue: the
// first pause, doubled after each retry up to the longest.
const (
	sendRetryFirst = 20 * time.Microsecond
	sendRetryMax   = 5 * time.Millisecond
)

// recvmsg receives one datagram into buf and its control messages into
// oob, waiting in the runtime's poller, so the socket's read deadline
// applies. flags are the message flags (MSG_TRUNC…).
func recvmsg(rc syscall.RawConn, buf, oob []byte) (n, oobn, flags int, from unix.Sockaddr, err error) {
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, from, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err == nil {
		err = rerr
	}
	return n, oobn, flags, from, err
}

// sendRetry sends the datagram b to port without blocking. A netlink
// socket never polls writable when the receiver's queue is full, so a
// full queue (EAGAIN), a failed allocation (ENOBUFS) or an interrupted
// call (EINTR) is retried after a pause (sendRetryFirst, doubling up to
// sendRetryMax) until deadline; a zero deadline retries for ever. It
// returns nil once sent, the error of a send that cannot succeed (such
// as ECONNREFUSED: nobody holds the port), or, past the deadline, an
// error wrapping os.ErrDeadlineExceeded and the last errno.
func sendRetry(rc syscall.RawConn, port uint32, b []byte, deadline time.Time) error {
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port}
	delay := sendRetryFirst
	for {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, sa)
		}); cerr != nil {
			return cerr
		}
		if err != unix.EAGAIN && err != unix.ENOBUFS && err != unix.EINTR {
			return err
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%w: %w", os.ErrDeadlineExceeded, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, sendRetryMax)
	}
}
