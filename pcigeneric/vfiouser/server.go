package vfiouser

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// DefaultVectors is the number of MSI vectors the served function offers.
const DefaultVectors = 32

// dmaTimeout bounds the wait for the client's answer to a DMA_READ or
// DMA_WRITE the server sends for a region mapped without fd.
const dmaTimeout = 5 * time.Second

// DeviceOptions configure a ServerDevice.
type DeviceOptions struct {
	// Model is the device-table model to impersonate (default
	// mock.DefaultModel).
	Model string
	// Entry, if set, selects the table entry whose IDs are presented;
	// otherwise the model's first entry is used.
	Entry *pcigeneric.Entry
	// Revision is the PCI revision ID.
	Revision uint8
	// Vectors is the number of MSI vectors offered: a power of two 1..32
	// (default DefaultVectors).
	Vectors int
	// Logger receives one record per event (connect, version, dma_map,
	// dma_unmap, irq_setup, reset, disconnect, error); nil discards.
	Logger *slog.Logger
	// ModemLogger receives the mock modem's own logs (nil: discard).
	ModemLogger *slog.Logger
	// IPData configures the mock modem's IP data function, as in
	// mock.Options (nil: the pair's own framing).
	IPData *ipdata.Config
	// Modem configures each session's mock modem as in mock.Options:
	// with Modem.RequireConnect IP data is dropped and counted until the
	// client connects a session over a control channel (MBIM CONNECT).
	// Each session gets a fresh modem (a new client finds it registered,
	// attached, without a session).
	Modem modem.Config
	// Device, if set, adjusts each session's modem configuration.
	Device func(*ep.Config)
	// Quirks are the field failures each session's modem reproduces
	// (mhi/ep/quirk, docs/QUIRKS.md).
	Quirks quirk.Set
	// OnRegister, if set, is called with every BAR0 register access the
	// client makes, in order, from the session's handler goroutine.
	OnRegister func(RegisterAccess)
}

// RegisterAccess is one 32-bit access of the client to the modem's
// registers (BAR0).
type RegisterAccess struct {
	// Write is true for a write, false for a read.
	Write bool
	// Offset is the register's byte offset in BAR0 (ep.RegisterName names
	// it).
	Offset uint32
	// Value is the value written, or the value the read returned.
	Value uint32
}

// ServerStats counts what a ServerDevice has done over all its sessions.
type ServerStats struct {
	Sessions     uint64 `json:"sessions"`
	Messages     uint64 `json:"messages"`
	ErrorReplies uint64 `json:"error_replies"`
	Malformed    uint64 `json:"malformed"`
	DMAMaps      uint64 `json:"dma_maps"`
	DMAFaults    uint64 `json:"dma_faults"`
	Interrupts   uint64 `json:"interrupts"`
	IRQsLost     uint64 `json:"irqs_lost"`
	// IRQsHeld counts interrupts raised on a masked vector (held pending).
	IRQsHeld uint64 `json:"irqs_held"`
	// DMAMessages counts DMA_READ/DMA_WRITE messages sent for regions
	// mapped without fd.
	DMAMessages uint64 `json:"dma_messages"`
	Resets      uint64 `json:"resets"`
}

// ServerDevice is the PCI function a server presents: configuration space
// built from a device-table entry and, per client session, a fresh mock
// modem whose registers are BAR0.
type ServerDevice struct {
	// Entry is the device-table entry impersonated.
	Entry pcigeneric.Entry
	// PCI is the identity and resources of the function.
	PCI PCIConfig

	opts DeviceOptions
	log  *slog.Logger
	cfg  func() (ep.Config, *mock.Functions, error)

	messages, errReplies, malformed, sessions atomic.Uint64
	maps, faults, raised, lost, held          atomic.Uint64
	dmaMsgs, resets                           atomic.Uint64
	pm                                        pmCounters // pmcap.go

	mu    sync.Mutex
	modem *ep.Device
	fns   *mock.Functions
	irqs  *irqTable
	busy  bool
	// lastIRQs is the interrupt state and counters of the last session,
	// taken as it ended.
	lastIRQs IRQStats
}

