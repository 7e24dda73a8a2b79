package ep_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/eptest"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

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
func dlSetup(t *testing.T) (h *eptest.Host, first, second []byte, bufs []uint64) {
	h = eptest.NewHost(t, func(c *ep.Config) { c.Functions = map[string]ep.Function{ep.LoopbackName: discard{}} })
	h.PowerUp()
	h.StartChannel(1)
	for range 4 {
		bufs = append(bufs, h.Mem.Alloc(t, 128, 8))
	}
	tre := h.Queue(1, bufs[0], 128, wire.TREIEOT)
	h.Ring(1)
	first, second = pattern(300, 1), pattern(50, 99)
	for _, d := range [][]byte{first, second} {
		if err := h.Dev.QueueDL(context.Background(), 1, d); err != nil {
			t.Fatal(err)
		}
	}
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tre, wire.CCOverflow, 128)
	if !bytes.Equal(h.Read(bufs[0], 128), first[:128]) {
		t.Fatal("first piece differs")
	}
	return h, first, second, bufs
}

func pendingDL(h *eptest.Host, ch uint8) int {
	for _, c := range h.Dev.Status().Channels {
		if c.Num == ch {
			return c.PendingDL
		}
	}
	return -1
}

func TestDLStopWithoutBuffersPausesMidTransfer(t *testing.T) {
	h, first, second, bufs := dlSetup(t)
	if ev := h.Command(wire.PktStopChanCmd, 1); ev.Code() != wire.CCSuccess {
		t.Fatalf("STOP = %s", ev.Code())
	}
	// Buffers posted while stopped are not used.
	var tres []uint64
	for _, b := range bufs[1:] {
		tres = append(tres, h.Queue(1, b, 128, wire.TREIEOT))
	}
	h.Ring(1)
	h.StayFor(10*time.Millisecond, "nothing moves while stopped", func() bool { return h.PendingEvents(0) == 0 })
	if n := pendingDL(h, 1); n != 2 {
		t.Fatalf("%d transfers queued, want 2", n)
	}
	// START resumes the transfer where it stopped.
	if ev := h.Command(wire.PktStartChanCmd, 1); ev.Code() != wire.CCSuccess {
		t.Fatalf("START = %s", ev.Code())
	}
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tres[0], wire.CCOverflow, 128)
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tres[1], wire.CCEOT, 44)
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tres[2], wire.CCEOT, 50)
	got := append(h.Read(bufs[0], 128), h.Read(bufs[1], 128)...)
	got = append(got, h.Read(bufs[2], 44)...)
	if !bytes.Equal(got, first) || !bytes.Equal(h.Read(bufs[3], 50), second) {
		t.Fatal("data differs after resume")
	}
	if s := h.Dev.Stats(); s.DLTransfers != 2 || s.DLPartialDropped != 0 || s.DLDroppedOnReset != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDLStopFinishesTransferInProgress(t *testing.T) {
	h, first, second, bufs := dlSetup(t)
	c := h.Dev.ChannelWorker(1)
	// Hold the worker so that the STOP, not the doorbell, meets the new
	// buffers: three are posted, two finish the first transfer, the third
	// must stay unused.
	c.Lock()
	var tres []uint64
	for _, b := range bufs[1:] {
		tres = append(tres, h.Queue(1, b, 128, wire.TREIEOT))
	}
	h.Ring(1)
	cmd := h.PostCommand(wire.PktStopChanCmd, 1)
	h.WaitFor("STOP pending", func() bool { return c.StopRequested() })
	c.Unlock()
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tres[0], wire.CCOverflow, 128)
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tres[1], wire.CCEOT, 44)
	if ev := h.NextEvent(0); ev.Type() != wire.PktCmdCompletion || ev.Ptr != cmd || ev.Code() != wire.CCSuccess {
		t.Fatalf("event %v, want the STOP completion", ev)
	}
	if st := h.ChState(1); st != wire.ChannelStop {
		t.Fatalf("context state %s", st)
	}
	h.StayFor(10*time.Millisecond, "second transfer not started", func() bool { return h.PendingEvents(0) == 0 })
	got := append(h.Read(bufs[0], 128), h.Read(bufs[1], 128)...)
	if !bytes.Equal(append(got, h.Read(bufs[2], 44)...), first) {
		t.Fatal("first transfer differs")
	}
	if n := pendingDL(h, 1); n != 1 {
		t.Fatalf("%d transfers queued, want 1", n)
	}

	// RESET keeps the whole queued transfer for the next START.
	if ev := h.Command(wire.PktResetChanCmd, 1); ev.Code() != wire.CCSuccess {
		t.Fatalf("RESET = %s", ev.Code())
	}
	if n := pendingDL(h, 1); n != 1 {
		t.Fatalf("%d transfers queued after RESET, want 1", n)
	}
	h.StartChannel(1)
	buf := h.Mem.Alloc(t, 64, 8)
	tre := h.Queue(1, buf, 64, wire.TREIEOT)
	h.Ring(1)
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tre, wire.CCEOT, 50)
	if !bytes.Equal(h.Read(buf, 50), second) {
		t.Fatal("second transfer differs")
	}
	if s := h.Dev.Stats(); s.DLTransfers != 2 || s.DLPartialDropped != 0 || s.DLDroppedOnReset != 0 {
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
				h.Command(wire.PktStopChanCmd, 1)
			}
			if ev := h.Command(wire.PktResetChanCmd, 1); ev.Code() != wire.CCSuccess {
				t.Fatalf("RESET = %s", ev.Code())
			}
			s := h.Dev.Stats()
			if s.DLPartialDropped != 1 || s.DLPartialDroppedBytes != 300 || s.DLDroppedOnReset != 0 {
				t.Fatalf("stats %+v", s)
			}
			if n := pendingDL(h, 1); n != 1 {
				t.Fatalf("%d transfers queued, want 1", n)
			}
			h.StartChannel(1)
			buf := h.Mem.Alloc(t, 64, 8)
			tre := h.Queue(1, buf, 64, wire.TREIEOT)
			h.Ring(1)
			eptest.ExpectTransfer(t, h.NextEvent(0), 1, tre, wire.CCEOT, 50)
			if !bytes.Equal(h.Read(buf, 50), second) {
				t.Fatal("kept transfer differs")
			}
		})
	}
}

