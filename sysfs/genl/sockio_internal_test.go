package genl

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// userSockPair is a sender and a receiver on NETLINK_USERSOCK, the
// receiver's queue as short as the kernel allows.
func userSockPair(t *testing.T) (snd syscall.RawConn, rcv *netlink.Conn, rcvRC syscall.RawConn) {
	t.Helper()
	dial := func() (*netlink.Conn, syscall.RawConn) {
		c, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		return c, rc
	}
	_, snd = dial()
	rcv, rcvRC = dial()
	_ = rcvRC.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 0) })
	return snd, rcv, rcvRC
}

// fill sends to port until its queue is full.
func fill(t *testing.T, rc syscall.RawConn, port uint32, b []byte) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		var err error
		_ = rc.Control(func(fd uintptr) {
			err = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Pid: port})
		})
		if err == unix.EAGAIN {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the receiver's queue never filled")
}

// TestSendRetry: a send to a full queue waits until the receiver reads
// and then goes through; one whose receiver never reads gives up at the
// deadline with an error matching os.ErrDeadlineExceeded and EAGAIN; one
// to a port nobody holds fails at once with ECONNREFUSED.
func TestSendRetry(t *testing.T) {
	snd, rcv, rcvRC := userSockPair(t)
	msg := make([]byte, 1024)

	fill(t, snd, rcv.PID(), msg)
	start := time.Now()
	err := sendRetry(snd, rcv.PID(), msg, start.Add(50*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("send to a queue nobody reads: %v, want os.ErrDeadlineExceeded and EAGAIN", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("gave up after %v, before the 50 ms deadline", d)
	}

	drained := make(chan int)
	go func() {
		time.Sleep(20 * time.Millisecond)
		buf := make([]byte, 4096)
		n := 0
		for {
			var err error
			_ = rcvRC.Control(func(fd uintptr) { _, _, err = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT) })
			if err != nil {
				break
			}
			n++
		}
		drained <- n
	}()
	if err := sendRetry(snd, rcv.PID(), msg, time.Now().Add(10*time.Second)); err != nil {
		t.Fatalf("send to a full queue that is then read: %v", err)
	}
	if n := <-drained; n == 0 {
		t.Fatal("the receiver read nothing")
	}

	// The sender's own port, once closed, is held by nobody.
	gone, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		t.Fatal(err)
	}
	port := gone.PID()
	_ = gone.Close()
	start = time.Now()
	if err := sendRetry(snd, port, msg, time.Time{}); !errors.Is(err, unix.ECONNREFUSED) {
		t.Fatalf("send to a port nobody holds: %v, want ECONNREFUSED", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("ECONNREFUSED took %v: retried", d)
	}
}
