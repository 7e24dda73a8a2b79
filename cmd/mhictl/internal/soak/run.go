package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/sysfs"
)

// soakGCPercent is the GOGC of a soak run.
const soakGCPercent = 25

// runner is one soak run.
type runner struct {
	o     *Options
	start time.Time
	tree  *sysfs.Tree
	rx    *receiver
	dir   string // vfio-user: the socket's directory

	ctx    context.Context
	cancel context.CancelFunc

	// sessMu guards sess and retired; the data and LOOPBACK drivers hold
	// it (read) around their use of the session, a modem restart (write)
	// while it replaces it.
	sessMu  sync.RWMutex
	runlock func() // sessMu.RUnlock, bound once (a method value allocates)
	sess    *session
	retired hostCounts // final counters of closed sessions' devices
	// ctrlRetired: controller counters of closed sessions.
	ctrlRetired mhi.ControllerStatsSnapshot

	lb *lbDriver

	// Counters of what the soak did.
	sent            atomic.Uint64 // data packets sent (taken by Transmit or generated)
	phases          atomic.Int64
	genPhases       atomic.Int64
	phasesBounded   atomic.Int64 // phases judged without the modem's counters (a served modem killed)
	mruChanges      atomic.Uint64
	mruRefused      atomic.Uint64
	sysErrs         atomic.Uint64 // injected
	socResets       atomic.Uint64
	recovered       atomic.Uint64 // StatusRecovered seen
	recoveryFailed  atomic.Uint64 // StatusRecoveryFailed (and terminal) seen
	recovering      atomic.Int64  // SYS_ERR seen, recovery not finished
	recoveringSince atomic.Int64  // unix ns of the first SYS_ERR of the recovery in progress
	dataRestarts    atomic.Uint64
	restarting      atomic.Int32 // a data restart (Down … Up) or modem restart in progress
	modemRestarts   atomic.Uint64
	bound           atomic.Uint64 // faultBound, once known

	mu         sync.Mutex
	violations []Violation
	drops      map[string]uint64
	closedSent uint64 // packets of the phases closed (kept as totals only: an hour has thousands of phases)
	mon        *monitor
}

// Run runs a soak and returns its summary; the error wraps ErrViolation
// when a check failed (the summary names it), or says why the run could
// not start or continue.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := &runner{o: &o, tree: sysfs.NewTree(), rx: &receiver{skipN: o.sabotage.skipCountEvery}, drops: map[string]uint64{}}
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	r.runlock = r.sessMu.RUnlock
	if o.Transport == VFIOUser {
		dir, err := os.MkdirTemp("", "gomhi-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		r.dir = dir
	}
	// The Go heap grows to its goal (GOGC: twice what is live, and the
	// in-process modem's DMA slab alone is 64 MiB) before it is collected;
	// RSS follows it. A lower goal makes the heap reach its steady size
	// within the warm-up, so that RSS afterwards shows what is retained,
	// not the collector's pacing.
	defer debug.SetGCPercent(debug.SetGCPercent(soakGCPercent))
	r.start = time.Now()
	r.mon = newMonitor(r)
	s, err := r.open(r.ctx, 1)
	if err != nil {
		return nil, err
	}
	r.lb = newLBDriver(r)
	r.setSession(s)
	r.faultBound()

	var wg sync.WaitGroup
	bg := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	bg(r.lb.run)
	bg(r.faults)
	bg(r.mon.run)
	dataErr := r.dataLoop()
	r.cancel()
	wg.Wait()
	r.mon.final()

	r.lb.close()
	r.sessMu.Lock()
	if r.sess != nil {
		r.sess.close()
		r.retire(r.sess)
		r.sess = nil
	}
	r.sessMu.Unlock()

	sum := r.summary()
	if dataErr != nil && !errors.Is(dataErr, context.Canceled) && len(sum.Violations) == 0 {
		return sum, dataErr
	}
	if len(sum.Violations) > 0 {
		v := sum.Violations[0]
		return sum, fmt.Errorf("%w: %s: %s", ErrViolation, v.Kind, v.Message)
	}
	if ctx.Err() != nil {
		return sum, ctx.Err()
	}
	return sum, nil
}

// setSession installs s as the current session: bound in the tree, its
// controller's status events followed.
func (r *runner) setSession(s *session) {
	s.ctrl.OnStatus(func(ev mhi.StatusEvent) {
		switch ev.Kind {
		case mhi.StatusSysErr:
			if r.recovering.Add(1) == 1 {
				r.recoveringSince.Store(time.Now().UnixNano())
			}
		case mhi.StatusRecovered:
			r.recovered.Add(1)
			r.recovering.Store(0)
		case mhi.StatusEE:
		case mhi.StatusFailed:
			r.recoveryFailed.Add(1)
			// Not from the listener: fail dumps the controller's state.
			go r.fail("recovery", "the host gave up SYS_ERR recovery (%v): %d recoveries, %d SYS_ERRs injected, %d SoC resets; faults closer together than the recovery window (mhi.DefaultRecoveryWindow) count as consecutive",
				ev.Err, r.recovered.Load(), r.sysErrs.Load(), r.socResets.Load())
		default: // a failed attempt; another follows after a backoff
			r.recoveryFailed.Add(1)
		}
	})
	r.sessMu.Lock()
	r.sess = s
	r.bind(s)
	r.recovering.Store(0) // a new controller: the old one's recovery ended with it
	r.sessMu.Unlock()
	r.mon.sessionChanged()
}

