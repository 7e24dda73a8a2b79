// Package client is the vfio-user client: it implements mhi.Transport for
// gomhi's host stack (package mhi) on a PCI function served over a unix
// socket, such as the mock modem 'mhictl modem serve' serves (package
// pcigeneric/vfiouser). It links no mock modem code.
//
// Dial (or New on a connected socket) negotiates the version, reads the
// device info, BAR0 and config space, enables memory, bus mastering and
// MSI, maps one memfd of DMA memory with DMA_MAP and sets one eventfd per
// MSI vector. The Transport then serves the host stack: BAR0 accesses are
// messages, DMA buffers come from the memfd, interrupts from the eventfds.
// IDs tells which device-table entry to build the controller from; Open
// does all of it and builds the controller. Errors wrap the sentinels of
// package protocol (ErrBusy, ErrPeerRefused, ErrClosed, ErrTimeout, …).
package client

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/slab"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// Client defaults.
const (
	// defaultBase is the IOVA of the client's DMA memory.
	defaultBase = 0x4000_0000
	// defaultMemory is the size of the client's DMA memory.
	defaultMemory = 64 << 20
	// DefaultTimeout bounds the wait for one reply.
	DefaultTimeout = 5 * time.Second
)

// Options configure a client transport.
type Options struct {
	// Memory is the DMA memory size in bytes, a multiple of 4096 (default
	// 64 MiB).
	Memory int
	// Base is the IOVA of the DMA memory (default 0x4000_0000).
	Base uint64
	// Vectors caps the MSI vectors used (default: all the device offers).
	Vectors int
	// MSIX uses the function's MSI-X capability instead of MSI.
	MSIX bool
	// Timeout bounds the wait for each reply (default DefaultTimeout).
	Timeout time.Duration
	// NoPostedWrites makes BAR0 writes wait for a reply; by default they
	// are posted (NO_REPLY), as QEMU posts them.
	NoPostedWrites bool
	// NoDMAFD maps the DMA memory without passing its fd, so the server
	// reaches it with DMA_READ/DMA_WRITE messages (slow; for tests).
	NoDMAFD bool
}

// Transport is a vfio-user client implementing mhi.Transport: BAR0 through
// REGION_READ/REGION_WRITE, DMA memory in a memfd mapped to the server with
// DMA_MAP, MSI vectors on eventfds set with DEVICE_SET_IRQS.
type Transport struct {
	w    *protocol.Conn
	opts Options

	nextID  atomic.Uint32
	pmu     sync.Mutex
	pending map[uint16]chan callReply
	dead    chan struct{}
	readErr error
	rdone   chan struct{}

	barSize uint64
	ids     [4]uint16
	caps    string

	memfd int
	// slab carves up mem; it is set during setup while the read loop may
	// already serve the server's DMA requests, hence atomic (nil: no
	// memory yet, every DMA request fails with EFAULT).
	slab atomic.Pointer[slab.Slab]
	mem  []byte // the memfd mapping the slab carves up

	evfds   []int      // the vectors' eventfds, owned by evfiles
	evfiles []*os.File // the eventfds in the runtime's poller
	irqIdx  uint32     // IRQMSI or IRQMSIX, the index the vectors are on
	iwg     sync.WaitGroup
	hmu     sync.RWMutex
	handler func(int)

	closeOnce sync.Once
	closeErr  error
}

// Dial connects to the vfio-user server at the unix socket path and sets
// the device up (see New).
func Dial(path string, opts Options) (*Transport, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vfiouser: dial %s: %w", path, err)
	}
	return New(c, opts)
}

