package ctrlport_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/proto/qmi"
)

// fakeWire is an in-memory MessageTransport: each message sent is
// answered by answer (on a goroutine, in order), and push sends an
// unsolicited message to every subscriber.
type fakeWire struct {
	mu     sync.Mutex
	subs   map[int]func([]byte)
	next   int
	answer func(msg []byte) [][]byte
	out    chan []byte
	once   sync.Once
}

func newFakeWire(t *testing.T, answer func(msg []byte) [][]byte) *fakeWire {
	w := &fakeWire{subs: map[int]func([]byte){}, answer: answer, out: make(chan []byte, 256)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range w.out {
			w.mu.Lock()
			var fs []func([]byte)
			for _, f := range w.subs {
				fs = append(fs, f)
			}
			w.mu.Unlock()
			for _, f := range fs {
				f(m)
			}
		}
	}()
	t.Cleanup(func() { w.once.Do(func() { close(w.out) }); <-done })
	return w
}

func (w *fakeWire) Send(msg []byte) error {
	for _, m := range w.answer(append([]byte(nil), msg...)) {
		w.out <- m
	}
	return nil
}

func (w *fakeWire) push(msg []byte) { w.out <- msg }

func (w *fakeWire) Subscribe(f func([]byte)) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.next
	w.next++
	w.subs[id] = f
	return func() {
		w.mu.Lock()
		delete(w.subs, id)
		w.mu.Unlock()
	}
}

// fakeMBIMModem answers BASIC_CONNECT PACKET_SERVICE, CONNECT and
// IP_CONFIGURATION per session id, up to limit sessions; session N gets
// 198.18.N.1/24.
type fakeMBIMModem struct {
	limit uint32

	mu       sync.Mutex
	active   map[uint32]string // session id → APN
	connects []uint32          // CONNECT activate's session ids
	ipQuery  []uint32          // IP_CONFIGURATION's session ids
}

func (m *fakeMBIMModem) isActive(sid uint32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.active[sid]
	return ok
}

func (m *fakeMBIMModem) deactivate(sid uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.active, sid)
}

func (m *fakeMBIMModem) answer(msg []byte) [][]byte {
	mm, err := mbim.ParseMessage(msg)
	if err != nil || mm.Type != mbim.TypeCommand || mm.Service != mbim.ServiceBasicConnect {
		return nil
	}
	done := func(st mbim.Status, info []byte) [][]byte {
		return [][]byte{mbim.AppendCommandDone(nil, mm.TID, mm.Service, mm.CID, st, info)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch mm.CID {
	case mbim.CIDPacketService:
		ps := mbim.PacketService{PacketServiceState: 2}
		return done(mbim.StatusSuccess, ps.AppendTo(nil))
	case mbim.CIDConnect:
		return m.connect(mm, done)
	case mbim.CIDIPConfiguration:
		q, err := mbim.ParseIPConfiguration(mm.Info)
		if err != nil {
			return done(mbim.StatusFailure, nil)
		}
		m.ipQuery = append(m.ipQuery, q.SessionID)
		n := byte(q.SessionID)
		ipc := mbim.IPConfiguration{SessionID: q.SessionID, IPv4Available: mbim.IPConfigAddress | mbim.IPConfigGateway | mbim.IPConfigMTU,
			IPv4Addresses: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, n, 1}), 24)},
			IPv4Gateway:   netip.AddrFrom4([4]byte{198, 18, n, 2}), IPv4MTU: 1500}
		return done(mbim.StatusSuccess, ipc.AppendTo(nil))
	}
	return done(mbim.StatusNoDeviceSupport, nil)
}

