package modem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/qmi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// QMIName is the name of the channel pair a modem's QMI control port uses
// (channels 14/15 on Qualcomm SDX configurations; Linux's wwan0qmi0).
const QMIName = "QMI"

// defaultQMIMaxClients is the number of client ids each QMI service hands
// out unless QMIOptions says otherwise.
const defaultQMIMaxClients = 32

// QMIOptions configure a QMI function.
type QMIOptions struct {
	// MaxClients is the number of client ids each service hands out per
	// port (1..254; zero means 32). Allocating more
	// fails with ClientIdsExhausted, as on a real modem.
	MaxClients int
	// Logger receives Debug records per message and Warn records for
	// malformed frames; nil discards them.
	Logger *slog.Logger
	// PacketStatistics, when set, answers WDS GET_PACKET_STATISTICS (for
	// example from the IP data function's counters); without it the
	// message is unsupported.
	PacketStatistics func() PacketCounters
	// IndicationTimeout bounds how long an unsolicited indication waits
	// for room in the downlink queue before it is dropped and counted
	// (zero means one second).
	IndicationTimeout time.Duration
}

// PacketCounters are a data session's packet counters as the modem
// reports them to the host: Tx is from the host (uplink), Rx towards it.
type PacketCounters struct {
	TxPackets, RxPackets uint64
	TxBytes, RxBytes     uint64
	TxErrors, RxErrors   uint64
	TxDropped, RxDropped uint64
}

// qmiServiceVersion is one entry of CTL GET_VERSION_INFO.
type qmiServiceVersion struct {
	svc          qmi.Service
	major, minor uint16
}

// qmiServices are the services the mock implements and the versions it
// reports (values in the range SDX55 firmware reports; libqmi since
// 1.24.4 uses them only for logging and for refusing clients of services
// that are not listed).
var qmiServices = []qmiServiceVersion{
	{qmi.CTL, 1, 5}, {qmi.WDS, 1, 67}, {qmi.DMS, 1, 14}, {qmi.NAS, 1, 25}, {qmi.WDA, 1, 16},
}

func qmiServiceImplemented(s qmi.Service) bool {
	return s != qmi.CTL && slices.ContainsFunc(qmiServices, func(v qmiServiceVersion) bool { return v.svc == s })
}

// QMIUnsupported counts requests for one message the mock does not
// implement (answered with InvalidQmiCommand).
type QMIUnsupported struct {
	Service string `json:"service"`
	Message uint16 `json:"message"`
	Count   uint64 `json:"count"`
}

// QMIStats are the QMI function's counters. Conservation: FramesIn =
// Responses + Dropped; FramesOut = Responses + Indications.
type QMIStats struct {
	FramesIn  uint64 `json:"frames_in"`
	FramesOut uint64 `json:"frames_out"`
	// Responses counts answered requests, ErrorResponses those answered
	// with a failure result (by code name in ErrorCodes).
	Responses      uint64            `json:"responses"`
	ErrorResponses uint64            `json:"error_responses"`
	ErrorCodes     map[string]uint64 `json:"error_codes,omitempty"`
	// Indications counts unsolicited messages sent; IndicationsDropped
	// those that could not be sent (port closed, downlink queue full).
	Indications        uint64 `json:"indications"`
	IndicationsDropped uint64 `json:"indications_dropped"`
	// Dropped counts frames not answered, by reason in Errors: "short",
	// "marker", "qmux_length", "sdu_header" (the header is unreadable),
	// "truncated" (the transfer ends inside the frame), "not_request" (a
	// response or indication from the host), "send_failed" (the answer
	// could not be queued).
	Dropped uint64            `json:"dropped"`
	Errors  map[string]uint64 `json:"errors,omitempty"`
	// Malformed counts requests with bad TLVs answered MalformedMessage.
	Malformed   uint64            `json:"malformed"`
	InByService map[string]uint64 `json:"in_by_service,omitempty"`
	// Unsupported lists the (service, message) pairs answered with
	// InvalidQmiCommand, most asked first.
	Unsupported      []QMIUnsupported `json:"unsupported,omitempty"`
	ClientsAllocated uint64           `json:"clients_allocated"`
	ClientsReleased  uint64           `json:"clients_released"`
	ClientsActive    uint64           `json:"clients_active"`
}