// New sets up the device on conn: VERSION, DEVICE_GET_INFO,
// REGION_INFO for BAR0 and config space, the IDs, memory and bus-master
// enable and MSI enable in config space, DMA_MAP of the memory and
// SET_IRQS of the eventfds. It owns conn; on error conn is closed.
func New(conn *net.UnixConn, opts Options) (*Transport, error) {
	if opts.Memory == 0 {
		opts.Memory = defaultMemory
	}
	if opts.Base == 0 {
		opts.Base = defaultBase
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Memory < 0 || opts.Memory%4096 != 0 {
		conn.Close()
		return nil, fmt.Errorf("vfiouser: DMA memory of %d bytes, want a multiple of 4096: %w", opts.Memory, wire.ErrConfig)
	}
	t := &Transport{
		w: protocol.NewConn(conn), opts: opts, pending: map[uint16]chan callReply{},
		dead: make(chan struct{}), rdone: make(chan struct{}), memfd: -1,
	}
	go t.readLoop()
	if err := t.setup(); err != nil {
		t.teardown()
		return nil, err
	}
	return t, nil
}

func (t *Transport) setup() error {
	maxFDs, err := t.negotiateVersion()
	if err != nil {
		return err
	}
	if err := t.probeDevice(); err != nil {
		return err
	}
	vectors, err := t.irqVectors()
	if err != nil {
		return err
	}
	if err := t.enableDevice(vectors); err != nil {
		return err
	}
	if err := t.mapDMA(); err != nil {
		return err
	}
	return t.startVectors(vectors, maxFDs)
}

// negotiateVersion sends VERSION and checks the server's answer; it returns
// the most descriptors the server takes in one message.
func (t *Transport) negotiateVersion() (maxFDs int, err error) {
	r, err := t.call(protocol.CmdVersion, protocol.Version{Capabilities: `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096}}`}, nil)
	if errors.Is(err, unix.EBUSY) {
		return 0, fmt.Errorf("%w (one client at a time: stop the other first): %w", protocol.ErrBusy, err)
	}
	if errors.Is(err, unix.EPERM) {
		return 0, fmt.Errorf("%w (this process runs as uid %d): %w", protocol.ErrPeerRefused, os.Getuid(), err)
	}
	if err != nil {
		return 0, err
	}
	v, ok := r.Body.(protocol.Version)
	if !ok || v.Major != 0 || v.Minor != 0 {
		return 0, fmt.Errorf("vfiouser: server version %+v: %w", r.Body, protocol.ErrMalformed)
	}
	t.caps = v.Capabilities
	var caps struct {
		Capabilities struct {
			MaxMsgFDs int `json:"max_msg_fds"`
		} `json:"capabilities"`
	}
	maxFDs = 1
	if json.Unmarshal([]byte(v.Capabilities), &caps) == nil && caps.Capabilities.MaxMsgFDs > 0 {
		maxFDs = min(caps.Capabilities.MaxMsgFDs, protocol.MaxFDs)
	}
	return maxFDs, nil
}

// probeDevice reads the device info and the BAR0 and config space regions,
// checks that the server offers a PCI function, and keeps its IDs.
func (t *Transport) probeDevice() error {
	r, err := t.call(protocol.CmdDeviceGetInfo, protocol.DeviceInfo{Argsz: 16}, nil)
	if err != nil {
		return err
	}
	if di, _ := r.Body.(protocol.DeviceInfo); di.Flags&protocol.DeviceFlagPCI == 0 || di.NumRegions <= protocol.RegionConfig || di.NumIRQs <= protocol.IRQMSI {
		return fmt.Errorf("vfiouser: device info %+v: not a PCI function: %w", r.Body, protocol.ErrMalformed)
	}
	bar, err := t.regionInfo(protocol.RegionBAR0)
	if err != nil {
		return err
	}
	if bar.Size < 4096 || bar.Flags&(protocol.RegionFlagRead|protocol.RegionFlagWrite) != protocol.RegionFlagRead|protocol.RegionFlagWrite {
		return fmt.Errorf("vfiouser: BAR0 %+v: %w", bar, protocol.ErrMalformed)
	}
	t.barSize = bar.Size
	cfg, err := t.regionInfo(protocol.RegionConfig)
	if err != nil {
		return err
	}
	if cfg.Size < 64 {
		return fmt.Errorf("vfiouser: config space of %d bytes: %w", cfg.Size, protocol.ErrMalformed)
	}
	var hdr [64]byte
	if err := t.ReadConfig(0, hdr[:]); err != nil {
		return err
	}
	le := binary.LittleEndian
	t.ids = [4]uint16{le.Uint16(hdr[protocol.CfgVendorID:]), le.Uint16(hdr[protocol.CfgDeviceID:]), le.Uint16(hdr[protocol.CfgSubVendorID:]), le.Uint16(hdr[protocol.CfgSubDeviceID:])}
	return nil
}

// irqVectors picks the interrupt index (MSI or MSI-X) and the number of
// vectors to use from the server's IRQ info and the options.
func (t *Transport) irqVectors() (int, error) {
	irqIndex, kind := uint32(protocol.IRQMSI), "MSI"
	if t.opts.MSIX {
		irqIndex, kind = protocol.IRQMSIX, "MSI-X"
	}
	t.irqIdx = irqIndex
	r, err := t.call(protocol.CmdIRQInfo, protocol.IRQInfo{Argsz: 16, Index: irqIndex}, nil)
	if err != nil {
		return 0, err
	}
	ii, _ := r.Body.(protocol.IRQInfo)
	vectors := int(min(ii.Count, 32))
	if t.opts.Vectors > 0 {
		vectors = min(vectors, t.opts.Vectors)
	}
	for !t.opts.MSIX && vectors&(vectors-1) != 0 {
		vectors &= vectors - 1 // MSI enables a power of two
	}
	if vectors < 1 || ii.Flags&protocol.IRQInfoEventfd == 0 {
		return 0, fmt.Errorf("vfiouser: %s %+v: no eventfd vectors: %w", kind, ii, protocol.ErrMalformed)
	}
	return vectors, nil
}

// enableDevice turns on memory space and bus mastering and enables MSI
// (with vectors, a power of two) or MSI-X in config space.
func (t *Transport) enableDevice(vectors int) error {
	le := binary.LittleEndian
	if err := t.WriteConfig(protocol.CfgCommand, le.AppendUint16(nil, 0x0006)); err != nil {
		return err
	}
	if t.opts.MSIX {
		if err := t.WriteConfig(protocol.CfgMSIX+2, le.AppendUint16(nil, 0x8000)); err != nil {
			return err
		}
	} else {
		mme := uint16(0)
		for v := vectors; v > 1; v >>= 1 {
			mme++
		}
		if err := t.WriteConfig(protocol.CfgMSI+2, le.AppendUint16(nil, mme<<4|1)); err != nil {
			return err
		}
	}
	return nil
}

// mapDMA creates the DMA memory (a memfd, mapped here) and maps it into
// the server with DMA_MAP, with its descriptor unless NoDMAFD.
func (t *Transport) mapDMA() error {
	fd, err := unix.MemfdCreate("gomhi-vfiouser-dma", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("vfiouser: memfd: %w", err)
	}
	t.memfd = fd
	if err := unix.Ftruncate(fd, int64(t.opts.Memory)); err != nil {
		return fmt.Errorf("vfiouser: memfd size: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, t.opts.Memory, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("vfiouser: mmap DMA memory: %w", err)
	}
	t.mem = mem
	t.slab.Store(slab.NewOn(t.opts.Base, mem))
	var mapFDs []int
	if !t.opts.NoDMAFD {
		mapFDs = []int{fd}
	}
	if _, err := t.call(protocol.CmdDMAMap, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, IOVA: t.opts.Base, Size: uint64(t.opts.Memory)}, mapFDs); err != nil {
		return err
	}
	return nil
}

// startVectors creates an eventfd per vector, hands them to the server
// with SET_IRQS in batches of maxFDs, and starts a loop per vector.
func (t *Transport) startVectors(vectors, maxFDs int) error {
	irqIndex := t.irqIdx
	for range vectors {
		efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			return fmt.Errorf("vfiouser: eventfd: %w", err)
		}
		t.evfds = append(t.evfds, efd)
		t.evfiles = append(t.evfiles, os.NewFile(uintptr(efd), "vfiouser-msi"))
	}
	for start := 0; start < vectors; start += maxFDs {
		batch := t.evfds[start:min(start+maxFDs, vectors)]
		if _, err := t.call(protocol.CmdSetIRQs, protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: irqIndex, Start: uint32(start), Count: uint32(len(batch))}, batch); err != nil {
			return err
		}
	}
	for v, f := range t.evfiles {
		rc, err := f.SyscallConn()
		if err != nil {
			return fmt.Errorf("vfiouser: eventfd of vector %d: %w", v, err)
		}
		t.iwg.Add(1)
		go t.vectorLoop(v, rc)
	}
	return nil
}