// NewServerDevice builds the function for opts.Model: the entry's IDs,
// class 0xff0000, a 64-bit BAR0 covering the modem's registers (a power of
// two, at least 4 KiB) and an MSI capability.
func NewServerDevice(opts DeviceOptions) (*ServerDevice, error) {
	if opts.Model == "" {
		opts.Model = mock.DefaultModel
	}
	if opts.Vectors == 0 {
		opts.Vectors = DefaultVectors
	}
	if opts.Vectors < 1 || opts.Vectors > 32 || opts.Vectors&(opts.Vectors-1) != 0 {
		return nil, fmt.Errorf("vfiouser: %d MSI vectors, want a power of two 1..32: %w", opts.Vectors, protocol.ErrMalformed)
	}
	info, ok := pcigeneric.Model(opts.Model)
	if !ok {
		return nil, fmt.Errorf("vfiouser: model %q: %w", opts.Model, pcigeneric.ErrUnknownModel)
	}
	var entry pcigeneric.Entry
	if opts.Entry != nil {
		entry = *opts.Entry
	} else {
		es := pcigeneric.EntriesFor(info.Name)
		if len(es) == 0 {
			return nil, fmt.Errorf("vfiouser: model %q has no table entry: %w", opts.Model, pcigeneric.ErrUnknownModel)
		}
		entry = es[0]
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mlog := opts.ModemLogger
	if mlog == nil {
		mlog = slog.New(slog.DiscardHandler)
	}
	d := &ServerDevice{Entry: entry, opts: opts, log: log}
	d.cfg = func() (ep.Config, *mock.Functions, error) {
		ec, fns, err := mock.NewConfig(entry, mock.ModemOptions{
			IPData: opts.IPData, Modem: opts.Modem, Logger: mlog, Quirks: opts.Quirks,
		})
		if err != nil {
			return ep.Config{}, nil, err
		}
		if opts.Device != nil {
			opts.Device(&ec)
		}
		return ec, fns, nil
	}
	ec, _, err := d.cfg()
	if err != nil {
		return nil, err
	}
	regLen := uint64(ec.RegLen)
	if regLen == 0 {
		regLen = ep.DefaultRegLen
	}
	bar := uint64(4096)
	for bar < regLen {
		bar <<= 1
	}
	v, dv, sv, sd := entry.Match.IDs()
	d.PCI = PCIConfig{Vendor: v, Device: dv, SubVendor: sv, SubDevice: sd, Revision: opts.Revision, BARSize: bar, Vectors: opts.Vectors}
	return d, nil
}

// Stats returns the device's counters.
func (d *ServerDevice) Stats() ServerStats {
	return ServerStats{
		Sessions: d.sessions.Load(), Messages: d.messages.Load(), ErrorReplies: d.errReplies.Load(),
		Malformed: d.malformed.Load(), DMAMaps: d.maps.Load(), DMAFaults: d.faults.Load(),
		Interrupts: d.raised.Load(), IRQsLost: d.lost.Load(), IRQsHeld: d.held.Load(),
		DMAMessages: d.dmaMsgs.Load(), Resets: d.resets.Load(),
	}
}

// Modem returns the mock modem of the current session, or nil.
func (d *ServerDevice) Modem() *ep.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.modem
}

// Interrupts returns the current session's interrupt state and per-vector
// counters (the index the client enabled, each vector's eventfd, mask and
// pending bits, the interrupts signalled, lost and held), or a zero
// IRQStats between sessions.
func (d *ServerDevice) Interrupts() IRQStats {
	d.mu.Lock()
	irqs := d.irqs
	d.mu.Unlock()
	if irqs == nil {
		return IRQStats{}
	}
	return irqs.stats()
}

// LastInterrupts returns the interrupt state and per-vector counters of
// the last session that ended, as they were at its end (a zero IRQStats
// before the first one ends).
func (d *ServerDevice) LastInterrupts() IRQStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastIRQs
}

// Functions returns the current session's mock modem functions (IP data,
// MBIM…) and their shared state, or nil between sessions.
func (d *ServerDevice) Functions() *mock.Functions {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fns
}

// busyGrace is how long ListenAndServe lets a client that connects while
// another is served wait for the session to end (the last client may just
// have left, its session not yet torn down) before refusing it.
const busyGrace = time.Second

// ListenAndServe listens on the unix socket path and serves one client at
// a time until ctx is done; the socket file is removed on return. It
// returns nil when ctx ends it. The socket is created with mode 0600
// (socketMode) whatever the umask; a stale socket there is replaced, a live one
// or any other kind of file is refused (see listenSocket). A connecting
// process that is neither root nor the socket's owner (SO_PEERCRED) gets
// an EPERM error reply to its first message (its setup fails with
// protocol.ErrPeerRefused) and a Warn log line, and never takes the device.
// A client that connects while another is served, and is still waiting
// after a second (busyGrace), gets an EBUSY error reply to its first
// message (its setup fails with protocol.ErrBusy) instead of waiting
// unanswered.
func ListenAndServe(ctx context.Context, path string, dev *ServerDevice) error {
	l, err := Listen(path)
	if err != nil {
		return err
	}
	return l.Serve(ctx, dev)
}

// Listener is a vfio-user socket made by Listen: the socket file exists
// (clients can connect and wait) from Listen's return until Serve returns
// or Close is called.
type Listener struct {
	path string
	ino  uint64
	l    *net.UnixListener
}

// Listen creates the socket at path as ListenAndServe does, without
// serving it yet, so a caller can announce it once it exists.
func Listen(path string) (*Listener, error) {
	l, ino, err := listenSocket(path)
	if err != nil {
		return nil, err
	}
	return &Listener{path: path, ino: ino, l: l}, nil
}

