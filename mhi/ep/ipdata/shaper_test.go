package ipdata

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/proto/lend"
	"github.com/gomhi/gomhi/mhi/wire"
)

// udpTo builds an IPv4 or IPv6 UDP packet to port.
func udpTo(v6 bool, port uint16, frag bool) []byte {
	if v6 {
		p := make([]byte, 48)
		p[0] = 0x60
		p[6] = 17
		binary.BigEndian.PutUint16(p[42:], port)
		return p
	}
	p := make([]byte, 28)
	p[0] = 0x45
	p[9] = 17
	if frag {
		binary.BigEndian.PutUint16(p[6:], 0x2000) // more fragments
	}
	binary.BigEndian.PutUint16(p[22:], port)
	return p
}

func TestShapedFlowMatch(t *testing.T) {
	f, err := New(Config{Format: framing.RawIP, Shape: ShapeConfig{UDPPort: 9, Rate: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if f.Config().Shape.Queue != DefaultShapeQueue {
		t.Fatalf("queue default: %+v", f.Config().Shape)
	}
	tcp := udpTo(false, 9, false)
	tcp[9] = 6
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"ipv4 port 9", udpTo(false, 9, false), true},
		{"ipv6 port 9", udpTo(true, 9, false), true},
		{"ipv4 port 10", udpTo(false, 10, false), false},
		{"ipv4 fragment", udpTo(false, 9, true), false},
		{"tcp", tcp, false},
		{"short", udpTo(false, 9, false)[:24], false},
		{"empty", nil, false},
		{"bad ihl", append([]byte{0x4F}, udpTo(false, 9, false)[1:]...), false},
	} {
		if got := f.shapedFlow(tc.pkt); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestShapeAndLendRegionValidation(t *testing.T) {
	for _, sc := range []ShapeConfig{{UDPPort: 9}, {UDPPort: 9, Rate: -1}, {UDPPort: 9, Rate: 1, Queue: -1}} {
		if _, err := New(Config{Format: framing.RawIP, Shape: sc}); !errors.Is(err, wire.ErrConfig) {
			t.Errorf("shape %+v: %v", sc, err)
		}
	}
	f, err := New(Config{Format: framing.RawIP})
	if err != nil {
		t.Fatal(err)
	}
	good := lend.Region{DataIOVA: 0x1000, SlotSize: 1600, Slots: 127, TagIOVA: 0x100000, ProdIOVA: 0x100200,
		ConsIOVA: 0x100204, RingIOVA: 0x100400, RingEntries: 128}
	if err := f.SetLendRegion(good); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*lend.Region){
		func(r *lend.Region) { r.Slots = 0 },
		func(r *lend.Region) { r.Slots = 1 << 16 },
		func(r *lend.Region) { r.RingEntries = 100 },
		func(r *lend.Region) { r.RingEntries = 64 },
		func(r *lend.Region) { r.TagIOVA++ },
		func(r *lend.Region) { r.Headroom = r.SlotSize },
	} {
		r := good
		mut(&r)
		if err := f.SetLendRegion(r); !errors.Is(err, wire.ErrConfig) {
			t.Errorf("region %+v: %v", r, err)
		}
	}
}
