package ep

import (
	"fmt"
	"time"

	"testing"

	"github.com/gomhi/gomhi/mhi/wire"
)

// ctrlRig is a host driving the control channel pairs the way
// mhi_wwan_ctrl does: each write is one uplink transfer, a ring of
// downlink buffers is kept posted and refilled, and OVERFLOW pieces are
// chained into one transfer. Every control channel and the command ring
// share event ring 0; the rig is single-threaded (every wait pumps ring 0).
type ctrlRig struct {
	*testHost
	pairs  map[string]*ctrlPair
	byChan map[uint8]*ctrlPair
	cmdEv  *wire.Element
}

type ctrlPair struct {
	name    string
	ul, dl  uint8
	ulBufs  []uint64
	ulOut   int
	dlBuf   map[uint64]uint64
	dlPool  []uint64
	cur     []byte
	rx      [][]byte
	bufSize int
}

const (
	ctrlRing    = 16
	ctrlBufSize = 1024 // small enough that long answers chain
)

// ctrlChannels are the control pairs of the rig, as the device table has
// them (QMI of qcom-sdx55m, DUN and DUN2 of telit-fn990).
var ctrlChannels = []struct {
	name string
	ul   uint8
}{{"QMI", 14}, {"DUN", 32}, {"DUN2", 92}}

// newCtrlRig starts a device offering the control pairs with fns attached
// and powers it up; the pairs are not started.
func newCtrlRig(tb testing.TB, fns map[string]Function) *ctrlRig {
	tb.Helper()
	h := newHost(tb, func(c *Config) {
		c.MHI.EventRings[0].Elements = 64
		for _, cc := range ctrlChannels {
			c.MHI.Channels = append(c.MHI.Channels,
				wire.ChannelConfig{Num: cc.ul, Name: cc.name, Elements: ctrlRing, EventRing: 0, Dir: wire.Uplink, EE: wire.EEAMSS},
				wire.ChannelConfig{Num: cc.ul + 1, Name: cc.name, Elements: ctrlRing, EventRing: 0, Dir: wire.Downlink, EE: wire.EEAMSS})
		}
		c.Functions = fns
	})
	r := &ctrlRig{testHost: h, pairs: map[string]*ctrlPair{}, byChan: map[uint8]*ctrlPair{}}
	h.powerUp()
	for _, cc := range ctrlChannels {
		p := &ctrlPair{name: cc.name, ul: cc.ul, dl: cc.ul + 1, dlBuf: map[uint64]uint64{}, bufSize: ctrlBufSize}
		r.pairs[cc.name], r.byChan[p.ul], r.byChan[p.dl] = p, p, p
	}
	return r
}

// open starts a pair's channels (as opening /dev/wwan0qmi0 does) and
// posts its downlink buffers.
func (r *ctrlRig) open(name string) *ctrlPair {
	r.t.Helper()
	p := r.pairs[name]
	for _, ch := range []uint8{p.ul, p.dl} {
		r.initChannel(ch, ctrlRing)
		if ev := r.cmd(wire.PktStartChanCmd, ch); ev.Code() != wire.CCSuccess {
			r.t.Fatalf("START(%d) = %s", ch, ev.Code())
		}
	}
	p.ulBufs, p.ulOut, p.dlPool, p.cur, p.rx = nil, 0, nil, nil, nil
	p.dlBuf = map[uint64]uint64{}
	for range ctrlRing {
		p.ulBufs = append(p.ulBufs, r.mem.alloc(r.t, 8192, 8))
	}
	for range ctrlRing - 1 {
		p.dlPool = append(p.dlPool, r.mem.alloc(r.t, p.bufSize, 8))
	}
	r.post(p, len(p.dlPool))
	return p
}

// close resets a pair's channels (the last close of the port).
func (r *ctrlRig) close(name string) {
	r.t.Helper()
	p := r.pairs[name]
	for _, ch := range []uint8{p.ul, p.dl} {
		if ev := r.cmd(wire.PktResetChanCmd, ch); ev.Code() != wire.CCSuccess {
			r.t.Fatalf("RESET(%d) = %s", ch, ev.Code())
		}
	}
}

