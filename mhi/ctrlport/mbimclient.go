package ctrlport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// MessageTransport carries whole control messages: a Pair is one (and a
// Port's Pair, to share the channel with the port's clients).
type MessageTransport interface {
	Send(msg []byte) error
	Subscribe(f func(msg []byte)) (cancel func())
}

// Errors of an MBIMClient.
var (
	// ErrFunctionError: the device answered a transaction with
	// FUNCTION_ERROR; the error names its code.
	ErrFunctionError = errors.New("ctrlport: MBIM FUNCTION_ERROR")
	// ErrStatus: a COMMAND_DONE, OPEN_DONE or CLOSE_DONE with a status
	// other than Success (the typed helpers return it; Command does not).
	ErrStatus = errors.New("ctrlport: MBIM status")
	// ErrDeviceDown: the device crashed (SYS_ERR) or went away while a
	// request was in flight: no answer will come.
	ErrDeviceDown = errors.New("ctrlport: the modem crashed (SYS_ERR) or went away; the request was not answered")
)

// downNotifier is a MessageTransport that tells when the device crashed
// or went away (a Pair does), so that requests in flight fail at once.
type downNotifier interface {
	OnDown(f func(error)) (cancel func())
}

// FunctionError is a FUNCTION_ERROR answer; it matches ErrFunctionError.
type FunctionError struct {
	Code mbim.ProtocolError
	TID  uint32
}

// Error names the code and the transaction.
func (e *FunctionError) Error() string {
	return fmt.Sprintf("%v: %s (TID %d)", ErrFunctionError, e.Code, e.TID)
}

// Unwrap returns ErrFunctionError.
func (e *FunctionError) Unwrap() error { return ErrFunctionError }

// StatusError is a COMMAND_DONE whose status is not Success, from the
// typed helpers; it matches ErrStatus.
type StatusError struct {
	Op     string // e.g. "CONNECT set"
	Status mbim.Status
}

// Error names the command and the status.
func (e *StatusError) Error() string { return fmt.Sprintf("%v: %s: %s", ErrStatus, e.Op, e.Status) }

// Unwrap returns ErrStatus.
func (e *StatusError) Unwrap() error { return ErrStatus }

// DefaultFirstTID is where an MBIMClient's transaction ids start: far
// above the small ids libmbim's clients use, so that a client sharing a
// port with mbimcli or mbim-proxy never answers for them or they for it.
const DefaultFirstTID = 0x4d480000

// MBIMClientOptions configure an MBIMClient.
type MBIMClientOptions struct {
	// FirstTID is the first transaction id (default DefaultFirstTID).
	FirstTID uint32
	// MaxControlTransfer is announced in Open and bounds what Command
	// sends in one fragment (default 4096, what libmbim uses on wwan
	// ports).
	MaxControlTransfer int
	// OnIndication, when set, receives every INDICATE_STATUS (info is
	// valid only during the call; it must not block).
	OnIndication func(svc mbim.UUID, cid uint32, info mbim.Info)
}

// MBIMClient runs MBIM transactions over a MessageTransport: it sends a
// message and waits for the reply with the same transaction id,
// reassembling fragmented replies. It is safe for concurrent use.
type MBIMClient struct {
	t      MessageTransport
	opts   MBIMClientOptions
	cancel func()

	mu      sync.Mutex
	next    uint32
	waiters map[uint32]chan mbimReply
	reasm   mbim.Reassembler
	stats   MBIMClientStats
}

// mbimReply is what a transaction receives: the reply's bytes, or why the
// reply with its TID could not be read.
type mbimReply struct {
	raw []byte
	err error
}

// MBIMClientStats are an MBIMClient's counters of what the device sent.
type MBIMClientStats struct {
	// Stray counts received messages no transaction waited for (other
	// clients' replies on a shared port, late replies after a timeout,
	// replies with a wrong TID) and transfers that hold no message.
	Stray uint64 `json:"stray"`
	// BadFragments counts fragments the reassembly refused (out of
	// sequence, growing past the limit, a bad fragment header) and
	// fragmented messages given up incomplete (another started, or the
	// transaction waiting for it ended).
	BadFragments uint64 `json:"bad_fragments"`
	// Malformed counts replies whose header names a waiting transaction
	// but which do not parse; the transaction fails with the reason.
	Malformed uint64 `json:"malformed"`
	// Indications counts INDICATE_STATUS messages received.
	Indications uint64 `json:"indications"`
}