type qmiSvcMsg struct {
	svc qmi.Service
	msg qmi.MessageID
}

// qmiCall is one WDS client's data call: the client's hold on one IP
// family of the Modem's session.
type qmiCall struct {
	handle  uint32
	family  IPType // IPv4 or IPv6
	session uint32 // Modem session ID
	num     uint8  // Modem session number
}

// qmiClient is an allocated client id.
type qmiClient struct {
	svc qmi.Service
	cid uint8
	// WDS
	family IPType // IP family preference (SET_IP_FAMILY), IPv4 by default
	call   *qmiCall
	// bound says BIND_MUX_DATA_PORT named the client's session: num is
	// then the session of its mux id; an unbound client carries session 0.
	bound       bool
	num         uint8
	wdsEvents   bool // asked for WDS event reports / indications
	servingInds bool // NAS: asked for serving system indications
}

// qmiServing is what a NAS serving system indication reports.
type qmiServing struct {
	registered, attached bool
}

// qmiPort is the state of one QMUX port (one channel pair).
type qmiPort struct {
	pipe    *ep.Pipe
	clients map[uint16]*qmiClient // service<<8 | cid
	cursor  [256]uint8            // last cid handed out, per service
	serving qmiServing            // last state NAS indications reported
	wake    chan struct{}
	rbuf    []byte // responses; used by the port's uplink worker only
	ibuf    []byte // indications built by the port's indication goroutine
}

func clientKey(s qmi.Service, cid uint8) uint16 { return uint16(s)<<8 | uint16(cid) }

// QMI is the mock modem's QMI service behind the "QMI" channel pair: CTL
// (version info, client ids, sync, data format), DMS (identity,
// capabilities, operating mode, SIM ids), NAS (serving system, signal,
// system info), WDS (start/stop network, packet service status, current
// settings) and WDA (data format), all reading and changing the shared
// Modem. Every request gets a response; unknown messages get
// InvalidQmiCommand and are listed in QMIStats.Unsupported. See
// docs/CONTROL.md, "QMI and AT".
type QMI struct {
	m    *Modem
	opts QMIOptions
	log  *slog.Logger

	// mu guards ports, own, offMode and format, and is held while a
	// request is answered (the Modem consulted or changed, the counters
	// updated under smu).
	//
	// lockorder: ep.channel.work → QMI.mu → QMI.smu
	// lockorder: QMI.mu → Modem.mu
	mu    sync.Mutex
	ports map[*ep.Pipe]*qmiPort
	// own holds the Modem session IDs a QMI START_NETWORK connected; QMI
	// disconnects only those when their last call stops.
	own map[uint32]bool
	// offMode is the operating mode reported while the radio is off.
	offMode uint8
	// format is the data format WDA reports (SET_DATA_FORMAT records it).
	format wdaFormat

	// smu guards st and unsupported; nothing is taken while it is held.
	smu         sync.Mutex
	st          QMIStats
	unsupported map[qmiSvcMsg]uint64
}

// Errors of NewQMI.
var ErrQMIConfig = errors.New("modem: invalid QMI options")

// NewQMI returns the QMI function of modem m.
func NewQMI(m *Modem, opts QMIOptions) (*QMI, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: no modem", ErrQMIConfig)
	}
	if opts.MaxClients == 0 {
		opts.MaxClients = defaultQMIMaxClients
	}
	if opts.MaxClients < 1 || opts.MaxClients > 254 {
		return nil, fmt.Errorf("%w: MaxClients %d outside 1..254", ErrQMIConfig, opts.MaxClients)
	}
	if opts.IndicationTimeout == 0 {
		opts.IndicationTimeout = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &QMI{m: m, opts: opts, log: log, ports: map[*ep.Pipe]*qmiPort{}, offMode: dmsModeLowPower,
		unsupported: map[qmiSvcMsg]uint64{}, own: map[uint32]bool{},
		format: wdaFormat{link: wdaLinkRawIP, ul: wdaAggDisabled, dl: wdaAggDisabled}}
	q.st.ErrorCodes = map[string]uint64{}
	q.st.Errors = map[string]uint64{}
	q.st.InByService = map[string]uint64{}
	return q, nil
}