func (r *ctrlRig) post(p *ctrlPair, n int) {
	for ; n > 0 && len(p.dlPool) > 0; n-- {
		buf := p.dlPool[len(p.dlPool)-1]
		p.dlPool = p.dlPool[:len(p.dlPool)-1]
		tre := r.queue(p.dl, buf, uint32(p.bufSize), wire.TREIEOT)
		p.dlBuf[tre] = buf
	}
	r.ring(p.dl)
}

// cmd posts a command and returns its completion, pumping ring 0.
func (r *ctrlRig) cmd(t wire.PacketType, ch uint8) wire.Element {
	r.t.Helper()
	addr := r.testHost.cmd.addr(r.testHost.cmd.wp)
	r.writeElement(addr, wire.CommandElement(t, ch))
	r.testHost.cmd.wp = (r.testHost.cmd.wp + 1) % r.testHost.cmd.n
	r.store64(r.cmdCtx+wire.CtxWP, r.testHost.cmd.addr(r.testHost.cmd.wp))
	r.setReg64(wire.RegCRDBLower, r.testHost.cmd.addr(r.testHost.cmd.wp))
	r.pumpUntil(fmt.Sprintf("completion of %s(%d)", t, ch), func() bool { return r.cmdEv != nil })
	ev := *r.cmdEv
	r.cmdEv = nil
	if ev.Ptr != addr {
		r.t.Fatalf("reply to %s(%d): %v", t, ch, ev)
	}
	return ev
}

// step handles one event of ring 0 if there is one.
func (r *ctrlRig) step() bool {
	if r.pendingEvents(0) == 0 {
		return false
	}
	ev := r.nextEvent(0)
	if ev.Type() == wire.PktCmdCompletion {
		r.cmdEv = &ev
		return true
	}
	if ev.Type() != wire.PktTxEvent {
		r.t.Fatalf("unexpected event %v", ev)
	}
	p := r.byChan[ev.Channel()]
	if p == nil {
		r.t.Fatalf("event for channel %d: %v", ev.Channel(), ev)
	}
	if ev.Channel() == p.ul {
		p.ulOut--
		return true
	}
	buf, ok := p.dlBuf[ev.Ptr]
	if !ok {
		r.t.Fatalf("DL event for unknown TRE: %v", ev)
	}
	delete(p.dlBuf, ev.Ptr)
	p.cur = append(p.cur, r.read(buf, int(ev.Length()))...)
	switch ev.Code() {
	case wire.CCOverflow:
	case wire.CCEOT:
		p.rx = append(p.rx, p.cur)
		p.cur = nil
	default:
		r.t.Fatalf("DL event %v", ev)
	}
	p.dlPool = append(p.dlPool, buf)
	r.post(p, 1)
	return true
}

// pumpUntil handles events until cond holds.
func (r *ctrlRig) pumpUntil(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if !r.step() {
			if time.Now().After(deadline) {
				r.t.Fatalf("timed out waiting for %s (stats %+v)", what, r.dev.Stats())
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// pumpFor handles events for d.
func (r *ctrlRig) pumpFor(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !r.step() {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// write sends one uplink transfer on a pair.
func (r *ctrlRig) write(name string, data []byte) {
	r.t.Helper()
	p := r.pairs[name]
	r.pumpUntil("UL ring room", func() bool { return p.ulOut < ctrlRing-1 })
	ring := r.ch[p.ul]
	buf := p.ulBufs[ring.wp]
	if len(data) > 8192 {
		r.t.Fatalf("UL transfer of %d bytes", len(data))
	}
	if len(data) > 0 {
		r.testHost.write(buf, data)
	}
	r.queue(p.ul, buf, uint32(len(data)), wire.TREIEOT)
	p.ulOut++
	r.ring(p.ul)
}

// read returns the next downlink transfer of a pair.
func (r *ctrlRig) readDL(name string) []byte {
	r.t.Helper()
	p := r.pairs[name]
	r.pumpUntil(name+" downlink transfer", func() bool { return len(p.rx) > 0 })
	out := p.rx[0]
	p.rx = p.rx[1:]
	return out
}

// quiet checks that no downlink transfer arrives on a pair for d.
func (r *ctrlRig) quiet(name string, d time.Duration) {
	r.t.Helper()
	p := r.pairs[name]
	r.pumpFor(d)
	if len(p.rx) != 0 {
		r.t.Fatalf("%s: unexpected downlink %q", name, p.rx[0])
	}
}
