package ipdata

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/eptest"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
)

// ipRig is a host driving the IP_HW0 pair (100 up, 101 down) the way
// mhi_net does: a ring of MRU-sized downlink buffers refilled as they
// complete, overflow pieces chained into one transfer, uplink transfers
// queued as long as the ring has room. It is single-threaded: every wait
// pumps event ring 1.
type ipRig struct {
	*eptest.Host
	ipd *Function

	ulN, dlN int // ring elements
	mru      int
	ulBufs   []uint64 // one per UL ring slot
	ulSize   int
	ulOut    int // UL TREs not yet completed

	dlBuf     map[uint64]uint64 // DL TRE IOVA -> its buffer
	dlPool    []uint64          // DL buffers not posted
	cur       []byte            // DL transfer being chained
	transfers [][]byte          // complete DL transfers
	overflows int               // OVERFLOW completions seen
	dlEvents  int
}

const (
	ulChan = 100
	dlChan = 101
)

// ipRigConfig shapes an ipRig.
type ipRigConfig struct {
	ip        Config
	mru       int // DL buffer size (default 32768)
	dlBuffers int // DL buffers the host owns (default 8)
	post      int // of those, posted at start (default all)
	ulSize    int // UL buffer size (default 4096)
	ring      int // elements of both rings (default 32)
	depth     int // DLQueueDepth (default the device's)
}

func newIPRig(tb testing.TB, rc ipRigConfig) *ipRig {
	tb.Helper()
	if rc.mru == 0 {
		rc.mru = 32768
	}
	if rc.dlBuffers == 0 {
		rc.dlBuffers = 8
	}
	if rc.post == 0 {
		rc.post = rc.dlBuffers
	}
	if rc.ulSize == 0 {
		rc.ulSize = 4096
	}
	if rc.ring == 0 {
		rc.ring = 32
	}
	ipd, err := New(rc.ip)
	if err != nil {
		tb.Fatal(err)
	}
	h := eptest.NewHost(tb, func(c *ep.Config) {
		c.Functions = map[string]ep.Function{Name: ipd}
		c.BurstPollInterval = 100 * time.Microsecond
		c.MHI.EventRings[1].Elements = 64
		c.DLQueueDepth = rc.depth
	})
	r := &ipRig{Host: h, ipd: ipd, ulN: rc.ring, dlN: rc.ring, mru: rc.mru, ulSize: rc.ulSize,
		dlBuf: map[uint64]uint64{}}
	h.PowerUp()
	r.startIP(ulChan)
	for range rc.ring {
		r.ulBufs = append(r.ulBufs, h.Mem.Alloc(tb, rc.ulSize, 8))
	}
	r.startIP(dlChan)
	for range rc.dlBuffers {
		r.dlPool = append(r.dlPool, h.Mem.Alloc(tb, rc.mru, 8))
	}
	r.post(rc.post)
	return r
}

// startIP initialises and starts one of the IP channels.
func (r *ipRig) startIP(ch uint8) {
	r.T.Helper()
	r.InitChannel(ch, r.ulN)
	if ev := r.commandPumping(wire.PktStartChanCmd, ch); ev.Code() != wire.CCSuccess {
		r.T.Fatalf("START(%d) = %s", ch, ev.Code())
	}
}

// post posts up to n pooled DL buffers and rings the doorbell.
func (r *ipRig) post(n int) {
	for ; n > 0 && len(r.dlPool) > 0; n-- {
		buf := r.dlPool[len(r.dlPool)-1]
		r.dlPool = r.dlPool[:len(r.dlPool)-1]
		tre := r.Queue(dlChan, buf, uint32(r.mru), wire.TREIEOT|wire.TREBEI)
		r.dlBuf[tre] = buf
	}
	r.Ring(dlChan)
}

