package soak

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/loopback"
)

// LoopbackCounts is what the LOOPBACK pair (channels 0/1) carried: the
// project's loopback client sends random payloads and compares every
// echo byte for byte. Sent = Received + Aborted + Lost, where Aborted are
// the transfers in flight when a SYS_ERR hit (the client counts them) and
// Lost those in flight when the served modem was killed.
type LoopbackCounts struct {
	Runs        uint64 `json:"runs"`
	Sent        uint64 `json:"sent"`
	Received    uint64 `json:"received"`
	Mismatched  uint64 `json:"mismatched"`
	Aborted     uint64 `json:"aborted"`
	Lost        uint64 `json:"lost_with_modem"`
	Bytes       uint64 `json:"bytes"`
	Interrupted uint64 `json:"interrupted_runs"`
	Restarts    uint64 `json:"restarts"`
}

// lbDriver keeps the LOOPBACK pair busy: runs of 32 payloads of 1 to
// 16 KiB, the client closed and opened again when a restart is due.
type lbDriver struct {
	r   *runner
	rng *rand.Rand

	mu     sync.Mutex // guards c, ctrl, counts
	c      *loopback.Client
	ctrl   *mhi.Controller
	counts LoopbackCounts

	restart  atomic.Bool   // a restart is due
	received atomic.Uint64 // for the watchdog
}

// lbTimeout is the longest wait for one echo.
const lbTimeout = 2 * time.Second

func newLBDriver(r *runner) *lbDriver { return &lbDriver{r: r, rng: r.rngFor(2)} }

func (l *lbDriver) snapshot() LoopbackCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts
}

// run drives the pair until the run ends.
func (l *lbDriver) run() {
	r := l.r
	var openFailSince time.Time
	for r.ctx.Err() == nil {
		s, release := r.current()
		if s == nil {
			release()
			r.sleep(time.Millisecond)
			continue
		}
		if l.c != nil && (l.ctrl != s.ctrl || l.restart.Load()) {
			if l.ctrl == s.ctrl {
				l.mu.Lock()
				l.counts.Restarts++
				l.mu.Unlock()
			}
			l.restart.Store(false)
			l.closeLocked()
		}
		if l.c == nil {
			var c *loopback.Client
			var err error
			seed := l.rng.Uint64() | 1
			c, err = loopback.Open(s.ctrl, loopback.Options{DLBufferSize: 8192, Timeout: lbTimeout, Seed: seed})
			if err != nil {
				release()
				if openFailSince.IsZero() {
					openFailSince = time.Now()
				} else if time.Since(openFailSince) > r.o.Stall {
					r.fail("stuck", "LOOPBACK pair (channels 0/1): cannot be opened for %v: %v", r.o.Stall, err)
					return
				}
				r.sleep(5 * time.Millisecond)
				continue
			}
			openFailSince = time.Time{}
			l.mu.Lock()
			l.c, l.ctrl = c, s.ctrl
			l.mu.Unlock()
		}
		faultsBefore, killsBefore := r.faultMark(), r.modemRestarts.Load()
		res, err := l.c.Run(loopback.RunOptions{Count: 32, MinSize: 1, MaxSize: 16 << 10, MaxTRE: 4})
		release()
		l.account(res, err, faultsBefore, killsBefore)
		if err != nil {
			r.sleep(time.Millisecond)
		}
	}
}

// account adds a run's result and checks it.
func (l *lbDriver) account(res loopback.Result, err error, faultsBefore, killsBefore uint64) {
	r := l.r
	l.mu.Lock()
	c := &l.counts
	c.Runs++
	c.Sent += uint64(res.Sent)
	c.Received += uint64(res.Received)
	c.Mismatched += uint64(res.Mismatched)
	c.Aborted += uint64(res.Aborted)
	c.Bytes += uint64(res.Bytes)
	if err != nil {
		c.Interrupted++
	}
	lost := int64(res.Sent) - int64(res.Received) - int64(res.Aborted)
	faulted := r.faultMark() != faultsBefore || r.recovering.Load() > 0
	mismatched := uint64(res.Mismatched)
	if lost > 0 && err != nil && r.modemRestarts.Load() != killsBefore {
		c.Lost += uint64(lost)
		lost = 0
	}
	l.mu.Unlock()
	l.received.Add(uint64(res.Received))
	switch {
	case r.ctx.Err() != nil:
	case mismatched > 0:
		r.fail("integrity", "LOOPBACK pair: %d of %d echoes differ from what was sent or were never sent (faults during the run: %v)", mismatched, res.Sent, faulted)
	case lost != 0:
		r.fail("loopback", "LOOPBACK pair: %d sent, %d received, %d aborted by SYS_ERR: %d unaccounted (run error: %v)",
			res.Sent, res.Received, res.Aborted, lost, err)
	case err != nil && !faulted && !errors.Is(err, loopback.ErrInterrupted):
		r.fail("stuck", "LOOPBACK pair (channels 0/1): %v, with no fault injected", err)
	}
}

// closeLocked closes the client; the caller holds the session (read).
func (l *lbDriver) closeLocked() {
	l.mu.Lock()
	c := l.c
	l.c, l.ctrl = nil, nil
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// close closes the client at the end of the run.
func (l *lbDriver) close() {
	l.r.sessMu.RLock()
	defer l.r.sessMu.RUnlock()
	l.closeLocked()
}
