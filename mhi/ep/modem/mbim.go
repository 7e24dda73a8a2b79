package modem

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// MBIMName is the name of the channel pair an MBIM modem answers on
// (channels 12/13 in Linux's tables).
const MBIMName = "MBIM"

// MBIM is the mock modem's MBIM control function: attach it to the "MBIM"
// channel pair. It answers OPEN/CLOSE and the BASIC_CONNECT commands that
// mbimcli and ModemManager use, from and into the shared Modem state, and
// sends INDICATE_STATUS when that state changes. Anything it does not
// implement gets a COMMAND_DONE with NoDeviceSupport; malformed messages
// get a FUNCTION_ERROR or, when they are too short to name a transaction,
// are dropped; everything is counted (MBIMStats).
type MBIM struct {
	modem *Modem
	opts  MBIMOptions
	log   *slog.Logger

	// mu guards everything below but pending, evMu and events; it is
	// held while a reply is sent (queued on the downlink channel: its mu)
	// and while the Modem is consulted or changed.
	//
	// lockorder: ep.channel.work → MBIM.mu → Modem.mu
	// lockorder: MBIM.mu → ep.channel.mu
	mu       sync.Mutex
	pipe     *ep.Pipe
	open     bool
	maxCtl   int
	reasm    mbim.Reassembler
	subs     map[mbimEvent]bool // nil: every indication
	sigIntvl uint32
	rssiThr  uint32
	errThr   uint32
	out      []byte // scratch: the reply
	info     []byte // scratch: its InformationBuffer
	frag     []byte // scratch: one fragment
	stats    MBIMStats
	unsup    map[mbimUnsupKey]uint64
	byStatus map[mbim.Status]uint64
	byError  map[mbim.ProtocolError]uint64

	pending chan struct{} // a Modem event is waiting
	// evMu guards events. onModemEvent takes it on the goroutine that
	// changed the Modem, under that function's mu (the Modem calls its
	// subscribers by function value, without its own lock); nothing is
	// taken while it is held.
	//
	// lockorder: MBIM.mu → MBIM.evMu
	// lockorder: QMI.mu → MBIM.evMu
	// lockorder: AT.mu → MBIM.evMu
	evMu   sync.Mutex
	events map[EventKind]bool
	// sessEvents has bit n set when session n changed since the last
	// indications were sent.
	sessEvents [MaxSessionLimit / 64]uint64
}

// MBIMOptions configure an MBIM function.
type MBIMOptions struct {
	// Logger receives Debug records per message and Warn records for
	// malformed ones (nil: discard).
	Logger *slog.Logger
	// PacketStatistics, when set, answers PACKET_STATISTICS (for example
	// from the IP data function's counters); without it the CID is not
	// offered.
	PacketStatistics func() mbim.PacketStatistics
	// FragmentTimeout is the longest wait between two fragments of a
	// host message (0: libmbim's 1250 ms).
	FragmentTimeout time.Duration
	// Mangle, when set, is called on every message the function sends,
	// just before it is queued: fault injection for tests that must see
	// a broken modem fail (a wrong TID, a wrong length).
	Mangle func(msg []byte)
}

type mbimEvent struct {
	svc mbim.UUID
	cid uint32
}

type mbimUnsupKey struct {
	svc mbim.UUID
	cid uint32
	ct  mbim.CommandType
}

// MBIMUnsupported is one (service, CID, command type) the function
// answered with NoDeviceSupport, and how often.
type MBIMUnsupported struct {
	Service string `json:"service"` // name or UUID
	CID     uint32 `json:"cid"`
	Command string `json:"command"` // "query" or "set"
	Count   uint64 `json:"count"`
}

// MBIMStats are an MBIM function's counters.
type MBIMStats struct {
	MessagesIn   uint64 `json:"messages_in"`  // uplink transfers received
	BytesIn      uint64 `json:"bytes_in"`     // their bytes
	MessagesOut  uint64 `json:"messages_out"` // downlink messages queued (fragments counted singly)
	BytesOut     uint64 `json:"bytes_out"`
	FragmentsIn  uint64 `json:"fragments_in"`  // host fragments of fragmented commands
	FragmentsOut uint64 `json:"fragments_out"` // reply fragments (replies above MaxControlTransfer)

	Opens          uint64 `json:"opens"`
	Closes         uint64 `json:"closes"`
	HostErrors     uint64 `json:"host_errors"`     // HOST_ERROR messages received
	Commands       uint64 `json:"commands"`        // complete COMMANDs handled while open
	CommandsOK     uint64 `json:"commands_ok"`     // answered with status Success
	CommandsFailed uint64 `json:"commands_failed"` // answered with another status
	NotSupported   uint64 `json:"not_supported"`   // of those, NoDeviceSupport
	// ByStatus counts COMMAND_DONE replies by status name.
	ByStatus map[string]uint64 `json:"by_status"`

	// FunctionErrors counts FUNCTION_ERROR replies; ByError by code name
	// (NotOpened, LengthMismatch, FragmentOutOfSequence, TimeoutFragment,
	// MaxTransfer, Unknown).
	FunctionErrors uint64            `json:"function_errors"`
	ByError        map[string]uint64 `json:"by_error"`
	// DroppedShort counts transfers too short to carry a header: no
	// transaction to answer, so they are dropped.
	DroppedShort uint64 `json:"dropped_short"`
	// DroppedReplies counts replies that could not be queued (the channel
	// was reset or the device closed while the reply waited).
	DroppedReplies uint64 `json:"dropped_replies"`

	Indications        uint64 `json:"indications"`         // INDICATE_STATUS queued
	IndicationsDropped uint64 `json:"indications_dropped"` // not queued: downlink full or stopped
	// Unsupported lists what the host asked for that the function does
	// not implement.
	Unsupported []MBIMUnsupported `json:"unsupported"`
}