// Attach implements PipeAttacher: the port's state and its indication
// goroutine (which ends when the device closes) are set up before the
// first message.
func (q *QMI) Attach(p *ep.Pipe) { q.portFor(p) }

// portFor returns p's port, creating it (and its indication goroutine) on
// first use.
func (q *QMI) portFor(p *ep.Pipe) *qmiPort {
	q.mu.Lock()
	defer q.mu.Unlock()
	if port, ok := q.ports[p]; ok {
		return port
	}
	port := &qmiPort{pipe: p, clients: map[uint16]*qmiClient{}, wake: make(chan struct{}, 1),
		serving: q.servingLocked()}
	q.ports[p] = port
	if p != nil { // nil: a test's port without a device
		cancel := q.m.Subscribe(func(Event) { port.poke() })
		go q.indicationLoop(port, cancel)
	}
	return port
}

func (port *qmiPort) poke() {
	select {
	case port.wake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the counters.
func (q *QMI) Stats() QMIStats {
	q.smu.Lock()
	s := q.st
	s.ErrorCodes = maps2(q.st.ErrorCodes)
	s.Errors = maps2(q.st.Errors)
	s.InByService = maps2(q.st.InByService)
	for k, n := range q.unsupported {
		s.Unsupported = append(s.Unsupported, QMIUnsupported{Service: k.svc.String(), Message: uint16(k.msg), Count: n})
	}
	q.smu.Unlock()
	slices.SortFunc(s.Unsupported, func(a, b QMIUnsupported) int {
		if a.Count != b.Count {
			return int(b.Count) - int(a.Count)
		}
		if a.Service != b.Service {
			if a.Service < b.Service {
				return -1
			}
			return 1
		}
		return int(a.Message) - int(b.Message)
	})
	return s
}

func maps2(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (q *QMI) count(f func(s *QMIStats)) {
	q.smu.Lock()
	f(&q.st)
	q.smu.Unlock()
}

func (q *QMI) drop(reason string) {
	q.count(func(s *QMIStats) { s.Dropped++; s.Errors[reason]++ })
}

// Receive implements Function: the transfer holds one QMUX frame (or
// several back to back); each request is answered with one response.
func (q *QMI) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	port := q.portFor(p)
	return q.receive(ctx, port, transfer, func(b []byte) error { return p.Send(ctx, b) })
}

// receive handles the frames of one transfer; send queues one downlink
// frame. It is the seam the tests and the fuzz target drive.
func (q *QMI) receive(ctx context.Context, port *qmiPort, transfer []byte, send func([]byte) error) error {
	for len(transfer) > 0 {
		n, err := qmi.FrameLen(transfer)
		if err == nil && n > len(transfer) {
			err = errTruncated
		}
		if err != nil {
			q.count(func(s *QMIStats) { s.FramesIn++ })
			q.drop(qmiDropReason(err))
			q.log.Warn("qmi: dropping malformed uplink data", "pipe", port.name(), "bytes", len(transfer), "err", err)
			return nil
		}
		if err := q.frame(ctx, port, transfer[:n], send); err != nil && ctx.Err() != nil {
			return err
		}
		transfer = transfer[n:]
	}
	return nil
}

var errTruncated = errors.New("qmi: transfer ends inside a frame")

func qmiDropReason(err error) string {
	switch {
	case errors.Is(err, errTruncated):
		return "truncated"
	case errors.Is(err, qmi.ErrShort):
		return "short"
	case errors.Is(err, qmi.ErrMarker):
		return "marker"
	case errors.Is(err, qmi.ErrQMUXLength):
		return "qmux_length"
	case errors.Is(err, qmi.ErrSDUHeader):
		return "sdu_header"
	}
	return "other"
}

func (port *qmiPort) name() string {
	if port.pipe == nil {
		return "-"
	}
	return port.pipe.Name()
}

// qmiReq is one request being answered.
type qmiReq struct {
	q      *QMI
	port   *qmiPort
	f      qmi.Frame
	client *qmiClient
	b      qmi.Builder
	res    qmi.Result
	// after the response: indications to this client
	post []qmiIndication
}

// qmiIndication is an indication to build and send.
type qmiIndication struct {
	svc   qmi.Service
	cid   uint8
	msg   qmi.MessageID
	build func(b *qmi.Builder)
}

// ok starts a successful response.
func (r *qmiReq) ok() {
	r.res = qmi.Success
	r.b.Result(qmi.Success)
}

// fail answers with a failure result.
func (r *qmiReq) fail(code qmi.ErrorCode) {
	r.res = qmi.Failure(code)
	r.b.Result(r.res)
}

// arg returns the value of the request's mandatory TLV typ, which must be
// n bytes long; when it is missing or of another length, it answers
// MissingArgument and returns false.
func (r *qmiReq) arg(typ uint8, n int) ([]byte, bool) {
	v, ok := r.f.TLVs.Find(typ)
	if !ok || len(v) != n {
		r.fail(qmi.ErrMissingArgument)
		return nil, false
	}
	return v, true
}

// frame answers one frame.
func (q *QMI) frame(ctx context.Context, port *qmiPort, frame []byte, send func([]byte) error) error {
	q.count(func(s *QMIStats) { s.FramesIn++ })
	f, err := qmi.ParseFrame(frame)
	malformed := errors.Is(err, qmi.ErrTLVLength) || errors.Is(err, qmi.ErrTLVOverrun)
	if err != nil && !malformed {
		q.drop(qmiDropReason(err))
		q.log.Warn("qmi: dropping malformed frame", "pipe", port.name(), "bytes", len(frame), "err", err)
		return nil
	}
	q.count(func(s *QMIStats) { s.InByService[f.Service.String()]++ })
	if f.Type() != qmi.Request {
		q.drop("not_request")
		q.log.Warn("qmi: dropping a frame that is not a request", "pipe", port.name(), "message", f.Name(), "type", f.Type())
		return nil
	}
	r := &qmiReq{q: q, port: port, f: f}
	r.b.Start(port.rbuf[:0], qmi.ResponseTo(&f))
	switch {
	case malformed:
		q.count(func(s *QMIStats) { s.Malformed++ })
		q.log.Warn("qmi: malformed request", "pipe", port.name(), "message", f.Name(), "err", err)
		r.fail(qmi.ErrMalformedMessage)
	case f.Service == qmi.CTL:
		q.mu.Lock()
		q.ctl(r)
		q.mu.Unlock()
	default:
		q.mu.Lock()
		r.client = port.clients[clientKey(f.Service, f.Client)]
		if r.client == nil {
			r.fail(qmi.ErrInvalidClientID)
		} else {
			q.service(r)
		}
		q.mu.Unlock()
	}
	out, err := r.b.Finish()
	if err != nil {
		// A response the codec cannot build is the mock's bug; answer
		// Internal rather than nothing.
		q.log.Error("qmi: building response", "message", f.Name(), "err", err)
		r.b.Start(port.rbuf[:0], qmi.ResponseTo(&f))
		r.fail(qmi.ErrInternal)
		out, _ = r.b.Finish()
	}
	port.rbuf = out[:0]
	q.log.Debug("qmi: request", "pipe", port.name(), "message", f.Name(), "client", f.Client, "tid", f.TID,
		"status", r.res.Status, "error", r.res.Code)
	// Counted before the host can see the answer, so that a host that has
	// it also sees the counters; taken back if it cannot be queued.
	count := func(d int) {
		q.count(func(s *QMIStats) {
			s.Responses += uint64(d)
			s.FramesOut += uint64(d)
			if !r.res.OK() {
				s.ErrorResponses += uint64(d)
				s.ErrorCodes[r.res.Code.String()] += uint64(d)
			}
		})
	}
	count(1)
	if err := send(out); err != nil {
		count(-1)
		q.drop("send_failed")
		return err
	}
	for _, ind := range r.post {
		if err := q.sendIndication(port, ind, &port.rbuf, send); err != nil {
			return err
		}
	}
	return nil
}

// sendIndication builds ind into *buf and sends it.
func (q *QMI) sendIndication(port *qmiPort, ind qmiIndication, buf *[]byte, send func([]byte) error) error {
	var b qmi.Builder
	b.Start((*buf)[:0], qmi.Header{QMUXFlags: qmi.QMUXFromModem, Service: ind.svc, Client: ind.cid,
		Type: qmi.Indication, Message: ind.msg})
	ind.build(&b)
	out, err := b.Finish()
	*buf = out[:0]
	if err == nil {
		q.count(func(s *QMIStats) { s.Indications++; s.FramesOut++ })
		if err = send(out); err != nil {
			q.count(func(s *QMIStats) { s.Indications--; s.FramesOut-- })
		}
	}
	if err != nil {
		q.count(func(s *QMIStats) { s.IndicationsDropped++ })
		return err
	}
	q.log.Debug("qmi: indication", "pipe", port.name(), "message", ind.svc.String()+" "+ind.svc.MessageName(ind.msg), "client", ind.cid)
	return nil
}

// unsupported answers a message the mock does not implement.
func (r *qmiReq) unsupported() {
	r.q.smu.Lock()
	r.q.unsupported[qmiSvcMsg{r.f.Service, r.f.Message}]++
	r.q.smu.Unlock()
	r.q.log.Debug("qmi: unsupported message", "message", r.f.Name())
	r.fail(qmi.ErrInvalidQMICommand)
}

// CTL TLVs.
const (
	ctlTLVService   = 0x01 // ALLOCATE_CID request; ALLOCATE/RELEASE_CID {service, cid}
	ctlTLVProtocol  = 0x10 // SET_DATA_FORMAT link protocol
	ctlTLVQoSHeader = 0x01 // SET_DATA_FORMAT QoS header format
	ctlProtoRawIP   = 2
)

// ctl answers a CTL request. q.mu is held.
func (q *QMI) ctl(r *qmiReq) {
	port := r.port
	switch r.f.Message {
	case qmi.CTLGetVersionInfo:
		r.ok()
		r.b.Begin(0x01)
		r.b.Put8(uint8(len(qmiServices)))
		for _, v := range qmiServices {
			r.b.Put8(uint8(v.svc))
			r.b.Put16(v.major)
			r.b.Put16(v.minor)
		}
		r.b.End()
	case qmi.CTLAllocateCID:
		v, ok := r.arg(ctlTLVService, 1)
		if !ok {
			return
		}
		svc := qmi.Service(v[0])
		if !qmiServiceImplemented(svc) {
			r.fail(qmi.ErrInvalidServiceType)
			return
		}
		cid, ok := q.allocateLocked(port, svc)
		if !ok {
			r.fail(qmi.ErrClientIDsExhausted)
			return
		}
		r.ok()
		r.b.Begin(0x01)
		r.b.Put8(uint8(svc))
		r.b.Put8(cid)
		r.b.End()
	case qmi.CTLReleaseCID:
		v, ok := r.arg(ctlTLVService, 2)
		if !ok {
			return
		}
		svc, cid := qmi.Service(v[0]), v[1]
		c := port.clients[clientKey(svc, cid)]
		if c == nil {
			r.fail(qmi.ErrInvalidClientID)
			return
		}
		q.releaseLocked(port, c)
		r.ok()
		r.b.TLV(0x01, v)
	case qmi.CTLSync:
		// libqmi's "sync" releases every client id of the port.
		for _, c := range port.clients {
			q.releaseLocked(port, c)
		}
		r.ok()
	case qmi.CTLSetDataFormat:
		proto := uint16(ctlProtoRawIP)
		if v, ok := r.f.TLVs.Find(ctlTLVProtocol); ok {
			rd := qmi.NewReader(v)
			proto = rd.U16()
			if rd.Finish() != nil {
				r.fail(qmi.ErrMalformedMessage)
				return
			}
		}
		if v, ok := r.f.TLVs.Find(ctlTLVQoSHeader); ok && (len(v) != 1 || v[0] != 0) {
			r.fail(qmi.ErrInvalidDataFormat) // the data path has no QoS header
			return
		}
		if proto != ctlProtoRawIP {
			r.fail(qmi.ErrInvalidDataFormat) // mhi_net carries raw IP only
			return
		}
		r.ok()
		r.b.TLVU16(ctlTLVProtocol, ctlProtoRawIP)
	default:
		r.unsupported()
	}
}

// allocateLocked hands out the next free client id of svc.
func (q *QMI) allocateLocked(port *qmiPort, svc qmi.Service) (uint8, bool) {
	max := q.opts.MaxClients
	cur := int(port.cursor[svc])
	for range max {
		cur = cur%max + 1
		if _, used := port.clients[clientKey(svc, uint8(cur))]; !used {
			port.cursor[svc] = uint8(cur)
			c := &qmiClient{svc: svc, cid: uint8(cur), family: IPv4}
			port.clients[clientKey(svc, uint8(cur))] = c
			q.count(func(s *QMIStats) { s.ClientsAllocated++; s.ClientsActive++ })
			return uint8(cur), true
		}
	}
	return 0, false
}

// releaseLocked frees a client id; a WDS client's call ends with it.
func (q *QMI) releaseLocked(port *qmiPort, c *qmiClient) {
	if c.call != nil {
		q.dropCallLocked(c)
	}
	delete(port.clients, clientKey(c.svc, c.cid))
	q.count(func(s *QMIStats) { s.ClientsReleased++; s.ClientsActive-- })
}

// service answers a request of an allocated client. q.mu is held.
func (q *QMI) service(r *qmiReq) {
	switch r.f.Service {
	case qmi.DMS:
		q.dms(r)
	case qmi.NAS:
		q.nas(r)
	case qmi.WDS:
		q.wds(r)
	case qmi.WDA:
		q.wda(r)
	default:
		r.unsupported()
	}
}

// indicationLoop sends the indications that changes made elsewhere (MBIM,
// AT, another QMI port, the radio) call for, until the device closes.
func (q *QMI) indicationLoop(port *qmiPort, cancel func()) {
	defer cancel()
	done := port.pipe.Done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		<-done
		stop()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-port.wake:
		}
		for _, ind := range q.reconcile(port) {
			if port.pipe.DownlinkState() != wire.ChannelRunning {
				q.count(func(s *QMIStats) { s.IndicationsDropped++ })
				continue
			}
			ictx, istop := context.WithTimeout(ctx, q.opts.IndicationTimeout)
			_ = q.sendIndication(port, ind, &port.ibuf, func(b []byte) error { return port.pipe.Send(ictx, b) })
			istop()
		}
	}
}