// NewMBIMClient starts listening on t.
func NewMBIMClient(t MessageTransport, opts MBIMClientOptions) *MBIMClient {
	if opts.FirstTID == 0 {
		opts.FirstTID = DefaultFirstTID
	}
	if opts.MaxControlTransfer < mbim.MinControlTransfer {
		opts.MaxControlTransfer = 4096
	}
	c := &MBIMClient{t: t, opts: opts, next: opts.FirstTID, waiters: map[uint32]chan mbimReply{}}
	cancel := t.Subscribe(c.receive)
	c.cancel = cancel
	if dn, ok := t.(downNotifier); ok {
		cancelDown := dn.OnDown(c.failPending)
		c.cancel = func() { cancel(); cancelDown() }
	}
	return c
}

// failPending fails every transaction in flight with err.
func (c *MBIMClient) failPending(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for tid, w := range c.waiters {
		select {
		case w <- mbimReply{err: err}:
		default:
		}
		delete(c.waiters, tid)
	}
}

// Close stops listening; transactions in flight fail with their context.
func (c *MBIMClient) Close() { c.cancel() }

// Stray returns the number of received messages no transaction of this
// client waited for (other clients' replies on a shared port, late
// replies after a timeout).
func (c *MBIMClient) Stray() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.Stray
}

// Stats returns the client's counters.
func (c *MBIMClient) Stats() MBIMClientStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// receive takes one downlink transfer: one message, or several back to
// back (each cut by its MessageLength, as a stream reader does).
func (c *MBIMClient) receive(msg []byte) {
	for len(msg) > 0 {
		_, n, _, err := mbim.PeekHeader(msg)
		if err != nil || n < mbim.HeaderLen || uint64(n) > uint64(len(msg)) {
			n = uint32(len(msg)) // what is left is one malformed message
		}
		c.receiveOne(msg[:n])
		msg = msg[n:]
	}
}

func (c *MBIMClient) receiveOne(msg []byte) {
	m, err := mbim.ParseMessage(msg)
	if err != nil {
		c.malformed(msg, err)
		return
	}
	c.mu.Lock()
	if m.Type.Fragmentable() {
		res, err := c.reasm.Add(m, time.Now())
		if res.Abandoned {
			c.stats.BadFragments++
		}
		if err != nil {
			c.stats.BadFragments++
			c.mu.Unlock()
			return
		}
		if res.Message == nil {
			c.mu.Unlock()
			return
		}
		if m, err = mbim.ParseMessage(res.Message); err != nil {
			c.mu.Unlock()
			c.malformed(res.Message, err)
			return
		}
	}
	if m.Type == mbim.TypeIndicateStatus {
		c.stats.Indications++
		f := c.opts.OnIndication
		c.mu.Unlock()
		if f != nil {
			f(m.Service, m.CID, m.Info)
		}
		return
	}
	w, ok := c.waiters[m.TID]
	if !ok {
		c.stats.Stray++
		c.mu.Unlock()
		return
	}
	delete(c.waiters, m.TID)
	c.mu.Unlock()
	w <- mbimReply{raw: append([]byte(nil), m.Raw...)}
}

// malformed handles a message that does not parse: if its header names a
// reply type and a waiting transaction, that transaction fails with the
// reason at once (rather than waiting for its timeout); otherwise it is
// stray.
func (c *MBIMClient) malformed(msg []byte, perr error) {
	t, _, tid, err := mbim.PeekHeader(msg)
	c.mu.Lock()
	w, ok := c.waiters[tid]
	if err != nil || !ok || t.FromHost() || t == mbim.TypeIndicateStatus {
		c.stats.Stray++
		c.mu.Unlock()
		return
	}
	delete(c.waiters, tid)
	c.stats.Malformed++
	c.mu.Unlock()
	w <- mbimReply{err: fmt.Errorf("ctrlport: MBIM %s TID %d does not parse: %w", t, tid, perr)}
}