// NewMBIM returns an MBIM function answering from m.
func NewMBIM(m *Modem, opts MBIMOptions) (*MBIM, error) {
	if m == nil {
		return nil, fmt.Errorf("modem: MBIM needs a Modem: %w", ErrConfig)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &MBIM{
		modem:    m,
		opts:     opts,
		log:      log.With("function", "MBIM"),
		maxCtl:   4096,
		unsup:    map[mbimUnsupKey]uint64{},
		byStatus: map[mbim.Status]uint64{},
		byError:  map[mbim.ProtocolError]uint64{},
		pending:  make(chan struct{}, 1),
		events:   map[EventKind]bool{},
	}
	f.reasm.Timeout = opts.FragmentTimeout
	f.reasm.MaxLen = mbim.DefaultMaxMessage
	return f, nil
}

// Attach implements PipeAttacher: it learns the pipe and starts sending
// indications for Modem changes until the device closes.
func (f *MBIM) Attach(p *ep.Pipe) {
	f.mu.Lock()
	if f.pipe != nil {
		f.mu.Unlock()
		f.log.Warn("MBIM function attached to a second channel pair; ignored", "pair", p.Name())
		return
	}
	f.pipe = p
	f.mu.Unlock()
	cancel := f.modem.Subscribe(f.onModemEvent)
	go func() {
		defer cancel()
		for {
			select {
			case <-p.Done():
				return
			case <-f.pending:
				f.sendIndications(p)
			}
		}
	}()
}

// onModemEvent runs in the goroutine that changed the Modem: note the
// event and wake the indication goroutine.
func (f *MBIM) onModemEvent(ev Event) {
	f.evMu.Lock()
	f.events[ev.Kind] = true
	if ev.Kind == EventSession {
		f.sessEvents[ev.Session>>6] |= 1 << (ev.Session & 63)
	}
	f.evMu.Unlock()
	select {
	case f.pending <- struct{}{}:
	default:
	}
}

// Open reports whether the host has opened the MBIM function (and not
// closed it since).
func (f *MBIM) Open() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

// SetMangle replaces MBIMOptions.Mangle on a running function (nil
// removes it): fault injection for a test that must see a broken modem
// fail, on a function built by someone else (pcigeneric/mock.NewConfig).
func (f *MBIM) SetMangle(fn func(msg []byte)) {
	f.mu.Lock()
	f.opts.Mangle = fn
	f.mu.Unlock()
}

// Stats returns the function's counters.
func (f *MBIM) Stats() MBIMStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.ByStatus = map[string]uint64{}
	for k, v := range f.byStatus {
		s.ByStatus[k.String()] = v
	}
	s.ByError = map[string]uint64{}
	for k, v := range f.byError {
		s.ByError[k.String()] = v
	}
	for k, v := range f.unsup {
		s.Unsupported = append(s.Unsupported, MBIMUnsupported{Service: k.svc.Name(), CID: k.cid, Command: k.ct.String(), Count: v})
	}
	slices.SortFunc(s.Unsupported, func(a, b MBIMUnsupported) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return int(a.CID) - int(b.CID)
	})
	return s
}

// mbimOut is where the function's messages go: the Pipe, or a recorder
// in tests.
type mbimOut interface {
	Send(ctx context.Context, data []byte) error
	TrySend(data []byte) error
}

// Receive implements Function: one uplink transfer is one MBIM message or
// fragment.
func (f *MBIM) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	return f.receive(ctx, p, transfer)
}

