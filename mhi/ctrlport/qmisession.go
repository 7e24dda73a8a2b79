package ctrlport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/gomhi/gomhi/mhi/proto/qmi"
)

// QMISession is a SessionClient over QMI (CTL client ids, WDS
// START_NETWORK, GET_CURRENT_SETTINGS, STOP_NETWORK), for models whose
// control channel is QMI only. A dual-stack session is two calls, one WDS
// client per IP family, as QMI modems want. It shares its transport (a
// Port's Pair) with qmicli and qmi-proxy: its CTL transaction ids are
// high (QMICTLFirstTID…254) where libqmi counts from 1, and its service
// messages go to client ids it allocated itself.
type QMISession struct {
	t      MessageTransport
	cancel func()
	notify atomic.Pointer[func()]
	tids   *qmiTIDs
	// number is the session number; bind, when set, the Bind Mux Data
	// Port request each of its WDS clients sends before START_NETWORK.
	number uint8
	bind   *QMIMuxBinding

	mu        sync.Mutex
	waiters   map[qmiWaitKey]chan qmiReply
	calls     []qmiCall
	cids      map[uint8]bool // WDS client ids this session holds (calls and calls being made)
	stray     uint64
	malformed uint64
}

// qmiReply is what a transaction receives: the response frame, or why the
// response with its key could not be read.
type qmiReply struct {
	raw []byte
	err error
}

// failPending fails every request in flight with err: the device
// crashed or went away, no response will come.
func (s *QMISession) failPending(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, w := range s.waiters {
		select {
		case w <- qmiReply{err: err}:
		default:
		}
		delete(s.waiters, k)
	}
}

// qmiTIDs are the transaction ids the sessions of one port share, so
// that two sessions never wait for the same CTL transaction id.
type qmiTIDs struct {
	mu     sync.Mutex
	ctlTID uint8
	svcTID uint16
}

// next returns the next transaction id for svc.
func (t *qmiTIDs) next(svc qmi.Service) uint16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if svc == qmi.CTL {
		tid := uint16(t.ctlTID)
		if t.ctlTID++; t.ctlTID == 255 {
			t.ctlTID = QMICTLFirstTID
		}
		return tid
	}
	tid := t.svcTID
	if t.svcTID++; t.svcTID == 0 {
		t.svcTID = 1
	}
	return tid
}

// QMIMuxBinding is what a session N > 0 binds its WDS clients to with
// WDS BIND_MUX_DATA_PORT (0x00A2): the data endpoint (TLV 0x10: type,
// interface number) and the mux id (TLV 0x11) its packets carry on the
// QMAP link.
type QMIMuxBinding struct {
	EndpointType  uint32
	EndpointIface uint32
	MuxID         uint8
}

// The data endpoint an MHI modem's IP_HW0 channel is: endpoint type PCIe
// (libqmi's QMI_DATA_ENDPOINT_TYPE_PCIE, 3) and interface number 4, the
// number ModemManager (from 1.22) and oFono bind PCIe modems to.
const (
	QMIEndpointPCIe      uint32 = 3
	QMIEndpointIfacePCIe uint32 = 4
)

// MuxBinding is the binding of session n whose mux ids start at base:
// the PCIe endpoint and mux id base + n.
func MuxBinding(base, n uint8) *QMIMuxBinding {
	return &QMIMuxBinding{EndpointType: QMIEndpointPCIe, EndpointIface: QMIEndpointIfacePCIe, MuxID: base + n}
}

// QMICTLFirstTID is the first CTL transaction id a QMISession uses.
const QMICTLFirstTID = 200

type qmiWaitKey struct {
	svc qmi.Service
	cid uint8
	tid uint16
}

// qmiCall is one WDS call: the client that started it and its handle.
type qmiCall struct {
	cid    uint8
	handle uint32
	family uint8 // 4 or 6
}

// QMI WDS values used by the session (libqmi's numbering).
const (
	qmiWDSFamily4         = 4
	qmiWDSFamily6         = 6
	qmiWDSConnected       = 2
	qmiWDSGlobalHandle    = 0xFFFFFFFF
	qmiWDSSettingsRequest = 1<<2 | 1<<3 | 1<<4 | 1<<8 | 1<<9 | 1<<13 | 1<<15 // PDP type, APN, DNS, IP, gateway, MTU, family
)

