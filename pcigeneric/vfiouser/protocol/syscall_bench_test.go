package protocol

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"golang.org/x/sys/unix"
)

// BenchmarkSyscallCost measures, on this machine, the kernel operations a
// vfio-user round trip is made of, to bound what BenchmarkLoopback can
// reach (docs/PERFORMANCE.md):
//
//   - eventfd: an eventfd write and read by one goroutine (two system
//     calls, no wakeup): the server's interrupt signalling, the client's
//     read;
//   - socket: a 72-byte sendmsg (a doorbell pair) and the recvmsg taking it,
//     by one goroutine (two system calls, no wakeup);
//   - pingpong: an eventfd write that wakes a goroutine waiting in the
//     runtime's poller, which answers the same way (per op: two wakeups
//     through the poller, four system calls, plus the reads that find
//     nothing): what a message costs when its receiver is waiting.
func BenchmarkSyscallCost(b *testing.B) {
	one := binary.LittleEndian.AppendUint64(nil, 1) // an eventfd signal, as the server writes it
	b.Run("eventfd", func(b *testing.B) {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(efd)
		var buf [8]byte
		b.ReportAllocs()
		for b.Loop() {
			if _, err := unix.Write(efd, one); err != nil {
				b.Fatal(err)
			}
			if _, err := unix.Read(efd, buf[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("socket", func(b *testing.B) {
		c, s := vutest.SocketPair(b)
		defer c.Close()
		defer s.Close()
		wc, ws := NewConn(c), NewConn(s)
		msg := make([]byte, 72)
		b.ReportAllocs()
		for b.Loop() {
			if err := wc.WriteMessage(msg, nil); err != nil {
				b.Fatal(err)
			}
			if n, _, _, err := ws.recv(ws.rbuf); err != nil || n != len(msg) {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("pingpong", func(b *testing.B) {
		var files [2]*os.File
		var fds [2]int // not files[i].Fd(), which makes the descriptor blocking
		for i := range files {
			efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
			if err != nil {
				b.Fatal(err)
			}
			fds[i] = efd
			files[i] = os.NewFile(uintptr(efd), "pingpong")
			defer files[i].Close()
		}
		wait := func(f *os.File) error {
			rc, err := f.SyscallConn()
			if err != nil {
				return err
			}
			var buf [8]byte
			return rc.Read(func(fd uintptr) bool {
				_, err := unix.Read(int(fd), buf[:])
				return err != unix.EAGAIN
			})
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for wait(files[0]) == nil {
				if _, err := unix.Write(fds[1], one); err != nil {
					return
				}
			}
		}()
		for b.Loop() {
			if _, err := unix.Write(fds[0], one); err != nil {
				b.Fatal(err)
			}
			if err := wait(files[1]); err != nil {
				b.Fatal(err)
			}
		}
		files[0].Close()
		<-done
	})
}