func (f *MBIM) receive(ctx context.Context, p mbimOut, transfer []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.MessagesIn++
	f.stats.BytesIn += uint64(len(transfer))
	now := time.Now()
	if tid, ok := f.reasm.Expire(now); ok {
		f.functionError(ctx, p, tid, mbim.ErrorTimeoutFragment)
	}
	m, err := mbim.ParseMessage(transfer)
	if err != nil {
		if len(transfer) < mbim.HeaderLen {
			f.stats.DroppedShort++
			f.log.Warn("MBIM transfer too short for a header; dropped", "len", len(transfer))
			return nil
		}
		code := mbim.ProtocolErrorFor(err)
		if m.Type.FromHost() && !f.open && m.Type != mbim.TypeOpen {
			code = mbim.ErrorNotOpened
		}
		f.log.Warn("malformed MBIM message", "type", m.Type, "tid", m.TID, "len", len(transfer), "err", err, "reply", code)
		f.functionError(ctx, p, m.TID, code)
		return nil
	}
	f.log.Debug("MBIM message", "type", m.Type, "tid", m.TID, "len", len(transfer))
	switch m.Type {
	case mbim.TypeOpen:
		f.stats.Opens++
		f.open = true
		f.maxCtl = int(min(max(m.MaxControlTransfer(), mbim.MinControlTransfer), 32768))
		f.subs = nil
		f.reasm.Reset()
		f.send(ctx, p, mbim.AppendOpenDone(f.out[:0], m.TID, mbim.StatusSuccess))
	case mbim.TypeClose:
		f.stats.Closes++
		f.open = false
		f.subs = nil
		f.reasm.Reset()
		f.send(ctx, p, mbim.AppendCloseDone(f.out[:0], m.TID, mbim.StatusSuccess))
	case mbim.TypeHostError:
		f.stats.HostErrors++
		if tid, ok := f.reasm.Pending(); ok && tid == m.TID {
			f.reasm.Reset()
		}
		f.log.Info("MBIM HOST_ERROR from the host", "tid", m.TID, "code", m.ErrorCode())
	case mbim.TypeCommand:
		if !f.open {
			f.functionError(ctx, p, m.TID, mbim.ErrorNotOpened)
			return nil
		}
		if m.Fragmented() {
			f.stats.FragmentsIn++
		}
		res, err := f.reasm.Add(m, now)
		if res.Abandoned && (err == nil || res.AbandonedTID != m.TID) {
			f.functionError(ctx, p, res.AbandonedTID, mbim.ProtocolErrorFor(res.AbandonedErr))
		}
		if err != nil {
			f.functionError(ctx, p, m.TID, mbim.ProtocolErrorFor(err))
			return nil
		}
		if res.Message == nil {
			return nil
		}
		whole, err := mbim.ParseMessage(res.Message)
		if err != nil {
			f.functionError(ctx, p, m.TID, mbim.ProtocolErrorFor(err))
			return nil
		}
		f.command(ctx, p, &whole)
	default:
		// A device-to-host type, or one no one knows.
		f.functionError(ctx, p, m.TID, mbim.ErrorUnknown)
	}
	return nil
}

func (f *MBIM) functionError(ctx context.Context, p mbimOut, tid uint32, code mbim.ProtocolError) {
	f.stats.FunctionErrors++
	f.byError[code]++
	f.send(ctx, p, mbim.AppendFunctionError(f.out[:0], tid, code))
}

// send queues msg, in fragments when it exceeds the host's
// MaxControlTransfer. Called with f.mu held.
func (f *MBIM) send(ctx context.Context, p mbimOut, msg []byte) {
	f.out = msg[:0]
	n := 1
	if t, _, _, _ := mbim.PeekHeader(msg); t.Fragmentable() {
		n = mbim.FragmentCount(len(msg), f.maxCtl)
	}
	for i := range n {
		piece := msg
		if n > 1 {
			var err error
			f.frag, err = mbim.AppendFragment(f.frag[:0], msg, f.maxCtl, i)
			if err != nil {
				f.stats.DroppedReplies++
				f.log.Error("MBIM reply fragmentation", "err", err)
				return
			}
			piece = f.frag
			f.stats.FragmentsOut++
		}
		if f.opts.Mangle != nil {
			f.opts.Mangle(piece)
		}
		if err := p.Send(ctx, piece); err != nil {
			f.stats.DroppedReplies++
			f.log.Warn("MBIM reply not queued", "err", err)
			return
		}
		f.stats.MessagesOut++
		f.stats.BytesOut += uint64(len(piece))
	}
}

// command answers one complete COMMAND. Called with f.mu held.
func (f *MBIM) command(ctx context.Context, p mbimOut, m *mbim.Message) {
	f.stats.Commands++
	status, info := mbim.StatusNoDeviceSupport, []byte(nil)
	switch {
	case m.Service == mbim.ServiceBasicConnect:
		status, info = f.basicConnect(m)
	case m.Service == mbim.ServiceQuectel && f.modem.cfg.FCCLocked:
		status, info = f.quectelRadioState(m)
	}
	if status == mbim.StatusNoDeviceSupport {
		f.stats.NotSupported++
		f.unsup[mbimUnsupKey{m.Service, m.CID, m.Command}]++
		f.log.Info("MBIM command not supported", "service", m.Service.Name(), "cid", m.CID, "command", m.Command)
	}
	if status == mbim.StatusSuccess {
		f.stats.CommandsOK++
	} else {
		f.stats.CommandsFailed++
	}
	f.byStatus[status]++
	f.send(ctx, p, mbim.AppendCommandDone(f.out[:0], m.TID, m.Service, m.CID, status, info))
}