// step handles one event of ring 1 if there is one.
func (r *ipRig) step() bool {
	if r.PendingEvents(1) == 0 {
		return false
	}
	ev := r.NextEvent(1)
	switch {
	case ev.Code() == wire.CCDBMode:
		r.Ring(ev.Channel())
	case ev.Channel() == ulChan:
		r.ulOut--
	case ev.Channel() == dlChan:
		r.dlEvents++
		buf, ok := r.dlBuf[ev.Ptr]
		if !ok {
			r.T.Fatalf("DL event for unknown TRE: %v", ev)
		}
		delete(r.dlBuf, ev.Ptr)
		r.cur = append(r.cur, r.Read(buf, int(ev.Length()))...)
		switch ev.Code() {
		case wire.CCOverflow:
			r.overflows++
		case wire.CCEOT:
			r.transfers = append(r.transfers, r.cur)
			r.cur = nil
		default:
			r.T.Fatalf("DL event %v", ev)
		}
		r.dlPool = append(r.dlPool, buf)
		r.post(1)
	default:
		r.T.Fatalf("unexpected event %v", ev)
	}
	return true
}

// pumpUntil handles events until cond holds, checking it before each.
func (r *ipRig) pumpUntil(what string, cond func() bool) {
	r.T.Helper()
	poll.Wait(r.T, eptest.WaitTimeout, func() bool {
		for !cond() {
			if !r.step() {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("timed out waiting for %s: %d DL transfers, stats %+v, ip %+v",
			what, len(r.transfers), r.Dev.Stats(), r.ipd.Stats())
	})
}

// pumpFor handles events for d.
func (r *ipRig) pumpFor(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if !r.step() {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// sendUL queues one uplink transfer, waiting for ring room.
func (r *ipRig) sendUL(data []byte) {
	r.T.Helper()
	if len(data) > r.ulSize {
		r.T.Fatalf("UL transfer of %d bytes, buffers hold %d", len(data), r.ulSize)
	}
	r.pumpUntil("UL ring room", func() bool { return r.ulOut < r.ulN-1 })
	ring := r.Ch[ulChan]
	buf := r.ulBufs[ring.Wp]
	r.Write(buf, data)
	r.Queue(ulChan, buf, uint32(len(data)), wire.TREIEOT|wire.TREBEI)
	r.ulOut++
	r.Ring(ulChan)
}

// commandPumping posts a command and waits for its completion on ring 0
// while handling ring 1, as a host whose event processing runs on its own.
func (r *ipRig) commandPumping(t wire.PacketType, ch uint8) wire.Element {
	r.T.Helper()
	addr := r.PostCommand(t, ch)
	r.pumpUntil(fmt.Sprintf("completion of %s(%d)", t, ch), func() bool { return r.PendingEvents(0) > 0 })
	ev := r.NextEvent(0)
	if ev.Type() != wire.PktCmdCompletion || ev.Ptr != addr {
		r.T.Fatalf("reply to %s(%d): %v", t, ch, ev)
	}
	return ev
}

// restartDL is the host's MRU change: STOP the DL channel, RESET it to
// reclaim its buffers, START it again on a fresh ring with buffers of the
// new size.
func (r *ipRig) restartDL(mru, buffers int) {
	r.T.Helper()
	if ev := r.commandPumping(wire.PktStopChanCmd, dlChan); ev.Code() != wire.CCSuccess {
		r.T.Fatalf("STOP = %s", ev.Code())
	}
	// Completions posted before the STOP finished are still on ring 1.
	for r.step() {
	}
	if ev := r.commandPumping(wire.PktResetChanCmd, dlChan); ev.Code() != wire.CCSuccess {
		r.T.Fatalf("RESET = %s", ev.Code())
	}
	if len(r.cur) != 0 {
		r.T.Fatalf("host holds %d bytes of an unfinished transfer after STOP", len(r.cur))
	}
	r.dlBuf = map[uint64]uint64{}
	r.mru = mru
	r.dlPool = nil
	for range buffers {
		r.dlPool = append(r.dlPool, r.Mem.Alloc(r.T, mru, 8))
	}
	r.startIP(dlChan)
	r.post(buffers)
}