// Close removes the socket; a Serve in progress returns.
func (ln *Listener) Close() error {
	err := ln.l.Close()
	removeSocket(ln.path, ln.ino)
	return err
}

// Serve serves dev on the listener as ListenAndServe does, until ctx is
// done, and removes the socket on return.
func (ln *Listener) Serve(ctx context.Context, dev *ServerDevice) error {
	l, path := ln.l, ln.path
	defer removeSocket(path, ln.ino)
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait() // before l.Close: the sessions end with ctx
	slot := make(chan struct{}, 1)
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("vfiouser: accept: %w", err)
		}
		if cred, err := checkPeer(c); err != nil {
			attrs := []any{"socket", path, "reason", err.Error()}
			if cred != nil {
				attrs = append(attrs, "peer_uid", cred.Uid, "peer_pid", cred.Pid)
			}
			dev.log.Warn("refuse", attrs...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				refuse(c, dev, unix.EPERM, refuseGrace)
			}()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			timer := time.NewTimer(busyGrace)
			defer timer.Stop()
			select {
			case slot <- struct{}{}:
			case <-timer.C:
				dev.log.Info("refuse", "reason", protocol.ErrBusy.Error())
				refuse(c, dev, unix.EBUSY, busyGrace)
				return
			case <-ctx.Done():
				_ = c.Close()
				return
			}
			defer func() { <-slot }()
			if err := serveConn(ctx, c, dev); err != nil {
				dev.log.Warn("error", "err", err.Error())
			}
		}()
	}
}

// refuseGrace is how long a refused peer has to send its first message,
// which is answered with EPERM.
const refuseGrace = 5 * time.Second

// refuse answers the first message on conn, if it comes within wait, with
// an error reply carrying errno, and closes conn.
func refuse(conn *net.UnixConn, dev *ServerDevice, errno unix.Errno, wait time.Duration) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	w := protocol.NewConn(conn)
	hdr, _, fds, err := w.ReadMessage()
	protocol.CloseFDs(fds)
	if err != nil {
		return
	}
	h, err := protocol.DecodeHeader(hdr)
	if err != nil || h.IsReply() || h.Flags&protocol.FlagNoReply != 0 {
		return
	}
	_ = w.WriteMessage(protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply|protocol.FlagError, uint32(errno), nil), nil)
}

// serveConn serves dev to the client on conn until the client disconnects, a
// framing error makes the stream unusable, or ctx is done; it closes conn.
// A clean disconnect or cancellation returns nil. Malformed messages that
// keep the framing get an error reply (EINVAL, ENOSYS, EFAULT) and are
// counted; a malformed header closes the connection.
func serveConn(ctx context.Context, conn *net.UnixConn, dev *ServerDevice) error {
	dev.mu.Lock()
	if dev.busy {
		dev.mu.Unlock()
		conn.Close()
		return protocol.ErrBusy
	}
	dev.busy = true
	dev.mu.Unlock()
	defer func() {
		dev.mu.Lock()
		dev.busy, dev.modem, dev.fns, dev.irqs = false, nil, nil, nil
		dev.mu.Unlock()
	}()
	dev.sessions.Add(1)
	s := newSession(dev, conn)
	dev.log.Info("connect")
	ec, fns, err := dev.cfg()
	if err != nil {
		conn.Close()
		return err
	}
	modem, err := ep.New(ec, s.mem, s.irqs)
	if err != nil {
		conn.Close()
		return err
	}
	s.modem, s.obs = modem, ec.Observer
	fns.Start(modem)
	dev.mu.Lock()
	dev.modem, dev.fns, dev.irqs = modem, fns, s.irqs
	dev.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	herr, rerr := s.run(conn)
	stop()
	_ = conn.Close()
	close(s.dead)
	_ = modem.Close()
	s.mem.remove(0, 0, true)
	last := s.irqs.stats()
	s.irqs.clear()
	dev.mu.Lock()
	dev.lastIRQs = last
	dev.mu.Unlock()
	err = herr
	if err == nil && rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, net.ErrClosed) {
		err = rerr
	}
	if ctx.Err() != nil {
		err = nil
	}
	logDisconnect(dev, modem, ec, fns, err)
	return err
}

// newSession makes the session state for a client on conn.
func newSession(dev *ServerDevice, conn *net.UnixConn) *session {
	s := &session{
		dev:     dev,
		w:       protocol.NewConn(conn),
		cfg:     newConfigSpace(dev.PCI),
		mem:     &dmaTable{faults: &dev.faults},
		irqs:    newIRQTable(dev.PCI.Vectors, &dev.raised, &dev.lost, &dev.held),
		pending: map[uint16]chan protocol.Message{},
		dead:    make(chan struct{}),
	}
	s.w.Greedy = true // several messages per recvmsg (see protocol.Conn)
	s.mem.fallback = s.dmaMessage
	s.cfg.pm = &dev.pm
	return s
}