// basicConnectCIDs are the BASIC_CONNECT CIDs the function answers (listed
// in DEVICE_SERVICES), with the command types each accepts.
var basicConnectCIDs = []struct {
	cid        uint32
	query, set bool
}{
	{mbim.CIDDeviceCaps, true, false},
	{mbim.CIDSubscriberReadyStatus, true, false},
	{mbim.CIDRadioState, true, true},
	{mbim.CIDPin, true, true},
	{mbim.CIDPinList, true, false},
	{mbim.CIDHomeProvider, true, false},
	{mbim.CIDRegisterState, true, true},
	{mbim.CIDPacketService, true, true},
	{mbim.CIDSignalState, true, true},
	{mbim.CIDConnect, true, true},
	{mbim.CIDIPConfiguration, true, false},
	{mbim.CIDDeviceServices, true, false},
	{mbim.CIDDeviceServiceSubscribeList, false, true},
	{mbim.CIDPacketStatistics, true, false},
}

func (f *MBIM) offered(cid uint32, ct mbim.CommandType) bool {
	if cid == mbim.CIDPacketStatistics && f.opts.PacketStatistics == nil {
		return false
	}
	for _, c := range basicConnectCIDs {
		if c.cid == cid {
			return (ct == mbim.CommandQuery && c.query) || (ct == mbim.CommandSet && c.set)
		}
	}
	return false
}

// Data classes the mock claims: GSM family up to LTE.
const mbimDataClasses = mbim.DataClassGPRS | mbim.DataClassEDGE | mbim.DataClassUMTS |
	mbim.DataClassHSDPA | mbim.DataClassHSUPA | mbim.DataClassLTE

// Link speeds the mock reports for an attached packet service (bit/s).
const (
	mbimUplinkSpeed   = 50_000_000
	mbimDownlinkSpeed = 150_000_000
)

// basicConnect answers a BASIC_CONNECT command: the status and the
// InformationBuffer (built in f.info). Called with f.mu held.
func (f *MBIM) basicConnect(m *mbim.Message) (mbim.Status, []byte) {
	if !f.offered(m.CID, m.Command) {
		return mbim.StatusNoDeviceSupport, nil
	}
	status, info := f.answerBasicConnect(m, f.info[:0])
	if info != nil {
		f.info = info[:0]
	}
	return status, info
}

// answerBasicConnect runs the handler of an offered BASIC_CONNECT CID; the
// answer's InformationBuffer is appended to buf.
func (f *MBIM) answerBasicConnect(m *mbim.Message, buf []byte) (mbim.Status, []byte) {
	set := m.Command == mbim.CommandSet
	switch m.CID {
	case mbim.CIDDeviceCaps:
		return mbim.StatusSuccess, f.deviceCaps().AppendTo(buf)
	case mbim.CIDSubscriberReadyStatus:
		return mbim.StatusSuccess, f.subscriberReady().AppendTo(buf)
	case mbim.CIDRadioState:
		return f.answerRadioState(m, set, buf)
	case mbim.CIDPin:
		return f.answerPin(m, set, buf)
	case mbim.CIDPinList:
		return mbim.StatusSuccess, mbimPinList().AppendTo(buf)
	case mbim.CIDHomeProvider:
		return mbim.StatusSuccess, f.homeProvider().AppendTo(buf)
	case mbim.CIDRegisterState:
		return f.answerRegisterState(m, set, buf)
	case mbim.CIDPacketService:
		return f.answerPacketService(m, set, buf)
	case mbim.CIDSignalState:
		return f.answerSignalState(m, set, buf)
	case mbim.CIDConnect:
		return f.connect(m, buf)
	case mbim.CIDIPConfiguration:
		return f.answerIPConfiguration(m, buf)
	case mbim.CIDDeviceServices:
		return mbim.StatusSuccess, f.deviceServices().AppendTo(buf)
	case mbim.CIDDeviceServiceSubscribeList:
		return f.answerSubscribeList(m, buf)
	case mbim.CIDPacketStatistics:
		st := f.opts.PacketStatistics()
		return mbim.StatusSuccess, st.AppendTo(buf)
	}
	return mbim.StatusNoDeviceSupport, nil
}

