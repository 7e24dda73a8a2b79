package vfiouser

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
)

// Client defaults.
const (
	// DefaultBase is the IOVA of the client's DMA memory.
	DefaultBase = 0x4000_0000
	// DefaultMemory is the size of the client's DMA memory.
	DefaultMemory = 64 << 20
	// DefaultTimeout bounds the wait for one reply.
	DefaultTimeout = 5 * time.Second
)

// ClientOptions configure a client transport.
type ClientOptions struct {
	// Memory is the DMA memory size in bytes, a multiple of 4096 (default
	// DefaultMemory).
	Memory int
	// Base is the IOVA of the DMA memory (default DefaultBase).
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
	w    *wire
	opts ClientOptions

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
// the device up (see NewClient).
func Dial(path string, opts ClientOptions) (*Transport, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vfiouser: dial %s: %w", path, err)
	}
	return NewClient(c, opts)
}

// NewClient sets up the device on conn: VERSION, DEVICE_GET_INFO,
// REGION_INFO for BAR0 and config space, the IDs, memory and bus-master
// enable and MSI enable in config space, DMA_MAP of the memory and
// SET_IRQS of the eventfds. It owns conn; on error conn is closed.
func NewClient(conn *net.UnixConn, opts ClientOptions) (*Transport, error) {
	if opts.Memory == 0 {
		opts.Memory = DefaultMemory
	}
	if opts.Base == 0 {
		opts.Base = DefaultBase
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Memory < 0 || opts.Memory%4096 != 0 {
		conn.Close()
		return nil, fmt.Errorf("vfiouser: DMA memory of %d bytes, want a multiple of 4096: %w", opts.Memory, mhi.ErrConfig)
	}
	t := &Transport{
		w: newWire(conn), opts: opts, pending: map[uint16]chan callReply{},
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
	r, err := t.call(CmdVersion, Version{Capabilities: `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096}}`}, nil)
	if errors.Is(err, unix.EBUSY) {
		return 0, fmt.Errorf("%w (one client at a time: stop the other first): %w", ErrBusy, err)
	}
	if errors.Is(err, unix.EPERM) {
		return 0, fmt.Errorf("%w (this process runs as uid %d): %w", ErrPeerRefused, os.Getuid(), err)
	}
	if err != nil {
		return 0, err
	}
	v, ok := r.Body.(Version)
	if !ok || v.Major != 0 || v.Minor != 0 {
		return 0, fmt.Errorf("vfiouser: server version %+v: %w", r.Body, ErrMalformed)
	}
	t.caps = v.Capabilities
	var caps struct {
		Capabilities struct {
			MaxMsgFDs int `json:"max_msg_fds"`
		} `json:"capabilities"`
	}
	maxFDs = 1
	if json.Unmarshal([]byte(v.Capabilities), &caps) == nil && caps.Capabilities.MaxMsgFDs > 0 {
		maxFDs = min(caps.Capabilities.MaxMsgFDs, MaxFDs)
	}
	return maxFDs, nil
}

// probeDevice reads the device info and the BAR0 and config space regions,
// checks that the server offers a PCI function, and keeps its IDs.
func (t *Transport) probeDevice() error {
	r, err := t.call(CmdDeviceGetInfo, DeviceInfo{Argsz: 16}, nil)
	if err != nil {
		return err
	}
	if di, _ := r.Body.(DeviceInfo); di.Flags&DeviceFlagPCI == 0 || di.NumRegions <= RegionConfig || di.NumIRQs <= IRQMSI {
		return fmt.Errorf("vfiouser: device info %+v: not a PCI function: %w", r.Body, ErrMalformed)
	}
	bar, err := t.regionInfo(RegionBAR0)
	if err != nil {
		return err
	}
	if bar.Size < 4096 || bar.Flags&(RegionFlagRead|RegionFlagWrite) != RegionFlagRead|RegionFlagWrite {
		return fmt.Errorf("vfiouser: BAR0 %+v: %w", bar, ErrMalformed)
	}
	t.barSize = bar.Size
	cfg, err := t.regionInfo(RegionConfig)
	if err != nil {
		return err
	}
	if cfg.Size < 64 {
		return fmt.Errorf("vfiouser: config space of %d bytes: %w", cfg.Size, ErrMalformed)
	}
	var hdr [64]byte
	if err := t.ReadConfig(0, hdr[:]); err != nil {
		return err
	}
	le := binary.LittleEndian
	t.ids = [4]uint16{le.Uint16(hdr[CfgVendorID:]), le.Uint16(hdr[CfgDeviceID:]), le.Uint16(hdr[CfgSubVendorID:]), le.Uint16(hdr[CfgSubDeviceID:])}
	return nil
}

// irqVectors picks the interrupt index (MSI or MSI-X) and the number of
// vectors to use from the server's IRQ info and the options.
func (t *Transport) irqVectors() (int, error) {
	irqIndex, kind := uint32(IRQMSI), "MSI"
	if t.opts.MSIX {
		irqIndex, kind = IRQMSIX, "MSI-X"
	}
	t.irqIdx = irqIndex
	r, err := t.call(CmdIRQInfo, IRQInfo{Argsz: 16, Index: irqIndex}, nil)
	if err != nil {
		return 0, err
	}
	ii, _ := r.Body.(IRQInfo)
	vectors := int(min(ii.Count, 32))
	if t.opts.Vectors > 0 {
		vectors = min(vectors, t.opts.Vectors)
	}
	for !t.opts.MSIX && vectors&(vectors-1) != 0 {
		vectors &= vectors - 1 // MSI enables a power of two
	}
	if vectors < 1 || ii.Flags&IRQInfoEventfd == 0 {
		return 0, fmt.Errorf("vfiouser: %s %+v: no eventfd vectors: %w", kind, ii, ErrMalformed)
	}
	return vectors, nil
}

// enableDevice turns on memory space and bus mastering and enables MSI
// (with vectors, a power of two) or MSI-X in config space.
func (t *Transport) enableDevice(vectors int) error {
	le := binary.LittleEndian
	if err := t.WriteConfig(CfgCommand, le.AppendUint16(nil, 0x0006)); err != nil {
		return err
	}
	if t.opts.MSIX {
		if err := t.WriteConfig(CfgMSIX+2, le.AppendUint16(nil, 0x8000)); err != nil {
			return err
		}
	} else {
		mme := uint16(0)
		for v := vectors; v > 1; v >>= 1 {
			mme++
		}
		if err := t.WriteConfig(CfgMSI+2, le.AppendUint16(nil, mme<<4|1)); err != nil {
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
	if _, err := t.call(CmdDMAMap, DMAMap{Argsz: 32, Flags: DMAFlagRead | DMAFlagWrite, IOVA: t.opts.Base, Size: uint64(t.opts.Memory)}, mapFDs); err != nil {
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
		if _, err := t.call(CmdSetIRQs, SetIRQs{Flags: IRQDataEventfd | IRQActionTrig, Index: irqIndex, Start: uint32(start), Count: uint32(len(batch))}, batch); err != nil {
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

func (t *Transport) regionInfo(index uint32) (RegionInfo, error) {
	r, err := t.call(CmdRegionInfo, RegionInfo{Argsz: 32, Index: index}, nil)
	if err != nil {
		return RegionInfo{}, err
	}
	ri, _ := r.Body.(RegionInfo)
	return ri, nil
}

// call sends a command and waits for its reply; an error reply gives an
// error wrapping ErrRemote and the errno.
func (t *Transport) call(cmd Command, body any, fds []int) (Message, error) {
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
	if err := t.w.write(EncodeMessage(id, cmd, 0, 0, body), fds); err != nil {
		drop()
		return Message{}, fmt.Errorf("vfiouser: %s: %w", cmd, err)
	}
	timer := time.NewTimer(t.opts.Timeout)
	defer timer.Stop()
	reply := func(cr callReply) (Message, error) {
		r := cr.msg
		if cr.err != nil {
			return r, fmt.Errorf("vfiouser: %s: reply: %w", cmd, cr.err)
		}
		if r.Header.Flags&FlagError != 0 {
			return r, fmt.Errorf("vfiouser: %s: %w: %w", cmd, ErrRemote, unix.Errno(r.Header.Error))
		}
		if r.Header.Cmd != cmd {
			return r, fmt.Errorf("vfiouser: %s answered by %s: %w", cmd, r.Header.Cmd, ErrMalformed)
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
		return Message{}, fmt.Errorf("vfiouser: %s: %w (%w)", cmd, ErrClosed, t.readErr)
	case <-timer.C:
		drop()
		return Message{}, fmt.Errorf("vfiouser: %s: %w", cmd, ErrTimeout)
	}
}

// readLoop hands replies to their callers and answers the server's
// DMA_READ/DMA_WRITE from the DMA memory.
func (t *Transport) readLoop() {
	defer close(t.rdone)
	defer close(t.dead)
	for {
		_, hdr, payload, fds, err := t.w.next()
		if err != nil {
			t.readErr = err
			return
		}
		closeFDs(fds)
		// payload belongs to the wire until the next read; a reply goes to
		// another goroutine, so it gets a copy.
		m, err := DecodeMessage(hdr, append([]byte{}, payload...), len(fds))
		if err != nil {
			if m.Header.IsReply() {
				// A malformed answer still answers its call: the
				// caller gets the error now rather than a timeout.
				t.answer(m, err)
				continue
			}
			if m.Header.Flags&FlagNoReply != 0 {
				continue
			}
			_ = t.w.write(EncodeMessage(m.Header.ID, m.Header.Cmd, FlagReply|FlagError, uint32(unix.EINVAL), nil), nil)
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
	msg Message
	err error
}

// answer hands a reply (or its decoding error) to the call waiting for
// its ID; a reply nobody waits for is dropped.
func (t *Transport) answer(m Message, err error) {
	t.pmu.Lock()
	ch := t.pending[m.Header.ID]
	delete(t.pending, m.Header.ID)
	t.pmu.Unlock()
	if ch != nil {
		ch <- callReply{msg: m, err: err}
	}
}

func (t *Transport) serveDMA(m Message) {
	h := m.Header
	a, ok := m.Body.(DMAAccess)
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
		reply = EncodeMessage(h.ID, h.Cmd, FlagReply|FlagError, uint32(unix.EFAULT), nil)
		if h.Cmd != CmdDMARead && h.Cmd != CmdDMAWrite {
			reply = EncodeMessage(h.ID, h.Cmd, FlagReply|FlagError, uint32(unix.ENOSYS), nil)
		}
	case h.Cmd == CmdDMARead:
		data := make([]byte, len(buf))
		copy(data, buf)
		reply = EncodeMessage(h.ID, h.Cmd, FlagReply, 0, DMAAccess{Address: a.Address, Count: a.Count, Data: data})
	default:
		copy(buf, a.Data)
		reply = EncodeMessage(h.ID, h.Cmd, FlagReply, 0, DMAAccess{Address: a.Address, Count: a.Count})
	}
	if h.Flags&FlagNoReply == 0 {
		_ = t.w.write(reply, nil)
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
	r, err := t.call(CmdRegionRead, RegionAccess{Offset: uint64(off), Region: RegionConfig, Count: uint32(len(p))}, nil)
	if err != nil {
		return err
	}
	a, _ := r.Body.(RegionAccess)
	if len(a.Data) != len(p) {
		return fmt.Errorf("vfiouser: config read of %d bytes got %d: %w", len(p), len(a.Data), ErrMalformed)
	}
	copy(p, a.Data)
	return nil
}

// WriteConfig writes p to config space at off and waits for the reply.
func (t *Transport) WriteConfig(off int, p []byte) error {
	_, err := t.call(CmdRegionWrite, RegionAccess{Offset: uint64(off), Region: RegionConfig, Count: uint32(len(p)), Data: p}, nil)
	return err
}

// Read32 implements mhi.Registers with one REGION_READ of BAR0.
func (t *Transport) Read32(off uint32) (uint32, error) {
	r, err := t.call(CmdRegionRead, RegionAccess{Offset: uint64(off), Region: RegionBAR0, Count: 4}, nil)
	if err != nil {
		return 0, err
	}
	a, _ := r.Body.(RegionAccess)
	if len(a.Data) != 4 {
		return 0, fmt.Errorf("vfiouser: BAR0 read at 0x%x: %w", off, ErrMalformed)
	}
	return binary.LittleEndian.Uint32(a.Data), nil
}

// Write32 implements mhi.Registers with one REGION_WRITE of BAR0, posted
// (NO_REPLY) unless ClientOptions.NoPostedWrites.
func (t *Transport) Write32(off, v uint32) error {
	if t.opts.NoPostedWrites {
		a := RegionAccess{Offset: uint64(off), Region: RegionBAR0, Count: 4, Data: binary.LittleEndian.AppendUint32(nil, v)}
		_, err := t.call(CmdRegionWrite, a, nil)
		return err
	}
	select {
	case <-t.dead:
		return fmt.Errorf("vfiouser: BAR0 write at 0x%x: %w", off, ErrClosed)
	default:
	}
	// Posted: encoded into the connection's write buffer, no allocation.
	var data [4]byte
	binary.LittleEndian.PutUint32(data[:], v)
	id := uint16(t.nextID.Add(1))
	b := t.w.begin()
	b = appendRegionAccess(b, id, CmdRegionWrite, FlagNoReply, uint64(off), RegionBAR0, 4, data[:])
	if err := t.w.flush(b, nil); err != nil {
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
		return fmt.Errorf("vfiouser: BAR0 writes at 0x%x and 0x%x: %w", hiOff, loOff, ErrClosed)
	default:
	}
	var data [8]byte
	binary.LittleEndian.PutUint32(data[0:], hi)
	binary.LittleEndian.PutUint32(data[4:], lo)
	id := uint16(t.nextID.Add(2))
	b := t.w.begin()
	b = appendRegionAccess(b, id-1, CmdRegionWrite, FlagNoReply, uint64(hiOff), RegionBAR0, 4, data[0:4])
	b = appendRegionAccess(b, id, CmdRegionWrite, FlagNoReply, uint64(loOff), RegionBAR0, 4, data[4:8])
	if err := t.w.flush(b, nil); err != nil {
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
	_, err := t.call(CmdDeviceReset, nil, nil)
	return err
}

// Close disables the vectors, unmaps the DMA memory on the server and
// closes the connection. DMA buffers must not be used afterwards.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		select {
		case <-t.dead:
		default:
			_, err1 := t.call(CmdSetIRQs, SetIRQs{Flags: IRQDataNone | IRQActionTrig, Index: t.irqIdx}, nil)
			_, err2 := t.call(CmdDMAUnmap, DMAUnmap{Argsz: 24, Flags: DMAUnmapAll}, nil)
			t.closeErr = errors.Join(err1, err2)
		}
		t.teardown()
	})
	return t.closeErr
}

func (t *Transport) teardown() {
	_ = t.w.c.Close()
	<-t.rdone
	for _, f := range t.evfiles {
		_ = f.Close()
	}
	t.iwg.Wait()
	closeFDs([]int{t.memfd})
	if t.mem != nil {
		_ = unix.Munmap(t.mem)
	}
}

var (
	_ mhi.Transport  = (*Transport)(nil)
	_ mhi.BARSizer   = (*Transport)(nil)
	_ mhi.PairWriter = (*Transport)(nil)
)