// Reservations survive a channel reset but not an MHI reset.
func TestReservationAcrossResets(t *testing.T) {
	h := eptest.NewHost(t, nil)
	h.PowerUp()
	h.StartChannel(1)
	p, _ := h.Dev.Pipe(ep.LoopbackName)
	waitDownlinkRunning(t, p)
	b, err := p.TryReserve(16)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.Buf, "kept over RESET")
	h.Command(wire.PktResetChanCmd, 1)
	if err := p.Commit(b, 15); err != nil {
		t.Fatal(err)
	}
	if _, err := p.TryReserve(16); err == nil {
		t.Fatal("reservation allowed on a disabled channel")
	}
	h.StartChannel(1)
	buf := h.Mem.Alloc(t, 64, 8)
	tre := h.Queue(1, buf, 64, wire.TREIEOT)
	h.Ring(1)
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tre, wire.CCEOT, 15)

	b, err = p.Reserve(context.Background(), 8)
	if err != nil {
		t.Fatal(err)
	}
	h.SetReg(wire.RegMHICTRL, uint32(wire.StateM0)<<wire.MHICTRLStateShift|wire.MHICTRLReset)
	h.WaitReady()
	if err := p.Commit(b, 8); err == nil {
		t.Fatal("reservation survived an MHI reset")
	}
	if s := h.Dev.Stats(); s.DLDroppedOnReset != 1 || s.DLDroppedBytesOnReset != 8 {
		t.Fatalf("stats %+v", s)
	}
	// SendFunc builds in place; Release and a zero commit give slots back.
	h.PowerUp()
	h.StartChannel(1)
	waitDownlinkRunning(t, p)
	for range 2 * ep.DefaultDLQueueDepth {
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
	tre = h.Queue(1, buf, 64, wire.TREIEOT)
	h.Ring(1)
	eptest.ExpectTransfer(t, h.NextEvent(0), 1, tre, wire.CCEOT, 8)
	if string(h.Read(buf, 8)) != "in place" {
		t.Fatal("SendFunc data differs")
	}
	b, _ = p.TryReserve(4)
	if err := p.Commit(b, 5); err == nil {
		t.Fatal("commit beyond the reservation accepted")
	}
	if err := p.Commit(ep.DLBuffer{}, 0); err == nil {
		t.Fatal("commit of a zero DLBuffer accepted")
	}
}

// waitDownlinkRunning waits until the device side of p's downlink runs.
// The device activates a channel after it has posted the START
// completion, so the host sees RUNNING a moment before the pipe does.
func waitDownlinkRunning(t *testing.T, p *ep.Pipe) {
	t.Helper()
	poll.Wait(t, 5*time.Second, func() bool { return p.DownlinkState() == wire.ChannelRunning },
		func() string { return fmt.Sprintf("downlink %s, want RUNNING", p.DownlinkState()) })
}