// transact sends the message build makes for a fresh TID and returns the
// reply's bytes.
func (c *MBIMClient) transact(ctx context.Context, build func(tid uint32) []byte) (mbim.Message, error) {
	c.mu.Lock()
	tid := c.next
	c.next++
	if c.next == 0 {
		c.next = 1
	}
	w := make(chan mbimReply, 1)
	c.waiters[tid] = w
	c.mu.Unlock()
	drop := func() {
		c.mu.Lock()
		delete(c.waiters, tid)
		if ptid, pending := c.reasm.Pending(); pending && ptid == tid {
			// The reply was coming in fragments that never completed:
			// give it up, and its buffer.
			c.reasm.Reset()
			c.stats.BadFragments++
		}
		c.mu.Unlock()
	}
	msg := build(tid)
	n := 1
	if t, _, _, _ := mbim.PeekHeader(msg); t.Fragmentable() {
		n = mbim.FragmentCount(len(msg), c.opts.MaxControlTransfer)
	}
	for i := range n {
		piece := msg
		if n > 1 {
			var err error
			if piece, err = mbim.AppendFragment(nil, msg, c.opts.MaxControlTransfer, i); err != nil {
				drop()
				return mbim.Message{}, err
			}
		}
		if err := c.t.Send(piece); err != nil {
			drop()
			return mbim.Message{}, err
		}
	}
	select {
	case r := <-w:
		if r.err != nil {
			return mbim.Message{}, r.err
		}
		m, err := mbim.ParseMessage(r.raw)
		if err != nil {
			return m, err
		}
		if m.Type == mbim.TypeFunctionError {
			return m, &FunctionError{Code: m.ErrorCode(), TID: tid}
		}
		return m, nil
	case <-ctx.Done():
		drop()
		return mbim.Message{}, fmt.Errorf("ctrlport: MBIM TID %d: %w", tid, ctx.Err())
	}
}

// Open sends OPEN and waits for OPEN_DONE.
func (c *MBIMClient) Open(ctx context.Context) error {
	return c.transactDone(ctx, "OPEN", mbim.TypeOpenDone, func(tid uint32) []byte {
		return mbim.AppendOpen(nil, tid, uint32(c.opts.MaxControlTransfer))
	})
}

// CloseSession sends CLOSE and waits for CLOSE_DONE.
func (c *MBIMClient) CloseSession(ctx context.Context) error {
	return c.transactDone(ctx, "CLOSE", mbim.TypeCloseDone, func(tid uint32) []byte { return mbim.AppendClose(nil, tid) })
}

// transactDone sends the request build makes (named name in errors) and
// checks that the reply is a done of type want with status Success.
func (c *MBIMClient) transactDone(ctx context.Context, name string, want mbim.MessageType, build func(tid uint32) []byte) error {
	m, err := c.transact(ctx, build)
	if err != nil {
		return err
	}
	if m.Type != want {
		return fmt.Errorf("%w: %s in reply to %s", mbim.ErrWrongMessage, m.Type, name)
	}
	if s := m.DoneStatus(); s != mbim.StatusSuccess {
		return fmt.Errorf("%w: %s: %s", ErrStatus, name, s)
	}
	return nil
}

// Command sends a COMMAND and returns its COMMAND_DONE's status and
// InformationBuffer (a copy the caller owns). A status other than Success
// is not an error here.
func (c *MBIMClient) Command(ctx context.Context, svc mbim.UUID, cid uint32, ct mbim.CommandType, info []byte) (mbim.Status, mbim.Info, error) {
	m, err := c.transact(ctx, func(tid uint32) []byte { return mbim.AppendCommand(nil, tid, svc, cid, ct, info) })
	if err != nil {
		return 0, nil, err
	}
	if m.Type != mbim.TypeCommandDone || m.Service != svc || m.CID != cid {
		return 0, nil, fmt.Errorf("%w: %s %s/%d in reply to %s/%d", mbim.ErrWrongMessage, m.Type, m.Service.Name(), m.CID, svc.Name(), cid)
	}
	return m.Status, m.Info, nil
}

// basic runs a BASIC_CONNECT command that must succeed.
func (c *MBIMClient) basic(ctx context.Context, cid uint32, ct mbim.CommandType, info []byte) (mbim.Info, error) {
	s, out, err := c.Command(ctx, mbim.ServiceBasicConnect, cid, ct, info)
	if err != nil {
		return nil, err
	}
	if s != mbim.StatusSuccess {
		return out, &StatusError{Op: mbim.CIDName(mbim.ServiceBasicConnect, cid) + " " + ct.String(), Status: s}
	}
	return out, nil
}

// basicAs runs a BASIC_CONNECT command that must succeed and decodes its
// InformationBuffer with parse.
func basicAs[T any](ctx context.Context, c *MBIMClient, cid uint32, ct mbim.CommandType, info []byte, parse func(mbim.Info) (T, error)) (T, error) {
	in, err := c.basic(ctx, cid, ct, info)
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(in)
}

// DeviceCaps queries DEVICE_CAPS.
func (c *MBIMClient) DeviceCaps(ctx context.Context) (mbim.DeviceCaps, error) {
	return basicAs(ctx, c, mbim.CIDDeviceCaps, mbim.CommandQuery, nil, mbim.ParseDeviceCaps)
}