// QMIError is a failed QMI result; it matches ErrQMIStatus.
type QMIError struct {
	Op   string // e.g. "WDS START_NETWORK"
	Code qmi.ErrorCode
	// CallEndReason is START_NETWORK's call-end reason (TLV 0x10), 0 if
	// absent.
	CallEndReason uint16
}

// ErrQMIStatus: a QMI response with a failed result.
var ErrQMIStatus = errors.New("ctrlport: QMI status")

// Error names the operation and the code.
func (e *QMIError) Error() string {
	s := fmt.Sprintf("%v: %s: %s", ErrQMIStatus, e.Op, e.Code)
	if e.CallEndReason != 0 {
		s += fmt.Sprintf(" (call end reason %d)", e.CallEndReason)
	}
	return s
}

// Unwrap returns ErrQMIStatus.
func (e *QMIError) Unwrap() error { return ErrQMIStatus }

// NewQMISession starts a QMI session client on t.
func NewQMISession(t MessageTransport) *QMISession {
	return newQMISession(t, &qmiTIDs{ctlTID: QMICTLFirstTID, svcTID: 1}, 0, nil)
}

func newQMISession(t MessageTransport, tids *qmiTIDs, n uint8, bind *QMIMuxBinding) *QMISession {
	s := &QMISession{t: t, tids: tids, number: n, bind: bind, waiters: map[qmiWaitKey]chan qmiReply{}, cids: map[uint8]bool{}}
	cancel := t.Subscribe(s.receive)
	s.cancel = cancel
	if dn, ok := t.(downNotifier); ok {
		cancelDown := dn.OnDown(s.failPending)
		s.cancel = func() { cancel(); cancelDown() }
	}
	return s
}

// Sibling returns a session client for session n on the same transport,
// sharing this one's transaction ids. With bind set, each of its WDS
// clients is bound to bind's endpoint and mux id (WDS BIND_MUX_DATA_PORT)
// before it starts a call; without, its calls are unbound, carried on
// the endpoint's default mux id (session 0's).
func (s *QMISession) Sibling(n uint8, bind *QMIMuxBinding) *QMISession {
	return newQMISession(s.t, s.tids, n, bind)
}

// Number returns the session number.
func (s *QMISession) Number() uint8 { return s.number }

// Protocol returns "qmi".
func (s *QMISession) Protocol() string { return "qmi" }

// Notify implements SessionClient.
func (s *QMISession) Notify(f func()) { s.notify.Store(&f) }

// Close stops listening.
func (s *QMISession) Close() { s.cancel() }

// Stray returns the number of received frames no transaction waited for
// (other clients' answers on a shared port, unreadable frames).
func (s *QMISession) Stray() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stray
}

// QMISessionStats are a QMISession's counters of what the modem sent.
type QMISessionStats struct {
	// Stray counts frames no transaction waited for (other clients'
	// answers on a shared port, late or mismatched answers) and
	// unreadable frames.
	Stray uint64 `json:"stray"`
	// Malformed counts responses that named a waiting transaction but
	// whose TLVs do not parse; the transaction fails with the reason.
	Malformed uint64 `json:"malformed"`
}

// Stats returns the session client's counters.
func (s *QMISession) Stats() QMISessionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return QMISessionStats{Stray: s.stray, Malformed: s.malformed}
}

// receive takes one downlink transfer: one or more QMUX frames.
func (s *QMISession) receive(msg []byte) {
	for len(msg) > 0 {
		n, err := qmi.FrameLen(msg)
		if err != nil || n > len(msg) {
			s.mu.Lock()
			s.stray++
			s.mu.Unlock()
			return
		}
		s.frame(msg[:n])
		msg = msg[n:]
	}
}

