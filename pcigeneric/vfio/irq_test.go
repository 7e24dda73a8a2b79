package vfio

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
)

func TestIRQInfo(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	tests := []struct {
		index int
		want  IRQ
		err   error
	}{
		{IRQIndexINTx, IRQ{Index: 0, Flags: IRQFlagEventfd | IRQFlagMaskable | IRQFlagAutomasked, Count: 1}, nil},
		{IRQIndexMSI, IRQ{Index: 1, Flags: IRQFlagEventfd | IRQFlagNoResize, Count: 1}, nil},
		{IRQIndexMSIX, IRQ{Index: 2, Flags: IRQFlagEventfd | IRQFlagNoResize, Count: 4}, nil},
		{5, IRQ{}, ErrNoRegion},
	}
	for _, tc := range tests {
		got, err := d.IRQInfo(tc.index)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("IRQInfo(%d) = %+v, %v; want %+v, %v", tc.index, got, err, tc.want, tc.err)
		}
	}
}

func TestEnableIRQs(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	vecs, err := d.EnableIRQs(IRQIndexMSIX, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(vecs) != 3 {
		t.Fatalf("%d vectors", len(vecs))
	}
	// The SET_IRQS argument: argsz, flags, index, start, count, fds.
	arg := f.k.irqSets[len(f.k.irqSets)-1]
	want := layout(32, field{0, 4, 32}, field{4, 4, irqSetDataEventfd | irqSetActionTrigger}, field{8, 4, IRQIndexMSIX},
		field{12, 4, 0}, field{16, 4, 3},
		field{20, 4, uint64(vecs[0].FD())}, field{24, 4, uint64(vecs[1].FD())}, field{28, 4, uint64(vecs[2].FD())})
	if string(arg) != string(want) {
		t.Errorf("SET_IRQS argument\n got % x\nwant % x", arg, want)
	}
	for i, v := range vecs {
		if v.Index() != IRQIndexMSIX || v.Number() != i {
			t.Errorf("vector %d: index %d number %d", i, v.Index(), v.Number())
		}
	}

	// Wait sees the device's eventfd write, and the counter.
	f.k.fire(t, testAddr, IRQIndexMSIX, 1)
	f.k.fire(t, testAddr, IRQIndexMSIX, 1)
	if n, err := vecs[1].Wait(time.Second); err != nil || n != 2 {
		t.Errorf("Wait = %d, %v; want 2", n, err)
	}
	if _, err := vecs[1].Wait(10 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait with nothing pending: %v, want ErrTimeout", err)
	}
	if _, err := vecs[0].Wait(0); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait(0): %v", err)
	}
	// A Wait in progress wakes on the interrupt.
	done := make(chan error, 1)
	go func() {
		_, err := vecs[2].Wait(-1)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	f.k.fire(t, testAddr, IRQIndexMSIX, 2)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("blocking Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocking Wait did not wake up")
	}

	for _, tc := range []struct{ index, count int }{{IRQIndexMSIX, 5}, {IRQIndexMSI, 0}, {IRQIndexMSI, 2}, {7, 1}} {
		if _, err := d.EnableIRQs(tc.index, tc.count); err == nil {
			t.Errorf("EnableIRQs(%d, %d) succeeded", tc.index, tc.count)
		}
	}

	if err := d.DisableIRQs(IRQIndexMSIX); err != nil {
		t.Fatal(err)
	}
	off := f.k.irqSets[len(f.k.irqSets)-1]
	if w := layout(20, field{0, 4, 20}, field{4, 4, irqSetDataNone | irqSetActionTrigger}, field{8, 4, IRQIndexMSIX}); string(off) != string(w) {
		t.Errorf("disable argument\n got % x\nwant % x", off, w)
	}
	if n := len(f.k.eventfds); n != 0 {
		t.Errorf("%d eventfds left open", n)
	}
	if _, err := vecs[0].Wait(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after DisableIRQs: %v", err)
	}
}

