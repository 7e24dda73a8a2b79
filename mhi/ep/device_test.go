package ep

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
	}{
		{"invalid MHI config", func(c *Config) { c.MHI.MaxChannels = 0 }},
		{"register space too small", func(c *Config) { c.RegLen = 0x800 }},
		{"register length unaligned", func(c *Config) { c.RegLen = 0x1002 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{MHI: testControllerConfig()}
			tc.mod(&cfg)
			if _, err := New(cfg, newFakeMem(), &fakeIRQ{}); !errors.Is(err, wire.ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := New(Config{MHI: testControllerConfig()}, nil, &fakeIRQ{}); !errors.Is(err, wire.ErrConfig) {
		t.Fatalf("New without memory = %v, want ErrConfig", err)
	}
}

func TestRegisterFile(t *testing.T) {
	h := newHost(t, nil)
	regLen := h.reg(wire.RegMHIREGLEN)
	nER := uint32(2)
	reads := []struct {
		name string
		off  uint32
		want uint32
	}{
		{"MHIREGLEN", wire.RegMHIREGLEN, DefaultRegLen},
		{"MHIVER", wire.RegMHIVER, wire.MHIVersion1},
		// NHWER=1, NER=2, NHWCH=2 (burst channels), NCH=128.
		{"MHICFG", wire.RegMHICFG, 1<<24 | 2<<16 | 2<<8 | 128},
		{"CHDBOFF", wire.RegCHDBOFF, 0x400},
		{"ERDBOFF", wire.RegERDBOFF, 0x800},
		{"BHIOFF", wire.RegBHIOFF, 0x100},
		{"BHIEOFF", wire.RegBHIEOFF, 0x300},
		{"DEBUGOFF", wire.RegDEBUGOFF, 0x380},
		{"MHICTRL", wire.RegMHICTRL, 0},
		{"SOC_HW_VERSION", wire.RegSOCHWVERSION, 0x60050100},
		{"BHI EXECENV", BHIOffset + wire.BHIExecEnv, uint32(wire.EEAMSS)},
		{"BHI SERIALNU", BHIOffset + wire.BHISerialNum, 0x5A5A1234},
		{"BHI OEMPKHASH0", BHIOffset + wire.BHIOEMPKHash0, 0xA0000000},
		{"BHI OEMPKHASH15", BHIOffset + wire.BHIOEMPKHash0 + 15*4, 0xA000000F},
		{"BHI INTVEC", BHIOffset + wire.BHIIntVec, 0},
	}
	for _, r := range reads {
		if got := h.reg(r.off); got != r.want {
			t.Errorf("%s (0x%x) = 0x%x, want 0x%x", r.name, r.off, got, r.want)
		}
	}
	// The host's sanity checks of mhi_init_mmio / prepare_for_power_up.
	if chdb := h.reg(wire.RegCHDBOFF); chdb >= regLen-8*127 {
		t.Errorf("CHDBOFF 0x%x leaves no room for 127 doorbells in 0x%x", chdb, regLen)
	}
	if erdb := h.reg(wire.RegERDBOFF); erdb >= regLen-8*nER {
		t.Errorf("ERDBOFF 0x%x leaves no room for %d doorbells", erdb, nER)
	}
	if h.reg(wire.RegBHIOFF) >= regLen || h.reg(wire.RegBHIEOFF) >= regLen {
		t.Errorf("BHI offsets outside the register space")
	}

	// Writable registers read back; MHICFG only takes NER/NHWER.
	h.setReg(wire.RegMHICFG, 0xFFFFFFFF)
	if got := h.reg(wire.RegMHICFG); got != 0xFFFF0000|2<<8|128 {
		t.Errorf("MHICFG after writing all ones = 0x%x", got)
	}
	h.setReg64(wire.RegCCABAPLower, 0x1_2345_6780)
	if lo, hi := h.reg(wire.RegCCABAPLower), h.reg(wire.RegCCABAPHigher); lo != 0x23456780 || hi != 1 {
		t.Errorf("CCABAP = 0x%x:0x%x", hi, lo)
	}
	h.setReg(BHIOffset+wire.BHIIntVec, 5)
	if got := h.reg(BHIOffset + wire.BHIIntVec); got != 5 {
		t.Errorf("INTVEC = %d, want 5", got)
	}
	h.setReg64(ChannelDoorbellOffset+8*3, 0xAB_0000_1230)
	if lo, hi := h.reg(ChannelDoorbellOffset+8*3), h.reg(ChannelDoorbellOffset+8*3+4); lo != 0x1230 || hi != 0xAB {
		t.Errorf("channel 3 doorbell = 0x%x:0x%x", hi, lo)
	}
	if h.dev.Stats().BadRegisterAccesses != 0 {
		t.Fatalf("good accesses counted as bad: %+v", h.dev.Stats())
	}

	bad := []struct {
		name  string
		write bool
		off   uint32
	}{
		{"unaligned read", false, 0x3},
		{"read beyond RegLen", false, DefaultRegLen},
		{"read far beyond", false, 0xFFFFFFFC},
		{"reserved read", false, 0x04},
		{"reserved BHI read", false, BHIOffset + 0x14},
		{"event doorbell beyond NER", false, EventDoorbellOffset + 8*nER},
		{"unaligned write", true, wire.RegMHICTRL + 1},
		{"write beyond RegLen", true, DefaultRegLen + 4},
		{"write read-only MHISTATUS", true, wire.RegMHISTATUS},
		{"write read-only MHIVER", true, wire.RegMHIVER},
		{"write read-only BHI EXECENV", true, BHIOffset + wire.BHIExecEnv},
		{"write reserved", true, 0x1F0},
	}
	for i, b := range bad {
		if b.write {
			h.setReg(b.off, 0xFFFFFFFF)
		} else if got := h.reg(b.off); got != 0 {
			t.Errorf("%s = 0x%x, want 0", b.name, got)
		}
		if got := h.dev.Stats().BadRegisterAccesses; got != uint64(i+1) {
			t.Errorf("%s: bad accesses %d, want %d", b.name, got, i+1)
		}
	}
	if h.reg(wire.RegMHIVER) != wire.MHIVersion1 || h.reg(BHIOffset+wire.BHIExecEnv) != uint32(wire.EEAMSS) {
		t.Errorf("read-only registers changed by writes")
	}
}

func TestReadyAfterReset(t *testing.T) {
	const delay = 30 * time.Millisecond
	start := time.Now()
	h := newHost(t, func(c *Config) { c.ReadyDelay = delay })
	if st := h.state(); st != wire.StateReset && time.Since(start) < delay {
		t.Fatalf("state %s right after New, want RESET", st)
	}
	h.waitReady()
	if el := time.Since(start); el < delay {
		t.Fatalf("READY after %v, want at least %v", el, delay)
	}
	if got := h.reg(wire.RegMHISTATUS); got != uint32(wire.StateReady)<<8|wire.MHISTATUSReady {
		t.Fatalf("MHISTATUS = 0x%x", got)
	}
	if st := h.dev.Status(); st.State != wire.StateReady || st.EE != wire.EEAMSS {
		t.Fatalf("status %+v", st)
	}
}

func TestNeverReady(t *testing.T) {
	const delay = 5 * time.Millisecond
	h := newHost(t, func(c *Config) { c.ReadyDelay = delay })
	h.waitReady()
	h.dev.SetNeverReady(true)
	h.dev.Reset()
	if st := h.state(); st != wire.StateReset {
		t.Fatalf("state %s after Reset, want RESET", st)
	}
	h.stayFor(10*delay, "RESET with NeverReady", func() bool {
		return h.reg(wire.RegMHISTATUS) == 0
	})
	h.dev.SetNeverReady(false)
	h.waitReady()
}

func TestPowerUpEvents(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	r := h.ev[0]
	if rp := h.eventRP(0); rp != r.base+2*wire.ElementSize {
		t.Fatalf("event ring 0 rp 0x%x, want base+32 (0x%x)", rp, r.base+32)
	}
	if st := h.reg(wire.RegMHISTATUS); st != uint32(wire.StateM0)<<8|wire.MHISTATUSReady {
		t.Fatalf("MHISTATUS 0x%x, want M0|READY", st)
	}
	h.waitFor("interrupts on vector 1", func() bool { return len(h.irq.raised(1)) == 2 })
	if s := h.dev.Stats(); s.EventsPosted[0] != 2 || s.EventsPosted[1] != 0 || s.BoundsViolations != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestChannelCommands(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	h.startChannel(0)
	steps := []struct {
		cmd  wire.PacketType
		ch   uint8
		code wire.CompletionCode
		want wire.ChannelState
	}{
		{wire.PktStopChanCmd, 0, wire.CCSuccess, wire.ChannelStop},
		{wire.PktStartChanCmd, 0, wire.CCSuccess, wire.ChannelRunning},
		{wire.PktStopChanCmd, 0, wire.CCSuccess, wire.ChannelStop},
		{wire.PktResetChanCmd, 0, wire.CCSuccess, wire.ChannelDisabled},
		{wire.PktNoopCmd, 0, wire.CCSuccess, wire.ChannelDisabled},
		// Channel 50 is not offered: a clean error rather than silence.
		{wire.PktStartChanCmd, 50, wire.CCUndefinedErr, wire.ChannelEnabled},
		{wire.PktResetChanCmd, 200, wire.CCUndefinedErr, 0xFF},
	}
	h.initChannel(50, 16)
	for _, s := range steps {
		ev := h.command(s.cmd, s.ch)
		if ev.Code() != s.code {
			t.Fatalf("%s(%d) = %s, want %s", s.cmd, s.ch, ev.Code(), s.code)
		}
		if s.want != 0xFF {
			if st := h.chState(s.ch); st != s.want {
				t.Fatalf("after %s(%d): context state %s, want %s", s.cmd, s.ch, st, s.want)
			}
		}
	}
	if s := h.dev.Stats(); s.Commands != uint64(len(steps))+1 || s.CommandErrors != 2 {
		t.Fatalf("commands %d errors %d", s.Commands, s.CommandErrors)
	}
	// Unknown command type.
	if ev := h.command(0x33, 0); ev.Code() != wire.CCUndefinedErr {
		t.Fatalf("unknown command = %s", ev.Code())
	}
}

func TestStartRejectsBadContext(t *testing.T) {
	tests := []struct {
		name string
		mod  func(c *wire.Context)
	}{
		{"rlen zero", func(c *wire.Context) { c.RLen = 0 }},
		{"rlen not a multiple of 16", func(c *wire.Context) { c.RLen = 100 }},
		{"rbase outside memory", func(c *wire.Context) { c.RBase, c.RP, c.WP = 0x100, 0x100, 0x100 }},
		{"ring runs past memory", func(c *wire.Context) { c.RLen = testMemSize }},
		{"rp outside ring", func(c *wire.Context) { c.RP = c.RBase + c.RLen }},
		{"wp misaligned", func(c *wire.Context) { c.WP = c.RBase + 8 }},
		{"event ring index too large", func(c *wire.Context) { c.Index = 9 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, nil)
			h.powerUp()
			r := h.initChannel(0, 16)
			ctx := wire.ParseContext(h.read(r.ctxIOVA, wire.ContextSize))
			tc.mod(&ctx)
			h.writeContext(r.ctxIOVA, ctx)
			if ev := h.command(wire.PktStartChanCmd, 0); ev.Code() != wire.CCUndefinedErr {
				t.Fatalf("START = %s, want UNDEFINED_ERR", ev.Code())
			}
			if st := h.chState(0); st != wire.ChannelEnabled {
				t.Fatalf("context state %s, want ENABLED (untouched)", st)
			}
			if h.dev.Stats().BoundsViolations == 0 {
				t.Fatalf("bad context not counted")
			}
		})
	}
}

func TestLoopbackSingleTRE(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	dlBuf := h.mem.alloc(t, 256, 8)
	dlTRE := h.queue(1, dlBuf, 256, wire.TREIEOT)
	h.ring(1)
	ulBuf, data := h.buffer(100, 3)
	ulTRE := h.queue(0, ulBuf, 100, wire.TREIEOT)
	h.ring(0)

	got := map[uint8]wire.Element{}
	for range 2 {
		ev := h.nextEvent(0)
		got[ev.Channel()] = ev
	}
	expectTransfer(t, got[0], 0, ulTRE, wire.CCEOT, 100)
	expectTransfer(t, got[1], 1, dlTRE, wire.CCEOT, 100)
	if out := h.read(dlBuf, 100); string(out) != string(data) {
		t.Fatalf("looped data differs")
	}
	s := h.dev.Stats()
	if s.ULTransfers != 1 || s.ULBytes != 100 || s.DLTransfers != 1 || s.DLBytes != 100 {
		t.Fatalf("stats %+v", s)
	}
	st := h.dev.Status()
	for _, c := range st.Channels {
		want := h.ch[c.Num]
		if want == nil {
			continue
		}
		if c.State != wire.ChannelRunning || c.ReadPointer != want.addr(1) {
			t.Fatalf("status of channel %d: %+v, want RUNNING rp 0x%x", c.Num, c, want.addr(1))
		}
		if rp := h.load64(want.ctxIOVA + wire.CtxRP); rp != want.addr(1) {
			t.Fatalf("channel %d context rp 0x%x, want 0x%x", c.Num, rp, want.addr(1))
		}
	}
}

func TestLoopbackChainedIntoSmallerBuffers(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	var dlTREs []uint64
	dlBufs := make([]uint64, 4)
	for i := range dlBufs {
		dlBufs[i] = h.mem.alloc(t, 128, 8)
		dlTREs = append(dlTREs, h.queue(1, dlBufs[i], 128, wire.TREIEOT))
	}
	h.ring(1)
	sizes := []int{100, 200, 50}
	var want []byte
	var ulTREs []uint64
	for i, n := range sizes {
		buf, data := h.buffer(n, byte(i*50))
		want = append(want, data...)
		flags := uint32(wire.TREChain | wire.TREIEOB)
		if i == len(sizes)-1 {
			flags = wire.TREIEOT
		}
		ulTREs = append(ulTREs, h.queue(0, buf, uint32(n), flags))
	}
	h.ring(0)

	var ul, dl []wire.Element
	for len(ul)+len(dl) < 6 {
		ev := h.nextEvent(0)
		if ev.Channel() == 0 {
			ul = append(ul, ev)
		} else {
			dl = append(dl, ev)
		}
	}
	if len(ul) != 3 || len(dl) != 3 {
		t.Fatalf("%d UL and %d DL events, want 3 and 3", len(ul), len(dl))
	}
	expectTransfer(t, ul[0], 0, ulTREs[0], wire.CCEOB, 100)
	expectTransfer(t, ul[1], 0, ulTREs[1], wire.CCEOB, 200)
	expectTransfer(t, ul[2], 0, ulTREs[2], wire.CCEOT, 50)
	expectTransfer(t, dl[0], 1, dlTREs[0], wire.CCOverflow, 128)
	expectTransfer(t, dl[1], 1, dlTREs[1], wire.CCOverflow, 128)
	expectTransfer(t, dl[2], 1, dlTREs[2], wire.CCEOT, 94)
	var got []byte
	for i, ev := range dl {
		got = append(got, h.read(dlBufs[i], int(ev.Length()))...)
	}
	if string(got) != string(want) {
		t.Fatalf("looped data differs")
	}
	if s := h.dev.Stats(); s.ULTransfers != 1 || s.ULBytes != 350 || s.DLTransfers != 1 || s.DLBytes != 350 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLoopbackBackpressure(t *testing.T) {
	h := newHost(t, func(c *Config) { c.DLQueueDepth = 1 })
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	const n = 4
	var datas [][]byte
	for i := range n {
		buf, data := h.buffer(64, byte(i*16))
		datas = append(datas, data)
		h.queue(0, buf, 64, wire.TREIEOT)
	}
	h.ring(0)
	// No DL buffers: one transfer fills the DL queue, the next one waits
	// in the function, the rest stay in the ring.
	if ev := h.nextEvent(0); ev.Channel() != 0 || ev.Code() != wire.CCEOT {
		t.Fatalf("first event %v, want UL EOT", ev)
	}
	h.stayFor(30*time.Millisecond, "UL stalled without DL buffers", func() bool {
		return h.pendingEvents(0) == 0
	})
	if s := h.dev.Stats(); s.ULTransfers != 1 {
		t.Fatalf("%d UL transfers consumed without DL room, want 1", s.ULTransfers)
	}
	dlBufs := make([]uint64, n)
	for i := range dlBufs {
		dlBufs[i] = h.mem.alloc(t, 64, 8)
		h.queue(1, dlBufs[i], 64, wire.TREIEOT)
	}
	h.ring(1)
	ulDone, dlDone := 1, 0
	for ulDone < n || dlDone < n {
		ev := h.nextEvent(0)
		if ev.Code() != wire.CCEOT {
			t.Fatalf("event %v", ev)
		}
		if ev.Channel() == 0 {
			ulDone++
		} else {
			dlDone++
		}
	}
	for i := range n {
		if string(h.read(dlBufs[i], 64)) != string(datas[i]) {
			t.Fatalf("DL transfer %d differs", i)
		}
	}
}

func TestEventRingFullBackpressure(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	// From now on the host reads events but hands no slot back.
	h.ev[0].recycle = false
	const n = 8 // 16 events, more than the free slots of ring 0
	dlBufs := make([]uint64, n)
	for i := range n {
		dlBufs[i] = h.mem.alloc(t, 32, 8)
		h.queue(1, dlBufs[i], 32, wire.TREIEOT)
		buf, _ := h.buffer(32, byte(i))
		h.queue(0, buf, 32, wire.TREIEOT)
	}
	h.ring(1)
	h.ring(0)
	// Ring 0 has 16 slots, one always unused: 15 events fit.
	h.waitFor("ring full", func() bool { return h.dev.Stats().EventRingFullWaits > 0 })
	r := h.ev[0]
	limit := r.addr(r.wp)
	h.stayFor(20*time.Millisecond, "device stops at the doorbell's WP", func() bool {
		return h.eventRP(0) == limit
	})
	events := 0
	for h.pendingEvents(0) > 0 {
		h.nextEvent(0)
		events++
	}
	if events != 15 {
		t.Fatalf("%d events before the ring was full, want 15 (16 slots, one unused)", events)
	}
	h.ev[0].recycle = true
	h.handEventRing(0)
	for events < 2*n {
		if ev := h.nextEvent(0); ev.Code() != wire.CCEOT {
			t.Fatalf("event %v", ev)
		}
		events++
	}
	if s := h.dev.Stats(); s.ULTransfers != n || s.DLTransfers != n {
		t.Fatalf("stats %+v", s)
	}
}

func TestBurstPollingAndDBMode(t *testing.T) {
	h := newHost(t, func(c *Config) {
		c.BurstPollInterval = time.Millisecond
		c.BurstIdlePolls = 5
	})
	h.powerUp()
	ul := h.startChannel(100)
	buf, _ := h.buffer(64, 1)
	tre := h.queue(100, buf, 64, wire.TREIEOT|wire.TREBEI)
	h.ring(100) // db_mode is set after START: the first queue rings
	expectTransfer(t, h.nextEvent(1), 100, tre, wire.CCEOT, 64)
	// Burst mode: the host only updates the context wp now.
	tre2 := h.queue(100, buf, 32, wire.TREIEOT|wire.TREBEI)
	tre3 := h.queue(100, buf, 16, wire.TREIEOT|wire.TREBEI)
	expectTransfer(t, h.nextEvent(1), 100, tre2, wire.CCEOT, 32)
	expectTransfer(t, h.nextEvent(1), 100, tre3, wire.CCEOT, 16)
	// Dry: the device asks for the doorbell again, pointing at its rp.
	expectTransfer(t, h.nextEvent(1), 100, ul.addr(3), wire.CCDBMode, 0)
	if s := h.dev.Stats(); s.DBModeEvents != 1 || s.ChannelDoorbells != 1 || s.ULTransfers != 3 {
		t.Fatalf("stats %+v", s)
	}
	// Doorbell mode again: a doorbell restarts processing.
	tre4 := h.queue(100, buf, 8, wire.TREIEOT|wire.TREBEI)
	h.ring(100)
	expectTransfer(t, h.nextEvent(1), 100, tre4, wire.CCEOT, 8)

	// Downlink: data waits for buffers; polling finds a buffer published
	// by wp only, then runs dry and sends DB_MODE.
	dl := h.startChannel(101)
	dlBuf := h.mem.alloc(t, 64, 8)
	dlTRE := h.queue(101, dlBuf, 64, wire.TREIEOT|wire.TREBEI)
	h.ring(101)
	ctx := context.Background()
	if err := h.dev.QueueDL(ctx, 101, []byte("first")); err != nil {
		t.Fatal(err)
	}
	// Channel 100 keeps polling and may post DB_MODE again: skip those.
	nextDL := func() wire.Element {
		for {
			if ev := h.nextEvent(1); ev.Channel() != 100 {
				return ev
			}
		}
	}
	expectTransfer(t, nextDL(), 101, dlTRE, wire.CCEOT, 5)
	if err := h.dev.QueueDL(ctx, 101, []byte("second")); err != nil {
		t.Fatal(err)
	}
	dlTRE2 := h.queue(101, dlBuf, 64, wire.TREIEOT|wire.TREBEI) // no doorbell
	expectTransfer(t, nextDL(), 101, dlTRE2, wire.CCEOT, 6)
	if err := h.dev.QueueDL(ctx, 101, []byte("third")); err != nil {
		t.Fatal(err)
	}
	expectTransfer(t, nextDL(), 101, dl.addr(2), wire.CCDBMode, 0)
	dlTRE3 := h.queue(101, dlBuf, 64, wire.TREIEOT|wire.TREBEI)
	h.ring(101)
	expectTransfer(t, nextDL(), 101, dlTRE3, wire.CCEOT, 5)
	if string(h.read(dlBuf, 5)) != "third" {
		t.Fatalf("DL data %q", h.read(dlBuf, 5))
	}
}

func TestInterruptModeration(t *testing.T) {
	tests := []struct {
		name         string
		moderationMs int
		bei          bool
		wantIRQs     int
		wantDelayed  bool
	}{
		{"BEI with INTMODT: one delayed interrupt", 40, true, 1, true},
		{"BEI without INTMODT: none", 0, true, 0, false},
		{"no BEI: one per event", 40, false, 3, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, func(c *Config) {
				c.MHI.EventRings[1].ModerationMs = tc.moderationMs
				c.BurstIdlePolls = 1000 // no DB_MODE during the test
			})
			h.powerUp()
			h.startChannel(100)
			buf, _ := h.buffer(16, 0)
			flags := uint32(wire.TREIEOT)
			if tc.bei {
				flags |= wire.TREBEI
			}
			for range 3 {
				h.queue(100, buf, 16, flags)
			}
			start := time.Now()
			h.ring(100)
			for range 3 {
				h.nextEvent(1)
			}
			if tc.wantIRQs > 0 {
				h.waitFor("interrupts", func() bool { return len(h.irq.raised(2)) >= tc.wantIRQs })
			}
			settle := 2 * time.Duration(max(tc.moderationMs, 10)) * time.Millisecond
			h.stayFor(settle, "interrupt count", func() bool { return len(h.irq.raised(2)) <= tc.wantIRQs })
			irqs := h.irq.raised(2)
			if len(irqs) != tc.wantIRQs {
				t.Fatalf("%d interrupts on vector 2, want %d", len(irqs), tc.wantIRQs)
			}
			if tc.wantDelayed {
				if d := irqs[0].at.Sub(start); d < time.Duration(tc.moderationMs)*time.Millisecond {
					t.Fatalf("moderated interrupt after %v, want >= %d ms", d, tc.moderationMs)
				}
				if s := h.dev.Stats(); s.InterruptsModerated != 1 {
					t.Fatalf("moderated %d", s.InterruptsModerated)
				}
			}
		})
	}
}

func TestModeratedInterruptCancelledByUnmoderatedEvent(t *testing.T) {
	h := newHost(t, func(c *Config) {
		c.MHI.EventRings[1].ModerationMs = 30
		c.BurstIdlePolls = 1000
	})
	h.powerUp()
	h.startChannel(100)
	buf, _ := h.buffer(16, 0)
	h.queue(100, buf, 16, wire.TREIEOT|wire.TREBEI)
	h.queue(100, buf, 16, wire.TREIEOT)
	h.ring(100)
	h.nextEvent(1)
	h.nextEvent(1)
	h.waitFor("interrupt", func() bool { return len(h.irq.raised(2)) == 1 })
	h.stayFor(60*time.Millisecond, "a single interrupt", func() bool { return len(h.irq.raised(2)) == 1 })
	if s := h.dev.Stats(); s.InterruptsModerated != 0 {
		t.Fatalf("moderated interrupt fired although cancelled: %+v", s)
	}
}

func TestM3AndResume(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	h.setReg(wire.RegMHICTRL, uint32(wire.StateM3)<<wire.MHICTRLStateShift)
	if ev := h.nextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM3 {
		t.Fatalf("event %v, want STATE_CHANGE(M3)", ev)
	}
	if h.state() != wire.StateM3 {
		t.Fatalf("MHISTATUS state %s", h.state())
	}
	dlBuf := h.mem.alloc(t, 64, 8)
	h.queue(1, dlBuf, 64, wire.TREIEOT)
	h.ring(1)
	buf, data := h.buffer(40, 9)
	h.queue(0, buf, 40, wire.TREIEOT)
	h.ring(0)
	h.stayFor(20*time.Millisecond, "no transfers in M3", func() bool { return h.pendingEvents(0) == 0 })
	h.setReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
	if ev := h.nextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM0 {
		t.Fatalf("event %v, want STATE_CHANGE(M0)", ev)
	}
	for range 2 {
		if ev := h.nextEvent(0); ev.Type() != wire.PktTxEvent || ev.Code() != wire.CCEOT {
			t.Fatalf("event %v, want transfer EOT (and no EE event)", ev)
		}
	}
	if string(h.read(dlBuf, 40)) != string(data) {
		t.Fatalf("looped data differs")
	}
	for _, ch := range []uint8{0, 1} {
		if st := h.chState(ch); st != wire.ChannelRunning {
			t.Fatalf("channel %d %s after resume", ch, st)
		}
	}
}

// A burst channel resumed from M3 whose doorbell is serviced before the
// device has finished waking its channels: Linux rings the doorbell of a
// channel with work pending as soon as it handles the M0 event, then only
// updates the context wp, so the device must go on polling (or ask for
// the doorbell with DB_MODE). The resume is held between the M0 event and
// the channels' wake-up until the doorbell's transfer has completed, the
// order a loaded machine produces now and then (a QEMU guest's runtime-PM
// ping, 1 of 3 answered, the modem never idle again).
func TestBurstResumeDoorbellBeforeWakeUp(t *testing.T) {
	h := newHost(t, func(c *Config) {
		c.BurstPollInterval = time.Millisecond
		c.BurstIdlePolls = 50
	})
	h.powerUp()
	h.startChannel(100)
	buf, _ := h.buffer(64, 3)
	h.setReg(wire.RegMHICTRL, uint32(wire.StateM3)<<wire.MHICTRLStateShift)
	if ev := h.nextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM3 {
		t.Fatalf("event %v, want STATE_CHANGE(M3)", ev)
	}
	tre := h.queue(100, buf, 64, wire.TREIEOT|wire.TREBEI) // queued in M3: no doorbell

	release := make(chan struct{})
	hold := func() {
		select {
		case <-release:
		case <-time.After(waitTimeout):
		}
	}
	h.dev.afterResumeEvent.Store(&hold)
	h.setReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
	if ev := h.nextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM0 {
		t.Fatalf("event %v, want STATE_CHANGE(M0)", ev)
	}
	h.ring(100) // the host's M0 transition: db_mode set, pending work rung
	expectTransfer(t, h.nextEvent(1), 100, tre, wire.CCEOT, 64)
	close(release)
	// The control goroutine holds ctrlMu through the whole resume; once
	// it is free, the channel has been marked and poked. Then wait for
	// the worker's round that takes the mark, and for its end.
	h.dev.ctrlMu.Lock()
	h.dev.ctrlMu.Unlock() //nolint:staticcheck // waits for the resume's end
	c := h.dev.channels[100]
	h.waitFor("the resync taken", func() bool { return !c.dbModeResync.Load() })
	c.work.Lock()
	c.work.Unlock() //nolint:staticcheck // waits for the round in progress

	// Burst mode: the host only updates the context wp now, and rings
	// again only on DB_MODE.
	for i := range 3 {
		tre := h.queue(100, buf, uint32(16+i), wire.TREIEOT|wire.TREBEI)
		for {
			ev := h.nextEvent(1)
			if ev.Code() == wire.CCDBMode {
				h.ring(100)
				continue
			}
			expectTransfer(t, ev, 100, tre, wire.CCEOT, uint32(16+i))
			break
		}
	}
}

func TestSysErrAndRecovery(t *testing.T) {
	tests := []struct {
		name   string
		inject func(h *testHost)
		fault  bool
	}{
		{"injected", func(h *testHost) { h.dev.InjectSysErr() }, true},
		{"host-forced", func(h *testHost) {
			h.setReg(wire.RegMHICTRL, uint32(wire.StateSysErr)<<wire.MHICTRLStateShift)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, nil)
			h.powerUp()
			h.startChannel(0)
			h.setReg(BHIOffset+wire.BHIIntVec, 7)
			tc.inject(h)
			h.waitFor("SYS_ERR", func() bool { return h.state() == wire.StateSysErr })
			st := h.reg(wire.RegMHISTATUS)
			if h.state() != wire.StateSysErr || st&wire.MHISTATUSSysErr == 0 {
				t.Fatalf("MHISTATUS 0x%x, want SYS_ERR with the SYSERR bit", st)
			}
			if ev := h.nextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateSysErr {
				t.Fatalf("event %v, want STATE_CHANGE(SYS_ERR)", ev)
			}
			h.waitFor("INTVEC interrupt", func() bool { return len(h.irq.raised(7)) == 1 })
			// Transfers stop.
			buf, _ := h.buffer(8, 0)
			h.queue(0, buf, 8, wire.TREIEOT)
			h.ring(0)
			h.stayFor(10*time.Millisecond, "no transfers in SYS_ERR", func() bool { return h.pendingEvents(0) == 0 })
			if tc.fault != (h.dev.Stats().FaultsInjected == 1) {
				t.Fatalf("faults injected %d", h.dev.Stats().FaultsInjected)
			}
			// Recovery: MHICTRL.RESET, READY again, INTVEC cleared.
			h.setReg(wire.RegMHICTRL, h.reg(wire.RegMHICTRL)|wire.MHICTRLReset)
			h.waitReady()
			if v := h.reg(BHIOffset + wire.BHIIntVec); v != 0 {
				t.Fatalf("INTVEC %d after reset, want 0", v)
			}
			h.powerUp()
			h.startChannel(0)
		})
	}
}

func TestMHIResetThenReady(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	// Downlink data with no host buffer is pending when the reset comes.
	if err := h.dev.QueueDL(context.Background(), 1, []byte("pending")); err != nil {
		t.Fatal(err)
	}
	h.setReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift|wire.MHICTRLReset)
	h.waitFor("MHICTRL.RESET cleared", func() bool { return h.reg(wire.RegMHICTRL) == 0 })
	h.waitReady()
	s := h.dev.Stats()
	if s.DLDroppedOnReset != 1 || s.DLDroppedBytesOnReset != 7 || s.Resets != 1 {
		t.Fatalf("stats %+v", s)
	}
	for _, c := range h.dev.Status().Channels {
		if c.State != wire.ChannelDisabled || c.PendingDL != 0 {
			t.Fatalf("channel after reset: %+v", c)
		}
	}
	// A second power-up on fresh contexts works end to end.
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	dlBuf := h.mem.alloc(t, 64, 8)
	h.queue(1, dlBuf, 64, wire.TREIEOT)
	h.ring(1)
	buf, data := h.buffer(10, 4)
	h.queue(0, buf, 10, wire.TREIEOT)
	h.ring(0)
	h.nextEvent(0)
	h.nextEvent(0)
	if string(h.read(dlBuf, 10)) != string(data) {
		t.Fatalf("looped data differs after reset")
	}

	// Function-level reset from the transport: registers back to power-on.
	h.dev.Reset()
	if h.reg(wire.RegCCABAPLower) != 0 || h.reg(wire.RegMHICTRL) != 0 || h.reg(wire.RegMHISTATUS) != 0 {
		t.Fatalf("registers survive a function-level reset")
	}
	h.waitReady()
}

