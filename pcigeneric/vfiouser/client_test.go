package vfiouser

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/slab"
)

// TestClientServesDMA checks the client's answers to the server's DMA_READ
// and DMA_WRITE: inside its memory they are served, outside they fail with
// EFAULT, and other server commands get ENOSYS.
func TestClientServesDMA(t *testing.T) {
	c, s := socketPair(t)
	defer c.Close()
	defer s.Close()
	tr := &Transport{w: newWire(c), mem: make([]byte, 4096)}
	tr.slab.Store(slab.NewOn(0x1000, tr.mem))
	peer := newWire(s)
	exchange := func(raw []byte) Message {
		t.Helper()
		hdr, payload := raw[:HeaderSize], raw[HeaderSize:]
		m, err := DecodeMessage(hdr, payload, 0)
		if err != nil {
			t.Fatal(err)
		}
		tr.serveDMA(m)
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
		rh, rp, _, err := peer.read()
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeMessage(rh, rp, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := exchange(EncodeMessage(1, CmdDMAWrite, 0, 0, DMAAccess{Address: 0x1ffc, Count: 4, Data: []byte{1, 2, 3, 4}}))
	if r.Header.Flags&FlagError != 0 || tr.mem[0xffc] != 1 || tr.mem[0xfff] != 4 {
		t.Fatalf("write: %+v", r.Header)
	}
	r = exchange(EncodeMessage(2, CmdDMARead, 0, 0, DMAAccess{Address: 0x1ffc, Count: 4}))
	if a, ok := r.Body.(DMAAccess); !ok || string(a.Data) != "\x01\x02\x03\x04" {
		t.Fatalf("read: %+v", r)
	}
	for _, bad := range [][]byte{
		EncodeMessage(3, CmdDMARead, 0, 0, DMAAccess{Address: 0x1ffc, Count: 8}),
		EncodeMessage(4, CmdDMAWrite, 0, 0, DMAAccess{Address: 0xffc, Count: 4, Data: []byte{0, 0, 0, 0}}),
		EncodeMessage(5, CmdDMARead, 0, 0, DMAAccess{Address: ^uint64(0) - 2, Count: 2}),
	} {
		if r := exchange(bad); r.Header.Flags&FlagError == 0 || unix.Errno(r.Header.Error) != unix.EFAULT {
			t.Fatalf("outside: %+v", r.Header)
		}
	}
	if r := exchange(EncodeMessage(6, CmdDeviceReset, 0, 0, nil)); unix.Errno(r.Header.Error) != unix.ENOSYS {
		t.Fatalf("reset at the client: %+v", r.Header)
	}
}