func (s *QMISession) frame(b []byte) {
	f, err := qmi.ParseFrame(b)
	if err != nil && !(errors.Is(err, qmi.ErrTLVLength) || errors.Is(err, qmi.ErrTLVOverrun)) {
		s.mu.Lock()
		s.stray++
		s.mu.Unlock()
		return
	}
	switch f.Type() {
	case qmi.Response:
		// A response whose TLVs do not parse still names its transaction
		// (ParseFrame fills the header): it fails at once, not by timeout.
		cid := f.Client
		if f.Service == qmi.CTL {
			cid = 0
		}
		k := qmiWaitKey{f.Service, cid, f.TID}
		s.mu.Lock()
		w, ok := s.waiters[k]
		if ok {
			delete(s.waiters, k)
			if err != nil {
				s.malformed++
			}
		} else {
			s.stray++
		}
		s.mu.Unlock()
		if ok {
			w <- qmiReply{raw: append([]byte(nil), b...), err: err}
		}
	default:
		if err != nil {
			s.mu.Lock()
			s.stray++
			s.mu.Unlock()
			return
		}
		s.indication(f)
	}
}

// indication handles an indication: a WDS packet service status that
// says a call of this session (or of every client) is not connected
// tells the Session to ask.
func (s *QMISession) indication(f qmi.Frame) {
	switch f.Type() {
	case qmi.Indication:
		if f.Service != qmi.WDS || f.Message != qmi.WDSGetPacketServiceStatus {
			return
		}
		v, ok := f.TLVs.Find(0x01)
		if !ok || len(v) < 1 || v[0] == qmiWDSConnected {
			return
		}
		s.mu.Lock()
		ours := f.Client == qmi.BroadcastClient || s.cids[f.Client]
		s.mu.Unlock()
		if f := s.notify.Load(); ours && f != nil {
			(*f)()
		}
	}
}

// transact sends one request and waits for its response; a failed result
// is a *QMIError.
func (s *QMISession) transact(ctx context.Context, svc qmi.Service, cid uint8, msg qmi.MessageID, tlvs func(b *qmi.Builder)) (qmi.Frame, error) {
	op := svc.String() + " " + svc.MessageName(msg)
	if svc == qmi.CTL {
		cid = 0
	}
	tid := s.tids.next(svc)
	s.mu.Lock()
	k := qmiWaitKey{svc, cid, tid}
	w := make(chan qmiReply, 1)
	s.waiters[k] = w
	s.mu.Unlock()
	drop := func() {
		s.mu.Lock()
		delete(s.waiters, k)
		s.mu.Unlock()
	}
	var b qmi.Builder
	b.Start(make([]byte, 0, 128), qmi.Header{QMUXFlags: qmi.QMUXFromHost, Service: svc, Client: cid, Type: qmi.Request, TID: tid, Message: msg})
	if tlvs != nil {
		tlvs(&b)
	}
	frame, err := b.Finish()
	if err != nil {
		drop()
		return qmi.Frame{}, fmt.Errorf("ctrlport: %s: %w", op, err)
	}
	if err := s.t.Send(frame); err != nil {
		drop()
		return qmi.Frame{}, fmt.Errorf("ctrlport: %s: %w", op, err)
	}
	select {
	case rep := <-w:
		if errors.Is(rep.err, ErrDeviceDown) {
			return qmi.Frame{}, fmt.Errorf("ctrlport: %s: %w", op, rep.err)
		}
		if rep.err != nil {
			return qmi.Frame{}, fmt.Errorf("ctrlport: %s: malformed response: %w", op, rep.err)
		}
		f, err := qmi.ParseFrame(rep.raw)
		if err != nil {
			return f, fmt.Errorf("ctrlport: %s: %w", op, err)
		}
		if f.Message != msg {
			return f, fmt.Errorf("ctrlport: %s: response for message %#04x", op, uint16(f.Message))
		}
		r, err := f.TLVs.Result()
		if err != nil {
			return f, fmt.Errorf("ctrlport: %s: %w", op, err)
		}
		if !r.OK() {
			e := &QMIError{Op: op, Code: r.Code}
			if v, ok := f.TLVs.Find(0x10); ok && msg == qmi.WDSStartNetwork && svc == qmi.WDS && len(v) == 2 {
				e.CallEndReason = binary.LittleEndian.Uint16(v)
			}
			return f, e
		}
		return f, nil
	case <-ctx.Done():
		drop()
		return qmi.Frame{}, fmt.Errorf("ctrlport: %s (TID %d): %w", op, tid, ctx.Err())
	}
}

func qmiCode(err error) qmi.ErrorCode {
	var qe *QMIError
	if errors.As(err, &qe) {
		return qe.Code
	}
	return qmi.ErrNone
}