// run reads the client's messages on a reader goroutine and handles them
// in order until the stream ends. After the first handling error it closes
// conn and only drains (and closes the descriptors of) what was queued.
// It returns the handling error (or the reader's inline error) and the
// reader's error.
func (s *session) run(conn *net.UnixConn) (herr, rerr error) {
	cmds := make(chan inbound, 16)
	go func() {
		defer close(cmds)
		rerr = s.readLoop(cmds)
	}()
	for in := range cmds {
		if herr != nil {
			protocol.CloseFDs(in.fds)
			s.queued.Add(-1)
			continue
		}
		if err := s.handle(in); err != nil {
			herr = err
			_ = conn.Close()
		}
		s.queued.Add(-1)
	}
	if herr == nil {
		herr = s.inlineErr
	}
	return herr, rerr
}

// logDisconnect logs the end of a session (err is its reason, nil for a
// clean end) with the modem's, the IP data pairs' and the control
// functions' counters.
func logDisconnect(dev *ServerDevice, modem *ep.Device, ec ep.Config, fns *mock.Functions, err error) {
	reason := "eof"
	if err != nil {
		reason = err.Error()
	}
	ms := modem.Stats()
	dev.log.Info("disconnect", "reason", reason, "ul_transfers", ms.ULTransfers, "dl_transfers", ms.DLTransfers,
		"interrupts", ms.InterruptsRaised, "interrupts_dropped", ms.InterruptsDropped, "resets", ms.Resets,
		"m3_entries", ms.M3Entries, "m3_exits", ms.M3Exits)
	for name, f := range ec.Functions {
		if ipd, ok := f.(interface{ Stats() ipdata.Stats }); ok {
			st := ipd.Stats()
			dev.log.Info("ip_data", "pair", name, "ul_packets", st.ULPackets, "gen_packets", st.GenPackets,
				"dl_packets", st.DLPackets, "dl_aggregates", st.DLAggregates, "answered", st.Answered,
				"dropped", st.Dropped(), "dropped_gated", st.DroppedGated, "dropped_not_answered", st.DroppedNotAnswered,
				"dropped_aborted", st.DroppedAborted, "dropped_sunk", st.DroppedSunk, "dropped_too_large", st.DroppedTooLarge,
				"dropped_empty", st.DroppedEmpty, "dropped_reset", st.DroppedReset, "dropped_shaped", st.DroppedShaped,
				"dropped_overrun", st.DroppedOverrun, "malformed", st.DeaggErrors(),
				"ul_csum_computed", st.ULCsumComputed, "ul_csum_bad", st.ULCsumBad)
		}
	}
	if fns != nil && fns.Modem != nil {
		ms := fns.Stats()
		dev.log.Info("control", "connects", ms.Connects, "disconnects", ms.Disconnects, "connect_failures", ms.ConnectFailures,
			"mbim_messages_in", ms.MBIMMessagesIn, "mbim_messages_out", ms.MBIMMessagesOut,
			"mbim_function_errors", ms.MBIMFunctionErrors, "mbim_not_supported", ms.MBIMNotSupported)
	}
}

var (
	_ ep.HostMemory  = (*dmaTable)(nil)
	_ ep.Interrupter = (*irqTable)(nil)
)

type inbound struct {
	msg protocol.Message
	err error
	fds []int
}

type session struct {
	dev   *ServerDevice
	w     *protocol.Conn
	cfg   *configSpace
	msix  msixTable
	mem   *dmaTable
	irqs  *irqTable
	modem *ep.Device
	// obs is told of the session's DMA maps and unmaps (the modem's
	// ep.Config.Observer; nil: nobody).
	obs ep.Observer

	nextID  atomic.Uint32
	pmu     sync.Mutex
	pending map[uint16]chan protocol.Message
	dead    chan struct{}

	// queued counts the commands handed to the handler goroutine and not
	// yet answered; dmaWaits the DMA_READ/DMA_WRITE the session is waiting
	// for. While both are 0 and every DMA mapping has an fd, the read loop
	// answers commands itself (see inline).
	queued, dmaWaits atomic.Int64
	// inlineErr is why the read loop ended the session after a reply it
	// answered itself could not be sent.
	inlineErr error
	// rdata is the read loop's scratch for REGION_READ data.
	rdata []byte
}

// inline reports whether the read loop may answer the next command itself
// instead of handing it to the handler goroutine: no command is waiting
// there (answers stay in order), and no access of the modem can wait for a
// DMA_READ/DMA_WRITE reply, which only the read loop can receive (every
// mapping has an fd and none is outstanding).
func (s *session) inline() bool {
	return s.queued.Load() == 0 && s.dmaWaits.Load() == 0 && s.mem.indirect.Load() == 0
}

