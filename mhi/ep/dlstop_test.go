package ep

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// postCommand writes a command and rings the command doorbell without
// waiting for the completion; it returns the command's IOVA.
func (h *testHost) postCommand(t wire.PacketType, ch uint8) uint64 {
	addr := h.cmd.addr(h.cmd.wp)
	h.writeElement(addr, wire.CommandElement(t, ch))
	h.cmd.wp = (h.cmd.wp + 1) % h.cmd.n
	h.store64(h.cmdCtx+wire.CtxWP, h.cmd.addr(h.cmd.wp))
	h.setReg64(wire.RegCRDBLower, h.cmd.addr(h.cmd.wp))
	return addr
}

// pattern returns n bytes derived from seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*13)
	}
	return b
}

// dlSetup starts the LOOPBACK downlink channel (1) with one 128-byte
// buffer posted and queues a 300-byte and a 50-byte transfer: the first
// piece of the first one lands, then the device runs out of buffers.
func dlSetup(t *testing.T) (h *testHost, first, second []byte, bufs []uint64) {
	h = newHost(t, func(c *Config) { c.Functions = map[string]Function{LoopbackName: discard{}} })
	h.powerUp()
	h.startChannel(1)
	for range 4 {
		bufs = append(bufs, h.mem.alloc(t, 128, 8))
	}
	tre := h.queue(1, bufs[0], 128, wire.TREIEOT)
	h.ring(1)
	first, second = pattern(300, 1), pattern(50, 99)
	for _, d := range [][]byte{first, second} {
		if err := h.dev.QueueDL(context.Background(), 1, d); err != nil {
			t.Fatal(err)
		}
	}
	expectTransfer(t, h.nextEvent(0), 1, tre, wire.CCOverflow, 128)
	if !bytes.Equal(h.read(bufs[0], 128), first[:128]) {
		t.Fatal("first piece differs")
	}
	return h, first, second, bufs
}

func pendingDL(h *testHost, ch uint8) int {
	for _, c := range h.dev.Status().Channels {
		if c.Num == ch {
			return c.PendingDL
		}
	}
	return -1
}

