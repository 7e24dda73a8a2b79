package ep_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/eptest"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*ep.Config)
	}{
		{"invalid MHI config", func(c *ep.Config) { c.MHI.MaxChannels = 0 }},
		{"register space too small", func(c *ep.Config) { c.RegLen = 0x800 }},
		{"register length unaligned", func(c *ep.Config) { c.RegLen = 0x1002 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ep.Config{MHI: eptest.ControllerConfig()}
			tc.mod(&cfg)
			if _, err := ep.New(cfg, eptest.NewMem(), &eptest.IRQ{}); !errors.Is(err, wire.ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
	if _, err := ep.New(ep.Config{MHI: eptest.ControllerConfig()}, nil, &eptest.IRQ{}); !errors.Is(err, wire.ErrConfig) {
		t.Fatalf("New without memory = %v, want ErrConfig", err)
	}
}

func TestRegisterFile(t *testing.T) {
	h := eptest.NewHost(t, nil)
	regLen := h.Reg(wire.RegMHIREGLEN)
	nER := uint32(2)
	reads := []struct {
		name string
		off  uint32
		want uint32
	}{
		{"MHIREGLEN", wire.RegMHIREGLEN, ep.DefaultRegLen},
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
		{"BHI EXECENV", ep.BHIOffset + wire.BHIExecEnv, uint32(wire.EEAMSS)},
		{"BHI SERIALNU", ep.BHIOffset + wire.BHISerialNum, 0x5A5A1234},
		{"BHI OEMPKHASH0", ep.BHIOffset + wire.BHIOEMPKHash0, 0xA0000000},
		{"BHI OEMPKHASH15", ep.BHIOffset + wire.BHIOEMPKHash0 + 15*4, 0xA000000F},
		{"BHI INTVEC", ep.BHIOffset + wire.BHIIntVec, 0},
	}
	for _, r := range reads {
		if got := h.Reg(r.off); got != r.want {
			t.Errorf("%s (0x%x) = 0x%x, want 0x%x", r.name, r.off, got, r.want)
		}
	}
	// The host's sanity checks of mhi_init_mmio / prepare_for_power_up.
	if chdb := h.Reg(wire.RegCHDBOFF); chdb >= regLen-8*127 {
		t.Errorf("CHDBOFF 0x%x leaves no room for 127 doorbells in 0x%x", chdb, regLen)
	}
	if erdb := h.Reg(wire.RegERDBOFF); erdb >= regLen-8*nER {
		t.Errorf("ERDBOFF 0x%x leaves no room for %d doorbells", erdb, nER)
	}
	if h.Reg(wire.RegBHIOFF) >= regLen || h.Reg(wire.RegBHIEOFF) >= regLen {
		t.Errorf("BHI offsets outside the register space")
	}

	// Writable registers read back; MHICFG only takes NER/NHWER.
	h.SetReg(wire.RegMHICFG, 0xFFFFFFFF)
	if got := h.Reg(wire.RegMHICFG); got != 0xFFFF0000|2<<8|128 {
		t.Errorf("MHICFG after writing all ones = 0x%x", got)
	}
	h.SetReg64(wire.RegCCABAPLower, 0x1_2345_6780)
	if lo, hi := h.Reg(wire.RegCCABAPLower), h.Reg(wire.RegCCABAPHigher); lo != 0x23456780 || hi != 1 {
		t.Errorf("CCABAP = 0x%x:0x%x", hi, lo)
	}
	h.SetReg(ep.BHIOffset+wire.BHIIntVec, 5)
	if got := h.Reg(ep.BHIOffset + wire.BHIIntVec); got != 5 {
		t.Errorf("INTVEC = %d, want 5", got)
	}
	h.SetReg64(ep.ChannelDoorbellOffset+8*3, 0xAB_0000_1230)
	if lo, hi := h.Reg(ep.ChannelDoorbellOffset+8*3), h.Reg(ep.ChannelDoorbellOffset+8*3+4); lo != 0x1230 || hi != 0xAB {
		t.Errorf("channel 3 doorbell = 0x%x:0x%x", hi, lo)
	}
	if h.Dev.Stats().BadRegisterAccesses != 0 {
		t.Fatalf("good accesses counted as bad: %+v", h.Dev.Stats())
	}

	bad := []struct {
		name  string
		write bool
		off   uint32
	}{
		{"unaligned read", false, 0x3},
		{"read beyond RegLen", false, ep.DefaultRegLen},
		{"read far beyond", false, 0xFFFFFFFC},
		{"reserved read", false, 0x04},
		{"reserved BHI read", false, ep.BHIOffset + 0x14},
		{"event doorbell beyond NER", false, ep.EventDoorbellOffset + 8*nER},
		{"unaligned write", true, wire.RegMHICTRL + 1},
		{"write beyond RegLen", true, ep.DefaultRegLen + 4},
		{"write read-only MHISTATUS", true, wire.RegMHISTATUS},
		{"write read-only MHIVER", true, wire.RegMHIVER},
		{"write read-only BHI EXECENV", true, ep.BHIOffset + wire.BHIExecEnv},
		{"write reserved", true, 0x1F0},
	}
	for i, b := range bad {
		if b.write {
			h.SetReg(b.off, 0xFFFFFFFF)
		} else if got := h.Reg(b.off); got != 0 {
			t.Errorf("%s = 0x%x, want 0", b.name, got)
		}
		if got := h.Dev.Stats().BadRegisterAccesses; got != uint64(i+1) {
			t.Errorf("%s: bad accesses %d, want %d", b.name, got, i+1)
		}
	}
	if h.Reg(wire.RegMHIVER) != wire.MHIVersion1 || h.Reg(ep.BHIOffset+wire.BHIExecEnv) != uint32(wire.EEAMSS) {
		t.Errorf("read-only registers changed by writes")
	}
}

func TestReadyAfterReset(t *testing.T) {
	const delay = 30 * time.Millisecond
	start := time.Now()
	h := eptest.NewHost(t, func(c *ep.Config) { c.ReadyDelay = delay })
	if st := h.State(); st != wire.StateReset && time.Since(start) < delay {
		t.Fatalf("state %s right after New, want RESET", st)
	}
	h.WaitReady()
	if el := time.Since(start); el < delay {
		t.Fatalf("READY after %v, want at least %v", el, delay)
	}
	if got := h.Reg(wire.RegMHISTATUS); got != uint32(wire.StateReady)<<8|wire.MHISTATUSReady {
		t.Fatalf("MHISTATUS = 0x%x", got)
	}
	if st := h.Dev.Status(); st.State != wire.StateReady || st.EE != wire.EEAMSS {
		t.Fatalf("status %+v", st)
	}
}

func TestNeverReady(t *testing.T) {
	const delay = 5 * time.Millisecond
	h := eptest.NewHost(t, func(c *ep.Config) { c.ReadyDelay = delay })
	h.WaitReady()
	h.Dev.SetNeverReady(true)
	h.Dev.Reset()
	if st := h.State(); st != wire.StateReset {
		t.Fatalf("state %s after Reset, want RESET", st)
	}
	h.StayFor(10*delay, "RESET with NeverReady", func() bool {
		return h.Reg(wire.RegMHISTATUS) == 0
	})
	h.Dev.SetNeverReady(false)
	h.WaitReady()
}

func TestPowerUpEvents(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	r := h.Ev[0]
	if rp := h.EventRP(0); rp != r.Base+2*wire.ElementSize {
		t.Fatalf("event ring 0 rp 0x%x, want base+32 (0x%x)", rp, r.Base+32)
	}
	if st := h.Reg(wire.RegMHISTATUS); st != uint32(wire.StateM0)<<8|wire.MHISTATUSReady {
		t.Fatalf("MHISTATUS 0x%x, want M0|READY", st)
	}
	h.WaitFor("interrupts on vector 1", func() bool { return len(h.Irq.Raised(1)) == 2 })
	if s := h.Dev.Stats(); s.EventsPosted[0] != 2 || s.EventsPosted[1] != 0 || s.BoundsViolations != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestChannelCommands(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	h.StartChannel(0)
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
	h.InitChannel(50, 16)
	for _, s := range steps {
		ev := h.Command(s.cmd, s.ch)
		if ev.Code() != s.code {
			t.Fatalf("%s(%d) = %s, want %s", s.cmd, s.ch, ev.Code(), s.code)
		}
		if s.want != 0xFF {
			if st := h.ChState(s.ch); st != s.want {
				t.Fatalf("after %s(%d): context state %s, want %s", s.cmd, s.ch, st, s.want)
			}
		}
	}
	if s := h.Dev.Stats(); s.Commands != uint64(len(steps))+1 || s.CommandErrors != 2 {
		t.Fatalf("commands %d errors %d", s.Commands, s.CommandErrors)
	}
	// Unknown command type.
	if ev := h.Command(0x33, 0); ev.Code() != wire.CCUndefinedErr {
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
		{"ring runs past memory", func(c *wire.Context) { c.RLen = eptest.MemSize }},
		{"rp outside ring", func(c *wire.Context) { c.RP = c.RBase + c.RLen }},
		{"wp misaligned", func(c *wire.Context) { c.WP = c.RBase + 8 }},
		{"event ring index too large", func(c *wire.Context) { c.Index = 9 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := eptest.NewHost(t, nil)
			h.PowerUp()
			r := h.InitChannel(0, 16)
			ctx := wire.ParseContext(h.Read(r.CtxIOVA, wire.ContextSize))
			tc.mod(&ctx)
			h.WriteContext(r.CtxIOVA, ctx)
			if ev := h.Command(wire.PktStartChanCmd, 0); ev.Code() != wire.CCUndefinedErr {
				t.Fatalf("START = %s, want UNDEFINED_ERR", ev.Code())
			}
			if st := h.ChState(0); st != wire.ChannelEnabled {
				t.Fatalf("context state %s, want ENABLED (untouched)", st)
			}
			if h.Dev.Stats().BoundsViolations == 0 {
				t.Fatalf("bad context not counted")
			}
		})
	}
}

func TestLoopbackSingleTRE(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	dlBuf := h.Mem.Alloc(t, 256, 8)
	dlTRE := h.Queue(1, dlBuf, 256, wire.TREIEOT)
	h.Ring(1)
	ulBuf, data := h.Buffer(100, 3)
	ulTRE := h.Queue(0, ulBuf, 100, wire.TREIEOT)
	h.Ring(0)

	got := map[uint8]wire.Element{}
	for range 2 {
		ev := h.NextEvent(0)
		got[ev.Channel()] = ev
	}
	eptest.ExpectTransfer(t, got[0], 0, ulTRE, wire.CCEOT, 100)
	eptest.ExpectTransfer(t, got[1], 1, dlTRE, wire.CCEOT, 100)
	if out := h.Read(dlBuf, 100); string(out) != string(data) {
		t.Fatalf("looped data differs")
	}
	s := h.Dev.Stats()
	if s.ULTransfers != 1 || s.ULBytes != 100 || s.DLTransfers != 1 || s.DLBytes != 100 {
		t.Fatalf("stats %+v", s)
	}
	st := h.Dev.Status()
	for _, c := range st.Channels {
		want := h.Ch[c.Num]
		if want == nil {
			continue
		}
		if c.State != wire.ChannelRunning || c.ReadPointer != want.Addr(1) {
			t.Fatalf("status of channel %d: %+v, want RUNNING rp 0x%x", c.Num, c, want.Addr(1))
		}
		if rp := h.Load64(want.CtxIOVA + wire.CtxRP); rp != want.Addr(1) {
			t.Fatalf("channel %d context rp 0x%x, want 0x%x", c.Num, rp, want.Addr(1))
		}
	}
}

func TestLoopbackChainedIntoSmallerBuffers(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	var dlTREs []uint64
	dlBufs := make([]uint64, 4)
	for i := range dlBufs {
		dlBufs[i] = h.Mem.Alloc(t, 128, 8)
		dlTREs = append(dlTREs, h.Queue(1, dlBufs[i], 128, wire.TREIEOT))
	}
	h.Ring(1)
	sizes := []int{100, 200, 50}
	var want []byte
	var ulTREs []uint64
	for i, n := range sizes {
		buf, data := h.Buffer(n, byte(i*50))
		want = append(want, data...)
		flags := uint32(wire.TREChain | wire.TREIEOB)
		if i == len(sizes)-1 {
			flags = wire.TREIEOT
		}
		ulTREs = append(ulTREs, h.Queue(0, buf, uint32(n), flags))
	}
	h.Ring(0)

	var ul, dl []wire.Element
	for len(ul)+len(dl) < 6 {
		ev := h.NextEvent(0)
		if ev.Channel() == 0 {
			ul = append(ul, ev)
		} else {
			dl = append(dl, ev)
		}
	}
	if len(ul) != 3 || len(dl) != 3 {
		t.Fatalf("%d UL and %d DL events, want 3 and 3", len(ul), len(dl))
	}
	eptest.ExpectTransfer(t, ul[0], 0, ulTREs[0], wire.CCEOB, 100)
	eptest.ExpectTransfer(t, ul[1], 0, ulTREs[1], wire.CCEOB, 200)
	eptest.ExpectTransfer(t, ul[2], 0, ulTREs[2], wire.CCEOT, 50)
	eptest.ExpectTransfer(t, dl[0], 1, dlTREs[0], wire.CCOverflow, 128)
	eptest.ExpectTransfer(t, dl[1], 1, dlTREs[1], wire.CCOverflow, 128)
	eptest.ExpectTransfer(t, dl[2], 1, dlTREs[2], wire.CCEOT, 94)
	var got []byte
	for i, ev := range dl {
		got = append(got, h.Read(dlBufs[i], int(ev.Length()))...)
	}
	if string(got) != string(want) {
		t.Fatalf("looped data differs")
	}
	if s := h.Dev.Stats(); s.ULTransfers != 1 || s.ULBytes != 350 || s.DLTransfers != 1 || s.DLBytes != 350 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLoopbackBackpressure(t *testing.T) {
	h := eptest.NewHost(t, func(c *ep.Config) { c.DLQueueDepth = 1 })
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	const n = 4
	var datas [][]byte
	for i := range n {
		buf, data := h.Buffer(64, byte(i*16))
		datas = append(datas, data)
		h.Queue(0, buf, 64, wire.TREIEOT)
	}
	h.Ring(0)
	// No DL buffers: one transfer fills the DL queue, the next one waits
	// in the function, the rest stay in the ring.
	if ev := h.NextEvent(0); ev.Channel() != 0 || ev.Code() != wire.CCEOT {
		t.Fatalf("first event %v, want UL EOT", ev)
	}
	h.StayFor(30*time.Millisecond, "UL stalled without DL buffers", func() bool {
		return h.PendingEvents(0) == 0
	})
	if s := h.Dev.Stats(); s.ULTransfers != 1 {
		t.Fatalf("%d UL transfers consumed without DL room, want 1", s.ULTransfers)
	}
	dlBufs := make([]uint64, n)
	for i := range dlBufs {
		dlBufs[i] = h.Mem.Alloc(t, 64, 8)
		h.Queue(1, dlBufs[i], 64, wire.TREIEOT)
	}
	h.Ring(1)
	ulDone, dlDone := 1, 0
	for ulDone < n || dlDone < n {
		ev := h.NextEvent(0)
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
		if string(h.Read(dlBufs[i], 64)) != string(datas[i]) {
			t.Fatalf("DL transfer %d differs", i)
		}
	}
}

func TestEventRingFullBackpressure(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	// From now on the host reads events but hands no slot back.
	h.Ev[0].Recycle = false
	const n = 8 // 16 events, more than the free slots of ring 0
	dlBufs := make([]uint64, n)
	for i := range n {
		dlBufs[i] = h.Mem.Alloc(t, 32, 8)
		h.Queue(1, dlBufs[i], 32, wire.TREIEOT)
		buf, _ := h.Buffer(32, byte(i))
		h.Queue(0, buf, 32, wire.TREIEOT)
	}
	h.Ring(1)
	h.Ring(0)
	// Ring 0 has 16 slots, one always unused: 15 events fit.
	h.WaitFor("ring full", func() bool { return h.Dev.Stats().EventRingFullWaits > 0 })
	r := h.Ev[0]
	limit := r.Addr(r.Wp)
	h.StayFor(20*time.Millisecond, "device stops at the doorbell's WP", func() bool {
		return h.EventRP(0) == limit
	})
	events := 0
	for h.PendingEvents(0) > 0 {
		h.NextEvent(0)
		events++
	}
	if events != 15 {
		t.Fatalf("%d events before the ring was full, want 15 (16 slots, one unused)", events)
	}
	h.Ev[0].Recycle = true
	h.HandEventRing(0)
	for events < 2*n {
		if ev := h.NextEvent(0); ev.Code() != wire.CCEOT {
			t.Fatalf("event %v", ev)
		}
		events++
	}
	if s := h.Dev.Stats(); s.ULTransfers != n || s.DLTransfers != n {
		t.Fatalf("stats %+v", s)
	}
}

func TestBurstPollingAndDBMode(t *testing.T) {
	h := eptest.NewHost(t, func(c *ep.Config) {
		c.BurstPollInterval = time.Millisecond
		c.BurstIdlePolls = 5
	})
	h.PowerUp()
	ul := h.StartChannel(100)
	buf, _ := h.Buffer(64, 1)
	tre := h.Queue(100, buf, 64, wire.TREIEOT|wire.TREBEI)
	h.Ring(100) // db_mode is set after START: the first queue rings
	eptest.ExpectTransfer(t, h.NextEvent(1), 100, tre, wire.CCEOT, 64)
	// Burst mode: the host only updates the context wp now.
	tre2 := h.Queue(100, buf, 32, wire.TREIEOT|wire.TREBEI)
	tre3 := h.Queue(100, buf, 16, wire.TREIEOT|wire.TREBEI)
	eptest.ExpectTransfer(t, h.NextEvent(1), 100, tre2, wire.CCEOT, 32)
	eptest.ExpectTransfer(t, h.NextEvent(1), 100, tre3, wire.CCEOT, 16)
	// Dry: the device asks for the doorbell again, pointing at its rp.
	eptest.ExpectTransfer(t, h.NextEvent(1), 100, ul.Addr(3), wire.CCDBMode, 0)
	if s := h.Dev.Stats(); s.DBModeEvents != 1 || s.ChannelDoorbells != 1 || s.ULTransfers != 3 {
		t.Fatalf("stats %+v", s)
	}
	// Doorbell mode again: a doorbell restarts processing.
	tre4 := h.Queue(100, buf, 8, wire.TREIEOT|wire.TREBEI)
	h.Ring(100)
	eptest.ExpectTransfer(t, h.NextEvent(1), 100, tre4, wire.CCEOT, 8)

	// Downlink: data waits for buffers; polling finds a buffer published
	// by wp only, then runs dry and sends DB_MODE.
	dl := h.StartChannel(101)
	dlBuf := h.Mem.Alloc(t, 64, 8)
	dlTRE := h.Queue(101, dlBuf, 64, wire.TREIEOT|wire.TREBEI)
	h.Ring(101)
	ctx := context.Background()
	if err := h.Dev.QueueDL(ctx, 101, []byte("first")); err != nil {
		t.Fatal(err)
	}
	// Channel 100 keeps polling and may post DB_MODE again: skip those.
	nextDL := func() wire.Element {
		for {
			if ev := h.NextEvent(1); ev.Channel() != 100 {
				return ev
			}
		}
	}
	eptest.ExpectTransfer(t, nextDL(), 101, dlTRE, wire.CCEOT, 5)
	if err := h.Dev.QueueDL(ctx, 101, []byte("second")); err != nil {
		t.Fatal(err)
	}
	dlTRE2 := h.Queue(101, dlBuf, 64, wire.TREIEOT|wire.TREBEI) // no doorbell
	eptest.ExpectTransfer(t, nextDL(), 101, dlTRE2, wire.CCEOT, 6)
	if err := h.Dev.QueueDL(ctx, 101, []byte("third")); err != nil {
		t.Fatal(err)
	}
	eptest.ExpectTransfer(t, nextDL(), 101, dl.Addr(2), wire.CCDBMode, 0)
	dlTRE3 := h.Queue(101, dlBuf, 64, wire.TREIEOT|wire.TREBEI)
	h.Ring(101)
	eptest.ExpectTransfer(t, nextDL(), 101, dlTRE3, wire.CCEOT, 5)
	if string(h.Read(dlBuf, 5)) != "third" {
		t.Fatalf("DL data %q", h.Read(dlBuf, 5))
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
			h := eptest.NewHost(t, func(c *ep.Config) {
				c.MHI.EventRings[1].ModerationMs = tc.moderationMs
				c.BurstIdlePolls = 1000 // no DB_MODE during the test
			})
			h.PowerUp()
			h.StartChannel(100)
			buf, _ := h.Buffer(16, 0)
			flags := uint32(wire.TREIEOT)
			if tc.bei {
				flags |= wire.TREBEI
			}
			for range 3 {
				h.Queue(100, buf, 16, flags)
			}
			start := time.Now()
			h.Ring(100)
			for range 3 {
				h.NextEvent(1)
			}
			if tc.wantIRQs > 0 {
				h.WaitFor("interrupts", func() bool { return len(h.Irq.Raised(2)) >= tc.wantIRQs })
			}
			settle := 2 * time.Duration(max(tc.moderationMs, 10)) * time.Millisecond
			h.StayFor(settle, "interrupt count", func() bool { return len(h.Irq.Raised(2)) <= tc.wantIRQs })
			irqs := h.Irq.Raised(2)
			if len(irqs) != tc.wantIRQs {
				t.Fatalf("%d interrupts on vector 2, want %d", len(irqs), tc.wantIRQs)
			}
			if tc.wantDelayed {
				if d := irqs[0].At.Sub(start); d < time.Duration(tc.moderationMs)*time.Millisecond {
					t.Fatalf("moderated interrupt after %v, want >= %d ms", d, tc.moderationMs)
				}
				if s := h.Dev.Stats(); s.InterruptsModerated != 1 {
					t.Fatalf("moderated %d", s.InterruptsModerated)
				}
			}
		})
	}
}

func TestModeratedInterruptCancelledByUnmoderatedEvent(t *testing.T) {
	h := eptest.NewHost(t, func(c *ep.Config) {
		c.MHI.EventRings[1].ModerationMs = 30
		c.BurstIdlePolls = 1000
	})
	h.PowerUp()
	h.StartChannel(100)
	buf, _ := h.Buffer(16, 0)
	h.Queue(100, buf, 16, wire.TREIEOT|wire.TREBEI)
	h.Queue(100, buf, 16, wire.TREIEOT)
	h.Ring(100)
	h.NextEvent(1)
	h.NextEvent(1)
	h.WaitFor("interrupt", func() bool { return len(h.Irq.Raised(2)) == 1 })
	h.StayFor(60*time.Millisecond, "a single interrupt", func() bool { return len(h.Irq.Raised(2)) == 1 })
	if s := h.Dev.Stats(); s.InterruptsModerated != 0 {
		t.Fatalf("moderated interrupt fired although cancelled: %+v", s)
	}
}

func TestM3AndResume(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	h.SetReg(wire.RegMHICTRL, uint32(wire.StateM3)<<wire.MHICTRLStateShift)
	if ev := h.NextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM3 {
		t.Fatalf("event %v, want STATE_CHANGE(M3)", ev)
	}
	if h.State() != wire.StateM3 {
		t.Fatalf("MHISTATUS state %s", h.State())
	}
	dlBuf := h.Mem.Alloc(t, 64, 8)
	h.Queue(1, dlBuf, 64, wire.TREIEOT)
	h.Ring(1)
	buf, data := h.Buffer(40, 9)
	h.Queue(0, buf, 40, wire.TREIEOT)
	h.Ring(0)
	h.StayFor(20*time.Millisecond, "no transfers in M3", func() bool { return h.PendingEvents(0) == 0 })
	h.SetReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
	if ev := h.NextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM0 {
		t.Fatalf("event %v, want STATE_CHANGE(M0)", ev)
	}
	for range 2 {
		if ev := h.NextEvent(0); ev.Type() != wire.PktTxEvent || ev.Code() != wire.CCEOT {
			t.Fatalf("event %v, want transfer EOT (and no EE event)", ev)
		}
	}
	if string(h.Read(dlBuf, 40)) != string(data) {
		t.Fatalf("looped data differs")
	}
	for _, ch := range []uint8{0, 1} {
		if st := h.ChState(ch); st != wire.ChannelRunning {
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
	h := eptest.NewHost(t, func(c *ep.Config) {
		c.BurstPollInterval = time.Millisecond
		c.BurstIdlePolls = 50
	})
	h.PowerUp()
	h.StartChannel(100)
	buf, _ := h.Buffer(64, 3)
	h.SetReg(wire.RegMHICTRL, uint32(wire.StateM3)<<wire.MHICTRLStateShift)
	if ev := h.NextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM3 {
		t.Fatalf("event %v, want STATE_CHANGE(M3)", ev)
	}
	tre := h.Queue(100, buf, 64, wire.TREIEOT|wire.TREBEI) // queued in M3: no doorbell

	release := make(chan struct{})
	hold := func() {
		select {
		case <-release:
		case <-time.After(eptest.WaitTimeout):
		}
	}
	h.Dev.SetAfterResumeEvent(&hold)
	h.SetReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
	if ev := h.NextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateM0 {
		t.Fatalf("event %v, want STATE_CHANGE(M0)", ev)
	}
	h.Ring(100) // the host's M0 transition: db_mode set, pending work rung
	eptest.ExpectTransfer(t, h.NextEvent(1), 100, tre, wire.CCEOT, 64)
	close(release)
	// The control goroutine holds ctrlMu through the whole resume; once
	// it is free, the channel has been marked and poked. Then wait for
	// the worker's round that takes the mark, and for its end.
	h.Dev.WaitControlIdle()
	c := h.Dev.ChannelWorker(100)
	h.WaitFor("the resync taken", func() bool { return !c.DBModeResync() })
	c.WaitIdle()

	// Burst mode: the host only updates the context wp now, and rings
	// again only on DB_MODE.
	for i := range 3 {
		tre := h.Queue(100, buf, uint32(16+i), wire.TREIEOT|wire.TREBEI)
		for {
			ev := h.NextEvent(1)
			if ev.Code() == wire.CCDBMode {
				h.Ring(100)
				continue
			}
			eptest.ExpectTransfer(t, ev, 100, tre, wire.CCEOT, uint32(16+i))
			break
		}
	}
}

func TestSysErrAndRecovery(t *testing.T) {
	tests := []struct {
		name   string
		inject func(h *eptest.Host)
		fault  bool
	}{
		{"injected", func(h *eptest.Host) { h.Dev.InjectSysErr() }, true},
		{"host-forced", func(h *eptest.Host) {
			h.SetReg(wire.RegMHICTRL, uint32(wire.StateSysErr)<<wire.MHICTRLStateShift)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := eptest.NewHost(t, nil)
			h.PowerUp()
			h.StartChannel(0)
			h.SetReg(ep.BHIOffset+wire.BHIIntVec, 7)
			tc.inject(h)
			h.WaitFor("SYS_ERR", func() bool { return h.State() == wire.StateSysErr })
			st := h.Reg(wire.RegMHISTATUS)
			if h.State() != wire.StateSysErr || st&wire.MHISTATUSSysErr == 0 {
				t.Fatalf("MHISTATUS 0x%x, want SYS_ERR with the SYSERR bit", st)
			}
			if ev := h.NextEvent(0); ev.Type() != wire.PktStateChangeEvent || ev.EventState() != wire.StateSysErr {
				t.Fatalf("event %v, want STATE_CHANGE(SYS_ERR)", ev)
			}
			h.WaitFor("INTVEC interrupt", func() bool { return len(h.Irq.Raised(7)) == 1 })
			// Transfers stop.
			buf, _ := h.Buffer(8, 0)
			h.Queue(0, buf, 8, wire.TREIEOT)
			h.Ring(0)
			h.StayFor(10*time.Millisecond, "no transfers in SYS_ERR", func() bool { return h.PendingEvents(0) == 0 })
			if tc.fault != (h.Dev.Stats().FaultsInjected == 1) {
				t.Fatalf("faults injected %d", h.Dev.Stats().FaultsInjected)
			}
			// Recovery: MHICTRL.RESET, READY again, INTVEC cleared.
			h.SetReg(wire.RegMHICTRL, h.Reg(wire.RegMHICTRL)|wire.MHICTRLReset)
			h.WaitReady()
			if v := h.Reg(ep.BHIOffset + wire.BHIIntVec); v != 0 {
				t.Fatalf("INTVEC %d after reset, want 0", v)
			}
			h.PowerUp()
			h.StartChannel(0)
		})
	}
}

func TestMHIResetThenReady(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	// Downlink data with no host buffer is pending when the reset comes.
	if err := h.Dev.QueueDL(context.Background(), 1, []byte("pending")); err != nil {
		t.Fatal(err)
	}
	h.SetReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift|wire.MHICTRLReset)
	h.WaitFor("MHICTRL.RESET cleared", func() bool { return h.Reg(wire.RegMHICTRL) == 0 })
	h.WaitReady()
	s := h.Dev.Stats()
	if s.DLDroppedOnReset != 1 || s.DLDroppedBytesOnReset != 7 || s.Resets != 1 {
		t.Fatalf("stats %+v", s)
	}
	for _, c := range h.Dev.Status().Channels {
		if c.State != wire.ChannelDisabled || c.PendingDL != 0 {
			t.Fatalf("channel after reset: %+v", c)
		}
	}
	// A second power-up on fresh contexts works end to end.
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	dlBuf := h.Mem.Alloc(t, 64, 8)
	h.Queue(1, dlBuf, 64, wire.TREIEOT)
	h.Ring(1)
	buf, data := h.Buffer(10, 4)
	h.Queue(0, buf, 10, wire.TREIEOT)
	h.Ring(0)
	h.NextEvent(0)
	h.NextEvent(0)
	if string(h.Read(dlBuf, 10)) != string(data) {
		t.Fatalf("looped data differs after reset")
	}

	// Function-level reset from the transport: registers back to power-on.
	h.Dev.Reset()
	if h.Reg(wire.RegCCABAPLower) != 0 || h.Reg(wire.RegMHICTRL) != 0 || h.Reg(wire.RegMHISTATUS) != 0 {
		t.Fatalf("registers survive a function-level reset")
	}
	h.WaitReady()
}

func TestEventCorruption(t *testing.T) {
	tests := []struct {
		kind  ep.Corruption
		check func(t *testing.T, h *eptest.Host, ev wire.Element, tre uint64, ring *eptest.Ring)
	}{
		{ep.CorruptEventPointer, func(t *testing.T, h *eptest.Host, ev wire.Element, tre uint64, r *eptest.Ring) {
			if ev.Ptr != r.Addr(r.N) {
				t.Fatalf("ptr 0x%x, want first address after the ring 0x%x", ev.Ptr, r.Addr(r.N))
			}
		}},
		{ep.CorruptChannelID, func(t *testing.T, h *eptest.Host, ev wire.Element, tre uint64, r *eptest.Ring) {
			if _, ok := h.Cfg.MHI.Channel(ev.Channel()); ok || ev.Ptr != tre {
				t.Fatalf("channel %d is offered (or ptr changed): %v", ev.Channel(), ev)
			}
		}},
		{ep.CorruptCompletionCode, func(t *testing.T, h *eptest.Host, ev wire.Element, tre uint64, r *eptest.Ring) {
			if ev.Code() != ep.BogusCompletionCode || ev.Length() != 64 {
				t.Fatalf("event %v, want code 0x7F len 64", ev)
			}
		}},
		{ep.CorruptLength, func(t *testing.T, h *eptest.Host, ev wire.Element, tre uint64, r *eptest.Ring) {
			if ev.Length() != 129 || ev.Code() != wire.CCEOT {
				t.Fatalf("event %v, want EOT with len 129 for a 128-byte buffer", ev)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.kind.String(), func(t *testing.T) {
			h := eptest.NewHost(t, nil)
			h.PowerUp()
			r := h.StartChannel(1)
			buf := h.Mem.Alloc(t, 128, 8)
			tre := h.Queue(1, buf, 128, wire.TREIEOT)
			h.Ring(1)
			if err := h.Dev.CorruptNextEvent(tc.kind); err != nil {
				t.Fatal(err)
			}
			if err := h.Dev.QueueDL(context.Background(), 1, make([]byte, 64)); err != nil {
				t.Fatal(err)
			}
			tc.check(t, h, h.NextEvent(0), tre, r)
			if s := h.Dev.Stats(); s.FaultsInjected != 1 {
				t.Fatalf("faults injected %d", s.FaultsInjected)
			}
		})
	}

	t.Run(ep.CorruptEventRP.String(), func(t *testing.T) {
		h := eptest.NewHost(t, nil)
		h.PowerUp()
		h.StartChannel(1)
		buf := h.Mem.Alloc(t, 128, 8)
		for range 2 {
			h.Queue(1, buf, 128, wire.TREIEOT)
		}
		h.Ring(1)
		if err := h.Dev.CorruptNextEvent(ep.CorruptEventRP); err != nil {
			t.Fatal(err)
		}
		if err := h.Dev.QueueDL(context.Background(), 1, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		er := h.Ev[0]
		h.WaitFor("rp outside the ring", func() bool { return h.EventRP(0) == er.Addr(er.N) })
		// The next event publishes a correct rp covering both.
		if err := h.Dev.QueueDL(context.Background(), 1, make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		h.WaitFor("rp back in the ring", func() bool { return h.EventRP(0) == er.Addr(er.Rp+2) })
		for range 2 {
			if ev := h.NextEvent(0); ev.Code() != wire.CCEOT {
				t.Fatalf("event %v", ev)
			}
		}
		if s := h.Dev.Stats(); s.FaultsInjected != 1 {
			t.Fatalf("faults injected %d", s.FaultsInjected)
		}
	})

	h := eptest.NewHost(t, nil)
	if err := h.Dev.CorruptNextEvent(ep.Corruption(99)); !errors.Is(err, wire.ErrConfig) {
		t.Fatalf("unknown corruption accepted: %v", err)
	}
}

func TestDropInterrupts(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.Dev.DropInterrupts(2)
	h.PowerUp() // STATE_CHANGE and EE events: both interrupts dropped
	h.StayFor(5*time.Millisecond, "no interrupts", func() bool { return len(h.Irq.Raised(1)) == 0 })
	h.StartChannel(0)
	h.WaitFor("interrupt after the drops", func() bool { return len(h.Irq.Raised(1)) == 1 })
	if s := h.Dev.Stats(); s.InterruptsDropped != 2 || s.FaultsInjected != 2 || s.InterruptsRaised != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBadPointers(t *testing.T) {
	tests := []struct {
		name       string
		ch         uint8
		el         func(h *eptest.Host) wire.Element
		wantBounds bool
	}{
		{"UL buffer outside memory", 0, func(h *eptest.Host) wire.Element {
			return wire.TransferTRE(0x100, 64, wire.TREIEOT)
		}, true},
		{"UL buffer running past memory", 0, func(h *eptest.Host) wire.Element {
			return wire.TransferTRE(eptest.MemBase+eptest.MemSize-8, 64, wire.TREIEOT)
		}, true},
		{"UL element not a TRE", 0, func(h *eptest.Host) wire.Element {
			return wire.CommandElement(wire.PktStartChanCmd, 0)
		}, false},
		{"UL length word beyond 16 bits", 0, func(h *eptest.Host) wire.Element {
			buf, _ := h.Buffer(16, 0)
			el := wire.TransferTRE(buf, 16, wire.TREIEOT)
			el.Dword0 |= 0x10000
			return el
		}, false},
		{"DL buffer outside memory", 1, func(h *eptest.Host) wire.Element {
			return wire.TransferTRE(0xFFFF_FFFF_0000, 64, wire.TREIEOT)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := eptest.NewHost(t, func(c *ep.Config) { c.Functions = map[string]ep.Function{"LOOPBACK": discard{}} })
			h.PowerUp()
			h.StartChannel(tc.ch)
			bad := h.QueueElement(tc.ch, tc.el(h))
			// A good TRE behind the bad one still works.
			buf, _ := h.Buffer(16, 0)
			good := h.Queue(tc.ch, buf, 16, wire.TREIEOT)
			h.Ring(tc.ch)
			if tc.ch == 1 {
				if err := h.Dev.QueueDL(context.Background(), 1, []byte("abc")); err != nil {
					t.Fatal(err)
				}
			}
			eptest.ExpectTransfer(t, h.NextEvent(0), tc.ch, bad, wire.CCBadTRE, 0)
			wantLen := uint32(16)
			if tc.ch == 1 {
				wantLen = 3
			}
			eptest.ExpectTransfer(t, h.NextEvent(0), tc.ch, good, wire.CCEOT, wantLen)
			s := h.Dev.Stats()
			if s.BadTREs != 1 || (s.BoundsViolations > 0) != tc.wantBounds {
				t.Fatalf("bad TREs %d bounds %d", s.BadTREs, s.BoundsViolations)
			}
		})
	}
}

// discard is a Function that swallows uplink transfers.
type discard struct{}

func (discard) Receive(context.Context, *ep.Pipe, []byte) error { return nil }

func TestBadDoorbellsAndBases(t *testing.T) {
	t.Run("channel doorbell outside its ring", func(t *testing.T) {
		h := eptest.NewHost(t, nil)
		h.PowerUp()
		h.StartChannel(0)
		h.SetReg64(ep.ChannelDoorbellOffset, 0xDEAD_0000)
		h.WaitFor("bounds violation", func() bool { return h.Dev.Stats().BoundsViolations == 1 })
		if h.PendingEvents(0) != 0 || h.Dev.Stats().ULTransfers != 0 {
			t.Fatalf("device acted on a bad doorbell")
		}
	})
	t.Run("command doorbell outside the ring", func(t *testing.T) {
		h := eptest.NewHost(t, nil)
		h.PowerUp()
		h.SetReg64(wire.RegCRDBLower, 0x10)
		h.WaitFor("bounds violation", func() bool { return h.Dev.Stats().BoundsViolations == 1 })
		if h.Dev.Stats().Commands != 0 {
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
			h := eptest.NewHost(t, nil)
			h.WaitReady()
			h.SetupContexts()
			h.HandEventRing(0)
			h.SetReg64(b.reg, 0x40)
			h.SetReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift)
			h.WaitFor("bounds violation", func() bool { return h.Dev.Stats().BoundsViolations > 0 })
			if h.Dev.State() != wire.StateM0 {
				t.Fatalf("state %s", h.Dev.State())
			}
			// Ringing the command doorbell must not crash either.
			h.SetReg64(wire.RegCRDBLower, h.Cmd.Addr(1))
			h.WaitFor("second violation", func() bool { return h.Dev.Stats().BoundsViolations > 1 })
		})
	}
}

func TestSendAPI(t *testing.T) {
	h := eptest.NewHost(t, func(c *ep.Config) { c.DLQueueDepth = 1 })
	p, ok := h.Dev.Pipe("LOOPBACK")
	if !ok || p.Name() != "LOOPBACK" {
		t.Fatalf("no LOOPBACK pipe")
	}
	if err := p.TrySend([]byte("x")); !errors.Is(err, wire.ErrChannelState) {
		t.Fatalf("TrySend on a disabled channel = %v", err)
	}
	h.PowerUp()
	h.StartChannel(1)
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
	if err := h.Dev.QueueDL(ctx, 0, nil); !errors.Is(err, wire.ErrNoChannel) {
		t.Fatalf("QueueDL on an uplink channel = %v", err)
	}
	// A blocked Send ends with Close.
	done := make(chan error, 1)
	go func() { done <- p.Send(context.Background(), []byte("z")) }()
	time.Sleep(2 * time.Millisecond)
	_ = h.Dev.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ep.ErrClosed) {
			t.Fatalf("Send after Close = %v", err)
		}
	case <-time.After(eptest.WaitTimeout):
		t.Fatal("Send still blocked after Close")
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	base := runtime.NumGoroutine()
	h := eptest.NewHost(t, func(c *ep.Config) { c.DLQueueDepth = 1 })
	h.PowerUp()
	h.StartChannel(0)
	h.StartChannel(1)
	h.StartChannel(100)
	// A pending moderated interrupt, a polling burst channel, and a
	// loopback blocked on a full downlink queue.
	buf, _ := h.Buffer(16, 0)
	h.Queue(100, buf, 16, wire.TREIEOT|wire.TREBEI)
	h.Ring(100)
	h.NextEvent(1)
	for range 3 {
		h.Queue(0, buf, 16, wire.TREIEOT)
	}
	h.Ring(0)
	h.NextEvent(0)
	if runtime.NumGoroutine() <= base {
		t.Fatalf("device runs no goroutines?")
	}
	if err := h.Dev.Close(); err != nil {
		t.Fatal(err)
	}
	_ = h.Dev.Close() // idempotent
	poll.Wait(t, eptest.WaitTimeout, func() bool { return runtime.NumGoroutine() <= base }, func() string {
		b := make([]byte, 1<<16)
		return fmt.Sprintf("%d goroutines after Close, %d before\n%s", runtime.NumGoroutine(), base, b[:runtime.Stack(b, true)])
	})
	// Register access after Close is harmless.
	h.SetReg64(ep.ChannelDoorbellOffset, 0)
	_ = h.Reg(wire.RegMHISTATUS)
}