// malformed logs a command whose InformationBuffer does not parse and
// answers INVALID_PARAMETERS.
func (f *MBIM) malformed(m *mbim.Message, err error) (mbim.Status, []byte) {
	f.log.Warn("MBIM command with a malformed InformationBuffer", "cid", mbim.CIDName(m.Service, m.CID), "tid", m.TID, "err", err)
	return mbim.StatusInvalidParameters, nil
}

// quectelRadioState answers the Quectel service's RADIO_STATE, which an
// FCC-locked modem offers (Config.FCCLocked): a query reports fcc-locked
// (4) while the lock holds, else on or off; a set on is Quectel's public
// FCC unlock (ModemManager's fcc-unlock script for Quectel modules runs
// 'mbimcli --quectel-set-radio-state=on'): the lock goes and the radio
// comes on. Called with f.mu held.
func (f *MBIM) quectelRadioState(m *mbim.Message) (mbim.Status, []byte) {
	if m.CID != mbim.CIDQuectelRadioState {
		return mbim.StatusNoDeviceSupport, nil
	}
	if m.Command == mbim.CommandSet {
		v, err := m.Info.U32(0)
		if err != nil || v != mbim.QuectelRadioOn && v != mbim.QuectelRadioOff {
			return mbim.StatusInvalidParameters, nil
		}
		if v == mbim.QuectelRadioOn {
			f.modem.UnlockFCC()
		}
		if err := f.modem.PowerRadio(v == mbim.QuectelRadioOn); err != nil {
			return mbim.StatusFailure, nil
		}
	}
	st := mbim.QuectelRadioOff
	switch {
	case f.modem.FCCLocked():
		st = mbim.QuectelRadioFCCLocked
	case f.modem.Radio():
		st = mbim.QuectelRadioOn
	}
	f.info = binary.LittleEndian.AppendUint32(f.info[:0], st)
	return mbim.StatusSuccess, f.info
}

// answerRadioState answers RADIO_STATE; a set switches the radio.
func (f *MBIM) answerRadioState(m *mbim.Message, set bool, buf []byte) (mbim.Status, []byte) {
	if set {
		req, err := mbim.ParseRadioStateSet(m.Info)
		if err != nil {
			return f.malformed(m, err)
		}
		if req.RadioState > mbim.RadioOn {
			return mbim.StatusInvalidParameters, nil
		}
		if err := f.modem.PowerRadio(req.RadioState == mbim.RadioOn); err != nil {
			// FCC-locked: the radio stays off (ModemManager then runs its
			// FCC unlock dispatcher).
			return mbim.StatusOperationNotAllowed, f.radioState().AppendTo(buf)
		}
	}
	return mbim.StatusSuccess, f.radioState().AppendTo(buf)
}

// answerPin answers PIN: no PIN is enabled, so a query says unlocked and a
// set (enter, enable, change) fails: there is nothing to do.
func (f *MBIM) answerPin(m *mbim.Message, set bool, buf []byte) (mbim.Status, []byte) {
	if set {
		if _, err := mbim.ParsePinSet(m.Info); err != nil {
			return f.malformed(m, err)
		}
		return mbim.StatusFailure, nil
	}
	pin := mbim.PinInfo{PinType: mbim.PinTypeUnknown, PinState: mbim.PinStateUnlocked}
	return mbim.StatusSuccess, pin.AppendTo(buf)
}

// mbimPinList is the PIN_LIST answer: PIN1 and PIN2, both disabled.
func mbimPinList() *mbim.PinList {
	var l mbim.PinList
	l[0] = mbim.PinDesc{Mode: mbim.PinModeDisabled, Format: mbim.PinFormatNumeric, LengthMin: 4, LengthMax: 8}
	l[1] = l[0]
	return &l
}

// answerRegisterState answers REGISTER_STATE; a set is checked (radio on,
// the home provider for a manual registration) and changes nothing: the
// mock is always registered at home.
func (f *MBIM) answerRegisterState(m *mbim.Message, set bool, buf []byte) (mbim.Status, []byte) {
	if set {
		req, err := mbim.ParseRegisterStateSet(m.Info)
		if err != nil {
			return f.malformed(m, err)
		}
		if !f.modem.Radio() {
			return mbim.StatusRadioPowerOff, nil
		}
		if req.RegisterAction == mbim.RegisterActionManual && req.ProviderID != f.modem.Identity().ProviderID {
			return mbim.StatusProviderNotVisible, nil
		}
		if req.RegisterAction > mbim.RegisterActionManual {
			return mbim.StatusInvalidParameters, nil
		}
	}
	return mbim.StatusSuccess, f.registrationState().AppendTo(buf)
}