// readLoop reads messages, hands replies to their waiters and answers
// commands, itself when it may (inline) or through the handler; it returns
// when the stream ends or loses its framing.
func (s *session) readLoop(cmds chan<- inbound) error {
	for {
		h, hdr, payload, fds, err := s.w.Next()
		if err != nil {
			if errors.Is(err, protocol.ErrFraming) || errors.Is(err, io.ErrUnexpectedEOF) {
				s.dev.malformed.Add(1)
			}
			return err
		}
		s.dev.messages.Add(1)
		if !h.IsReply() && s.inline() {
			if err := s.serveInline(h, hdr, payload, fds); err != nil {
				s.inlineErr = err
				_ = s.w.Close()
				return err
			}
			continue
		}
		// hdr, payload and fds belong to the wire until the next read;
		// what goes to another goroutine gets copies.
		fds = slices.Clone(fds)
		msg, err := protocol.DecodeMessage(hdr, append([]byte{}, payload...), len(fds))
		if err == nil && msg.Header.IsReply() {
			protocol.CloseFDs(fds)
			s.pmu.Lock()
			ch := s.pending[msg.Header.ID]
			delete(s.pending, msg.Header.ID)
			s.pmu.Unlock()
			if ch == nil {
				s.dev.malformed.Add(1)
				s.dev.log.Warn("error", "err", "unexpected reply", "cmd", msg.Header.Cmd.String(), "id", msg.Header.ID)
				continue
			}
			ch <- msg
			continue
		}
		s.queued.Add(1)
		cmds <- inbound{msg: msg, err: err, fds: fds}
	}
}

// serveInline answers a command in the read loop. REGION_READ and
// REGION_WRITE without descriptors, the messages of the data path, take a
// path that allocates nothing; the rest go through handle. payload and fds
// are the wire's, used before the next read.
func (s *session) serveInline(h protocol.Header, hdr, payload []byte, fds []int) error {
	if (h.Cmd != protocol.CmdRegionRead && h.Cmd != protocol.CmdRegionWrite) || len(fds) != 0 || h.Flags&protocol.FlagError != 0 {
		msg, err := protocol.DecodeMessage(hdr, payload, len(fds))
		return s.handle(inbound{msg: msg, err: err, fds: fds})
	}
	a, err := protocol.DecodeRegionAccess(h, payload)
	if err != nil {
		return s.replyError(h, err)
	}
	var data []byte
	if h.Cmd == protocol.CmdRegionRead {
		if cap(s.rdata) < int(a.Count) {
			s.rdata = make([]byte, a.Count)
		}
		data = s.rdata[:a.Count]
		err = s.regionRead(a, data)
	} else {
		err = s.regionWrite(a)
	}
	if err != nil {
		return s.replyError(h, err)
	}
	if h.Flags&protocol.FlagNoReply != 0 {
		return nil
	}
	b := s.w.Begin()
	b = protocol.AppendRegionAccess(b, h.ID, h.Cmd, protocol.FlagReply, a.Offset, a.Region, a.Count, data)
	return s.w.Flush(b, nil)
}

// dmaMessage performs a DMA access on a region mapped without fd by asking
// the client (DMA_READ/DMA_WRITE) and waiting for its reply.
func (s *session) dmaMessage(write bool, iova uint64, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), protocol.MaxDataXfer)
		id := uint16(s.nextID.Add(1))
		ch := make(chan protocol.Message, 1)
		s.dev.dmaMsgs.Add(1)
		s.dmaWaits.Add(1)
		s.pmu.Lock()
		s.pending[id] = ch
		s.pmu.Unlock()
		var msg []byte
		if write {
			msg = protocol.EncodeMessage(id, protocol.CmdDMAWrite, 0, 0, protocol.DMAAccess{Address: iova, Count: uint64(n), Data: p[:n]})
		} else {
			msg = protocol.EncodeMessage(id, protocol.CmdDMARead, 0, 0, protocol.DMAAccess{Address: iova, Count: uint64(n)})
		}
		err := s.w.WriteMessage(msg, nil)
		var r protocol.Message
		if err == nil {
			select {
			case r = <-ch:
			case <-s.dead:
				err = protocol.ErrClosed
			case <-time.After(dmaTimeout):
				err = protocol.ErrTimeout
			}
		}
		s.dmaWaits.Add(-1)
		if err != nil {
			s.pmu.Lock()
			delete(s.pending, id)
			s.pmu.Unlock()
			return fmt.Errorf("vfiouser: DMA at 0x%x: %w", iova, err)
		}
		if r.Header.Flags&protocol.FlagError != 0 {
			return fmt.Errorf("vfiouser: DMA at 0x%x: errno %d: %w", iova, r.Header.Error, protocol.ErrRemote)
		}
		if !write {
			a, ok := r.Body.(protocol.DMAAccess)
			if !ok || len(a.Data) != n {
				return fmt.Errorf("vfiouser: DMA_READ reply at 0x%x: %w", iova, protocol.ErrMalformed)
			}
			copy(p, a.Data)
		}
		p, iova = p[n:], iova+uint64(n)
	}
	return nil
}

