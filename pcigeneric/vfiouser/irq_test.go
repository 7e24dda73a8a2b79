package vfiouser

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
	"golang.org/x/sys/unix"
)

// irqSession is a server session driven message by message, as a client
// would: its replies are checked, and the session's interrupt table is
// at hand to raise vectors as the device does.
type irqSession struct {
	t    *testing.T
	dev  *ServerDevice
	conn *net.UnixConn
	w    *protocol.Conn
	done <-chan error
	id   uint16
}

func newIRQSession(t *testing.T) *irqSession {
	t.Helper()
	dev := newDevice(t)
	conn, done := serve(t, dev)
	s := &irqSession{t: t, dev: dev, conn: conn, w: protocol.NewConn(conn), done: done}
	t.Cleanup(func() {
		conn.Close()
		_ = waitServe(t, done)
	})
	// The session exists once its first message is answered.
	s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: protocol.IRQMSI}, nil, 0)
	return s
}

// setIRQs sends a DEVICE_SET_IRQS with fds and checks the reply: success
// for errno 0, else an error reply carrying errno.
func (s *irqSession) setIRQs(b protocol.SetIRQs, fds []int, errno unix.Errno) {
	s.t.Helper()
	s.id++
	if err := s.w.WriteMessage(protocol.EncodeMessage(s.id, protocol.CmdSetIRQs, 0, 0, b), fds); err != nil {
		s.t.Fatal(err)
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr, payload, rfds, err := s.w.ReadMessage()
	protocol.CloseFDs(rfds)
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := protocol.DecodeMessage(hdr, payload, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	h := m.Header
	if !h.IsReply() || h.ID != s.id || h.Cmd != protocol.CmdSetIRQs {
		s.t.Fatalf("reply %+v to SET_IRQS %d", h, s.id)
	}
	if got := unix.Errno(0); h.Flags&protocol.FlagError != 0 {
		got = unix.Errno(h.Error)
		if got != errno {
			s.t.Fatalf("SET_IRQS %+v (%d fds): error %v, want %v", b, len(fds), got, errno)
		}
	} else if errno != 0 {
		s.t.Fatalf("SET_IRQS %+v (%d fds) accepted, want %v", b, len(fds), errno)
	}
}

func (s *irqSession) table() *irqTable {
	s.dev.mu.Lock()
	defer s.dev.mu.Unlock()
	return s.dev.irqs
}

// readPBA reads the MSI-X pending-bit array's first word through BAR2.
func (s *irqSession) readPBA() uint32 {
	s.t.Helper()
	s.id++
	if err := s.w.WriteMessage(protocol.EncodeMessage(s.id, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionBAR2, Offset: msixPBAOffset, Count: 4}), nil); err != nil {
		s.t.Fatal(err)
	}
	hdr, payload, _, err := s.w.ReadMessage()
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := protocol.DecodeMessage(hdr, payload, 0)
	if err != nil || m.Header.Flags&protocol.FlagError != 0 {
		s.t.Fatalf("PBA read: %+v %v", m.Header, err)
	}
	return binary.LittleEndian.Uint32(m.Body.(protocol.RegionAccess).Data)
}

// eventfds makes n non-blocking eventfds, closed at the end of the test
// (the server gets its own copies).
func eventfds(t *testing.T, n int) []int {
	t.Helper()
	fds := make([]int, n)
	for i := range fds {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		fds[i] = fd
		t.Cleanup(func() { unix.Close(fd) })
	}
	return fds
}

// count reads and clears an eventfd's counter (0 when not signalled).
func count(t *testing.T, fd int) uint64 {
	t.Helper()
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if errors.Is(err, unix.EAGAIN) {
		return 0
	}
	if err != nil || n != 8 {
		t.Fatalf("eventfd read: %d %v", n, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// counts reads every eventfd of fds.
func counts(t *testing.T, fds []int) []uint64 {
	t.Helper()
	out := make([]uint64, len(fds))
	for i, fd := range fds {
		out[i] = count(t, fd)
	}
	return out
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSetIRQsQEMUMSIX replays what QEMU 11.1 sends when a Linux guest
// enables MSI-X and then unmasks its vectors one by one (the function
// reports NORESIZE, so QEMU disables the index and sets every vector
// again each time it grows), including the first request, "MSI-X
// enabled, no vector yet", which is DATA_EVENTFD for vector 0 with no
// descriptor, and a vector the guest never unmasked in the middle, which
// QEMU sends as a run of its own without descriptor. None of it may be an
// error, and each vector must then reach its own eventfd.
func TestSetIRQsQEMUMSIX(t *testing.T) {
	s := newIRQSession(t)
	efd := eventfds(t, 5)
	set := func(start, n int, fds []int) {
		t.Helper()
		s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSIX, Start: uint32(start), Count: uint32(n)}, fds, 0)
	}
	disable := func() {
		t.Helper()
		s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: protocol.IRQMSIX}, nil, 0)
	}
	// QEMU disables MSI before it enables MSI-X.
	s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: protocol.IRQMSI}, nil, 0)
	set(0, 1, nil) // vfio_enable_msix_no_vec
	st := s.table().stats()
	if st.Index != "MSI-X" || st.Vectors[0].Armed {
		t.Fatalf("after the no-vector request: %+v", st)
	}
	// Vectors 0, 2, 3, 4 in use, 1 not: each use re-sends the whole set.
	disable()
	set(0, 1, efd[:1])
	disable()
	set(0, 1, efd[:1])
	set(1, 1, nil)
	set(2, 1, efd[2:3])
	disable()
	set(0, 1, efd[:1])
	set(1, 1, nil)
	set(2, 3, efd[2:5])

	tb := s.table()
	for v := range 6 {
		tb.Raise(v)
	}
	if got, want := counts(t, efd), []uint64{1, 0, 1, 1, 1}; !equal(got, want) {
		t.Fatalf("eventfd counts %v, want %v: each vector on its own eventfd, none folded", got, want)
	}
	st = tb.stats()
	if st.Enabled != 5 || st.Vectors[1].Lost != 1 || st.Vectors[5].Lost != 1 || st.Vectors[0].Signalled != 1 || st.Vectors[4].Signalled != 1 {
		t.Fatalf("stats %+v", st)
	}
	if ds := s.dev.Stats(); ds.Malformed != 0 || ds.ErrorReplies != 0 || ds.Interrupts != 4 || ds.IRQsLost != 2 {
		t.Fatalf("device stats %+v: QEMU's requests must all be accepted", ds)
	}

	// QEMU's release of a vector (guest masks it, with KVM): DATA_EVENTFD
	// without descriptor for that vector alone.
	set(3, 1, nil)
	tb.Raise(3)
	if got := count(t, efd[3]); got != 0 || tb.stats().Vectors[3].Armed {
		t.Fatalf("de-assigned vector 3 still signalled (%d)", got)
	}
	disable()
	if st := tb.stats(); st.Index != "" || st.Vectors[0].Armed || st.Enabled != 0 {
		t.Fatalf("after disable: %+v", st)
	}
}

