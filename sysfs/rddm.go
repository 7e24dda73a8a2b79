package sysfs

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gomhi/gomhi/mhi"
)

// RAM dumps are bytes, not text, so they are not attributes: the tree
// keeps each device's controller here and hands its last dump, whole, to
// the servers that transfer it (the generic-netlink family's get-dump).
// The attribute rddm shows the same dump's size, digest and time.

// Errors of Tree.Dump besides ErrNotFound (no such device) and ErrBusy
// (the device cannot be crashed in its current state).
var (
	// ErrNoDump: the device has no RAM dump: it has not crashed into
	// RDDM since it was bound, or the dump asked for did not come.
	ErrNoDump = errors.New("sysfs: no RAM dump")
	// ErrDumpsOff: RAM-dump collection is not enabled for the device
	// (mhi.Options.RDDMSize is 0: `mhictl up` without --rddm-size).
	ErrDumpsOff = errors.New("sysfs: RAM-dump collection is off")
	// ErrDumpTimeout: a forced crash produced no dump within the wait.
	ErrDumpTimeout = errors.New("sysfs: no RAM dump within the wait")
)

// RAMDump is a device's RAM dump as Tree.Dump returns it.
type RAMDump struct {
	// Data is the dump; it is shared with the controller and must not be
	// modified.
	Data []byte
	// At is when the host finished collecting it.
	At time.Time
	// SHA256 is Data's digest.
	SHA256 [sha256.Size]byte
	// Crashed reports that this call forced the crash the dump comes
	// from.
	Crashed bool
}

// dumpSources maps device names to their controllers. The zero value is
// ready to use.
type dumpSources struct {
	mu   sync.Mutex
	ctrl map[string]*mhi.Controller
}

func (s *dumpSources) add(name string, c *mhi.Controller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrl == nil {
		s.ctrl = map[string]*mhi.Controller{}
	}
	s.ctrl[name] = c
}

func (s *dumpSources) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ctrl, name)
}

func (s *dumpSources) get(name string) (*mhi.Controller, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.ctrl[name]
	return c, ok && c != nil
}

// Dump returns the last RAM dump of device dev. With crash set it first
// makes the device crash into RDDM (MHICTRL state SYS_ERR, as Linux's
// mhi_force_rddm_mode) and waits up to wait for the dump the controller
// collects before it recovers the device as after any crash; the device
// must be in M0, or in M3 (suspended, by hand or by auto-suspend), which
// it is resumed from first. Errors wrap ErrNotFound (no such device), ErrDumpsOff,
// ErrNoDump, ErrDumpTimeout or ErrBusy, and say what to do.
func (t *Tree) Dump(dev string, crash bool, wait time.Duration) (RAMDump, error) {
	c, ok := t.dumps.get(dev)
	if !ok {
		return RAMDump{}, fmt.Errorf("devices/%s: %w", dev, ErrNotFound)
	}
	if c.DumpCapacity() == 0 {
		return RAMDump{}, fmt.Errorf("%s: RAM-dump collection is off (start `mhictl up` with --rddm-size BYTES): %w", dev, ErrDumpsOff)
	}
	if crash {
		if c.PMState() == "M3" {
			// Resume may race with another resume (a channel's work):
			// CollectDump below judges the state that results.
			_ = c.Resume()
		}
		if _, err := c.CollectDump(wait); err != nil {
			switch {
			case errors.Is(err, mhi.ErrTimeout):
				return RAMDump{}, fmt.Errorf("%s: forced a crash into RDDM, but no dump within %v: %w: %w", dev, wait, ErrDumpTimeout, err)
			case errors.Is(err, mhi.ErrNoDump):
				return RAMDump{}, fmt.Errorf("%s: forced a crash, but no RAM dump came: %w: %w", dev, ErrNoDump, err)
			case errors.Is(err, mhi.ErrWrongState), errors.Is(err, mhi.ErrPoweredDown), errors.Is(err, mhi.ErrRecovering):
				return RAMDump{}, fmt.Errorf("%s: cannot force a crash into RDDM now: %w: %w", dev, ErrBusy, err)
			}
			return RAMDump{}, fmt.Errorf("%s: forcing a crash into RDDM: %w", dev, err)
		}
	}
	// After a forced crash the last dump is the one it produced (or a
	// newer one).
	data, at := c.LastDump()
	if data == nil {
		msg := "it has not crashed into RDDM since it was started (`mhictl dump " + dev + " --crash` forces a crash)"
		if n := c.Stats().DumpErrors; n > 0 {
			msg = fmt.Sprintf("its crashes gave no usable dump (stats/mhi/dump_errors: %d)", n)
		}
		return RAMDump{}, fmt.Errorf("%s has no RAM dump: %s: %w", dev, msg, ErrNoDump)
	}
	return RAMDump{Data: data, At: at, SHA256: sha256.Sum256(data), Crashed: crash}, nil
}
