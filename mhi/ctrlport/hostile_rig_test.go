package ctrlport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/hostile"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"golang.org/x/sys/unix"
)

// This file holds the rigs of the control-channel attack suite
// (TestHostileControlChannel):
//
//   - hrig: the scripted hostile MHI device of mhi/hostile with the MBIM and
//     DUN control pairs. The test completes every downlink element itself
//     (any bytes, any completion code, any claimed length, or no event at
//     all) and sees every uplink transfer the host queues.
//   - mrig: the project's mock modem (mhi/ep) with a scripted function in
//     front of its MBIM, QMI or AT function: honest by default (it hands
//     every transfer to the real function), and at a test's word it answers
//     anything, or sends unsolicited transfers, through the real MHI path.

// attack is one named subtest of the suite with its time bound.
type attack struct {
	name  string
	limit time.Duration // whole subtest, teardown included
	run   func(t *testing.T)
}

// runAttacks runs each attack as a subtest and checks around it what every
// attack must keep: bounded time (a watchdog ends the test binary with every
// goroutine's stack if an attack hangs), and no goroutine or descriptor
// left after its rig is torn down. A panic anywhere fails the run.
func runAttacks(t *testing.T, attacks []attack) {
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			before := fuzzcheck.Snapshot()
			start := time.Now()
			watchdog := time.AfterFunc(a.limit+20*time.Second, func() {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				panic(fmt.Sprintf("attack %q still running after %v:\n%s", a.name, time.Since(start), buf[:n]))
			})
			// Registered first, so it runs after the rig's own cleanups.
			t.Cleanup(func() {
				watchdog.Stop()
				if d := time.Since(start); d > a.limit {
					t.Errorf("the attack took %v, bound %v", d, a.limit)
				}
				if l := before.Leaks(); l != "" {
					t.Errorf("left behind after the attack:\n%s", l)
				}
			})
			a.run(t)
		})
	}
}

// ---- hrig: the scripted hostile device ----

// Channels of the hrig's configuration.
const (
	hMBIMUL, hMBIMDL = 12, 13
	hDUNUL, hDUNDL   = 32, 33
	hRingElements    = 8
)

func hrigConfig() wire.ControllerConfig {
	ch := func(num uint8, name string, dir wire.Direction) wire.ChannelConfig {
		return wire.ChannelConfig{Num: num, Name: name, Elements: hRingElements, EventRing: 1, Dir: dir, EE: wire.EEAMSS}
	}
	return wire.ControllerConfig{
		MaxChannels: 128,
		Timeout:     2 * time.Second,
		Channels: []wire.ChannelConfig{
			ch(hMBIMUL, "MBIM", wire.Uplink), ch(hMBIMDL, "MBIM", wire.Downlink),
			ch(hDUNUL, "DUN", wire.Uplink), ch(hDUNDL, "DUN", wire.Downlink),
		},
		EventRings: []wire.EventRingConfig{
			{Elements: 32, Kind: wire.EventCtrl, Vector: 1, Channel: -1},
			{Elements: 64, Kind: wire.EventSWData, Vector: 2, Channel: -1},
		},
		CommandElements: 16,
	}
}

// hrig is a controller powered up on a scripted hostile device.
type hrig struct {
	dev  *hostile.Device
	h    *hostile.Transport
	ctrl *mhi.Controller

	mu     sync.Mutex
	dlHook func(ev *wire.Element) bool // sees every downlink transfer event; false drops it
	ul     chan []byte                 // uplink transfers the host queued, in order
}