// errnoError is a handler failure answered with an errno.
type errnoError struct {
	errno unix.Errno
	err   error
}

// Error returns the failure's message.
func (e *errnoError) Error() string { return e.err.Error() }

// Unwrap returns the failure.
func (e *errnoError) Unwrap() error { return e.err }

func fail(errno unix.Errno, format string, args ...any) error {
	return &errnoError{errno: errno, err: fmt.Errorf(format, args...)}
}

// handle answers one command. It returns an error only when the connection
// must end (the reply could not be sent).
func (s *session) handle(in inbound) error {
	h := in.msg.Header
	var body any
	err := in.err
	if err == nil {
		body, err = s.dispatch(in.msg, in.fds)
	} else {
		protocol.CloseFDs(in.fds)
	}
	if err != nil {
		return s.replyError(h, err)
	}
	if h.Flags&protocol.FlagNoReply != 0 {
		return nil
	}
	return s.w.WriteMessage(protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply, 0, body), nil)
}

// replyError counts and logs a failed command and answers it with an error
// reply carrying the errno that fits err. It returns an error only when the
// reply could not be sent.
func (s *session) replyError(h protocol.Header, err error) error {
	errno := unix.EINVAL
	var ee *errnoError
	var en unix.Errno
	switch {
	case errors.As(err, &ee):
		errno = ee.errno
	case errors.As(err, &en):
		errno = en
	case errors.Is(err, protocol.ErrUnknownCommand):
		errno = unix.ENOSYS
	case errors.Is(err, errDMA):
		errno = unix.EFAULT
	}
	if errors.Is(err, protocol.ErrMalformed) || errors.Is(err, protocol.ErrUnexpectedFDs) || errors.Is(err, protocol.ErrUnknownCommand) {
		s.dev.malformed.Add(1)
	}
	s.dev.log.Warn("error", "cmd", h.Cmd.String(), "id", h.ID, "err", err.Error())
	if h.Flags&protocol.FlagNoReply != 0 || h.IsReply() {
		return nil
	}
	s.dev.errReplies.Add(1)
	return s.w.WriteMessage(protocol.EncodeMessage(h.ID, h.Cmd, protocol.FlagReply|protocol.FlagError, uint32(errno), nil), nil)
}

// dispatch carries out a decoded command and returns the reply body. It
// owns fds.
func (s *session) dispatch(m protocol.Message, fds []int) (any, error) {
	log := s.dev.log
	switch b := m.Body.(type) {
	case protocol.Version:
		log.Info("version", "major", b.Major, "minor", b.Minor, "capabilities", b.Capabilities)
		if b.Major != 0 {
			return nil, fail(unix.ENOTSUP, "vfiouser: client version %d.%d", b.Major, b.Minor)
		}
		return protocol.Version{Major: 0, Minor: 0, Capabilities: protocol.ServerCapabilities}, nil
	case protocol.DMAMap:
		return nil, s.dmaMap(b, fds)
	case protocol.DMAUnmap:
		n := s.mem.remove(b.IOVA, b.Size, b.Flags&protocol.DMAUnmapAll != 0)
		log.Info("dma_unmap", "iova", b.IOVA, "size", b.Size, "flags", b.Flags, "regions", n)
		if s.obs != nil {
			s.obs.Observe(ep.Observation{Kind: ep.ObserveDMAUnmap, Value: b.Size, Flags: b.Flags})
		}
		return protocol.DMAUnmap{Argsz: 24, Flags: b.Flags, IOVA: b.IOVA, Size: b.Size}, nil
	case protocol.DeviceInfo:
		return protocol.DeviceInfo{Argsz: 16, Flags: protocol.DeviceFlagPCI | protocol.DeviceFlagReset, NumRegions: protocol.NumRegions, NumIRQs: protocol.NumIRQs}, nil
	case protocol.RegionInfo:
		ri, err := s.regionInfo(b.Index)
		if err != nil {
			return nil, err
		}
		return ri, nil
	case protocol.IRQInfo:
		ii, err := s.irqInfo(b.Index)
		if err != nil {
			return nil, err
		}
		return ii, nil
	case protocol.SetIRQs:
		return nil, s.setIRQs(b, fds)
	case protocol.RegionAccess:
		protocol.CloseFDs(fds)
		if m.Header.Cmd == protocol.CmdRegionRead {
			data := make([]byte, b.Count)
			if err := s.regionRead(b, data); err != nil {
				return nil, err
			}
			b.Data = data
			return b, nil
		}
		if err := s.regionWrite(b); err != nil {
			return nil, err
		}
		b.Data = nil
		return b, nil
	case protocol.DMAAccess:
		protocol.CloseFDs(fds)
		return nil, fail(unix.EINVAL, "vfiouser: %s is a server-to-client command", m.Header.Cmd)
	case nil:
		protocol.CloseFDs(fds)
		if m.Header.Cmd == protocol.CmdDeviceReset {
			log.Info("reset")
			s.dev.resets.Add(1)
			s.modem.Reset()
			return nil, nil
		}
	}
	protocol.CloseFDs(fds)
	return nil, fail(unix.EINVAL, "vfiouser: unexpected %s", m.Header.Cmd)
}