func (m *fakeMBIMModem) connect(mm mbim.Message, done func(mbim.Status, []byte) [][]byte) [][]byte {
	var sid uint32
	state := mbim.ActivationStateDeactivated
	if mm.Command == mbim.CommandSet {
		cs, err := mbim.ParseConnectSet(mm.Info)
		if err != nil {
			return done(mbim.StatusFailure, nil)
		}
		sid = cs.SessionID
		if cs.ActivationCommand == mbim.ActivationCommandActivate {
			if _, ok := m.active[sid]; ok || sid >= m.limit {
				return done(mbim.StatusMaxActivatedContexts, nil)
			}
			m.active[sid] = cs.AccessString
			m.connects = append(m.connects, sid)
		} else {
			if _, ok := m.active[sid]; !ok {
				return done(mbim.StatusContextNotActivated, nil)
			}
			delete(m.active, sid)
		}
	} else {
		q, err := mbim.ParseConnectInfo(mm.Info)
		if err != nil {
			return done(mbim.StatusFailure, nil)
		}
		sid = q.SessionID
	}
	if _, ok := m.active[sid]; ok {
		state = mbim.ActivationStateActivated
	}
	ci := mbim.ConnectInfo{SessionID: sid, ActivationState: state, IPType: mbim.IPTypeIPv4, ContextType: mbim.ContextTypeInternet}
	return done(mbim.StatusSuccess, ci.AppendTo(nil))
}