func newHRig(t *testing.T) *hrig {
	t.Helper()
	cfg := hrigConfig()
	dev := hostile.NewDevice(hostile.DeviceConfig{MHI: cfg})
	h := hostile.Wrap(dev, hostile.Options{PassFree: true})
	ctrl, err := mhi.NewController(h, cfg, mhi.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	r := &hrig{dev: dev, h: h, ctrl: ctrl, ul: make(chan []byte, 256)}
	dev.SetBehaviour(hostile.Behaviour{Event: r.event})
	t.Cleanup(func() {
		start := time.Now()
		if err := ctrl.PowerDown(); err != nil {
			t.Logf("PowerDown: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("PowerDown took %v", d)
		}
		if v := append(h.Violations(), dev.Violations()...); len(v) > 0 {
			t.Errorf("use of freed memory:\n%s", strings.Join(v, "\n"))
		}
		if n := dev.Memory().InUse(); n != 0 {
			t.Errorf("%d bytes of DMA memory still allocated after power-down", n)
		}
		dev.Close()
	})
	if err := ctrl.PowerUp(); err != nil {
		t.Fatalf("PowerUp: %v", err)
	}
	return r
}

// event is the device's hook on every event it posts (called with the
// device's lock held: it may only touch the device's memory).
func (r *hrig) event(_ int, ev *wire.Element) bool {
	if ev.Type() != wire.PktTxEvent {
		return true
	}
	if ev.Channel()%2 == 0 { // uplink: record what the host sent
		if raw, err := r.dev.Memory().Slice(ev.Ptr, wire.ElementSize); err == nil {
			tre := wire.ParseElement(raw)
			if data, err := r.dev.Memory().Slice(tre.Ptr, int(tre.Length())); err == nil {
				select {
				case r.ul <- append([]byte(nil), data...):
				default:
				}
			}
		}
		return true
	}
	r.mu.Lock()
	hook := r.dlHook
	r.mu.Unlock()
	if hook != nil {
		return hook(ev)
	}
	return true
}

// setDLHook installs (nil: removes) the hook on downlink transfer events.
func (r *hrig) setDLHook(f func(ev *wire.Element) bool) {
	r.mu.Lock()
	r.dlHook = f
	r.mu.Unlock()
}

// complete fills the next downlink element of channel num with data and
// posts an event with code, waiting (up to 2 s) for the host to have an
// element queued. It returns the element's length.
func (r *hrig) complete(t *testing.T, num uint8, data []byte, code wire.CompletionCode) int {
	t.Helper()
	var tre wire.Element
	if err := poll.UntilNil(2*time.Second, func() (err error) {
		_, tre, err = r.dev.NextTRE(num)
		return err
	}); err != nil {
		t.Fatalf("the host has no downlink element queued on channel %d: %v (pair stats %+v)", num, err, r.ctrl.Stats())
	}
	if _, err := r.dev.CompleteDL(num, data, code); err != nil {
		t.Fatalf("CompleteDL on channel %d: %v", num, err)
	}
	return int(tre.Length())
}

// send writes msg as an honest device does: as many elements as it
// takes, OVERFLOW for all but the last, EOT for the last.
func (r *hrig) send(t *testing.T, num uint8, msg []byte) {
	t.Helper()
	for {
		var tre wire.Element
		if err := poll.UntilNil(2*time.Second, func() (err error) {
			_, tre, err = r.dev.NextTRE(num)
			return err
		}); err != nil {
			t.Fatalf("the host has no downlink element queued on channel %d: %v", num, err)
		}
		size := int(tre.Length())
		if len(msg) <= size {
			r.complete(t, num, msg, wire.CCEOT)
			return
		}
		r.complete(t, num, msg[:size], wire.CCOverflow)
		msg = msg[size:]
	}
}

// nextUL returns the next uplink transfer the host queued (within 5 s).
func (r *hrig) nextUL(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-r.ul:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("the host sent nothing on the uplink")
		return nil
	}
}

// openHPort opens a port on the hrig's pair ("MBIM" or "DUN").
func openHPort(t *testing.T, r *hrig, pair string, opts ctrlport.Options) *ctrlport.Port {
	t.Helper()
	if opts.Link == "" {
		opts.Link = filepath.Join(t.TempDir(), "port")
	}
	p, err := ctrlport.Open(r.ctrl, pair, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// openClient opens the port's link as a tool would; closed at cleanup.
func openClient(t *testing.T, p *ctrlport.Port) *os.File {
	t.Helper()
	f, err := os.OpenFile(p.Link(), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// hExchange is the honest MBIM exchange on an hrig port: the client sends
// OPEN with tid, the device receives exactly it and answers OPEN_DONE, and
// the first message the client reads is that answer — nothing the attack
// left may come before it.
func hExchange(t *testing.T, r *hrig, c *os.File, tid uint32) {
	t.Helper()
	req := mbim.AppendOpen(nil, tid, 4096)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	if got := r.nextUL(t); string(got) != string(req) {
		t.Fatalf("the device received % x, want the client's OPEN % x", got, req)
	}
	r.send(t, hMBIMDL, mbim.AppendOpenDone(nil, tid, mbim.StatusSuccess))
	m := readMessage(t, c)
	if m.Type != mbim.TypeOpenDone || m.TID != tid {
		t.Fatalf("the client read %s TID %d (%d bytes) first, want OPEN_DONE TID %d", m.Type, m.TID, len(m.Raw), tid)
	}
}

// drainUL empties the record of uplink transfers.
func (r *hrig) drainUL() {
	for {
		select {
		case <-r.ul:
		default:
			return
		}
	}
}

// ---- mrig: the mock modem with scripted functions ----

// scriptFn stands in front of one of the mock's functions: honest by
// default, scripted when a hook is set.
type scriptFn struct {
	inner ep.Function

	mu   sync.Mutex
	pipe *ep.Pipe
	hook func(ctx context.Context, p *ep.Pipe, msg []byte) bool // true: answered, the real function does not see msg
	seen int
}

var (
	_ ep.PipeAttacher = (*scriptFn)(nil)
	_ ep.PipeObserver = (*scriptFn)(nil)
)

// Attach implements ep.PipeAttacher.
func (s *scriptFn) Attach(p *ep.Pipe) {
	s.mu.Lock()
	s.pipe = p
	s.mu.Unlock()
	if a, ok := s.inner.(ep.PipeAttacher); ok {
		a.Attach(p)
	}
}

// PipeStateChanged implements ep.PipeObserver.
func (s *scriptFn) PipeStateChanged(p *ep.Pipe, dir wire.Direction, st wire.ChannelState) {
	s.mu.Lock()
	s.pipe = p
	s.mu.Unlock()
	if o, ok := s.inner.(ep.PipeObserver); ok {
		o.PipeStateChanged(p, dir, st)
	}
}

// Receive implements ep.Function.
func (s *scriptFn) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	s.mu.Lock()
	s.pipe = p
	s.seen++
	hook := s.hook
	s.mu.Unlock()
	if hook != nil && hook(ctx, p, transfer) {
		return nil
	}
	return s.inner.Receive(ctx, p, transfer)
}

// setHook installs (nil: removes) the scripted answers.
func (s *scriptFn) setHook(f func(ctx context.Context, p *ep.Pipe, msg []byte) bool) {
	s.mu.Lock()
	s.hook = f
	s.mu.Unlock()
}

// sendUnsolicited sends data on the pair's downlink as one transfer, when
// no request asked for it.
func (s *scriptFn) sendUnsolicited(data []byte) error {
	s.mu.Lock()
	p := s.pipe
	s.mu.Unlock()
	if p == nil {
		return errors.New("the function has no pipe yet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Send(ctx, data)
}

// mrig is the mock modem of a model with scripted functions on some of
// its control pairs, powered up.
type mrig struct {
	mock *mock.Mock
	fns  map[string]*scriptFn
}

// newMRig starts a mock of model (RequireConnect) with a scriptFn in front
// of the functions of pairs.
func newMRig(t *testing.T, model string, pairs ...string) *mrig {
	t.Helper()
	r := &mrig{fns: map[string]*scriptFn{}}
	m, err := mock.Open(mock.Options{Model: model, Modem: modem.Config{RequireConnect: true}, Device: func(c *ep.Config) {
		for _, p := range pairs {
			inner, ok := c.Functions[p]
			if !ok {
				continue
			}
			s := &scriptFn{inner: inner}
			r.fns[p] = s
			c.Functions[p] = s
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	r.mock = m
	t.Cleanup(func() { m.Close() })
	for _, p := range pairs {
		if r.fns[p] == nil {
			t.Fatalf("model %s has no function on pair %s", model, p)
		}
	}
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	return r
}

// port opens a port on pair.
func (r *mrig) port(t *testing.T, pair string, opts ctrlport.Options) *ctrlport.Port {
	t.Helper()
	if opts.Link == "" {
		opts.Link = filepath.Join(t.TempDir(), strings.ToLower(pair))
	}
	p, err := ctrlport.Open(r.mock.Controller, pair, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// flushClient discards what the client's side of the pseudo-terminal
// holds (queue: unix.TCIFLUSH, TCOFLUSH, TCIOFLUSH). It does not use Fd,
// which would put the file in blocking mode and defeat read deadlines.
func flushClient(t *testing.T, c *os.File, queue int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlSetInt(int(fd), unix.TCFLSH, queue) }); err != nil || ierr != nil {
		t.Fatalf("flush: %v %v", err, ierr)
	}
}

// readFor reads from a client for d and returns what came.
func readFor(c *os.File, d time.Duration) []byte {
	var out []byte
	buf := make([]byte, 64<<10)
	// Not poll: it reads for all of d (a read deadline), it waits for no condition.
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_ = c.SetReadDeadline(deadline)
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) {
			break
		}
	}
	return out
}