// dmaMap carries out DMA_MAP: it adds the region (backed by its descriptor,
// if one came, which it closes; else served by DMA_READ/DMA_WRITE).
func (s *session) dmaMap(b protocol.DMAMap, fds []int) error {
	fd := -1
	if len(fds) == 1 {
		fd = fds[0]
		defer unix.Close(fd)
	}
	if err := s.mem.add(b, fd); err != nil {
		return err
	}
	s.dev.maps.Add(1)
	s.dev.log.Info("dma_map", "iova", b.IOVA, "size", b.Size, "offset", b.Offset, "flags", b.Flags, "fd", fd >= 0)
	if s.obs != nil {
		s.obs.Observe(ep.Observation{Kind: ep.ObserveDMAMap, Value: b.Size, Flags: b.Flags})
	}
	return nil
}

// regionInfo answers DEVICE_GET_REGION_INFO for region index: BAR0, config
// space and the MSI-X BAR are read-write; the other regions below
// NumRegions are empty.
func (s *session) regionInfo(index uint32) (protocol.RegionInfo, error) {
	ri := protocol.RegionInfo{Argsz: 32, Index: index}
	switch index {
	case protocol.RegionBAR0:
		ri.Flags, ri.Size = protocol.RegionFlagRead|protocol.RegionFlagWrite, s.dev.PCI.BARSize
	case protocol.RegionConfig:
		ri.Flags, ri.Size = protocol.RegionFlagRead|protocol.RegionFlagWrite, protocol.ConfigSize
	case protocol.RegionBAR2:
		ri.Flags, ri.Size = protocol.RegionFlagRead|protocol.RegionFlagWrite, msixBARSize
	default:
		if index >= protocol.NumRegions {
			return protocol.RegionInfo{}, fail(unix.EINVAL, "vfiouser: region %d", index)
		}
	}
	return ri, nil
}

// irqInfo answers DEVICE_GET_IRQ_INFO for IRQ index: MSI and MSI-X have
// the device's vectors, the other known indexes none.
func (s *session) irqInfo(index uint32) (protocol.IRQInfo, error) {
	ii := protocol.IRQInfo{Argsz: 16, Index: index}
	switch index {
	case protocol.IRQMSI, protocol.IRQMSIX:
		ii.Flags, ii.Count = protocol.IRQInfoEventfd|protocol.IRQInfoMaskable|protocol.IRQInfoNoResize, uint32(s.dev.PCI.Vectors)
	case protocol.IRQINTx, protocol.IRQErr, protocol.IRQReq:
		ii.Flags = protocol.IRQInfoEventfd
	default:
		return protocol.IRQInfo{}, fail(unix.EINVAL, "vfiouser: IRQ index %d", index)
	}
	return ii, nil
}

// setIRQs carries out DEVICE_SET_IRQS as the vfio-user specification
// (and VFIO's SET_IRQS, which it follows) defines it for MSI and MSI-X:
//
//   - DATA_EVENTFD|ACTION_TRIGGER with count descriptors sets the
//     vectors' eventfds, with none de-assigns them (QEMU splits a request
//     into runs of valid and invalid descriptors and sends an invalid run,
//     such as the "MSI-X enabled, no vector yet" request, without
//     descriptors); either enables the index;
//   - DATA_NONE|ACTION_TRIGGER with count 0 disables the index;
//   - DATA_NONE or DATA_BOOL with ACTION_TRIGGER raises the (selected)
//     vectors, with ACTION_MASK or ACTION_UNMASK masks or unmasks them (a
//     vector raised while masked is delivered on unmask).
//
// DATA_EVENTFD with ACTION_MASK or ACTION_UNMASK (an eventfd to signal
// when the client masks a vector) is refused. INTx is accepted and
// ignored (the function has no pin); ERR and REQ have no vectors.
func (s *session) setIRQs(b protocol.SetIRQs, fds []int) error {
	data, action := b.DataType(), b.Action()
	s.dev.log.Info("irq_setup", "index", b.Index, "kind", irqKind(int(b.Index)), "data", irqDataName(data), "action", irqActionName(action),
		"start", b.Start, "count", b.Count, "fds", len(fds))
	switch b.Index {
	case protocol.IRQINTx:
		protocol.CloseFDs(fds) // no INTx pin; accepted and ignored
		return nil
	case protocol.IRQMSI, protocol.IRQMSIX:
	default:
		protocol.CloseFDs(fds)
		if b.Count == 0 {
			return nil
		}
		return fail(unix.EINVAL, "vfiouser: IRQ index %d has no vectors", b.Index)
	}
	index, start, count := int(b.Index), int(b.Start), int(b.Count)
	if err := s.irqs.checkRange(index, start, count); err != nil {
		protocol.CloseFDs(fds)
		return fail(unix.EINVAL, "%w", err)
	}
	var err error
	switch {
	case data == protocol.IRQDataEventfd && action == protocol.IRQActionTrig:
		err = s.irqs.arm(index, start, count, fds)
	case data == protocol.IRQDataEventfd:
		protocol.CloseFDs(fds)
		return fail(unix.EINVAL, "vfiouser: %s: an eventfd for %s is not supported", irqKind(index), irqActionName(action))
	case count == 0 && data == protocol.IRQDataNone && action == protocol.IRQActionTrig:
		if s.irqs.disable(index) {
			s.dev.log.Info("irq_disable", "kind", irqKind(index))
		}
		return nil
	case count == 0:
		return nil
	case action == protocol.IRQActionTrig:
		err = s.irqs.trigger(index, start, count, b.Data)
	default:
		err = s.irqs.mask(index, start, count, b.Data, action == protocol.IRQActionMask)
	}
	if errors.Is(err, errIRQState) {
		return fail(unix.EINVAL, "%w", err)
	}
	return err
}