// allocate asks CTL for a client id of svc.
func (s *QMISession) allocate(ctx context.Context, svc qmi.Service) (uint8, error) {
	f, err := s.transact(ctx, qmi.CTL, 0, qmi.CTLAllocateCID, func(b *qmi.Builder) { b.TLVU8(0x01, uint8(svc)) })
	if err != nil {
		return 0, err
	}
	v, ok := f.TLVs.Find(0x01)
	if !ok || len(v) != 2 || qmi.Service(v[0]) != svc {
		if len(v) > 8 {
			return 0, fmt.Errorf("ctrlport: CTL ALLOCATE_CID: %w: allocation info of %d bytes", qmi.ErrValue, len(v))
		}
		return 0, fmt.Errorf("ctrlport: CTL ALLOCATE_CID: %w: allocation info % x", qmi.ErrValue, v)
	}
	s.mu.Lock()
	taken := s.cids[v[1]]
	if !taken && v[1] != qmi.BroadcastClient {
		s.cids[v[1]] = true
	}
	s.mu.Unlock()
	if v[1] == qmi.BroadcastClient || taken {
		return 0, fmt.Errorf("ctrlport: CTL ALLOCATE_CID: %w: client id %d (broadcast, or one this session holds)", qmi.ErrValue, v[1])
	}
	return v[1], nil
}

// release gives a client id back (errors ignored: the modem may have
// released it already, e.g. after a client's CTL SYNC).
func (s *QMISession) release(ctx context.Context, svc qmi.Service, cid uint8) {
	s.mu.Lock()
	delete(s.cids, cid)
	s.mu.Unlock()
	_, _ = s.transact(ctx, qmi.CTL, 0, qmi.CTLReleaseCID, func(b *qmi.Builder) { b.TLV(0x01, []byte{uint8(svc), cid}) })
}

// v4 decodes an IPv4 address as WDS carries it: a u32 in little-endian
// byte order whose most significant byte is the first octet.
func v4(v []byte) (netip.Addr, bool) {
	if len(v) != 4 {
		return netip.Addr{}, false
	}
	u := binary.LittleEndian.Uint32(v)
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}), true
}

// settings reads GET_CURRENT_SETTINGS of a connected client into cfg.
func (s *QMISession) settings(ctx context.Context, cid uint8, family uint8, cfg *SessionConfig) error {
	f, err := s.transact(ctx, qmi.WDS, cid, qmi.WDSGetCurrentSettings, func(b *qmi.Builder) { b.TLVU32(0x10, qmiWDSSettingsRequest) })
	if err != nil {
		return err
	}
	return parseWDSSettings(f.TLVs, family, cfg)
}

// wdsSettingsError is a GET_CURRENT_SETTINGS value the host refuses.
func wdsSettingsError(format string, args ...any) error {
	return fmt.Errorf("ctrlport: WDS GET_CURRENT_SETTINGS: %w: %s", ErrBadSessionConfig, fmt.Sprintf(format, args...))
}

// wdsTLV returns TLV typ if present, checking its size (want).
func wdsTLV(t qmi.TLVs, typ uint8, want int, what string) ([]byte, bool, error) {
	v, ok := t.Find(typ)
	if !ok {
		return nil, false, nil
	}
	if len(v) != want {
		return nil, false, wdsSettingsError("%s TLV 0x%02X of %d bytes, want %d", what, typ, len(v), want)
	}
	return v, true, nil
}

