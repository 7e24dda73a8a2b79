package wire

import (
	"errors"
	"testing"
)

func TestElementRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		e    Element
		typ  PacketType
	}{
		{"tre", TransferTRE(0x40001000, 1500, TREIEOT|TREBEI), PktTransfer},
		{"start", CommandElement(PktStartChanCmd, 101), PktStartChanCmd},
		{"xfer event", TransferEvent(0x40002010, CCOverflow, 0xFFFF, 1), PktTxEvent},
		{"cmd completion", CommandCompletionEvent(0x40003000, CCSuccess), PktCmdCompletion},
		{"state", StateChangeEvent(StateSysErr), PktStateChangeEvent},
		{"ee", EEEvent(EEAMSS), PktEEEvent},
	}
	for _, tc := range cases {
		var b [ElementSize]byte
		tc.e.Put(b[:])
		got := ParseElement(b[:])
		if got != tc.e || got.Type() != tc.typ {
			t.Errorf("%s: %v -> %v (type %s)", tc.name, tc.e, got, got.Type())
		}
	}
	ev := TransferEvent(0x1230, CCEOT, 77, 100)
	if ev.Code() != CCEOT || ev.Length() != 77 || ev.Channel() != 100 || ev.Ptr != 0x1230 {
		t.Fatalf("transfer event fields: %v", ev)
	}
	tre := TransferTRE(0x10, 0x1FFFF, TREChain)
	if tre.Length() != 0xFFFF || tre.Flags() != TREChain {
		t.Fatalf("TRE length must be 16 bits: %v", tre)
	}
	if s := StateChangeEvent(StateM0).EventState(); s != StateM0 {
		t.Fatalf("state %s", s)
	}
	// Linux's layout: the type sits in dword1 bits 23:16.
	var b [16]byte
	CommandElement(PktResetChanCmd, 5).Put(b[:])
	if b[14] != 0x10 || b[15] != 5 {
		t.Fatalf("command bytes % x", b)
	}
}

func TestContextLayout(t *testing.T) {
	c := Context{Cfg: 0x302, Type: 2, Index: 5, RBase: 0x1_0000_1000, RLen: 0x800, RP: 0x1_0000_1010, WP: 0x1_0000_1020}
	b := make([]byte, ContextSize)
	c.Put(b)
	if got := ParseContext(b); got != c {
		t.Fatalf("round trip %+v", got)
	}
	// 64-bit fields at 4-byte aligned offsets, little-endian.
	if b[0x0C] != 0x00 || b[0x0D] != 0x10 || b[0x10] != 0x01 || b[0x24] != 0x20 {
		t.Fatalf("layout % x", b)
	}
	if Load64(b, CtxWP) != c.WP {
		t.Fatalf("Load64 = 0x%x", Load64(b, CtxWP))
	}
	Store64(b, CtxRP, 0xAABBCCDD11223344)
	if ParseContext(b).RP != 0xAABBCCDD11223344 {
		t.Fatal("Store64")
	}
	if c.ChannelState() != ChannelRunning || c.BurstMode() != BurstEnable {
		t.Fatalf("chcfg fields: %s %d", c.ChannelState(), c.BurstMode())
	}
}

func TestConfigValidate(t *testing.T) {
	good := func() ControllerConfig {
		return ControllerConfig{
			MaxChannels: 128, CommandElements: 128,
			EventRings: []EventRingConfig{{Elements: 64, Channel: -1}},
			Channels: []ChannelConfig{
				{Num: 0, Name: "LOOPBACK", Elements: 32, Dir: Uplink},
				{Num: 1, Name: "LOOPBACK", Elements: 32, Dir: Downlink},
			},
		}
	}
	if err := (&ControllerConfig{}).Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("empty config: %v", err)
	}
	g := good()
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ControllerConfig){
		"not pow2":      func(c *ControllerConfig) { c.Channels[0].Elements = 30 },
		"bad ring":      func(c *ControllerConfig) { c.Channels[0].EventRing = 3 },
		"wrong dir":     func(c *ControllerConfig) { c.Channels[0].Dir = Downlink },
		"dup":           func(c *ControllerConfig) { c.Channels[1].Num = 0 },
		"beyond max":    func(c *ControllerConfig) { c.MaxChannels = 1 },
		"cmd ring":      func(c *ControllerConfig) { c.CommandElements = 100 },
		"er elements":   func(c *ControllerConfig) { c.EventRings[0].Elements = 1 },
		"er moderation": func(c *ControllerConfig) { c.EventRings[0].ModerationMs = 70000 },
	} {
		c := good()
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	wl := ControllerConfig{MaxChannels: 128, CommandElements: 2, EventRings: []EventRingConfig{{Elements: 2}}}.WithLoopback()
	if ch, ok := wl.Channel(1); !ok || ch.Name != "LOOPBACK" || ch.Dir != Downlink {
		t.Fatalf("WithLoopback: %+v", wl.Channels)
	}
	if again := wl.WithLoopback(); len(again.Channels) != 2 {
		t.Fatalf("WithLoopback twice added channels: %d", len(again.Channels))
	}
}
