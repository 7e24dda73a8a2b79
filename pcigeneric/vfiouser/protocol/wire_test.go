package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"golang.org/x/sys/unix"
)

// wireTestFD names the memfds these tests send, so that counting them
// in /proc/self/fd is not disturbed by other tests running in parallel.
const wireTestFD = "gomhi-wire-test"

// openFDs counts this process's descriptors of the memfds sendFDs made.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(target, wireTestFD) {
			n++
		}
	}
	return n
}

// sendFDs makes n memfds for a test to send, closed when it ends.
func sendFDs(t *testing.T, n int) []int {
	t.Helper()
	var fds []int
	for range n {
		fd, err := unix.MemfdCreate(wireTestFD, unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	t.Cleanup(func() { CloseFDs(fds) })
	return fds
}

// TestWireFramingAndFDs sends messages as a peer may (several messages
// before the reader reads, descriptors on one of them, messages split over
// several sendmsg calls, more than MaxFDs descriptors, a message larger
// than the read buffer) and checks what Next hands out: every message
// whole and in order, and the descriptors with the message they were sent
// with (for a peer sending one message per sendmsg), never leaked.
func TestWireFramingAndFDs(t *testing.T) {
	msg := func(id uint16, data int) []byte {
		return EncodeMessage(id, CmdRegionWrite, FlagNoReply, 0, RegionAccess{Count: uint32(data), Data: bytes.Repeat([]byte{byte(id)}, data)})
	}
	type send = wireSend
	cases := []struct {
		name  string
		sends []send
		ids   []uint16
		fds   []int // per message; -1: the too-many marker
	}{
		{"fds on the second of two queued messages", []send{{msg(1, 4), 0}, {msg(2, 4), 1}}, []uint16{1, 2}, []int{0, 1}},
		{"fds on the first of two queued messages", []send{{msg(1, 4), 2}, {msg(2, 4), 0}}, []uint16{1, 2}, []int{2, 0}},
		{"fds on every message", []send{{msg(1, 4), 1}, {msg(2, 4), 3}, {msg(3, 4), 1}}, []uint16{1, 2, 3}, []int{1, 3, 1}},
		{"message split over three sends, fds on the first", []send{{msg(1, 40)[:10], 2}, {msg(1, 40)[10:30], 0}, {msg(1, 40)[30:], 0}, {msg(2, 4), 0}}, []uint16{1, 2}, []int{2, 0}},
		{"more than MaxFDs", []send{{msg(1, 4), MaxFDs + 1}, {msg(2, 4), 1}}, []uint16{1, 2}, []int{-1, 1}},
		{"bigger than the read buffer", []send{{msg(1, 4), 0}, {msg(2, 3*wireBufSize), 1}, {msg(3, 4), 0}}, []uint16{1, 2, 3}, []int{0, 1, 0}},
		// A peer that packs two messages into one sendmsg with
		// descriptors gets them on the first from an exact wire, on the
		// last from a greedy one (see Conn).
		{"two messages in one send", []send{{append(msg(1, 4), msg(2, 4)...), 1}}, []uint16{1, 2}, []int{1, 0}},
	}
	for _, tc := range cases {
		for _, greedy := range []bool{false, true} {
			want := tc.fds
			if greedy && tc.name == "two messages in one send" {
				want = []int{0, 1}
			}
			t.Run(fmt.Sprintf("%s/greedy=%v", tc.name, greedy), func(t *testing.T) {
				testWireCase(t, greedy, tc.sends, tc.ids, want)
			})
		}
	}
}

type wireSend struct {
	b   []byte
	fds int
}

// testWireCase sends, then reads len(ids) messages with a greedy or exact
// wire and checks their IDs and descriptor counts (wantFDs; -1: the
// too-many marker) and that no received descriptor stays open.
func testWireCase(t *testing.T, greedy bool, sends []wireSend, ids []uint16, wantFDs []int) {
	c, s := vutest.SocketPair(t)
	defer c.Close()
	defer s.Close()
	wc, ws := NewConn(c), NewConn(s)
	ws.Greedy = greedy
	for _, sd := range sends {
		if err := wc.WriteMessage(sd.b, sendFDs(t, sd.fds)); err != nil {
			t.Fatal(err)
		}
	}
	before := openFDs(t) // with the sender's descriptors, open until the test ends
	for i, id := range ids {
		h, _, payload, fds, err := ws.Next()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if h.ID != id || len(payload) != int(h.Size)-HeaderSize || len(payload) > 16 && payload[16] != byte(id) {
			t.Fatalf("message %d: header %+v, %d payload bytes, want ID %d", i, h, len(payload), id)
		}
		want := wantFDs[i]
		if want == -1 {
			if len(fds) != MaxFDs+1 || fds[0] != -1 {
				t.Errorf("message %d: descriptors %v, want the too-many marker", id, fds)
			}
			continue
		}
		if len(fds) != want {
			t.Errorf("message %d: %d descriptors, want %d", id, len(fds), want)
		}
		CloseFDs(fds)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after reading, %d before: received descriptors leaked", after, before)
	}
}

// TestWireErrorsCloseFDs checks that descriptors received with a message
// that never completes, or before a broken header, are closed.
func TestWireErrorsCloseFDs(t *testing.T) {
	m := EncodeMessage(1, CmdRegionWrite, FlagNoReply, 0, RegionAccess{Count: 4, Data: []byte{1, 2, 3, 4}})
	bad := EncodeMessage(2, CmdRegionWrite, FlagNoReply, 0, RegionAccess{Count: 4, Data: []byte{1, 2, 3, 4}})
	bad[8] = 0xff // unknown flags
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"truncated", m[:20], io.ErrUnexpectedEOF},
		{"bad header", bad, ErrFraming},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, s := vutest.SocketPair(t)
			defer s.Close()
			wc, ws := NewConn(c), NewConn(s)
			before := openFDs(t)
			fds := sendFDs(t, 3)
			if err := wc.WriteMessage(tc.b, fds); err != nil {
				t.Fatal(err)
			}
			CloseFDs(fds)
			for i := range fds {
				fds[i] = -1
			}
			c.Close()
			if _, _, _, _, err := ws.Next(); !errors.Is(err, tc.want) {
				t.Fatalf("Next: %v, want %v", err, tc.want)
			}
			if after := openFDs(t); after != before {
				t.Errorf("%d descriptors open, want %d: received descriptors leaked", after, before)
			}
		})
	}
}