func (t *Transport) regionInfo(index uint32) (protocol.RegionInfo, error) {
	r, err := t.call(protocol.CmdRegionInfo, protocol.RegionInfo{Argsz: 32, Index: index}, nil)
	if err != nil {
		return protocol.RegionInfo{}, err
	}
	ri, _ := r.Body.(protocol.RegionInfo)
	return ri, nil
}

// call sends a command and waits for its reply; an error reply gives an
// error wrapping ErrRemote and the errno.
func (t *Transport) call(cmd protocol.Command, body any, fds []int) (protocol.Message, error) {
	id := uint16(t.nextID.Add(1))
	ch := make(chan callReply, 1)
	t.pmu.Lock()
	t.pending[id] = ch
	t.pmu.Unlock()
	drop := func() {
		t.pmu.Lock()
		delete(t.pending, id)
		t.pmu.Unlock()
	}
	if err := t.w.WriteMessage(protocol.EncodeMessage(id, cmd, 0, 0, body), fds); err != nil {
		drop()
		return protocol.Message{}, fmt.Errorf("vfiouser: %s: %w", cmd, err)
	}
	timer := time.NewTimer(t.opts.Timeout)
	defer timer.Stop()
	reply := func(cr callReply) (protocol.Message, error) {
		r := cr.msg
		if cr.err != nil {
			return r, fmt.Errorf("vfiouser: %s: reply: %w", cmd, cr.err)
		}
		if r.Header.Flags&protocol.FlagError != 0 {
			return r, fmt.Errorf("vfiouser: %s: %w: %w", cmd, protocol.ErrRemote, unix.Errno(r.Header.Error))
		}
		if r.Header.Cmd != cmd {
			return r, fmt.Errorf("vfiouser: %s answered by %s: %w", cmd, r.Header.Cmd, protocol.ErrMalformed)
		}
		return r, nil
	}
	select {
	case cr := <-ch:
		return reply(cr)
	case <-t.dead:
		// The reply may have arrived just before the connection closed
		// (a server that refuses answers, then hangs up): it wins.
		select {
		case cr := <-ch:
			return reply(cr)
		default:
		}
		drop()
		return protocol.Message{}, fmt.Errorf("vfiouser: %s: %w (%w)", cmd, protocol.ErrClosed, t.readErr)
	case <-timer.C:
		drop()
		return protocol.Message{}, fmt.Errorf("vfiouser: %s: %w", cmd, protocol.ErrTimeout)
	}
}