// parseWDSSettings reads a GET_CURRENT_SETTINGS response's TLVs (from the
// modem: untrusted; every length is checked, a TLV of the wrong size is an
// error) for family into cfg. The values themselves are judged by
// CheckSessionConfig.
func parseWDSSettings(t qmi.TLVs, family uint8, cfg *SessionConfig) error {
	if family == qmiWDSFamily4 {
		v, ok, err := wdsTLV(t, 0x1E, 4, "IPv4 address")
		if err != nil {
			return err
		}
		if !ok {
			return wdsSettingsError("no IPv4 address (TLV 0x1E)")
		}
		addr, _ := v4(v)
		plen := 32
		if v, ok, err := wdsTLV(t, 0x21, 4, "IPv4 subnet mask"); err != nil {
			return err
		} else if ok {
			m, _ := v4(v)
			mb := m.As4()
			u := binary.BigEndian.Uint32(mb[:])
			plen = bits.LeadingZeros32(^u)
			if bits.OnesCount32(u) != plen {
				return wdsSettingsError("IPv4 subnet mask %v is not contiguous", m)
			}
		}
		cfg.IPv4 = netip.PrefixFrom(addr, plen)
		if v, ok, err := wdsTLV(t, 0x20, 4, "IPv4 gateway"); err != nil {
			return err
		} else if ok {
			cfg.Gateway4, _ = v4(v)
		}
		for _, typ := range []uint8{0x15, 0x16} {
			if v, ok, err := wdsTLV(t, typ, 4, "IPv4 DNS"); err != nil {
				return err
			} else if ok {
				d, _ := v4(v)
				cfg.DNS4 = append(cfg.DNS4, d)
			}
		}
	} else {
		v, ok, err := wdsTLV(t, 0x25, 17, "IPv6 address")
		if err != nil {
			return err
		}
		if !ok {
			return wdsSettingsError("no IPv6 address (TLV 0x25)")
		}
		if v[16] > 128 {
			return wdsSettingsError("IPv6 prefix length %d", v[16])
		}
		cfg.IPv6 = netip.PrefixFrom(netip.AddrFrom16([16]byte(v[:16])), int(v[16]))
		if g, ok, err := wdsTLV(t, 0x26, 17, "IPv6 gateway"); err != nil {
			return err
		} else if ok {
			cfg.Gateway6 = netip.AddrFrom16([16]byte(g[:16]))
		}
		for _, typ := range []uint8{0x27, 0x28} {
			if d, ok, err := wdsTLV(t, typ, 16, "IPv6 DNS"); err != nil {
				return err
			} else if ok {
				cfg.DNS6 = append(cfg.DNS6, netip.AddrFrom16([16]byte(d)))
			}
		}
	}
	if m, ok, err := wdsTLV(t, 0x29, 4, "MTU"); err != nil {
		return err
	} else if ok {
		mtu := binary.LittleEndian.Uint32(m)
		if mtu == 0 || mtu > 1<<31-1 {
			return wdsSettingsError("MTU %d", mtu)
		}
		if cfg.MTU == 0 || int(mtu) < cfg.MTU {
			cfg.MTU = int(mtu)
		}
	}
	if a := findTLV(t, 0x14); len(a) > 0 && cfg.APN == "" {
		cfg.APN = string(a)
	}
	return nil
}

func findTLV(t qmi.TLVs, typ uint8) []byte {
	v, _ := t.Find(typ)
	return v
}

// Connect starts one WDS call per IP family of the request (a client id
// each, its IP family set, START_NETWORK with the APN) and reads each
// call's settings. A modem that answers NoEffect already has the call (a
// qmicli or MBIM client started it): the client is bound to it and its
// settings are read. On a failure the calls already made are stopped.
func (s *QMISession) Connect(ctx context.Context, req SessionRequest) (SessionConfig, error) {
	if err := req.validate(); err != nil {
		return SessionConfig{}, err
	}
	s.mu.Lock()
	busy := len(s.calls) > 0
	s.mu.Unlock()
	if busy {
		return SessionConfig{}, fmt.Errorf("%w: this client's calls are up; disconnect first", ErrSessionActive)
	}
	families := map[string][]uint8{IPTypeIPv4: {qmiWDSFamily4}, IPTypeIPv6: {qmiWDSFamily6}, IPTypeIPv4v6: {qmiWDSFamily4, qmiWDSFamily6}}[req.IPType]
	cfg := SessionConfig{Protocol: "qmi", IPType: req.IPType}
	var calls []qmiCall
	fail := func(err error) (SessionConfig, error) {
		s.stop(ctx, calls)
		return SessionConfig{}, fmt.Errorf("%w: APN %q, %s: %w", ErrSessionRefused, req.APN, req.IPType, err)
	}
	for _, fam := range families {
		cid, err := s.allocate(ctx, qmi.WDS)
		if err != nil {
			return fail(err)
		}
		if err := s.bindMux(ctx, cid); err != nil {
			s.release(ctx, qmi.WDS, cid)
			return fail(err)
		}
		if _, err := s.transact(ctx, qmi.WDS, cid, qmi.WDSSetIPFamily, func(b *qmi.Builder) { b.TLVU8(0x01, fam) }); err != nil && qmiCode(err) != qmi.ErrInvalidQMICommand {
			s.release(ctx, qmi.WDS, cid)
			return fail(err)
		}
		f, err := s.transact(ctx, qmi.WDS, cid, qmi.WDSStartNetwork, func(b *qmi.Builder) {
			b.TLVString(0x14, req.APN)
			b.TLVU8(0x19, fam)
		})
		handle := uint32(qmiWDSGlobalHandle)
		switch {
		case err == nil:
			v, ok := f.TLVs.Find(0x01)
			if !ok || len(v) != 4 {
				// A call the host cannot name: stop whatever the modem
				// started (with the global handle) and refuse.
				calls = append(calls, qmiCall{cid: cid, handle: handle, family: fam})
				return fail(fmt.Errorf("ctrlport: WDS START_NETWORK succeeded without a packet data handle (TLV 0x01 of %d bytes, want 4): %w", len(v), qmi.ErrValue))
			}
			handle = binary.LittleEndian.Uint32(v)
		case qmiCode(err) == qmi.ErrNoEffect:
			// The call exists already; this client is bound to it.
		default:
			s.release(ctx, qmi.WDS, cid)
			return fail(err)
		}
		calls = append(calls, qmiCall{cid: cid, handle: handle, family: fam})
		if err := s.settings(ctx, cid, fam, &cfg); err != nil {
			return fail(err)
		}
	}
	cfg.APN = req.APN
	s.mu.Lock()
	s.calls = calls
	s.mu.Unlock()
	return cfg, nil
}