// answerPacketService answers PACKET_SERVICE; a set attaches or detaches.
func (f *MBIM) answerPacketService(m *mbim.Message, set bool, buf []byte) (mbim.Status, []byte) {
	if set {
		req, err := mbim.ParsePacketServiceSet(m.Info)
		if err != nil {
			return f.malformed(m, err)
		}
		switch req.Action {
		case mbim.PacketServiceActionAttach:
			if err := f.modem.SetAttached(true); err != nil {
				return mbim.StatusRadioPowerOff, nil
			}
		case mbim.PacketServiceActionDetach:
			_ = f.modem.SetAttached(false)
		default:
			return mbim.StatusInvalidParameters, nil
		}
	}
	return mbim.StatusSuccess, f.packetService().AppendTo(buf)
}

// answerSignalState answers SIGNAL_STATE; a set keeps the host's reporting
// interval and thresholds.
func (f *MBIM) answerSignalState(m *mbim.Message, set bool, buf []byte) (mbim.Status, []byte) {
	if set {
		req, err := mbim.ParseSignalStateSet(m.Info)
		if err != nil {
			return f.malformed(m, err)
		}
		f.sigIntvl, f.rssiThr, f.errThr = req.SignalStrengthInterval, req.RssiThreshold, req.ErrorRateThreshold
	}
	return mbim.StatusSuccess, f.signalState().AppendTo(buf)
}

// answerIPConfiguration answers IP_CONFIGURATION for the session the query
// names.
func (f *MBIM) answerIPConfiguration(m *mbim.Message, buf []byte) (mbim.Status, []byte) {
	q, err := mbim.ParseIPConfiguration(m.Info)
	if err != nil {
		// libmbim sends the whole response layout; accept a bare session
		// id too.
		sid, err2 := m.Info.U32(0)
		if err2 != nil {
			return f.malformed(m, err)
		}
		q.SessionID = sid
	}
	cfg, ok := f.ipConfiguration(q.SessionID)
	if !ok {
		return mbim.StatusContextNotActivated, nil
	}
	return mbim.StatusSuccess, cfg.AppendTo(buf)
}

// answerSubscribeList answers DEVICE_SERVICE_SUBSCRIBE_LIST: the host's
// list replaces the indications it wants.
func (f *MBIM) answerSubscribeList(m *mbim.Message, buf []byte) (mbim.Status, []byte) {
	l, err := mbim.ParseEventList(m.Info)
	if err != nil {
		return f.malformed(m, err)
	}
	f.subs = map[mbimEvent]bool{}
	for _, e := range l {
		for _, c := range e.CIDs {
			f.subs[mbimEvent{e.Service, c}] = true
		}
	}
	return mbim.StatusSuccess, l.AppendTo(buf)
}

func (f *MBIM) deviceCaps() *mbim.DeviceCaps {
	id := f.modem.Identity()
	hw := id.Hardware
	if !strings.Contains(hw, id.Model) {
		hw = strings.TrimSpace(id.Model + " " + hw)
	}
	return &mbim.DeviceCaps{
		DeviceType:    mbim.DeviceTypeEmbedded,
		CellularClass: mbim.CellularClassGSM,
		VoiceClass:    mbim.VoiceClassNoVoice,
		SimClass:      mbim.SimClassRemovable,
		DataClass:     mbimDataClasses,
		MaxSessions:   uint32(f.modem.MaxSessions()),
		DeviceID:      id.IMEI,
		FirmwareInfo:  id.Firmware,
		HardwareInfo:  hw,
	}
}

func (f *MBIM) subscriberReady() *mbim.SubscriberReadyStatus {
	id := f.modem.Identity()
	s := &mbim.SubscriberReadyStatus{ReadyState: mbim.ReadyStateInitialized, SubscriberID: id.IMSI, SimICCID: id.ICCID}
	if id.MSISDN != "" {
		s.TelephoneNumbers = []string{id.MSISDN}
	}
	return s
}

func (f *MBIM) radioState() *mbim.RadioState {
	r := &mbim.RadioState{Hw: mbim.RadioOn, Sw: mbim.RadioOff}
	if f.modem.Radio() {
		r.Sw = mbim.RadioOn
	}
	return r
}

func (f *MBIM) homeProvider() *mbim.Provider {
	id := f.modem.Identity()
	p := &mbim.Provider{ProviderID: id.ProviderID, ProviderState: mbim.ProviderStateHome, ProviderName: id.ProviderName,
		CellularClass: mbim.CellularClassGSM, Rssi: uint32(f.modem.RSSI()), ErrorRate: 99}
	if f.modem.Registration() == RegHome {
		p.ProviderState |= mbim.ProviderStateRegistered
	}
	return p
}

func (f *MBIM) registrationState() *mbim.RegistrationState {
	r := &mbim.RegistrationState{RegisterState: mbim.RegisterStateDeregistered, RegisterMode: mbim.RegisterModeAutomatic,
		CurrentCellularClass: mbim.CellularClassGSM, RegistrationFlag: mbim.RegistrationFlagPacketServiceAutoAttach}
	if f.modem.Registration() == RegHome {
		id := f.modem.Identity()
		r.RegisterState = mbim.RegisterStateHome
		r.AvailableDataClasses = mbim.DataClassLTE
		r.ProviderID, r.ProviderName = id.ProviderID, id.ProviderName
	}
	return r
}