// readLoop hands replies to their callers and answers the server's
// DMA_READ/DMA_WRITE from the DMA memory.
func (t *Transport) readLoop() {
	defer close(t.rdone)
	defer close(t.dead)
	for {
		_, hdr, payload, fds, err := t.w.Next()
		if err != nil {
			t.readErr = err
			return
		}
		protocol.CloseFDs(fds)
		// payload belongs to the wire until the next read; a reply goes to
		// another goroutine, so it gets a copy.
		m, err := protocol.DecodeMessage(hdr, append([]byte{}, payload...), len(fds))
		if err != nil {
			if m.Header.IsReply() {
				// A malformed answer still answers its call: the
				// caller gets the error now rather than a timeout.
				t.answer(m, err)
				continue
			}
			if m.Header.Flags&protocol.FlagNoReply != 0 {
				continue
			}
			_ = t.w.WriteMessage(protocol.EncodeMessage(m.Header.ID, m.Header.Cmd, protocol.FlagReply|protocol.FlagError, uint32(unix.EINVAL), nil), nil)
			continue
		}
		if m.Header.IsReply() {
			t.answer(m, nil)
			continue
		}
		t.serveDMA(m)
	}
}

// callReply is what a call receives: the reply, or why it is unusable.
type callReply struct {
	msg protocol.Message
	err error
}

// answer hands a reply (or its decoding error) to the call waiting for
// its ID; a reply nobody waits for is dropped.
func (t *Transport) answer(m protocol.Message, err error) {
	t.pmu.Lock()
	ch := t.pending[m.Header.ID]
	delete(t.pending, m.Header.ID)
	t.pmu.Unlock()
	if ch != nil {
		ch <- callReply{msg: m, err: err}
	}
}

func (t *Transport) serveDMA(m protocol.Message) {
	h := m.Header
	a, ok := m.Body.(protocol.DMAAccess)
	var reply []byte
	var buf []byte
	slab := t.slab.Load()
	if ok {
		var err error
		ok = false
		if slab != nil {
			buf, err = slab.Slice(a.Address, int(min(a.Count, uint64(slab.Size()))))
			ok = err == nil && uint64(len(buf)) == a.Count
		}
	}
	switch {
	case !ok:
		reply = protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply|protocol.FlagError, uint32(unix.EFAULT), nil)
		if h.Cmd != protocol.CmdDMARead && h.Cmd != protocol.CmdDMAWrite {
			reply = protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply|protocol.FlagError, uint32(unix.ENOSYS), nil)
		}
	case h.Cmd == protocol.CmdDMARead:
		data := make([]byte, len(buf))
		copy(data, buf)
		reply = protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply, 0, protocol.DMAAccess{Address: a.Address, Count: a.Count, Data: data})
	default:
		copy(buf, a.Data)
		reply = protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply, 0, protocol.DMAAccess{Address: a.Address, Count: a.Count})
	}
	if h.Flags&protocol.FlagNoReply == 0 {
		_ = t.w.WriteMessage(reply, nil)
	}
}