// TestSetIRQsForms checks each form of DEVICE_SET_IRQS the specification
// gives for MSI and MSI-X: eventfds set and de-assigned, DATA_NONE and
// DATA_BOOL triggers, masks and unmasks (a vector raised while masked is
// held pending, shows in the MSI-X PBA and is delivered once on unmask),
// disable, and the requests refused with EINVAL.
func TestSetIRQsForms(t *testing.T) {
	for _, index := range []uint32{protocol.IRQMSI, protocol.IRQMSIX} {
		t.Run(irqKind(int(index)), func(t *testing.T) {
			s := newIRQSession(t)
			efd := eventfds(t, 4)
			req := func(flags uint32, start, n int, data []byte, fds []int, errno unix.Errno) {
				t.Helper()
				s.setIRQs(protocol.SetIRQs{Flags: flags, Index: index, Start: uint32(start), Count: uint32(n), Data: data}, fds, errno)
			}
			expect := func(what string, want ...uint64) {
				t.Helper()
				if got := counts(t, efd); !equal(got, want) {
					t.Fatalf("%s: eventfd counts %v, want %v", what, got, want)
				}
			}
			pba := func(want uint32) {
				t.Helper()
				if index != protocol.IRQMSIX {
					want = 0 // MSI has no PBA in BAR2
				}
				if got := s.readPBA(); got != want {
					t.Fatalf("PBA 0x%x, want 0x%x", got, want)
				}
			}
			// Not enabled yet: triggers and masks are refused.
			req(protocol.IRQDataNone|protocol.IRQActionTrig, 0, 1, nil, nil, unix.EINVAL)
			req(protocol.IRQDataNone|protocol.IRQActionMask, 0, 1, nil, nil, unix.EINVAL)

			req(protocol.IRQDataEventfd|protocol.IRQActionTrig, 0, 4, nil, efd, 0)
			req(protocol.IRQDataNone|protocol.IRQActionTrig, 1, 2, nil, nil, 0)
			expect("DATA_NONE trigger of 1..2", 0, 1, 1, 0)
			req(protocol.IRQDataBool|protocol.IRQActionTrig, 0, 4, []byte{1, 0, 0, 1}, nil, 0)
			expect("DATA_BOOL trigger {1,0,0,1}", 1, 0, 0, 1)

			// Mask 2 (DATA_NONE) and 0, 3 (DATA_BOOL): raised, held.
			req(protocol.IRQDataNone|protocol.IRQActionMask, 2, 1, nil, nil, 0)
			req(protocol.IRQDataBool|protocol.IRQActionMask, 0, 4, []byte{1, 0, 0, 1}, nil, 0)
			tb := s.table()
			for v := range 4 {
				tb.Raise(v)
				tb.Raise(v)
			}
			expect("raised twice each, 0, 2, 3 masked", 0, 2, 0, 0)
			pba(0b1101)
			if st := tb.stats(); !st.Vectors[2].Masked || !st.Vectors[2].Pending || st.Vectors[2].Held != 2 {
				t.Fatalf("vector 2: %+v", st.Vectors[2])
			}
			// A trigger of a masked vector is held too.
			req(protocol.IRQDataNone|protocol.IRQActionTrig, 2, 1, nil, nil, 0)
			expect("trigger of masked 2", 0, 0, 0, 0)
			// Unmask 2 (DATA_NONE) and 3 (DATA_BOOL): one delivery each.
			req(protocol.IRQDataNone|protocol.IRQActionUnmsk, 2, 1, nil, nil, 0)
			req(protocol.IRQDataBool|protocol.IRQActionUnmsk, 2, 2, []byte{0, 1}, nil, 0)
			expect("unmasked 2 and 3", 0, 0, 1, 1)
			pba(0b0001)
			// Unmasking again delivers nothing more; 0 stays masked.
			req(protocol.IRQDataNone|protocol.IRQActionUnmsk, 2, 2, nil, nil, 0)
			expect("unmasked again", 0, 0, 0, 0)
			// Vector 0 de-assigned while masked and pending: its unmask
			// finds no eventfd, the interrupt is lost and counted.
			req(protocol.IRQDataEventfd|protocol.IRQActionTrig, 0, 1, nil, nil, 0)
			req(protocol.IRQDataNone|protocol.IRQActionUnmsk, 0, 1, nil, nil, 0)
			expect("vector 0 de-assigned", 0, 0, 0, 0)
			if st := tb.stats(); st.Vectors[0].Lost != 1 || st.Vectors[0].Pending || st.Vectors[0].Armed {
				t.Fatalf("vector 0: %+v", st.Vectors[0])
			}
			// And set again.
			req(protocol.IRQDataEventfd|protocol.IRQActionTrig, 0, 1, nil, efd[:1], 0)
			tb.Raise(0)
			expect("vector 0 set again", 1, 0, 0, 0)

			// Refused: an eventfd for masking, some but not all
			// descriptors, vectors beyond the function's, a trigger
			// beyond the vectors enabled, the other index while this one
			// is enabled.
			req(protocol.IRQDataEventfd|protocol.IRQActionMask, 0, 1, nil, eventfds(t, 1), unix.EINVAL)
			req(protocol.IRQDataEventfd|protocol.IRQActionTrig, 0, 3, nil, eventfds(t, 2), unix.EINVAL)
			req(protocol.IRQDataNone|protocol.IRQActionMask, 30, 3, nil, nil, unix.EINVAL)
			req(protocol.IRQDataNone|protocol.IRQActionTrig, 3, 2, nil, nil, unix.EINVAL)
			other := uint32(protocol.IRQMSI + protocol.IRQMSIX - index)
			s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: other, Count: 1}, eventfds(t, 1), unix.EINVAL)
			// Disabling the other index (not enabled) changes nothing.
			s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: other}, nil, 0)
			tb.Raise(1)
			expect("after the other index's disable", 0, 1, 0, 0)

			// Disable: every eventfd closed, masks cleared.
			req(protocol.IRQDataNone|protocol.IRQActionTrig, 0, 0, nil, nil, 0)
			tb.Raise(1)
			expect("after disable", 0, 0, 0, 0)
			if st := tb.stats(); st.Index != "" || st.Vectors[0].Masked || st.Vectors[1].Lost != 1 {
				t.Fatalf("after disable: %+v", st)
			}
			if ds := s.dev.Stats(); ds.Malformed != 1 || ds.IRQsHeld != 7 {
				t.Fatalf("device stats %+v: want the 2-of-3 descriptors request malformed, 7 held", ds)
			}
		})
	}
}