func (f *MBIM) packetService() *mbim.PacketService {
	p := &mbim.PacketService{PacketServiceState: mbim.PacketServiceDetached}
	if f.modem.Attached() {
		p.PacketServiceState = mbim.PacketServiceAttached
		p.HighestAvailableDataClass = mbim.DataClassLTE
		p.UplinkSpeed, p.DownlinkSpeed = mbimUplinkSpeed, mbimDownlinkSpeed
	}
	return p
}

func (f *MBIM) signalState() *mbim.SignalState {
	return &mbim.SignalState{Rssi: uint32(f.modem.RSSI()), ErrorRate: 99,
		SignalStrengthInterval: f.sigIntvl, RssiThreshold: f.rssiThr, ErrorRateThreshold: f.errThr}
}

// mbimIPType maps an MBIM IpType to the Modem's (0: the default, IPv4).
func mbimIPType(t uint32) (IPType, bool) {
	switch t {
	case mbim.IPTypeDefault:
		return 0, true
	case mbim.IPTypeIPv4:
		return IPv4, true
	case mbim.IPTypeIPv6:
		return IPv6, true
	case mbim.IPTypeIPv4v6, mbim.IPTypeIPv4AndIPv6:
		return IPv4v6, true
	}
	return 0, false
}

// connectInfo describes session sid as CONNECT reports it: deactivated
// unless it is an active session of the modem.
func (f *MBIM) connectInfo(sid uint32) mbim.ConnectInfo {
	ci := mbim.ConnectInfo{SessionID: sid, ActivationState: mbim.ActivationStateDeactivated, ContextType: mbim.ContextTypeNone}
	if sid >= uint32(f.modem.MaxSessions()) {
		return ci
	}
	s := f.modem.SessionOf(uint8(sid))
	ci.NwError = s.EndCause
	if s.Active {
		ci.ActivationState = mbim.ActivationStateActivated
		ci.IPType = uint32(s.Type) // IPType's IPv4/IPv6/IPv4v6 are MBIM's 1/2/3
		ci.ContextType = mbim.ContextTypeInternet
	}
	return ci
}

func (f *MBIM) connect(m *mbim.Message, buf []byte) (mbim.Status, []byte) {
	if m.Command == mbim.CommandQuery {
		sid, err := m.Info.U32(0)
		if err != nil {
			f.log.Warn("MBIM CONNECT query without a session id", "tid", m.TID, "err", err)
			return mbim.StatusInvalidParameters, nil
		}
		ci := f.connectInfo(sid)
		return mbim.StatusSuccess, ci.AppendTo(buf)
	}
	req, err := mbim.ParseConnectSet(m.Info)
	if err != nil {
		f.log.Warn("MBIM CONNECT set with a malformed InformationBuffer", "tid", m.TID, "err", err)
		return mbim.StatusInvalidParameters, nil
	}
	reply := func(s mbim.Status) (mbim.Status, []byte) {
		ci := f.connectInfo(req.SessionID)
		return s, ci.AppendTo(buf)
	}
	if req.SessionID >= uint32(f.modem.MaxSessions()) {
		// Beyond the modem's sessions (DEVICE_CAPS MaxSessions): the
		// spec's status for "no more contexts".
		f.log.Info("MBIM CONNECT beyond the session limit", "session", req.SessionID, "max", f.modem.MaxSessions())
		return reply(mbim.StatusMaxActivatedContexts)
	}
	sid := uint8(req.SessionID)
	switch req.ActivationCommand {
	case mbim.ActivationCommandDeactivate:
		if sid == 0 {
			f.modem.ReleasePDN() // the autoconnect's PDN is session 0's
		}
		f.modem.DisconnectSession(sid)
		return reply(mbim.StatusSuccess)
	case mbim.ActivationCommandActivate:
	default:
		return reply(mbim.StatusInvalidParameters)
	}
	t, ok := mbimIPType(req.IPType)
	if !ok {
		return reply(mbim.StatusInvalidParameters)
	}
	_, err = f.modem.ConnectSession(sid, req.AccessString, t)
	switch {
	case err == nil:
		return reply(mbim.StatusSuccess)
	case errors.Is(err, ErrNoAPN):
		return reply(mbim.StatusInvalidAccessString)
	case errors.Is(err, ErrPDNHeld):
		// The modem's autoconnect holds the PDN (OpenMPTCProuter #4030,
		// QModem #251): the status the reports show.
		return reply(mbim.StatusContextNotActivated)
	case errors.Is(err, ErrCrashed):
		return reply(mbim.StatusFailure) // the reply is lost in the crash anyway
	case errors.Is(err, ErrRadioOff):
		return reply(mbim.StatusRadioPowerOff)
	case errors.Is(err, ErrSessionActive), errors.Is(err, ErrSessionLimit):
		return reply(mbim.StatusMaxActivatedContexts)
	}
	f.log.Warn("MBIM CONNECT failed", "err", err)
	return reply(mbim.StatusFailure)
}