func TestEnableIRQsTwiceAndClose(t *testing.T) {
	f := newFixture(t)
	d, err := open(f.k, testAddr, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnableIRQs(IRQIndexMSI, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EnableIRQs(IRQIndexMSI, 1); err != nil {
		t.Fatal(err)
	}
	if n := len(f.k.eventfds); n != 1 {
		t.Errorf("%d eventfds, want 1 (re-enabling replaces)", n)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.k.openFDs(); n != 0 {
		t.Errorf("%d fds after Close", n)
	}
	log := f.k.logCopy()
	if log[len(log)-4] != "irqs off 1" {
		t.Errorf("Close did not disable IRQs first: %q", log)
	}
}

func TestTransport(t *testing.T) {
	var _ mhi.Transport = (*Transport)(nil)
	f := newFixture(t)
	d, err := open(f.k, testAddr, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTransport(d, RegionBAR0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Vectors() != 3 || tr.IRQIndex() != IRQIndexMSIX {
		t.Errorf("vectors %d on index %d", tr.Vectors(), tr.IRQIndex())
	}
	if cmd := ne.Uint16(f.k.devices[testAddr].regions[RegionConfig].data[4:]); cmd&0x6 != 0x6 {
		t.Errorf("bus mastering not enabled: command %#x", cmd)
	}

	// Registers.
	if err := tr.Write32(0x10, 0xabcd); err != nil {
		t.Fatal(err)
	}
	if v, err := tr.Read32(0x10); err != nil || v != 0xabcd {
		t.Errorf("Read32 = %#x, %v", v, err)
	}
	if _, err := tr.Read32(16 << 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("Read32 out of range: %v", err)
	}
	// DMA.
	b, err := tr.Alloc(1000, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Free(b); err != nil {
		t.Fatal(err)
	}
	leaked, err := tr.Alloc(4096, 0) // freed by Close
	if err != nil || f.k.dmaBytes(leaked.IOVA, 1) == nil {
		t.Fatal(err)
	}

	// Interrupts.
	var mu sync.Mutex
	got := map[int]int{}
	calls := make(chan int, 16)
	tr.SetInterruptHandler(func(v int) {
		mu.Lock()
		got[v]++
		mu.Unlock()
		calls <- v
	})
	for _, v := range []int{2, 0, 1} {
		f.k.fire(t, testAddr, IRQIndexMSIX, v)
		select {
		case c := <-calls:
			if c != v {
				t.Errorf("handler called for vector %d, want %d", c, v)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("handler not called for vector %d", v)
		}
	}
	// Replacing the handler keeps the goroutine; nil stops delivery.
	second := make(chan int, 16)
	tr.SetInterruptHandler(func(v int) { second <- v })
	f.k.fire(t, testAddr, IRQIndexMSIX, 1)
	select {
	case v := <-second:
		if v != 1 {
			t.Errorf("second handler got %d", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second handler not called")
	}
	tr.SetInterruptHandler(nil)
	f.k.fire(t, testAddr, IRQIndexMSIX, 0)
	select {
	case v := <-second:
		t.Errorf("handler called after SetInterruptHandler(nil): %d", v)
	case <-calls:
		t.Error("old handler called after SetInterruptHandler(nil)")
	case <-time.After(50 * time.Millisecond):
	}
	// Restart: the pending interrupt on vector 0 is delivered.
	tr.SetInterruptHandler(func(v int) { second <- v })
	select {
	case v := <-second:
		if v != 0 {
			t.Errorf("after restart got vector %d", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called after restart")
	}

	if err := tr.Reset(); err != nil || f.k.resets != 1 {
		t.Errorf("Reset: %v", err)
	}

	tr.mu.Lock()
	loop := tr.cur
	tr.mu.Unlock()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-loop.done:
	default:
		t.Error("interrupt goroutine still running after Close")
	}
	if err := tr.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if f.k.openFDs() != 0 || f.k.dmaCount() != 0 || f.k.liveMaps() != 0 {
		t.Errorf("after Close: %d fds, %d DMA mappings, %d mmaps", f.k.openFDs(), f.k.dmaCount(), f.k.liveMaps())
	}
	if _, err := tr.Read32(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Read32 after Close: %v", err)
	}
	tr.SetInterruptHandler(func(int) {}) // no effect after Close
	if f.k.openFDs() != 0 {
		t.Error("SetInterruptHandler after Close started a goroutine")
	}
}

func TestNewTransportVectorChoice(t *testing.T) {
	tests := []struct {
		name      string
		msix, msi uint32
		vectors   int
		wantIndex int
		wantErr   error
	}{
		{"MSI-X when enough", 4, 1, 4, IRQIndexMSIX, nil},
		{"MSI when MSI-X is short", 2, 8, 4, IRQIndexMSI, nil},
		{"MSI when no MSI-X (edu)", 0, 1, 1, IRQIndexMSI, nil},
		{"default one vector", 0, 1, 0, IRQIndexMSI, nil},
		{"neither", 2, 2, 4, 0, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			dev := f.k.devices[testAddr]
			dev.irqs[IRQIndexMSIX].Count = tc.msix
			dev.irqs[IRQIndexMSI].Count = tc.msi
			d, err := open(f.k, testAddr, f.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			tr, err := NewTransport(d, RegionBAR0, tc.vectors)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if f.k.liveMaps() != 0 || len(f.k.eventfds) != 0 {
					t.Error("failed NewTransport left the BAR mapped or eventfds open")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.IRQIndex() != tc.wantIndex {
				t.Errorf("index %d, want %d", tr.IRQIndex(), tc.wantIndex)
			}
			if err := tr.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("BAR not mappable", func(t *testing.T) {
		f := newFixture(t)
		d := f.open(t)
		if _, err := NewTransport(d, RegionBAR2, 1); !errors.Is(err, ErrNoRegion) {
			t.Errorf("err = %v", err)
		}
	})
}