func irqDataName(data uint32) string {
	switch data {
	case protocol.IRQDataNone:
		return "none"
	case protocol.IRQDataBool:
		return "bool"
	case protocol.IRQDataEventfd:
		return "eventfd"
	}
	return fmt.Sprintf("0x%x", data)
}

func irqActionName(action uint32) string {
	switch action {
	case protocol.IRQActionMask:
		return "mask"
	case protocol.IRQActionUnmsk:
		return "unmask"
	case protocol.IRQActionTrig:
		return "trigger"
	}
	return fmt.Sprintf("0x%x", action)
}

func (s *session) regionBounds(a protocol.RegionAccess) (uint64, error) {
	var size uint64
	switch a.Region {
	case protocol.RegionBAR0:
		size = s.dev.PCI.BARSize
	case protocol.RegionConfig:
		size = protocol.ConfigSize
	case protocol.RegionBAR2:
		size = msixBARSize
	default:
		return 0, fail(unix.EINVAL, "vfiouser: region %d is not implemented", a.Region)
	}
	if a.Offset > size || uint64(a.Count) > size-a.Offset {
		return 0, fail(unix.EINVAL, "vfiouser: %d bytes at 0x%x outside region %d of 0x%x", a.Count, a.Offset, a.Region, size)
	}
	return size, nil
}

// regionRead reads a.Count bytes of a's region at a.Offset into data
// (len(data) == a.Count).
func (s *session) regionRead(a protocol.RegionAccess, data []byte) error {
	if _, err := s.regionBounds(a); err != nil {
		return err
	}
	switch a.Region {
	case protocol.RegionConfig:
		s.cfg.read(int(a.Offset), data)
		return nil
	case protocol.RegionBAR2:
		s.msix.read(int(a.Offset), data, s.irqs.pendingBits())
		return nil
	}
	if s.cfg.inD3() { // D3hot: BAR0 answers all ones (pmcap.go)
		for i := range data {
			data[i] = 0xff
		}
		return nil
	}
	md := s.modem
	// BAR0: whole aligned words; a narrower read takes its bytes from the
	// word that holds them.
	for i := 0; i < len(data); {
		off := a.Offset + uint64(i)
		word := off &^ 3
		var w [4]byte
		v := md.ReadRegister(uint32(word))
		if hook := s.dev.opts.OnRegister; hook != nil {
			hook(RegisterAccess{Offset: uint32(word), Value: v})
		}
		binary.LittleEndian.PutUint32(w[:], v)
		i += copy(data[i:], w[off-word:])
	}
	return nil
}

func (s *session) regionWrite(a protocol.RegionAccess) error {
	if _, err := s.regionBounds(a); err != nil {
		return err
	}
	switch a.Region {
	case protocol.RegionConfig:
		s.cfg.write(int(a.Offset), a.Data)
		return nil
	case protocol.RegionBAR2:
		s.msix.write(int(a.Offset), a.Data)
		return nil
	}
	if a.Offset%4 != 0 || a.Count%4 != 0 {
		return fail(unix.EINVAL, "vfiouser: BAR0 write of %d bytes at 0x%x: registers take aligned 32-bit writes", a.Count, a.Offset)
	}
	if s.cfg.inD3() { // D3hot: BAR0 writes are dropped (pmcap.go)
		return nil
	}
	md := s.modem
	for i := 0; i < len(a.Data); i += 4 {
		off, v := uint32(a.Offset)+uint32(i), binary.LittleEndian.Uint32(a.Data[i:])
		if hook := s.dev.opts.OnRegister; hook != nil {
			hook(RegisterAccess{Write: true, Offset: off, Value: v})
		}
		md.WriteRegister(off, v)
	}
	return nil
}