func TestDLStopWithoutBuffersPausesMidTransfer(t *testing.T) {
	h, first, second, bufs := dlSetup(t)
	if ev := h.command(wire.PktStopChanCmd, 1); ev.Code() != wire.CCSuccess {
		t.Fatalf("STOP = %s", ev.Code())
	}
	// Buffers posted while stopped are not used.
	var tres []uint64
	for _, b := range bufs[1:] {
		tres = append(tres, h.queue(1, b, 128, wire.TREIEOT))
	}
	h.ring(1)
	h.stayFor(10*time.Millisecond, "nothing moves while stopped", func() bool { return h.pendingEvents(0) == 0 })
	if n := pendingDL(h, 1); n != 2 {
		t.Fatalf("%d transfers queued, want 2", n)
	}
	// START resumes the transfer where it stopped.
	if ev := h.command(wire.PktStartChanCmd, 1); ev.Code() != wire.CCSuccess {
		t.Fatalf("START = %s", ev.Code())
	}
	expectTransfer(t, h.nextEvent(0), 1, tres[0], wire.CCOverflow, 128)
	expectTransfer(t, h.nextEvent(0), 1, tres[1], wire.CCEOT, 44)
	expectTransfer(t, h.nextEvent(0), 1, tres[2], wire.CCEOT, 50)
	got := append(h.read(bufs[0], 128), h.read(bufs[1], 128)...)
	got = append(got, h.read(bufs[2], 44)...)
	if !bytes.Equal(got, first) || !bytes.Equal(h.read(bufs[3], 50), second) {
		t.Fatal("data differs after resume")
	}
	if s := h.dev.Stats(); s.DLTransfers != 2 || s.DLPartialDropped != 0 || s.DLDroppedOnReset != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDLStopFinishesTransferInProgress(t *testing.T) {
	h, first, second, bufs := dlSetup(t)
	c := h.dev.channelByNum(1)
	// Hold the worker so that the STOP, not the doorbell, meets the new
	// buffers: three are posted, two finish the first transfer, the third
	// must stay unused.
	c.work.Lock()
	var tres []uint64
	for _, b := range bufs[1:] {
		tres = append(tres, h.queue(1, b, 128, wire.TREIEOT))
	}
	h.ring(1)
	cmd := h.postCommand(wire.PktStopChanCmd, 1)
	h.waitFor("STOP pending", func() bool { return c.stopReq.Load() })
	c.work.Unlock()
	expectTransfer(t, h.nextEvent(0), 1, tres[0], wire.CCOverflow, 128)
	expectTransfer(t, h.nextEvent(0), 1, tres[1], wire.CCEOT, 44)
	if ev := h.nextEvent(0); ev.Type() != wire.PktCmdCompletion || ev.Ptr != cmd || ev.Code() != wire.CCSuccess {
		t.Fatalf("event %v, want the STOP completion", ev)
	}
	if st := h.chState(1); st != wire.ChannelStop {
		t.Fatalf("context state %s", st)
	}
	h.stayFor(10*time.Millisecond, "second transfer not started", func() bool { return h.pendingEvents(0) == 0 })
	got := append(h.read(bufs[0], 128), h.read(bufs[1], 128)...)
	if !bytes.Equal(append(got, h.read(bufs[2], 44)...), first) {
		t.Fatal("first transfer differs")
	}
	if n := pendingDL(h, 1); n != 1 {
		t.Fatalf("%d transfers queued, want 1", n)
	}

	// RESET keeps the whole queued transfer for the next START.
	if ev := h.command(wire.PktResetChanCmd, 1); ev.Code() != wire.CCSuccess {
		t.Fatalf("RESET = %s", ev.Code())
	}
	if n := pendingDL(h, 1); n != 1 {
		t.Fatalf("%d transfers queued after RESET, want 1", n)
	}
	h.startChannel(1)
	buf := h.mem.alloc(t, 64, 8)
	tre := h.queue(1, buf, 64, wire.TREIEOT)
	h.ring(1)
	expectTransfer(t, h.nextEvent(0), 1, tre, wire.CCEOT, 50)
	if !bytes.Equal(h.read(buf, 50), second) {
		t.Fatal("second transfer differs")
	}
	if s := h.dev.Stats(); s.DLTransfers != 2 || s.DLPartialDropped != 0 || s.DLDroppedOnReset != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDLResetDropsOnlyPartialTransfer(t *testing.T) {
	tests := []struct {
		name string
		stop bool
	}{
		{"reset while running", false},
		{"stop then reset", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _, second, _ := dlSetup(t)
			if tc.stop {
				h.command(wire.PktStopChanCmd, 1)
			}
			if ev := h.command(wire.PktResetChanCmd, 1); ev.Code() != wire.CCSuccess {
				t.Fatalf("RESET = %s", ev.Code())
			}
			s := h.dev.Stats()
			if s.DLPartialDropped != 1 || s.DLPartialDroppedBytes != 300 || s.DLDroppedOnReset != 0 {
				t.Fatalf("stats %+v", s)
			}
			if n := pendingDL(h, 1); n != 1 {
				t.Fatalf("%d transfers queued, want 1", n)
			}
			h.startChannel(1)
			buf := h.mem.alloc(t, 64, 8)
			tre := h.queue(1, buf, 64, wire.TREIEOT)
			h.ring(1)
			expectTransfer(t, h.nextEvent(0), 1, tre, wire.CCEOT, 50)
			if !bytes.Equal(h.read(buf, 50), second) {
				t.Fatal("kept transfer differs")
			}
		})
	}
}

// Reservations survive a channel reset but not an MHI reset.
func TestReservationAcrossResets(t *testing.T) {
	h := newHost(t, nil)
	h.powerUp()
	h.startChannel(1)
	p, _ := h.dev.Pipe(LoopbackName)
	waitDownlinkRunning(t, p)
	b, err := p.TryReserve(16)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Buf, "kept over RESET")
	h.command(wire.PktResetChanCmd, 1)
	if err := p.Commit(b, 15); err != nil {
		t.Fatal(err)
	}
	if _, err := p.TryReserve(16); err == nil {
		t.Fatal("reservation allowed on a disabled channel")
	}
	h.startChannel(1)
	buf := h.mem.alloc(t, 64, 8)
	tre := h.queue(1, buf, 64, wire.TREIEOT)
	h.ring(1)
	expectTransfer(t, h.nextEvent(0), 1, tre, wire.CCEOT, 15)

	b, err = p.Reserve(context.Background(), 8)
	if err != nil {
		t.Fatal(err)
	}
	h.setReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift|wire.MHICTRLReset)
	h.waitReady()
	if err := p.Commit(b, 8); err == nil {
		t.Fatal("reservation survived an MHI reset")
	}
	if s := h.dev.Stats(); s.DLDroppedOnReset != 1 || s.DLDroppedBytesOnReset != 8 {
		t.Fatalf("stats %+v", s)
	}
	// SendFunc builds in place; Release and a zero commit give slots back.
	h.powerUp()
	h.startChannel(1)
	waitDownlinkRunning(t, p)
	for range 2 * DefaultDLQueueDepth {
		b, err := p.TryReserve(4)
		if err != nil {
			t.Fatal(err)
		}
		p.Release(b)
		if b, err = p.TryReserve(4); err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(b, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SendFunc(context.Background(), 32, func(buf []byte) int { return copy(buf, "in place") }); err != nil {
		t.Fatal(err)
	}
	tre = h.queue(1, buf, 64, wire.TREIEOT)
	h.ring(1)
	expectTransfer(t, h.nextEvent(0), 1, tre, wire.CCEOT, 8)
	if string(h.read(buf, 8)) != "in place" {
		t.Fatal("SendFunc data differs")
	}
	b, _ = p.TryReserve(4)
	if err := p.Commit(b, 5); err == nil {
		t.Fatal("commit beyond the reservation accepted")
	}
	if err := p.Commit(DLBuffer{}, 0); err == nil {
		t.Fatal("commit of a zero DLBuffer accepted")
	}
}

// waitDownlinkRunning waits until the device side of p's downlink runs.
// The device activates a channel after it has posted the START
// completion, so the host sees RUNNING a moment before the pipe does.
func waitDownlinkRunning(t *testing.T, p *Pipe) {
	t.Helper()
	if !poll.Until(5*time.Second, func() bool { return p.DownlinkState() == wire.ChannelRunning }) {
		t.Fatalf("downlink %s after 5 s, want RUNNING", p.DownlinkState())
	}
}