// RegistrationState queries REGISTER_STATE.
func (c *MBIMClient) RegistrationState(ctx context.Context) (mbim.RegistrationState, error) {
	return basicAs(ctx, c, mbim.CIDRegisterState, mbim.CommandQuery, nil, mbim.ParseRegistrationState)
}

// Attach sets PACKET_SERVICE attach and returns the state reported.
func (c *MBIMClient) Attach(ctx context.Context) (mbim.PacketService, error) {
	req := mbim.PacketServiceSet{Action: mbim.PacketServiceActionAttach}
	return basicAs(ctx, c, mbim.CIDPacketService, mbim.CommandSet, req.AppendTo(nil), mbim.ParsePacketService)
}

// SetRadio sets RADIO_STATE (the software radio switch) on or off and
// returns the state the modem answers with. A refusal is a *StatusError;
// its InformationBuffer, when it has one, is decoded all the same (an
// FCC-locked modem answers OPERATION_NOT_ALLOWED with its radio off).
func (c *MBIMClient) SetRadio(ctx context.Context, on bool) (mbim.RadioState, error) {
	req := mbim.RadioStateSet{RadioState: mbim.RadioOff}
	if on {
		req.RadioState = mbim.RadioOn
	}
	in, err := c.basic(ctx, mbim.CIDRadioState, mbim.CommandSet, req.AppendTo(nil))
	rs, perr := mbim.ParseRadioState(in)
	if err != nil {
		return rs, err
	}
	return rs, perr
}

// Connect activates session 0 with an access point name and an MBIM IP
// type (mbim.IPTypeIPv4…).
func (c *MBIMClient) Connect(ctx context.Context, apn string, ipType uint32) (mbim.ConnectInfo, error) {
	return c.ConnectSession(ctx, 0, apn, ipType)
}

// ConnectSession activates session sid (CONNECT's SessionId) with an
// access point name and an MBIM IP type.
func (c *MBIMClient) ConnectSession(ctx context.Context, sid uint32, apn string, ipType uint32) (mbim.ConnectInfo, error) {
	req := mbim.ConnectSet{SessionID: sid, ActivationCommand: mbim.ActivationCommandActivate, AccessString: apn, IPType: ipType, ContextType: mbim.ContextTypeInternet}
	return basicAs(ctx, c, mbim.CIDConnect, mbim.CommandSet, req.AppendTo(nil), mbim.ParseConnectInfo)
}

// Disconnect deactivates session 0.
func (c *MBIMClient) Disconnect(ctx context.Context) (mbim.ConnectInfo, error) {
	return c.DisconnectSession(ctx, 0)
}

// DisconnectSession deactivates session sid.
func (c *MBIMClient) DisconnectSession(ctx context.Context, sid uint32) (mbim.ConnectInfo, error) {
	req := mbim.ConnectSet{SessionID: sid, ActivationCommand: mbim.ActivationCommandDeactivate, ContextType: mbim.ContextTypeInternet}
	return basicAs(ctx, c, mbim.CIDConnect, mbim.CommandSet, req.AppendTo(nil), mbim.ParseConnectInfo)
}

// IPConfiguration queries IP_CONFIGURATION of session 0.
func (c *MBIMClient) IPConfiguration(ctx context.Context) (mbim.IPConfiguration, error) {
	return c.IPConfigurationOf(ctx, 0)
}

// IPConfigurationOf queries IP_CONFIGURATION of session sid.
func (c *MBIMClient) IPConfigurationOf(ctx context.Context, sid uint32) (mbim.IPConfiguration, error) {
	q := mbim.IPConfiguration{SessionID: sid}
	return basicAs(ctx, c, mbim.CIDIPConfiguration, mbim.CommandQuery, q.AppendTo(nil), mbim.ParseIPConfiguration)
}

// ConnectionState queries CONNECT for session 0.
func (c *MBIMClient) ConnectionState(ctx context.Context) (mbim.ConnectInfo, error) {
	return c.ConnectionStateOf(ctx, 0)
}

// ConnectionStateOf queries CONNECT for session sid.
func (c *MBIMClient) ConnectionStateOf(ctx context.Context, sid uint32) (mbim.ConnectInfo, error) {
	q := mbim.ConnectInfo{SessionID: sid}
	return basicAs(ctx, c, mbim.CIDConnect, mbim.CommandQuery, q.AppendTo(nil), mbim.ParseConnectInfo)
}