// retire adds a closing session's counters to the retired sums. sessMu
// must be held.
func (r *runner) retire(s *session) {
	r.retired = r.retired.plus(hostOf(s.dev.Stats()))
	c := s.ctrl.Stats()
	r.ctrlRetired.SysErrs += c.SysErrs
	r.ctrlRetired.Recoveries += c.Recoveries
	r.ctrlRetired.SoCResets += c.SoCResets
	r.ctrlRetired.StaleCompletion += c.StaleCompletion
}

// current returns the current session, with sessMu held for reading; the
// caller calls done when finished with it.
func (r *runner) current() (s *session, done func()) {
	r.sessMu.RLock()
	return r.sess, r.runlock
}

// hostTotals returns the data devices' counters over the whole run.
func (r *runner) hostTotals() hostCounts {
	r.sessMu.RLock()
	defer r.sessMu.RUnlock()
	h := r.retired
	if r.sess != nil {
		h = h.plus(hostOf(r.sess.dev.Stats()))
	}
	return h
}

// modemStats returns the modem's IP data counters and the session they
// belong to: the in-process modem's, or (remote) the served modem's,
// asked for over its side channel (session.remoteStats).
func (r *runner) modemStats(remote bool) (st ipdata.Stats, session int, ok bool) {
	r.sessMu.RLock()
	s := r.sess
	if s == nil {
		r.sessMu.RUnlock()
		return st, 0, false
	}
	if s.ipd != nil {
		st = s.ipd.Stats()
		r.sessMu.RUnlock()
		return st, s.n, true
	}
	r.sessMu.RUnlock()
	if !remote {
		return st, s.n, false
	}
	// Not under sessMu: a modem restart may kill the server meanwhile
	// (remoteStats then reports false).
	st, ok = s.remoteStats()
	return st, s.n, ok
}

// Violation is a failed check.
type Violation struct {
	// At is the time since the start of the run.
	At time.Duration `json:"at_ns"`
	// Kind names the check: conservation, integrity, stuck, resource,
	// loopback, control, error.
	Kind string `json:"kind"`
	// Message says what was violated, with the values.
	Message string `json:"message"`
	// Dump is the state of the stack when it happened (channels, event
	// rings, counters), for stuck channels and failed phases.
	Dump string `json:"dump,omitempty"`
}

// fail records a violation and stops the run: the first one ends it.
func (r *runner) fail(kind, format string, args ...any) {
	v := Violation{At: time.Since(r.start), Kind: kind, Message: fmt.Sprintf(format, args...)}
	if kind == "stuck" || kind == "conservation" || kind == "control" {
		v.Dump = r.dump()
	}
	r.mu.Lock()
	r.violations = append(r.violations, v)
	r.mu.Unlock()
	r.o.Logger.Error("soak: violation", "kind", kind, "msg", v.Message)
	r.cancel()
}

func (r *runner) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.violations) > 0
}

// done reports whether the run should start no more traffic.
func (r *runner) done() bool {
	if r.ctx.Err() != nil {
		return true
	}
	if r.o.Duration > 0 && time.Since(r.start) >= r.o.Duration {
		return true
	}
	return r.o.Packets > 0 && r.sent.Load() >= r.o.Packets
}

// setMRU writes the MRU through the attribute tree, as FUSE and netlink
// writes do, retrying while the device is busy (a recovery, a restart).
func (r *runner) setMRU(mru int) {
	path := "devices/" + devName + "/mru"
	// Twice the stall bound: a stuck channel behind a refusal is named by
	// the watchdog first.
	deadline := time.Now().Add(2 * r.o.Stall)
	for {
		r.sessMu.RLock()
		err := r.tree.Set(path, strconv.Itoa(mru))
		r.sessMu.RUnlock()
		if err == nil {
			r.mruChanges.Add(1)
			for range 3 { // sabotage: three of each per change, so a run of seconds under -race shows it
				if r.o.sabotage.leakPerMRU {
					go func() { select {} }() // a goroutine that never ends
				}
				if r.o.sabotage.leakFDPerMRU {
					// A raw descriptor: an *os.File's finalizer would close it.
					_, _ = syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
				}
			}
			return
		}
		r.mruRefused.Add(1)
		if errors.Is(err, sysfs.ErrInvalid) || time.Now().After(deadline) {
			r.fail("control", "writing %s = %d: refused for %v: %v", path, mru, 2*r.o.Stall, err)
			return
		}
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sleep waits d or until the run ends; false if it ended.
func (r *runner) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// rngFor returns a random source for one of the run's goroutines: each
// has its own stream of the seed, so their choices do not depend on how
// the goroutines interleave.
func (r *runner) rngFor(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.o.Seed, stream))
}