// bindMux binds WDS client cid to the session's endpoint and mux id
// (nothing for an unbound session).
func (s *QMISession) bindMux(ctx context.Context, cid uint8) error {
	b := s.bind
	if b == nil {
		return nil
	}
	_, err := s.transact(ctx, qmi.WDS, cid, qmi.WDSBindMuxDataPort, func(qb *qmi.Builder) {
		ep := binary.LittleEndian.AppendUint32(nil, b.EndpointType)
		qb.TLV(0x10, binary.LittleEndian.AppendUint32(ep, b.EndpointIface))
		qb.TLVU8(0x11, b.MuxID)
	})
	if err != nil {
		return fmt.Errorf("binding session %d to mux id %d: %w", s.number, b.MuxID, err)
	}
	return nil
}

// stop ends calls and releases their client ids. A client id the modem
// no longer knows (released by a CTL SYNC), a call already gone (NoEffect,
// OutOfCall) count as stopped.
func (s *QMISession) stop(ctx context.Context, calls []qmiCall) error {
	var errs []error
	for _, c := range calls {
		_, err := s.transact(ctx, qmi.WDS, c.cid, qmi.WDSStopNetwork, func(b *qmi.Builder) { b.TLVU32(0x01, c.handle) })
		switch qmiCode(err) {
		case qmi.ErrInvalidClientID, qmi.ErrNoEffect, qmi.ErrOutOfCall:
			err = nil
		}
		if err != nil {
			errs = append(errs, err)
		}
		s.release(ctx, qmi.WDS, c.cid)
	}
	return errors.Join(errs...)
}

// Disconnect stops this client's calls. (A QMI modem ends only the calls
// a client started; a session started over MBIM or by another QMI client
// is theirs to stop.)
func (s *QMISession) Disconnect(ctx context.Context) error {
	s.mu.Lock()
	calls := s.calls
	s.calls = nil
	s.mu.Unlock()
	return s.stop(ctx, calls)
}

// Active asks GET_PACKET_SERVICE_STATUS on the first call's client.
func (s *QMISession) Active(ctx context.Context) (bool, error) {
	s.mu.Lock()
	var c *qmiCall
	if len(s.calls) > 0 {
		c = &s.calls[0]
	}
	s.mu.Unlock()
	if c == nil {
		return false, nil
	}
	f, err := s.transact(ctx, qmi.WDS, c.cid, qmi.WDSGetPacketServiceStatus, nil)
	if qmiCode(err) == qmi.ErrInvalidClientID {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	v, ok := f.TLVs.Find(0x01)
	return ok && len(v) >= 1 && v[0] == qmiWDSConnected, nil
}