// vectorLoop waits for interrupts on vector v's eventfd in the runtime's
// poller (no thread blocks in a system call, and a processor about to go
// idle picks the interrupt up without a wakeup) and calls the handler once
// per read that finds the counter non-zero, as QEMU injects one MSI per
// such read. It returns when the eventfd is closed.
//
// The handler runs inside the RawConn.Read callback, which then asks to
// wait: the wait keeps a readiness edge that came while the handler ran
// (a new RawConn.Read would discard it first), so one read per interrupt
// suffices, where returning and reading again would add a read finding
// nothing before every wait.
func (t *Transport) vectorLoop(v int, rc syscall.RawConn) {
	defer t.iwg.Done()
	var b [8]byte
	broken := false
	read := func(fd uintptr) bool {
		n, err := unix.Read(int(fd), b[:])
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return false
		case err != nil || n != 8:
			broken = true // not an eventfd any more; cannot happen
			return true
		}
		// The handler runs under the read lock, so that once
		// SetInterruptHandler returns no call to the old handler is
		// still running (the controller frees its rings after nil).
		t.hmu.RLock()
		if t.handler != nil {
			t.handler(v)
		}
		t.hmu.RUnlock()
		return false
	}
	for !broken {
		if err := rc.Read(read); err != nil {
			return // closed
		}
	}
}

// IDs returns the vendor, device, subsystem vendor and subsystem device IDs
// read from the function's config space, to look the model up with
// pcigeneric.Lookup.
func (t *Transport) IDs() (vendor, device, subVendor, subDevice uint16) {
	return t.ids[0], t.ids[1], t.ids[2], t.ids[3]
}

// Done returns a channel that is closed when the connection to the server
// ends: the server went away, or Close.
func (t *Transport) Done() <-chan struct{} { return t.dead }

// Capabilities returns the server's VERSION capabilities JSON.
func (t *Transport) Capabilities() string { return t.caps }

// BARSize returns the size of BAR0 (the MHI BAR; it implements
// mhi.BARSizer, so the controller checks the device's offsets against it).
func (t *Transport) BARSize() uint64 { return t.barSize }

// ReadConfig reads len(p) bytes of config space at off.
func (t *Transport) ReadConfig(off int, p []byte) error {
	r, err := t.call(protocol.CmdRegionRead, protocol.RegionAccess{Offset: uint64(off), Region: protocol.RegionConfig, Count: uint32(len(p))}, nil)
	if err != nil {
		return err
	}
	a, _ := r.Body.(protocol.RegionAccess)
	if len(a.Data) != len(p) {
		return fmt.Errorf("vfiouser: config read of %d bytes got %d: %w", len(p), len(a.Data), protocol.ErrMalformed)
	}
	copy(p, a.Data)
	return nil
}

// WriteConfig writes p to config space at off and waits for the reply.
func (t *Transport) WriteConfig(off int, p []byte) error {
	_, err := t.call(protocol.CmdRegionWrite, protocol.RegionAccess{Offset: uint64(off), Region: protocol.RegionConfig, Count: uint32(len(p)), Data: p}, nil)
	return err
}

// Read32 implements mhi.Registers with one REGION_READ of BAR0.
func (t *Transport) Read32(off uint32) (uint32, error) {
	r, err := t.call(protocol.CmdRegionRead, protocol.RegionAccess{Offset: uint64(off), Region: protocol.RegionBAR0, Count: 4}, nil)
	if err != nil {
		return 0, err
	}
	a, _ := r.Body.(protocol.RegionAccess)
	if len(a.Data) != 4 {
		return 0, fmt.Errorf("vfiouser: BAR0 read at 0x%x: %w", off, protocol.ErrMalformed)
	}
	return binary.LittleEndian.Uint32(a.Data), nil
}