// ipConfiguration is IP_CONFIGURATION's answer for session sid: its
// addressing (Modem.AddressingOf) in the families it was activated with;
// false when it is not active.
func (f *MBIM) ipConfiguration(sid uint32) (mbim.IPConfiguration, bool) {
	if sid >= uint32(f.modem.MaxSessions()) {
		return mbim.IPConfiguration{SessionID: sid}, false
	}
	s := f.modem.SessionOf(uint8(sid))
	if !s.Active {
		return mbim.IPConfiguration{SessionID: sid}, false
	}
	a := f.modem.AddressingOf(s.Number)
	all := mbim.IPConfigAddress | mbim.IPConfigGateway | mbim.IPConfigDNS | mbim.IPConfigMTU
	c := mbim.IPConfiguration{SessionID: sid}
	if s.Type.has4() {
		c.IPv4Available = all
		c.IPv4Addresses = []netip.Prefix{a.IPv4}
		c.IPv4Gateway = a.Gateway4
		c.IPv4DNS = a.DNS4
		c.IPv4MTU = uint32(a.MTU)
	}
	if s.Type.has6() {
		c.IPv6Available = all
		c.IPv6Addresses = []netip.Prefix{a.IPv6}
		c.IPv6Gateway = a.Gateway6
		c.IPv6DNS = a.DNS6
		c.IPv6MTU = uint32(a.MTU)
	}
	return c, true
}

func (f *MBIM) deviceServices() *mbim.DeviceServices {
	var cids []uint32
	for _, c := range basicConnectCIDs {
		if f.offered(c.cid, mbim.CommandQuery) || f.offered(c.cid, mbim.CommandSet) {
			cids = append(cids, c.cid)
		}
	}
	return &mbim.DeviceServices{Services: []mbim.DeviceService{{ID: mbim.ServiceBasicConnect, CIDs: cids}}}
}

// wants reports whether the host wants indications of (svc, cid). Called
// with f.mu held.
func (f *MBIM) wants(cid uint32) bool {
	return f.subs == nil || f.subs[mbimEvent{mbim.ServiceBasicConnect, cid}]
}

// sendIndications sends an INDICATE_STATUS for every Modem change noted
// since the last call, while the host has the function open.
func (f *MBIM) sendIndications(p mbimOut) {
	f.evMu.Lock()
	evs, sess := f.events, f.sessEvents
	f.events, f.sessEvents = map[EventKind]bool{}, [len(f.sessEvents)]uint64{}
	f.evMu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.open {
		return
	}
	for _, k := range []EventKind{EventRadio, EventRegistration, EventPacketService, EventSession, EventSignal} {
		if !evs[k] {
			continue
		}
		buf := f.info[:0]
		switch k {
		case EventRadio:
			f.indicate(p, mbim.CIDRadioState, f.radioState().AppendTo(buf))
		case EventRegistration:
			f.indicate(p, mbim.CIDRegisterState, f.registrationState().AppendTo(buf))
		case EventPacketService:
			f.indicate(p, mbim.CIDPacketService, f.packetService().AppendTo(buf))
		case EventSession:
			// One CONNECT indication per session that changed, carrying
			// its SessionId.
			for n := range MaxSessionLimit {
				if sess[n>>6]&(1<<(n&63)) != 0 {
					ci := f.connectInfo(uint32(n))
					f.indicate(p, mbim.CIDConnect, ci.AppendTo(f.info[:0]))
				}
			}
		case EventSignal:
			f.indicate(p, mbim.CIDSignalState, f.signalState().AppendTo(buf))
		}
	}
}

// indicate sends an INDICATE_STATUS of BASIC_CONNECT cid with info (built
// in f.info), if the host wants it. Called with f.mu held.
func (f *MBIM) indicate(p mbimOut, cid uint32, info []byte) {
	f.info = info[:0]
	if !f.wants(cid) {
		return
	}
	msg := mbim.AppendIndicateStatus(f.out[:0], 0, mbim.ServiceBasicConnect, cid, info)
	f.out = msg[:0]
	if f.opts.Mangle != nil {
		f.opts.Mangle(msg)
	}
	if err := p.TrySend(msg); err != nil {
		f.stats.IndicationsDropped++
		f.log.Debug("MBIM indication not queued", "cid", mbim.CIDName(mbim.ServiceBasicConnect, cid), "err", err)
		return
	}
	f.stats.Indications++
	f.stats.MessagesOut++
	f.stats.BytesOut += uint64(len(msg))
}