func TestEventCorruption(t *testing.T) {
	tests := []struct {
		kind  Corruption
		check func(t *testing.T, h *testHost, ev wire.Element, tre uint64, ring *hostRing)
	}{
		{CorruptEventPointer, func(t *testing.T, h *testHost, ev wire.Element, tre uint64, r *hostRing) {
			if ev.Ptr != r.addr(r.n) {
				t.Fatalf("ptr 0x%x, want first address after the ring 0x%x", ev.Ptr, r.addr(r.n))
			}
		}},
		{CorruptChannelID, func(t *testing.T, h *testHost, ev wire.Element, tre uint64, r *hostRing) {
			if _, ok := h.cfg.MHI.Channel(ev.Channel()); ok || ev.Ptr != tre {
				t.Fatalf("channel %d is offered (or ptr changed): %v", ev.Channel(), ev)
			}
		}},
		{CorruptCompletionCode, func(t *testing.T, h *testHost, ev wire.Element, tre uint64, r *hostRing) {
			if ev.Code() != BogusCompletionCode || ev.Length() != 64 {
				t.Fatalf("event %v, want code 0x7F len 64", ev)
			}
		}},
		{CorruptLength, func(t *testing.T, h *testHost, ev wire.Element, tre uint64, r *hostRing) {
			if ev.Length() != 129 || ev.Code() != wire.CCEOT {
				t.Fatalf("event %v, want EOT with len 129 for a 128-byte buffer", ev)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.kind.String(), func(t *testing.T) {
			h := newHost(t, nil)
			h.powerUp()
			r := h.startChannel(1)
			buf := h.mem.alloc(t, 128, 8)
			tre := h.queue(1, buf, 128, wire.TREIEOT)
			h.ring(1)
			if err := h.dev.CorruptNextEvent(tc.kind); err != nil {
				t.Fatal(err)
			}
			if err := h.dev.QueueDL(context.Background(), 1, make([]byte, 64)); err != nil {
				t.Fatal(err)
			}
			tc.check(t, h, h.nextEvent(0), tre, r)
			if s := h.dev.Stats(); s.FaultsInjected != 1 {
				t.Fatalf("faults injected %d", s.FaultsInjected)
			}
		})
	}

	t.Run(CorruptEventRP.String(), func(t *testing.T) {
		h := newHost(t, nil)
		h.powerUp()
		h.startChannel(1)
		buf := h.mem.alloc(t, 128, 8)
		for range 2 {
			h.queue(1, buf, 128, wire.TREIEOT)
		}
		h.ring(1)
		if err := h.dev.CorruptNextEvent(CorruptEventRP); err != nil {
			t.Fatal(err)
		}
		if err := h.dev.QueueDL(context.Background(), 1, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		er := h.ev[0]
		h.waitFor("rp outside the ring", func() bool { return h.eventRP(0) == er.addr(er.n) })
		// The next event publishes a correct rp covering both.
		if err := h.dev.QueueDL(context.Background(), 1, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		h.waitFor("rp back in the ring", func() bool { return h.eventRP(0) == er.addr(er.rp+2) })
		for range 2 {
			if ev := h.nextEvent(0); ev.Code() != wire.CCEOT {
				t.Fatalf("event %v", ev)
			}
		}
		if s := h.dev.Stats(); s.FaultsInjected != 1 {
			t.Fatalf("faults injected %d", s.FaultsInjected)
		}
	})

	h := newHost(t, nil)
	if err := h.dev.CorruptNextEvent(Corruption(99)); !errors.Is(err, wire.ErrConfig) {
		t.Fatalf("unknown corruption accepted: %v", err)
	}
}

func TestDropInterrupts(t *testing.T) {
	h := newHost(t, nil)
	h.dev.DropInterrupts(2)
	h.powerUp() // STATE_CHANGE and EE events: both interrupts dropped
	h.stayFor(5*time.Millisecond, "no interrupts", func() bool { return len(h.irq.raised(1)) == 0 })
	h.startChannel(0)
	h.waitFor("interrupt after the drops", func() bool { return len(h.irq.raised(1)) == 1 })
	if s := h.dev.Stats(); s.InterruptsDropped != 2 || s.FaultsInjected != 2 || s.InterruptsRaised != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBadPointers(t *testing.T) {
	tests := []struct {
		name       string
		ch         uint8
		el         func(h *testHost) wire.Element
		wantBounds bool
	}{
		{"UL buffer outside memory", 0, func(h *testHost) wire.Element {
			return wire.TransferTRE(0x100, 64, wire.TREIEOT)
		}, true},
		{"UL buffer running past memory", 0, func(h *testHost) wire.Element {
			return wire.TransferTRE(testBase+testMemSize-8, 64, wire.TREIEOT)
		}, true},
		{"UL element not a TRE", 0, func(h *testHost) wire.Element {
			return wire.CommandElement(wire.PktStartChanCmd, 0)
		}, false},
		{"UL length word beyond 16 bits", 0, func(h *testHost) wire.Element {
			buf, _ := h.buffer(16, 0)
			el := wire.TransferTRE(buf, 16, wire.TREIEOT)
			el.Dword0 |= 0x10000
			return el
		}, false},
		{"DL buffer outside memory", 1, func(h *testHost) wire.Element {
			return wire.TransferTRE(0xFFFF_FFFF_0000, 64, wire.TREIEOT)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, func(c *Config) { c.Functions = map[string]Function{"LOOPBACK": discard{}} })
			h.powerUp()
			h.startChannel(tc.ch)
			bad := h.queueElement(tc.ch, tc.el(h))
			// A good TRE behind the bad one still works.
			buf, _ := h.buffer(16, 0)
			good := h.queue(tc.ch, buf, 16, wire.TREIEOT)
			h.ring(tc.ch)
			if tc.ch == 1 {
				if err := h.dev.QueueDL(context.Background(), 1, []byte("abc")); err != nil {
					t.Fatal(err)
				}
			}
			expectTransfer(t, h.nextEvent(0), tc.ch, bad, wire.CCBadTRE, 0)
			wantLen := uint32(16)
			if tc.ch == 1 {
				wantLen = 3
			}
			expectTransfer(t, h.nextEvent(0), tc.ch, good, wire.CCEOT, wantLen)
			s := h.dev.Stats()
			if s.BadTREs != 1 || (s.BoundsViolations > 0) != tc.wantBounds {
				t.Fatalf("bad TREs %d bounds %d", s.BadTREs, s.BoundsViolations)
			}
		})
	}
}

// discard is a Function that swallows uplink transfers.
type discard struct{}

func (discard) Receive(context.Context, *Pipe, []byte) error { return nil }

func TestBadDoorbellsAndBases(t *testing.T) {
	t.Run("channel doorbell outside its ring", func(t *testing.T) {
		h := newHost(t, nil)
		h.powerUp()
		h.startChannel(0)
		h.setReg64(ChannelDoorbellOffset, 0xDEAD_0000)
		h.waitFor("bounds violation", func() bool { return h.dev.Stats().BoundsViolations == 1 })
		if h.pendingEvents(0) != 0 || h.dev.Stats().ULTransfers != 0 {
			t.Fatalf("device acted on a bad doorbell")
		}
	})
	t.Run("command doorbell outside the ring", func(t *testing.T) {
		h := newHost(t, nil)
		h.powerUp()
		h.setReg64(wire.RegCRDBLower, 0x10)
		h.waitFor("bounds violation", func() bool { return h.dev.Stats().BoundsViolations == 1 })
		if h.dev.Stats().Commands != 0 {
			t.Fatalf("device executed commands from a bad doorbell")
		}
	})
	bases := []struct {
		name string
		reg  uint32
	}{
		{"ECABAP outside memory", wire.RegECABAPLower},
		{"CRCBAP outside memory", wire.RegCRCBAPLower},
	}
	for _, b := range bases {
		t.Run(b.name, func(t *testing.T) {
			h := newHost(t, nil)
			h.waitReady()
			h.setupContexts()
			h.handEventRing(0)
			h.setReg64(b.reg, 0x40)
			h.setReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
			h.waitFor("bounds violation", func() bool { return h.dev.Stats().BoundsViolations > 0 })
			if h.dev.State() != wire.StateM0 {
				t.Fatalf("state %s", h.dev.State())
			}
			// Ringing the command doorbell must not crash either.
			h.setReg64(wire.RegCRDBLower, h.cmd.addr(1))
			h.waitFor("second violation", func() bool { return h.dev.Stats().BoundsViolations > 1 })
		})
	}
}

func TestSendAPI(t *testing.T) {
	h := newHost(t, func(c *Config) { c.DLQueueDepth = 1 })
	p, ok := h.dev.Pipe("LOOPBACK")
	if !ok || p.Name() != "LOOPBACK" {
		t.Fatalf("no LOOPBACK pipe")
	}
	if err := p.TrySend([]byte("x")); !errors.Is(err, wire.ErrChannelState) {
		t.Fatalf("TrySend on a disabled channel = %v", err)
	}
	h.powerUp()
	h.startChannel(1)
	if p.DownlinkState() != wire.ChannelRunning || p.UplinkState() != wire.ChannelDisabled {
		t.Fatalf("pipe states %s/%s", p.UplinkState(), p.DownlinkState())
	}
	if err := p.TrySend([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := p.TrySend([]byte("y")); !errors.Is(err, wire.ErrRingFull) {
		t.Fatalf("TrySend on a full queue = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := p.Send(ctx, []byte("y")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send on a full queue = %v", err)
	}
	if err := h.dev.QueueDL(ctx, 0, nil); !errors.Is(err, wire.ErrNoChannel) {
		t.Fatalf("QueueDL on an uplink channel = %v", err)
	}
	// A blocked Send ends with Close.
	done := make(chan error, 1)
	go func() { done <- p.Send(context.Background(), []byte("z")) }()
	time.Sleep(2 * time.Millisecond)
	_ = h.dev.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Send after Close = %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Send still blocked after Close")
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	h := newHost(t, func(c *Config) { c.DLQueueDepth = 1 })
	h.powerUp()
	h.startChannel(0)
	h.startChannel(1)
	h.startChannel(100)
	// A pending moderated interrupt, a polling burst channel, and a
	// loopback blocked on a full downlink queue.
	buf, _ := h.buffer(16, 0)
	h.queue(100, buf, 16, wire.TREIEOT|wire.TREBEI)
	h.ring(100)
	h.nextEvent(1)
	for range 3 {
		h.queue(0, buf, 16, wire.TREIEOT)
	}
	h.ring(0)
	h.nextEvent(0)
	if runtime.NumGoroutine() <= base {
		t.Fatalf("device runs no goroutines?")
	}
	if err := h.dev.Close(); err != nil {
		t.Fatal(err)
	}
	_ = h.dev.Close() // idempotent
	if !poll.Until(waitTimeout, func() bool { return runtime.NumGoroutine() <= base }) {
		b := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Close, %d before\n%s", runtime.NumGoroutine(), base, b[:runtime.Stack(b, true)])
	}
	// Register access after Close is harmless.
	h.setReg64(ChannelDoorbellOffset, 0)
	_ = h.reg(wire.RegMHISTATUS)
}
