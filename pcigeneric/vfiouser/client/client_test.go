package client

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/slab"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// TestClientServesDMA checks the client's answers to the server's DMA_READ
// and DMA_WRITE: inside its memory they are served, outside they fail with
// EFAULT, and other server commands get ENOSYS.
func TestClientServesDMA(t *testing.T) {
	c, s := vutest.SocketPair(t)
	defer c.Close()
	defer s.Close()
	tr := &Transport{w: protocol.NewConn(c), mem: make([]byte, 4096)}
	tr.slab.Store(slab.NewOn(0x1000, tr.mem))
	peer := protocol.NewConn(s)
	exchange := func(raw []byte) protocol.Message {
		t.Helper()
		hdr, payload := raw[:protocol.HeaderSize], raw[protocol.HeaderSize:]
		m, err := protocol.DecodeMessage(hdr, payload, 0)
		if err != nil {
			t.Fatal(err)
		}
		tr.serveDMA(m)
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
		rh, rp, _, err := peer.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		r, err := protocol.DecodeMessage(rh, rp, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := exchange(protocol.EncodeMessage(1, protocol.CmdDMAWrite, 0, 0, protocol.DMAAccess{Address: 0x1ffc, Count: 4, Data: []byte{1, 2, 3, 4}}))
	if r.Header.Flags&protocol.FlagError != 0 || tr.mem[0xffc] != 1 || tr.mem[0xfff] != 4 {
		t.Fatalf("write: %+v", r.Header)
	}
	r = exchange(protocol.EncodeMessage(2, protocol.CmdDMARead, 0, 0, protocol.DMAAccess{Address: 0x1ffc, Count: 4}))
	if a, ok := r.Body.(protocol.DMAAccess); !ok || string(a.Data) != "\x01\x02\x03\x04" {
		t.Fatalf("read: %+v", r)
	}
	for _, bad := range [][]byte{
		protocol.EncodeMessage(3, protocol.CmdDMARead, 0, 0, protocol.DMAAccess{Address: 0x1ffc, Count: 8}),
		protocol.EncodeMessage(4, protocol.CmdDMAWrite, 0, 0, protocol.DMAAccess{Address: 0xffc, Count: 4, Data: []byte{0, 0, 0, 0}}),
		protocol.EncodeMessage(5, protocol.CmdDMARead, 0, 0, protocol.DMAAccess{Address: ^uint64(0) - 2, Count: 2}),
	} {
		if r := exchange(bad); r.Header.Flags&protocol.FlagError == 0 || unix.Errno(r.Header.Error) != unix.EFAULT {
			t.Fatalf("outside: %+v", r.Header)
		}
	}
	if r := exchange(protocol.EncodeMessage(6, protocol.CmdDeviceReset, 0, 0, nil)); unix.Errno(r.Header.Error) != unix.ENOSYS {
		t.Fatalf("reset at the client: %+v", r.Header)
	}
}
