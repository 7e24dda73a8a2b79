package vfiouser

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/loopback"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/internal/vutest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

func newDevice(tb testing.TB) *ServerDevice {
	tb.Helper()
	dev, err := NewServerDevice(DeviceOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return dev
}

// serve starts serveConn on one end of a socket pair and returns the other end
// and a channel with serveConn's result.
func serve(tb testing.TB, dev *ServerDevice) (*net.UnixConn, <-chan error) {
	tb.Helper()
	c, s := vutest.SocketPair(tb)
	done := make(chan error, 1)
	go func() { done <- serveConn(context.Background(), s, dev) }()
	return c, done
}

func waitServe(tb testing.TB, done <-chan error) error {
	tb.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		tb.Fatal("serveConn did not return")
		return nil
	}
}

type rig struct {
	dev  *ServerDevice
	tr   *client.Transport
	ctrl *mhi.Controller
	done <-chan error
}

// newRig connects a client to a fresh server and builds a host controller
// from the table entry found by the IDs read over the protocol.
func newRig(tb testing.TB, opts client.Options, timeout time.Duration) *rig {
	tb.Helper()
	dev := newDevice(tb)
	c, done := serve(tb, dev)
	tr, err := client.New(c, opts)
	if err != nil {
		tb.Fatal(err)
	}
	v, d, sv, sd := tr.IDs()
	e, ok := pcigeneric.Lookup(v, d, sv, sd)
	if !ok {
		tb.Fatalf("IDs %04x:%04x %04x:%04x not in the device table", v, d, sv, sd)
	}
	cfg := e.Info.Config.WithLoopback()
	cfg.Timeout = timeout
	ctrl, err := mhi.NewController(tr, cfg, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	r := &rig{dev: dev, tr: tr, ctrl: ctrl, done: done}
	tb.Cleanup(func() {
		_ = ctrl.PowerDown()
		_ = tr.Close()
		if err := waitServe(tb, done); err != nil {
			tb.Errorf("serveConn: %v", err)
		}
	})
	return r
}

func TestConfigSpace(t *testing.T) {
	dev := newDevice(t)
	c, done := serve(t, dev)
	tr, err := client.New(c, client.Options{Memory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	v, d, sv, sd := tr.IDs()
	wv, wd, wsv, wsd := dev.Entry.Match.IDs()
	if v != wv || d != wd || sv != wsv || sd != wsd {
		t.Fatalf("IDs %04x:%04x %04x:%04x, want %04x:%04x %04x:%04x", v, d, sv, sd, wv, wd, wsv, wsd)
	}
	if e, ok := pcigeneric.Lookup(v, d, sv, sd); !ok || e.Info.Name != mock.DefaultModel {
		t.Fatalf("lookup: %v %v", e.Info, ok)
	}
	var cs [protocol.ConfigSize]byte
	if err := tr.ReadConfig(0, cs[:]); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if class := le.Uint32(cs[protocol.CfgRevision:]) >> 8; class != pciClass {
		t.Errorf("class %06x", class)
	}
	if cmd := le.Uint16(cs[protocol.CfgCommand:]); cmd != 0x0006 {
		t.Errorf("command %04x after setup", cmd)
	}
	if cs[protocol.CfgCapPtr] != protocol.CfgMSI || cs[protocol.CfgMSI] != 0x05 || le.Uint16(cs[protocol.CfgStatus:])&0x10 == 0 {
		t.Errorf("no MSI capability: ptr %02x id %02x", cs[protocol.CfgCapPtr], cs[protocol.CfgMSI])
	}
	if ctl := le.Uint16(cs[protocol.CfgMSI+2:]); ctl != 0x0080|5<<1|5<<4|1 {
		t.Errorf("MSI control %04x", ctl)
	}
	// BAR sizing: all ones in, size mask with the type bits out.
	ones := []byte{0xff, 0xff, 0xff, 0xff}
	for _, off := range []int{protocol.CfgBAR0, protocol.CfgBAR1} {
		if err := tr.WriteConfig(off, ones); err != nil {
			t.Fatal(err)
		}
	}
	var bar [8]byte
	if err := tr.ReadConfig(protocol.CfgBAR0, bar[:]); err != nil {
		t.Fatal(err)
	}
	if lo, hi := le.Uint32(bar[:]), le.Uint32(bar[4:]); lo != uint32(^(dev.PCI.BARSize-1))|4 || hi != 0xffffffff {
		t.Errorf("BAR sizing read %08x %08x, BAR size 0x%x", lo, hi, dev.PCI.BARSize)
	}
	if err := tr.WriteConfig(protocol.CfgBAR0, []byte{0x00, 0x10, 0x00, 0xfe, 0x01, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := tr.ReadConfig(protocol.CfgBAR0, bar[:]); err != nil {
		t.Fatal(err)
	}
	if got := le.Uint64(bar[:]); got != 0x1_fe00_1004&^(dev.PCI.BARSize-1)|4 {
		t.Errorf("BAR0 %x", got)
	}
	// Read-only fields stay; MME is clamped to what is offered.
	if err := tr.WriteConfig(protocol.CfgVendorID, []byte{0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteConfig(protocol.CfgMSI+2, []byte{0x71, 0}); err != nil {
		t.Fatal(err)
	}
	if err := tr.ReadConfig(0, cs[:]); err != nil {
		t.Fatal(err)
	}
	if le.Uint16(cs[0:]) != wv || le.Uint16(cs[protocol.CfgMSI+2:])>>4&7 != 5 {
		t.Errorf("vendor %04x MSI control %04x", le.Uint16(cs[0:]), le.Uint16(cs[protocol.CfgMSI+2:]))
	}
	if dev.PCI.BARSize < 4096 || dev.PCI.BARSize&(dev.PCI.BARSize-1) != 0 || tr.BARSize() != dev.PCI.BARSize {
		t.Errorf("BAR size 0x%x / 0x%x", dev.PCI.BARSize, tr.BARSize())
	}
	if tr.Vectors() != 32 {
		t.Errorf("%d vectors", tr.Vectors())
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitServe(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestPowerUpLoopback(t *testing.T) {
	r := newRig(t, client.Options{}, 2*time.Second)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if s, ee := r.ctrl.State(); s != wire.StateM0 || ee != wire.EEAMSS {
		t.Fatalf("state %v %v, want M0 AMSS", s, ee)
	}
	c, err := loopback.Open(r.ctrl, loopback.Options{DLBufferSize: 16384, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(loopback.RunOptions{Count: 300, MinSize: 1, MaxSize: loopback.MaxPayload})
	if err != nil || res.Sent != 300 || res.Received != 300 || res.Mismatched != 0 || res.Timeouts != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	st := r.dev.Stats()
	if st.DMAFaults != 0 || st.Interrupts == 0 || st.DMAMaps != 1 {
		t.Fatalf("stats %+v", st)
	}
	if bv := r.dev.Modem().Stats().BoundsViolations; bv != 0 {
		t.Fatalf("%d bounds violations", bv)
	}
	t.Logf("%+v; stats %+v", res, st)
}

// TestPowerUpLoopbackMSIX runs the host over the MSI-X capability with
// three vectors (MSI would allow only powers of two).
func TestPowerUpLoopbackMSIX(t *testing.T) {
	r := newRig(t, client.Options{MSIX: true, Vectors: 3}, 2*time.Second)
	if n := r.tr.Vectors(); n != 3 {
		t.Fatalf("%d vectors, want 3", n)
	}
	var ctl [2]byte
	if err := r.tr.ReadConfig(protocol.CfgMSIX+2, ctl[:]); err != nil || ctl[1]&0x80 == 0 {
		t.Fatalf("MSI-X control % x (%v): not enabled", ctl, err)
	}
	if err := r.tr.ReadConfig(protocol.CfgMSI+2, ctl[:]); err != nil || ctl[0]&1 != 0 {
		t.Fatalf("MSI control % x (%v): MSI enabled beside MSI-X", ctl, err)
	}
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	c, err := loopback.Open(r.ctrl, loopback.Options{DLBufferSize: 16384, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(loopback.RunOptions{Count: 200, MinSize: 1, MaxSize: 4096})
	if err != nil || res.Received != 200 || res.Mismatched != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	if st := r.dev.Stats(); st.Interrupts == 0 || st.IRQsLost != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDMAMessages maps the memory without fd: every device access to host
// memory becomes a DMA_READ or DMA_WRITE answered by the client.
func TestDMAMessages(t *testing.T) {
	r := newRig(t, client.Options{NoDMAFD: true, Memory: 8 << 20}, 4*time.Second)
	if err := r.ctrl.PowerUp(); err != nil {
		t.Fatal(err)
	}
	c, err := loopback.Open(r.ctrl, loopback.Options{DLBufferSize: 4096, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(loopback.RunOptions{Count: 20, MinSize: 1, MaxSize: 8192})
	if err != nil || res.Received != 20 || res.Mismatched != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	if st := r.dev.Stats(); st.DMAMessages == 0 || st.DMAFaults != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestResetPowerCycle(t *testing.T) {
	r := newRig(t, client.Options{Memory: 8 << 20}, 2*time.Second)
	for i := range 2 {
		if err := r.ctrl.PowerUp(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := r.ctrl.PowerDown(); err != nil {
			t.Fatal(err)
		}
		if err := r.tr.Reset(); err != nil {
			t.Fatal(err)
		}
	}
	if s := r.dev.Stats(); s.Resets < 2 {
		t.Fatalf("stats %+v", s)
	}
}

// shifted hands the host stack IOVAs outside the mapping, so the device's
// first access to a context misses every mapping.
type shifted struct{ *client.Transport }

const shift = 1 << 40

func (s shifted) Alloc(size, align int) (mhi.DMABuffer, error) {
	b, err := s.Transport.Alloc(size, align)
	b.IOVA += shift
	return b, err
}

func (s shifted) Free(b mhi.DMABuffer) error {
	b.IOVA -= shift
	return s.Transport.Free(b)
}

func TestDMAOutsideMapping(t *testing.T) {
	dev := newDevice(t)
	c, done := serve(t, dev)
	tr, err := client.New(c, client.Options{Memory: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := pcigeneric.Model(mock.DefaultModel)
	cfg := info.Config.WithLoopback()
	cfg.Timeout = 300 * time.Millisecond
	ctrl, err := mhi.NewController(shifted{tr}, cfg, mhi.Options{Name: "bad", PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctrl.PowerUp(); err == nil {
		t.Fatal("power-up with unreachable contexts succeeded")
	}
	if dev.Stats().DMAFaults == 0 || dev.Modem().Stats().BoundsViolations == 0 {
		t.Fatalf("DMA outside the mapping not counted: %+v", dev.Stats())
	}
	_ = ctrl.PowerDown()
	_ = tr.Close()
	if err := waitServe(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestDMATable(t *testing.T) {
	var faults atomic.Uint64
	tb := &dmaTable{faults: &faults, fallback: func(bool, uint64, []byte) error { return errors.New("no fallback") }}
	fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 8192); err != nil {
		t.Fatal(err)
	}
	if err := tb.add(protocol.DMAMap{Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x10000, Size: 4096}, fd); err != nil {
		t.Fatal(err)
	}
	if err := tb.add(protocol.DMAMap{Flags: protocol.DMAFlagRead, IOVA: 0x20000, Size: 4096, Offset: 4096}, fd); err != nil {
		t.Fatal(err)
	}
	if err := tb.add(protocol.DMAMap{Flags: protocol.DMAFlagRead, IOVA: 0x10800, Size: 4096}, fd); !errors.Is(err, protocol.ErrMalformed) {
		t.Fatalf("overlap: %v", err)
	}
	if err := tb.Store32(0x10ffc, 0xdeadbeef); err != nil {
		t.Fatal(err)
	}
	if v, err := tb.Load32(0x10ffc); err != nil || v != 0xdeadbeef {
		t.Fatalf("load %x %v", v, err)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"below", tb.ReadAt(make([]byte, 4), 0xfffc)},
		{"across the end", tb.ReadAt(make([]byte, 8), 0x10ffc)},
		{"gap", tb.WriteAt(make([]byte, 1), 0x18000)},
		{"read-only", tb.Store32(0x20000, 1)},
		{"unaligned", tb.Store32(0x10002, 1)},
		{"huge", tb.ReadAt(make([]byte, 16), ^uint64(7))},
	} {
		if !errors.Is(tc.err, wire.ErrBounds) {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
	// Adjacent mappings: an access may span them.
	if err := tb.add(protocol.DMAMap{Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x30000, Size: 4096}, fd); err != nil {
		t.Fatal(err)
	}
	if err := tb.add(protocol.DMAMap{Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: 0x31000, Size: 4096, Offset: 4096}, fd); err != nil {
		t.Fatal(err)
	}
	if err := tb.WriteAt([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 0x30ffc); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := tb.ReadAt(got, 0x30ffc); err != nil || string(got) != "\x01\x02\x03\x04\x05\x06\x07\x08" {
		t.Fatalf("spanning read % x %v", got, err)
	}
	if v, err := tb.Load32(0x31000); err != nil || v != 0x08070605 {
		t.Fatalf("second mapping %x %v", v, err)
	}
	if err := tb.WriteAt(make([]byte, 8), 0x31ffc); !errors.Is(err, errDMA) {
		t.Fatalf("past the second mapping: %v", err)
	}
	if n := faults.Load(); n != 7 {
		t.Errorf("%d faults counted, want 7", n)
	}
	if n := tb.remove(0x30000, 0x2000, false); n != 2 {
		t.Errorf("removed %d in range", n)
	}
	// To the end of the address space (iova+size is 2^64), as QEMU unmaps
	// at guest power-off: the mapping at 0x20000 is inside, 0x10000 not.
	if n := tb.remove(0x18000, ^uint64(0)-0x18000+1, false); n != 1 {
		t.Errorf("removed %d up to 2^64, want 1", n)
	}
	if err := tb.ReadAt(make([]byte, 1), 0x20000); !errors.Is(err, errDMA) {
		t.Errorf("the mapping at 0x20000 after an unmap up to 2^64: %v", err)
	}
	if n := tb.remove(0, 0, true); n != 1 {
		t.Errorf("removed %d", n)
	}
	if err := tb.ReadAt(make([]byte, 1), 0x10000); !errors.Is(err, errDMA) {
		t.Errorf("after unmap: %v", err)
	}
}

func TestReconnect(t *testing.T) {
	dev := newDevice(t)
	path := filepath.Join(t.TempDir(), "vu.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ListenAndServe(ctx, path, dev) }()
	var tr *client.Transport
	var conn *net.UnixConn // round 1's connection, which the test cuts
	err := poll.UntilNil(time.Second, func() (err error) {
		tr, err = client.Dial(path, client.Options{Memory: 8 << 20})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		if round > 0 {
			// The server takes the next client once the last one is gone.
			if err = poll.UntilNil(5*time.Second, func() (err error) {
				opts := client.Options{Memory: 8 << 20, Timeout: time.Second}
				if round != 1 {
					tr, err = client.Dial(path, opts)
				} else if conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"}); err == nil {
					tr, err = client.New(conn, opts)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		info, _ := pcigeneric.Model(mock.DefaultModel)
		cfg := info.Config.WithLoopback()
		cfg.Timeout = 2 * time.Second
		ctrl, err := mhi.NewController(tr, cfg, mhi.Options{Name: "mhi0", PollInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := ctrl.PowerUp(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		c, err := loopback.Open(ctrl, loopback.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := c.Run(loopback.RunOptions{Count: 20, MinSize: 1, MaxSize: 4096}); err != nil || res.Mismatched != 0 || res.Received != 20 {
			t.Fatalf("round %d: %v %+v", round, err, res)
		}
		c.Close()
		_ = ctrl.PowerDown()
		if round == 1 {
			// An abrupt disconnect, without the unmap and IRQ teardown:
			// the socket closes under the client, which then only
			// releases its side.
			_ = conn.Close()
			<-tr.Done()
			_ = tr.Close()
		} else if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenAndServe did not return")
	}
	if s := dev.Stats(); s.Sessions != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// rawMsg builds a message by hand.
func rawMsg(id uint16, cmd protocol.Command, flags uint32, payload []byte) []byte {
	b := make([]byte, protocol.HeaderSize, protocol.HeaderSize+len(payload))
	protocol.Header{ID: id, Cmd: cmd, Size: uint32(protocol.HeaderSize + len(payload)), Flags: flags}.Encode(b)
	return append(b, payload...)
}

func TestMalformed(t *testing.T) {
	efd := func() []int {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		return []int{fd}
	}
	le := binary.LittleEndian
	badSize := rawMsg(1, protocol.CmdVersion, 0, nil)
	le.PutUint32(badSize[4:], 8)
	huge := rawMsg(1, protocol.CmdRegionRead, 0, nil)
	le.PutUint32(huge[4:], protocol.MaxMessageSize+1)
	reply := protocol.EncodeMessage(1, protocol.CmdDMARead, protocol.FlagReply, 0, protocol.DMAAccess{Address: 0, Count: 0})
	type tc struct {
		name  string
		msg   []byte
		fds   func() []int
		errno unix.Errno // 0: the server must close the connection
	}
	for _, c := range []tc{
		{"short header", []byte{1, 0, 1, 0, 16, 0, 0}, nil, 0},
		{"size below header", badSize, nil, 0},
		{"size above limit", huge, nil, 0},
		{"unknown flags", rawMsg(1, protocol.CmdVersion, 0x100, []byte{0, 0, 0, 0}), nil, 0},
		{"command with error", func() []byte { b := rawMsg(1, protocol.CmdDeviceReset, 0, nil); le.PutUint32(b[12:], 5); return b }(), nil, 0},
		{"unknown command", rawMsg(7, 99, 0, nil), nil, unix.ENOSYS},
		{"region io fds", rawMsg(7, protocol.CmdRegionIOFDs, 0, make([]byte, 16)), nil, unix.ENOSYS},
		{"short version", rawMsg(2, protocol.CmdVersion, 0, []byte{0}), nil, unix.EINVAL},
		{"major version 1", protocol.EncodeMessage(2, protocol.CmdVersion, 0, 0, protocol.Version{Major: 1}), nil, unix.ENOTSUP},
		{"region read short", rawMsg(3, protocol.CmdRegionRead, 0, make([]byte, 12)), nil, unix.EINVAL},
		{"region read beyond BAR", protocol.EncodeMessage(3, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Offset: 1 << 20, Count: 4}), nil, unix.EINVAL},
		{"region read count overflow", protocol.EncodeMessage(3, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Offset: ^uint64(0), Count: 4}), nil, unix.EINVAL},
		{"region write data mismatch", protocol.EncodeMessage(3, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Count: 8, Data: []byte{1, 2, 3, 4}}), nil, unix.EINVAL},
		{"BAR0 unaligned write", protocol.EncodeMessage(3, protocol.CmdRegionWrite, 0, 0, protocol.RegionAccess{Offset: 2, Count: 2, Data: []byte{1, 2}}), nil, unix.EINVAL},
		{"ROM region", protocol.EncodeMessage(3, protocol.CmdRegionRead, 0, 0, protocol.RegionAccess{Region: protocol.RegionROM, Count: 4}), nil, unix.EINVAL},
		{"DMA map bad argsz", protocol.EncodeMessage(4, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 31, Size: 4096}), nil, unix.EINVAL},
		{"DMA map wrapping", protocol.EncodeMessage(4, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, IOVA: ^uint64(0), Size: 4096}), nil, unix.EINVAL},
		{"DMA map bad fd", protocol.EncodeMessage(4, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, Size: 4096}), efd, unix.ENODEV},
		{"DMA map two fds", protocol.EncodeMessage(4, protocol.CmdDMAMap, 0, 0, protocol.DMAMap{Argsz: 32, Size: 4096}), func() []int { return append(efd(), efd()...) }, unix.EINVAL},
		{"fds with version", protocol.EncodeMessage(5, protocol.CmdVersion, 0, 0, protocol.Version{}), efd, unix.EINVAL},
		{"fds with reset", rawMsg(5, protocol.CmdDeviceReset, 0, nil), efd, unix.EINVAL},
		{"set irqs eventfd count", protocol.EncodeMessage(6, protocol.CmdSetIRQs, 0, 0, protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSI, Count: 2}), efd, unix.EINVAL},
		{"set irqs two actions", protocol.EncodeMessage(6, protocol.CmdSetIRQs, 0, 0, protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig | protocol.IRQActionMask, Index: protocol.IRQMSI}), nil, unix.EINVAL},
		{"set irqs beyond vectors", protocol.EncodeMessage(6, protocol.CmdSetIRQs, 0, 0, protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSI, Start: 32, Count: 1}), efd, unix.EINVAL},
		{"set irqs mask eventfd", protocol.EncodeMessage(6, protocol.CmdSetIRQs, 0, 0, protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionMask, Index: protocol.IRQMSI, Count: 1}), efd, unix.EINVAL},
		{"set irqs some eventfds", protocol.EncodeMessage(6, protocol.CmdSetIRQs, 0, 0, protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSIX, Count: 3}), func() []int { return append(efd(), efd()...) }, unix.EINVAL},
		{"set irqs trigger not enabled", protocol.EncodeMessage(6, protocol.CmdSetIRQs, 0, 0, protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: protocol.IRQMSIX, Count: 1}), nil, unix.EINVAL},
		{"irq info bad index", protocol.EncodeMessage(6, protocol.CmdIRQInfo, 0, 0, protocol.IRQInfo{Argsz: 16, Index: 9}), nil, unix.EINVAL},
		{"region info bad index", protocol.EncodeMessage(6, protocol.CmdRegionInfo, 0, 0, protocol.RegionInfo{Argsz: 32, Index: 40}), nil, unix.EINVAL},
		{"client DMA read", protocol.EncodeMessage(8, protocol.CmdDMARead, 0, 0, protocol.DMAAccess{Count: 4}), nil, unix.EINVAL},
		{"reset with payload", rawMsg(9, protocol.CmdDeviceReset, 0, []byte{1}), nil, unix.EINVAL},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := newDevice(t)
			conn, done := serve(t, dev)
			w := protocol.NewConn(conn)
			var fds []int
			if c.fds != nil {
				fds = c.fds()
			}
			if err := w.WriteMessage(c.msg, fds); err != nil {
				t.Fatal(err)
			}
			protocol.CloseFDs(fds)
			if c.errno == 0 && len(c.msg) < protocol.HeaderSize {
				_ = conn.CloseWrite()
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			hdr, payload, rfds, err := w.ReadMessage()
			protocol.CloseFDs(rfds)
			if c.errno == 0 {
				if !errors.Is(err, io.EOF) && !errors.Is(err, unix.ECONNRESET) {
					t.Fatalf("got %x %v, want the connection closed", hdr, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				m, err := protocol.DecodeMessage(hdr, payload, 0)
				if err != nil {
					t.Fatal(err)
				}
				h := m.Header
				if !h.IsReply() || h.Flags&protocol.FlagError == 0 || unix.Errno(h.Error) != c.errno || h.ID != le.Uint16(c.msg) {
					t.Fatalf("reply %+v, want errno %v (%d)", h, c.errno, c.errno)
				}
				// The connection still works after an error reply.
				if err := w.WriteMessage(protocol.EncodeMessage(99, protocol.CmdDeviceGetInfo, 0, 0, protocol.DeviceInfo{Argsz: 16}), nil); err != nil {
					t.Fatal(err)
				}
				hdr, payload, _, err := w.ReadMessage()
				if err != nil {
					t.Fatal(err)
				}
				if m, err := protocol.DecodeMessage(hdr, payload, 0); err != nil || m.Header.Flags&protocol.FlagError != 0 {
					t.Fatalf("after the error: %+v %v", m, err)
				}
			}
			// A stray reply is ignored, and a posted write with an error gets no reply.
			_ = w.WriteMessage(reply, nil)
			_ = w.WriteMessage(protocol.EncodeMessage(10, protocol.CmdRegionWrite, protocol.FlagNoReply, 0, protocol.RegionAccess{Offset: 1, Count: 1, Data: []byte{1}}), nil)
			conn.Close()
			_ = waitServe(t, done)
			if s := dev.Stats(); s.Malformed == 0 && s.ErrorReplies == 0 {
				t.Fatalf("not counted: %+v", s)
			}
			if dev.Modem() != nil {
				t.Fatal("modem still attached after the session")
			}
		})
	}
}

func TestBusy(t *testing.T) {
	dev := newDevice(t)
	c1, done := serve(t, dev)
	tr, err := client.New(c1, client.Options{Memory: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, s2 := vutest.SocketPair(t)
	if err := serveConn(context.Background(), s2, dev); !errors.Is(err, protocol.ErrBusy) {
		t.Fatalf("second client: %v", err)
	}
	_ = tr.Close()
	if err := waitServe(t, done); err != nil {
		t.Fatal(err)
	}
}