// TestSetIRQsMSIFolds checks that with MSI a vector beyond those enabled
// folds onto vector mod enabled (Linux on x86 without interrupt
// remapping gets one MSI vector and points every ring at it), while
// MSI-X does not fold.
func TestSetIRQsMSIFolds(t *testing.T) {
	s := newIRQSession(t)
	efd := eventfds(t, 2)
	s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSI, Count: 2}, efd, 0)
	tb := s.table()
	for _, v := range []int{0, 1, 2, 3, 5} {
		tb.Raise(v)
	}
	if got := counts(t, efd); !equal(got, []uint64{2, 3}) {
		t.Fatalf("MSI with 2 vectors: counts %v, want [2 3]", got)
	}
	s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: protocol.IRQMSI}, nil, 0)
	s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSIX, Count: 2}, efd, 0)
	tb.Raise(2)
	tb.Raise(3)
	if got := counts(t, efd); !equal(got, []uint64{0, 0}) || tb.stats().Vectors[2].Lost != 1 {
		t.Fatalf("MSI-X: counts %v, vector 2 %+v; want nothing folded", got, tb.stats().Vectors[2])
	}
}

// TestIRQMerged checks the count of interrupts the client injects: a
// signal written while the client has not read the previous one merges
// with it (one interrupt for both), one written after the read is a new
// interrupt, and the eventfd's counter keeps every signal either way.
func TestIRQMerged(t *testing.T) {
	s := newIRQSession(t)
	efd := eventfds(t, 1)
	s.setIRQs(protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSIX, Count: 1}, efd, 0)
	tb := s.table()
	tb.Raise(0)
	tb.Raise(0)
	tb.Raise(0)
	if v := tb.stats().Vectors[0]; v.Signalled != 3 || v.Merged != 2 || v.Delivered() != 1 {
		t.Fatalf("three signals before a read: %+v, want 3 signalled, 2 merged", v)
	}
	if got := count(t, efd[0]); got != 3 {
		t.Fatalf("eventfd counter %d, want 3", got)
	}
	tb.Raise(0)
	if v := tb.stats().Vectors[0]; v.Signalled != 4 || v.Merged != 2 || v.Delivered() != 2 {
		t.Fatalf("a signal after the read: %+v, want 4 signalled, 2 merged", v)
	}
	if got := count(t, efd[0]); got != 1 {
		t.Fatalf("eventfd counter %d, want 1", got)
	}
}