// Write32 implements mhi.Registers with one REGION_WRITE of BAR0, posted
// (NO_REPLY) unless Options.NoPostedWrites.
func (t *Transport) Write32(off, v uint32) error {
	if t.opts.NoPostedWrites {
		a := protocol.RegionAccess{Offset: uint64(off), Region: protocol.RegionBAR0, Count: 4, Data: binary.LittleEndian.AppendUint32(nil, v)}
		_, err := t.call(protocol.CmdRegionWrite, a, nil)
		return err
	}
	select {
	case <-t.dead:
		return fmt.Errorf("vfiouser: BAR0 write at 0x%x: %w", off, protocol.ErrClosed)
	default:
	}
	// Posted: encoded into the connection's write buffer, no allocation.
	var data [4]byte
	binary.LittleEndian.PutUint32(data[:], v)
	id := uint16(t.nextID.Add(1))
	b := t.w.Begin()
	b = protocol.AppendRegionAccess(b, id, protocol.CmdRegionWrite, protocol.FlagNoReply, uint64(off), protocol.RegionBAR0, 4, data[:])
	if err := t.w.Flush(b, nil); err != nil {
		return fmt.Errorf("vfiouser: BAR0 write at 0x%x: %w", off, err)
	}
	return nil
}

// WritePair32 implements mhi.PairWriter: the two REGION_WRITE messages
// Write32(hiOff, hi) and Write32(loOff, lo) would send, in that order,
// posted and sent together with one sendmsg (with NoPostedWrites, one
// call after the other). The server sees the same two writes.
func (t *Transport) WritePair32(hiOff, hi, loOff, lo uint32) error {
	if t.opts.NoPostedWrites {
		if err := t.Write32(hiOff, hi); err != nil {
			return err
		}
		return t.Write32(loOff, lo)
	}
	select {
	case <-t.dead:
		return fmt.Errorf("vfiouser: BAR0 writes at 0x%x and 0x%x: %w", hiOff, loOff, protocol.ErrClosed)
	default:
	}
	var data [8]byte
	binary.LittleEndian.PutUint32(data[0:], hi)
	binary.LittleEndian.PutUint32(data[4:], lo)
	id := uint16(t.nextID.Add(2))
	b := t.w.Begin()
	b = protocol.AppendRegionAccess(b, id-1, protocol.CmdRegionWrite, protocol.FlagNoReply, uint64(hiOff), protocol.RegionBAR0, 4, data[0:4])
	b = protocol.AppendRegionAccess(b, id, protocol.CmdRegionWrite, protocol.FlagNoReply, uint64(loOff), protocol.RegionBAR0, 4, data[4:8])
	if err := t.w.Flush(b, nil); err != nil {
		return fmt.Errorf("vfiouser: BAR0 writes at 0x%x and 0x%x: %w", hiOff, loOff, err)
	}
	return nil
}

// Alloc implements mhi.DMAMemory from the memfd shared with the server.
func (t *Transport) Alloc(size, align int) (mhi.DMABuffer, error) {
	return t.slab.Load().Alloc(size, align)
}

// Free implements mhi.DMAMemory.
func (t *Transport) Free(b mhi.DMABuffer) error { return t.slab.Load().Free(b) }

// Vectors implements mhi.Interrupts: the MSI vectors with an eventfd.
func (t *Transport) Vectors() int { return len(t.evfds) }

// SetInterruptHandler implements mhi.Interrupts. It waits for a running
// call of the previous handler to return.
func (t *Transport) SetInterruptHandler(h func(int)) {
	t.hmu.Lock()
	t.handler = h
	t.hmu.Unlock()
}

// Reset implements mhi.Transport with DEVICE_RESET.
func (t *Transport) Reset() error {
	_, err := t.call(protocol.CmdDeviceReset, nil, nil)
	return err
}

// Close disables the vectors, unmaps the DMA memory on the server and
// closes the connection. DMA buffers must not be used afterwards.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		select {
		case <-t.dead:
		default:
			_, err1 := t.call(protocol.CmdSetIRQs, protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: t.irqIdx}, nil)
			_, err2 := t.call(protocol.CmdDMAUnmap, protocol.DMAUnmap{Argsz: 24, Flags: protocol.DMAUnmapAll}, nil)
			t.closeErr = errors.Join(err1, err2)
		}
		t.teardown()
	})
	return t.closeErr
}

func (t *Transport) teardown() {
	_ = t.w.Close()
	<-t.rdone
	for _, f := range t.evfiles {
		_ = f.Close()
	}
	t.iwg.Wait()
	protocol.CloseFDs([]int{t.memfd})
	if t.mem != nil {
		_ = unix.Munmap(t.mem)
	}
}

var (
	_ mhi.Transport  = (*Transport)(nil)
	_ mhi.BARSizer   = (*Transport)(nil)
	_ mhi.PairWriter = (*Transport)(nil)
)
