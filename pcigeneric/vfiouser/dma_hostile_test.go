package vfiouser

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// TestDMAMapHostileFile checks the device's memory against a client that
// maps more of its file than the file holds, or shrinks the file after
// mapping it: touching pages past the end of a file raises SIGBUS, which
// must become a DMA fault, never a crash of the server.
func TestDMAMapHostileFile(t *testing.T) {
	var faults atomic.Uint64
	tb := &dmaTable{faults: &faults, fallback: func(bool, uint64, []byte) error { return errors.New("no fallback") }}
	defer tb.remove(0, 0, true)
	fd, err := unix.MemfdCreate("hostile", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 2*4096); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    protocol.DMAMap
	}{
		{"size past the end", protocol.DMAMap{Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x10000, Size: 1 << 20}},
		{"offset past the end", protocol.DMAMap{Flags: protocol.DMAFlagRead, IOVA: 0x10000, Size: 4096, Offset: 2 * 4096}},
		{"offset plus size past the end", protocol.DMAMap{Flags: protocol.DMAFlagRead, IOVA: 0x10000, Size: 2 * 4096, Offset: 4096}},
	} {
		if err := tb.add(tc.m, fd); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", tc.name, err)
		}
	}
	if err := tb.add(protocol.DMAMap{Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x10000, Size: 2 * 4096}, fd); err != nil {
		t.Fatal(err)
	}
	if err := tb.Store32(0x11000, 7); err != nil {
		t.Fatal(err)
	}
	// The client shrinks the file under the mapping.
	if err := unix.Ftruncate(fd, 4096); err != nil {
		t.Fatal(err)
	}
	before := faults.Load()
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"read", func() error { return tb.ReadAt(make([]byte, 8), 0x11000) }},
		{"write", func() error { return tb.WriteAt(make([]byte, 8), 0x11000) }},
		{"read across", func() error { return tb.ReadAt(make([]byte, 8), 0x10ffc) }},
		{"load", func() error { _, err := tb.Load32(0x11004); return err }},
		{"store", func() error { return tb.Store32(0x11004, 1) }},
	} {
		if err := tc.err(); !errors.Is(err, errDMA) || !errors.Is(err, wire.ErrBounds) {
			t.Errorf("%s past the shrunk file: %v, want errDMA and mhi.ErrBounds", tc.name, err)
		}
	}
	if got := faults.Load() - before; got != 5 {
		t.Errorf("%d faults counted, want 5", got)
	}
	// The part still backed works.
	if err := tb.Store32(0x10ffc, 9); err != nil {
		t.Fatal(err)
	}
	if v, err := tb.Load32(0x10ffc); err != nil || v != 9 {
		t.Fatalf("load %d %v", v, err)
	}
}

// TestIRQHostileDescriptors checks the interrupt side against a client
// that passes descriptors that can block a write: a pipe nobody reads, or
// a blocking eventfd whose counter it drove to the maximum. SET_IRQS must
// refuse what is not an eventfd, and raising a vector must never block.
func TestIRQHostileDescriptors(t *testing.T) {
	var raised, lost, held atomic.Uint64
	irqs := newIRQTable(4, &raised, &lost, &held)
	defer irqs.clear()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	null, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, fd := range map[string]int{"pipe": p[1], "/dev/null": null} {
		if err := irqs.arm(protocol.IRQMSIX, 0, 1, []int{fd}); !errors.Is(err, protocol.ErrMalformed) {
			t.Errorf("%s as an interrupt: %v, want ErrMalformed", name, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			t.Errorf("%s refused but not closed", name)
		}
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC) // blocking
	if err != nil {
		t.Fatal(err)
	}
	peer, err := unix.Dup(efd) // the client's copy
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(peer)
	if err := irqs.arm(protocol.IRQMSIX, 1, 1, []int{efd}); err != nil {
		t.Fatal(err)
	}
	max := make([]byte, 8)
	for i := range 8 {
		max[i] = 0xff
	}
	max[0] = 0xfe // 0xfffffffffffffffe: the largest count an eventfd holds
	if _, err := unix.Write(peer, max); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		irqs.Raise(1)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_, _ = unix.Read(peer, make([]byte, 8)) // unblock it
		<-done
		t.Fatal("Raise blocked on a full eventfd")
	}
	if lost.Load() != 1 {
		t.Errorf("%d interrupts counted lost, want 1", lost.Load())
	}
}