// reconcile compares the port's view with the Modem and returns the
// indications to send: calls whose session ended or changed, and the NAS
// serving system when registration or attach changed.
func (q *QMI) reconcile(port *qmiPort) []qmiIndication {
	// The snapshot is taken under q.mu: QMI's own session changes happen
	// under it too, so it never sees a call QMI is still setting up.
	q.mu.Lock()
	defer q.mu.Unlock()
	radio := q.m.Radio()
	var inds []qmiIndication
	for _, c := range port.clients {
		if c.call == nil {
			continue
		}
		s := q.m.SessionOf(c.call.num)
		up := s.Active && s.ID == c.call.session
		if up && sessionHas(s.Type, c.call.family) {
			continue
		}
		// The client's session ended (or lost its family) elsewhere: the
		// network, MBIM, AT, the radio or a restart.
		call := c.call
		c.call = nil
		if !up {
			delete(q.own, call.session)
		}
		reason := uint16(wdsCERReleaseNormal)
		if !radio {
			reason = wdsCERNoService
		}
		inds = append(inds, wdsPacketStatusInd(c.cid, false, call.family, reason))
	}
	if sv := q.servingLocked(); sv != port.serving {
		port.serving = sv
		for _, c := range port.clients {
			if c.svc == qmi.NAS && c.servingInds {
				inds = append(inds, qmiIndication{svc: qmi.NAS, cid: c.cid, msg: qmi.NASGetServingSystem,
					build: func(b *qmi.Builder) { q.putServingSystem(b, sv, true) }})
			}
		}
	}
	return inds
}

func (q *QMI) servingLocked() qmiServing {
	return qmiServing{registered: q.m.Registration() == RegHome, attached: q.m.Attached()}
}

func sessionHas(t IPType, family IPType) bool {
	if family == IPv6 {
		return t.has6()
	}
	return t.has4()
}