// newMBIMSessions is a Sessions set of limit sessions over a fake MBIM
// modem taking modemLimit sessions, each with a fakeHost.
func newMBIMSessions(t *testing.T, limit int, modemLimit uint32) (*ctrlport.Sessions, *fakeMBIMModem, *fakeWire, []*fakeHost) {
	t.Helper()
	fm := &fakeMBIMModem{limit: modemLimit, active: map[uint32]string{}}
	w := newFakeWire(t, fm.answer)
	s0 := ctrlport.NewMBIMSession(w)
	hosts := make([]*fakeHost, limit)
	ss, err := ctrlport.NewSessions(ctrlport.SessionsOptions{Limit: limit,
		Client: func(n uint8) (ctrlport.SessionClient, error) {
			if n == 0 {
				return s0, nil
			}
			return s0.Sibling(n)
		},
		Host: func(n uint8) ctrlport.HostConfigurer { hosts[n] = &fakeHost{}; return hosts[n] },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Close)
	return ss, fm, w, hosts
}

func TestSessionsMBIMTwoAtOnce(t *testing.T) {
	ss, fm, _, hosts := newMBIMSessions(t, 3, 8)
	var wg sync.WaitGroup
	states := make([]ctrlport.SessionState, 2)
	errs := make([]error, 2)
	for i, apn := range []string{"internet", "ims"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = ss.Connect(ctx(t), i, ctrlport.SessionRequest{APN: apn})
		}()
	}
	wg.Wait()
	for i, want := range []string{"198.18.0.1/24", "198.18.1.1/24"} {
		if errs[i] != nil {
			t.Fatalf("session %d: %v", i, errs[i])
		}
		st := states[i]
		if st.Session != uint8(i) || !st.Connected() || st.IPv4.String() != want {
			t.Errorf("session %d: state %+v, want connected with %s", i, st, want)
		}
		if a, _ := hosts[i].counts(); a != 1 {
			t.Errorf("session %d's host applied %d times, want 1", i, a)
		}
	}
	if st := ss.States(); st[1].APN != "ims" || st[0].APN != "internet" || st[2].Connected() || st[2].Session != 2 {
		t.Errorf("states %+v", st)
	}
	fm.mu.Lock()
	asked := fmt.Sprint(fm.ipQuery)
	fm.mu.Unlock()
	if asked != "[0 1]" && asked != "[1 0]" {
		t.Errorf("IP_CONFIGURATION asked for sessions %s, want 0 and 1", asked)
	}
	// Disconnect 1: session 0 stays.
	if _, err := ss.Disconnect(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if fm.isActive(1) || !fm.isActive(0) {
		t.Errorf("the modem's sessions after disconnecting 1: %v", fm.active)
	}
	if _, r := hosts[0].counts(); r != 0 {
		t.Error("disconnecting session 1 unconfigured session 0's host")
	}
	if _, r := hosts[1].counts(); r != 1 {
		t.Error("session 1's host not unconfigured")
	}
}

func TestSessionsErrors(t *testing.T) {
	ss, fm, _, hosts := newMBIMSessions(t, 3, 2)
	if _, err := ss.Connect(ctx(t), 3, ctrlport.SessionRequest{APN: "x"}); !errors.Is(err, ctrlport.ErrSessionLimit) {
		t.Errorf("session 3 of 3: %v, want ErrSessionLimit", err)
	}
	if _, err := ss.Connect(ctx(t), -1, ctrlport.SessionRequest{APN: "x"}); !errors.Is(err, ctrlport.ErrSessionLimit) {
		t.Errorf("session -1: %v, want ErrSessionLimit", err)
	}
	if _, err := ss.Disconnect(ctx(t), 1); !errors.Is(err, ctrlport.ErrSessionNotConnected) {
		t.Errorf("disconnect of an idle session 1: %v, want ErrSessionNotConnected", err)
	}
	if _, err := ss.Connect(ctx(t), 1, ctrlport.SessionRequest{APN: "ims"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Connect(ctx(t), 1, ctrlport.SessionRequest{APN: "ims"}); !errors.Is(err, ctrlport.ErrSessionActive) {
		t.Errorf("second connect of session 1: %v, want ErrSessionActive", err)
	}
	// The modem takes 2 sessions: session 2 is refused by the modem, and
	// nothing is configured for it.
	_, err := ss.Connect(ctx(t), 2, ctrlport.SessionRequest{APN: "more"})
	if !errors.Is(err, ctrlport.ErrSessionRefused) {
		t.Errorf("session 2 beyond the modem's limit: %v, want ErrSessionRefused", err)
	}
	if a, _ := hosts[2].counts(); a != 0 || fm.isActive(2) {
		t.Error("a refused session was configured")
	}
	if _, err := ss.Connect(ctx(t), 0, ctrlport.SessionRequest{APN: "x", Interface: "bad/name"}); !errors.Is(err, ctrlport.ErrSessionRequest) {
		t.Errorf("bad interface name: %v, want ErrSessionRequest", err)
	}
	if _, err := ss.Connect(ctx(t), 0, ctrlport.SessionRequest{APN: "x", Interface: "other0"}); !errors.Is(err, ctrlport.ErrSessionRequest) {
		t.Errorf("an interface the host does not configure: %v, want ErrSessionRequest", err)
	}
	if fm.isActive(0) {
		t.Error("a refused request reached the modem")
	}
	if _, err := ctrlport.NewSessions(ctrlport.SessionsOptions{Limit: 257, Client: func(uint8) (ctrlport.SessionClient, error) { return nil, nil }}); !errors.Is(err, ctrlport.ErrSessionLimit) {
		t.Errorf("a limit of 257: %v", err)
	}
}

// A CONNECT indication that deactivates session 1 ends session 1 only.
func TestSessionsMBIMIndicationRouted(t *testing.T) {
	ss, fm, w, hosts := newMBIMSessions(t, 3, 8)
	for i, apn := range []string{"internet", "ims"} {
		if _, err := ss.Connect(ctx(t), i, ctrlport.SessionRequest{APN: apn}); err != nil {
			t.Fatal(err)
		}
	}
	fm.deactivate(1)
	ci := mbim.ConnectInfo{SessionID: 1, ActivationState: mbim.ActivationStateDeactivated, ContextType: mbim.ContextTypeInternet}
	w.push(mbim.AppendIndicateStatus(nil, 0, mbim.ServiceBasicConnect, mbim.CIDConnect, ci.AppendTo(nil)))
	s1, _ := ss.Get(1)
	s0, _ := ss.Get(0)
	waitFor(t, "session 1 to end", func() bool { return !s1.State().Connected() })
	if _, r := hosts[1].counts(); r != 1 || s1.Stats().NetworkDisconnects != 1 {
		t.Errorf("session 1: host removed %d times, stats %+v", r, s1.Stats())
	}
	if !s0.State().Connected() || s0.Stats().StateChecks != 0 {
		t.Errorf("session 0 after session 1's indication: %+v, stats %+v", s0.State(), s0.Stats())
	}
	if _, r := hosts[0].counts(); r != 0 {
		t.Error("session 0's host was unconfigured")
	}
}

// fakeQMIModem answers CTL ALLOCATE/RELEASE_CID and WDS BIND_MUX_DATA_PORT,
// SET_IP_FAMILY, START/STOP_NETWORK and GET_CURRENT_SETTINGS; a client
// bound to mux id base+N gets 198.18.N.1.
type fakeQMIModem struct {
	base uint8

	mu      sync.Mutex
	nextCID uint8
	mux     map[uint8]uint8 // client id → mux id bound
	binds   [][]byte        // BIND_MUX_DATA_PORT TLVs 0x10 and 0x11, joined
	order   []string        // requests, "cid:message"
}

func (m *fakeQMIModem) answer(msg []byte) [][]byte {
	f, err := qmi.ParseFrame(msg)
	if err != nil || f.Type() != qmi.Request {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.order = append(m.order, fmt.Sprintf("%d:%s", f.Client, f.Service.MessageName(f.Message)))
	ok := func(tlvs func(b *qmi.Builder)) [][]byte { return [][]byte{qmiReply(f, nil, &qmi.Success, tlvs)} }
	switch {
	case f.Service == qmi.CTL && f.Message == qmi.CTLAllocateCID:
		m.nextCID++
		return ok(func(b *qmi.Builder) { b.TLV(0x01, []byte{uint8(qmi.WDS), m.nextCID}) })
	case f.Service == qmi.CTL:
		return ok(nil)
	case f.Message == qmi.WDSBindMuxDataPort:
		ep, _ := f.TLVs.Find(0x10)
		mux, _ := f.TLVs.Find(0x11)
		m.binds = append(m.binds, append(append([]byte(nil), ep...), mux...))
		if len(mux) == 1 {
			m.mux[f.Client] = mux[0]
		}
		return ok(nil)
	case f.Message == qmi.WDSStartNetwork:
		return ok(func(b *qmi.Builder) { b.TLVU32(0x01, uint32(f.Client)) })
	case f.Message == qmi.WDSGetCurrentSettings:
		n := m.base
		if mux, bound := m.mux[f.Client]; bound {
			n = mux
		}
		n -= m.base
		return [][]byte{wdsSettings(f, map[uint8][]byte{0x1E: wdsV4(fmt.Sprintf("198.18.%d.1", n)), 0x20: wdsV4(fmt.Sprintf("198.18.%d.2", n))})}
	}
	return ok(nil)
}

func TestSessionsQMIBindMuxDataPort(t *testing.T) {
	fm := &fakeQMIModem{base: 112, mux: map[uint8]uint8{}}
	w := newFakeWire(t, fm.answer)
	q0 := ctrlport.NewQMISession(w)
	ss, err := ctrlport.NewSessions(ctrlport.SessionsOptions{Limit: 4, Client: func(n uint8) (ctrlport.SessionClient, error) {
		if n == 0 {
			return q0, nil
		}
		return q0.Sibling(n, ctrlport.MuxBinding(112, n)), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Close)
	st0, err := ss.Connect(ctx(t), 0, ctrlport.SessionRequest{APN: "internet"})
	if err != nil {
		t.Fatal(err)
	}
	fm.mu.Lock()
	nb := len(fm.binds)
	fm.mu.Unlock()
	if nb != 0 {
		t.Fatalf("session 0 bound its client: %x", fm.binds)
	}
	st3, err := ss.Connect(ctx(t), 3, ctrlport.SessionRequest{APN: "ims"})
	if err != nil {
		t.Fatal(err)
	}
	if st0.IPv4.String() != "198.18.0.1/24" || st3.IPv4.String() != "198.18.3.1/24" || st3.Session != 3 {
		t.Errorf("session 0 %v, session 3 %v (%d)", st0.IPv4, st3.IPv4, st3.Session)
	}
	fm.mu.Lock()
	defer fm.mu.Unlock()
	want := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 3), 4)
	want = append(want, 115)
	if len(fm.binds) != 1 || string(fm.binds[0]) != string(want) {
		t.Fatalf("BIND_MUX_DATA_PORT TLVs % x, want % x (PCIe endpoint 3, interface 4, mux id 112+3)", fm.binds, want)
	}
	// The bind comes before the client's START_NETWORK.
	bind, start := -1, -1
	for i, o := range fm.order {
		switch o {
		case "2:BIND_MUX_DATA_PORT":
			bind = i
		case "2:START_NETWORK":
			start = i
		}
	}
	if bind < 0 || start < bind {
		t.Errorf("requests %v: want client 2's BIND_MUX_DATA_PORT before its START_NETWORK", fm.order)
	}
}

// fakePrep is a HostPreparer that records its calls.
type fakePrep struct {
	fakeHost
	mu                sync.Mutex
	name              string
	prepared, release int
	prepareErr        error
}

func (p *fakePrep) Interface() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name
}

func (p *fakePrep) Prepare(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prepareErr != nil {
		return p.prepareErr
	}
	p.prepared++
	p.name = cmpOr(name, "tun.1")
	return nil
}

func (p *fakePrep) Release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release++
	p.name = ""
	return nil
}

func (p *fakePrep) calls() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.prepared, p.release
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// A session whose host makes its interface per connect: made before the
// modem is asked, removed after a refusal, after a disconnect, after the
// network ends the session, and never made for a refused name.
func TestSessionsHostPreparer(t *testing.T) {
	fm := &fakeMBIMModem{limit: 1, active: map[uint32]string{}}
	w := newFakeWire(t, fm.answer)
	s0 := ctrlport.NewMBIMSession(w)
	s1, err := s0.Sibling(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s0.Sibling(1); !errors.Is(err, ctrlport.ErrSessionNumber) {
		t.Errorf("a second client for session 1: %v", err)
	}
	p := &fakePrep{}
	s := ctrlport.NewSession(s1, ctrlport.SessionOptions{Number: 1, Host: p})
	t.Cleanup(s.Close)
	t.Cleanup(s0.Close)
	// The modem takes session 0 only: refused, the interface removed.
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "ims", Interface: "ims0"}); !errors.Is(err, ctrlport.ErrSessionRefused) {
		t.Fatalf("connect beyond the modem's limit: %v", err)
	}
	if pr, rl := p.calls(); pr != 1 || rl != 1 || s.State().Interface != "" {
		t.Fatalf("after a refusal: prepared %d, released %d, interface %q", pr, rl, s.State().Interface)
	}
	p.prepareErr = fmt.Errorf("%w: ims0 exists", ctrlport.ErrInterfaceTaken)
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "ims", Interface: "ims0"}); !errors.Is(err, ctrlport.ErrInterfaceTaken) {
		t.Fatalf("connect with a name in use: %v", err)
	}
	fm.mu.Lock()
	asked := len(fm.connects)
	fm.limit = 2
	fm.mu.Unlock()
	if asked != 0 {
		t.Fatalf("the modem was asked %d times", asked)
	}
	p.prepareErr = nil
	st, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "ims", Interface: "ims0"})
	if err != nil || st.Interface != "ims0" || st.Session != 1 {
		t.Fatalf("connect: %+v %v", st, err)
	}
	if _, err := s.Disconnect(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if pr, rl := p.calls(); pr != 2 || rl != 2 {
		t.Fatalf("after a disconnect: prepared %d, released %d", pr, rl)
	}
	if _, err := s.Connect(ctx(t), ctrlport.SessionRequest{APN: "ims"}); err != nil {
		t.Fatal(err)
	}
	fm.deactivate(1)
	ci := mbim.ConnectInfo{SessionID: 1, ActivationState: mbim.ActivationStateDeactivated, ContextType: mbim.ContextTypeInternet}
	w.push(mbim.AppendIndicateStatus(nil, 0, mbim.ServiceBasicConnect, mbim.CIDConnect, ci.AppendTo(nil)))
	waitFor(t, "the network's disconnect to release the interface", func() bool { _, rl := p.calls(); return rl == 3 })
	if s.State().Connected() || s.Stats().NetworkDisconnects != 1 {
		t.Errorf("after the network's disconnect: %+v %+v", s.State(), s.Stats())
	}
}
