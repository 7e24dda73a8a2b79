package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sample is one point of the resource curves.
type Sample struct {
	// At is the time since the start of the run.
	At time.Duration `json:"at_ns"`
	// Packets is the number of data packets sent so far.
	Packets uint64 `json:"packets"`
	// RSS is this process's VmRSS in bytes; ServerRSS the served modem's
	// (vfio-user; 0 otherwise).
	RSS       int64 `json:"rss_bytes"`
	ServerRSS int64 `json:"server_rss_bytes,omitempty"`
	// HeapInuse is the Go heap in use (runtime.MemStats.HeapInuse).
	HeapInuse  uint64 `json:"heap_inuse_bytes"`
	Goroutines int    `json:"goroutines"`
	FDs        int    `json:"fds"`
}

// Resource is the flatness verdict for one resource.
type Resource struct {
	Name  string `json:"name"`
	First int64  `json:"first"`
	// WarmupMax is the maximum over the warm-up; LastHalfMax over the
	// last half of the run (after the warm-up); Limit is WarmupMax plus
	// the slack.
	WarmupMax   int64 `json:"warmup_max"`
	LastHalfMax int64 `json:"last_half_max"`
	Max         int64 `json:"max"`
	Last        int64 `json:"last"`
	Limit       int64 `json:"limit"`
	Flat        bool  `json:"flat"`
}

// progress is one thing the watchdog expects to move while work is
// outstanding.
type progress struct {
	name  string
	value func() uint64
	busy  func() bool // work is outstanding
	last  uint64
	moved time.Time
}

// monitor samples resources and watches for stuck channels.
type monitor struct {
	r *runner

	mu      sync.Mutex
	samples []Sample
	phase   *phaseState
	watch   []*progress
	rebuild bool
	// warmEnd is when the warm-up ends: Options.Warmup after the start,
	// not before every MRU was used once (the receive pools reach their
	// largest size then); a garbage collection ends it if none happened
	// yet (the Go heap, and with it RSS, grows to its goal until then).
	warmEnd time.Duration
	gc0     uint32 // runtime.MemStats.NumGC at the first sample
	gcSet   bool
}

// warmupGCs is the number of garbage collections the warm-up must have
// seen (one is forced at its end otherwise).
const warmupGCs = 1

func newMonitor(r *runner) *monitor { return &monitor{r: r, rebuild: true} }

func (m *monitor) setPhase(p *phaseState) {
	m.mu.Lock()
	m.phase = p
	m.mu.Unlock()
}

func (m *monitor) currentPhase() *phaseState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.phase
}

// sessionChanged makes the watchdog follow the new session's channels.
func (m *monitor) sessionChanged() {
	m.mu.Lock()
	m.rebuild = true
	m.mu.Unlock()
}

// buildWatch lists the progress the watchdog expects.
func (m *monitor) buildWatch() {
	r := m.r
	s, release := r.current()
	defer release()
	if s == nil {
		return
	}
	ul, dl := s.channels()
	lbUL, lbDL, _ := s.ctrl.ChannelPair("LOOPBACK")
	now := time.Now()
	// Packets are outstanding while a phase sends and not all of them
	// arrived; once it settles, its own check (Settle) judges what is
	// missing.
	outstanding := func() bool {
		p := m.currentPhase()
		if p == nil || p.settling.Load() {
			return false
		}
		return p.sent.Load() > r.rx.counts().Unique
	}
	m.watch = []*progress{
		{name: fmt.Sprintf("data uplink channel %d (%s)", ul.Num(), s.pair), value: ul.Stats().Completed.Load,
			busy: func() bool { return ul.Pending() > 0 }},
		{name: fmt.Sprintf("data downlink channel %d (%s)", dl.Num(), s.pair), value: dl.Stats().Completed.Load,
			busy: outstanding},
		{name: "receiver (data packets delivered)", value: func() uint64 { return r.rx.counts().Handed }, busy: outstanding},
		{name: fmt.Sprintf("LOOPBACK uplink channel %d", lbUL.Num()), value: lbUL.Stats().Completed.Load,
			busy: func() bool { return true }},
		{name: fmt.Sprintf("LOOPBACK downlink channel %d", lbDL.Num()), value: lbDL.Stats().Completed.Load,
			busy: func() bool { return true }},
	}
	for _, w := range m.watch {
		w.last, w.moved = w.value(), now
	}
}

// run samples and checks every CheckEvery until the run ends.
func (m *monitor) run() {
	r := m.r
	t := time.NewTicker(r.o.CheckEvery)
	defer t.Stop()
	m.sample()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		s := m.sample()
		if r.o.Progress != nil {
			r.o.Progress(s)
		}
		m.checkResources(s, false)
		m.checkStuck()
	}
}

// sample takes one sample of the resource curves.
func (m *monitor) sample() Sample {
	r := m.r
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := Sample{
		At: time.Since(r.start), Packets: r.sent.Load(), RSS: rssOf("self"),
		HeapInuse: ms.HeapInuse, Goroutines: runtime.NumGoroutine(), FDs: fdCount(),
	}
	if sess, release := r.current(); sess != nil {
		if pid := sess.pid(); pid > 0 {
			s.ServerRSS = rssOf(strconv.Itoa(pid))
		}
		release()
	} else {
		release()
	}
	m.mu.Lock()
	m.samples = append(m.samples, s)
	if !m.gcSet {
		m.gc0, m.gcSet = ms.NumGC, true
	}
	if m.warmEnd == 0 && time.Since(r.start) >= r.o.Warmup && r.mruChanges.Load() >= uint64(len(r.o.MRUs)) {
		if ms.NumGC < m.gc0+warmupGCs {
			// A slow run may not have collected yet: collect now, so the
			// heap's goal from here on is set by what is live.
			runtime.GC()
		}
		m.warmEnd = s.At
	}
	m.mu.Unlock()
	return s
}

// slackFor returns the allowed growth of a resource over its warm-up max.
func (m *monitor) slackFor(name string, warmMax int64) int64 {
	sl := m.r.o.Slack
	switch name {
	case "rss":
		if sl.RSSBytes > 0 {
			return sl.RSSBytes
		}
		return max(32<<20, warmMax/4)
	case "goroutines":
		return int64(sl.Goroutines)
	case "fds":
		return int64(sl.FDs)
	}
	return 0
}

var resourceNames = []string{"rss", "goroutines", "fds"}

func valueOf(s Sample, name string) int64 {
	switch name {
	case "rss":
		return s.RSS
	case "goroutines":
		return int64(s.Goroutines)
	case "fds":
		return int64(s.FDs)
	}
	return 0
}

// resources computes the flatness verdicts over the samples so far.
func (m *monitor) resources() []Resource {
	m.mu.Lock()
	samples := append([]Sample(nil), m.samples...)
	warmEnd := m.warmEnd
	m.mu.Unlock()
	if len(samples) == 0 {
		return nil
	}
	end := samples[len(samples)-1].At
	half := max(end/2, warmEnd)
	var out []Resource
	for _, name := range resourceNames {
		res := Resource{Name: name, First: valueOf(samples[0], name), Last: valueOf(samples[len(samples)-1], name)}
		for _, s := range samples {
			v := valueOf(s, name)
			res.Max = max(res.Max, v)
			if warmEnd == 0 || s.At <= warmEnd {
				res.WarmupMax = max(res.WarmupMax, v)
			}
			if warmEnd > 0 && s.At >= half {
				res.LastHalfMax = max(res.LastHalfMax, v)
			}
		}
		res.Limit = res.WarmupMax + m.slackFor(name, res.WarmupMax)
		res.Flat = warmEnd > 0 && res.LastHalfMax <= res.Limit
		out = append(out, res)
	}
	return out
}

// checkResources fails the run when a resource grew past its bound: twice
// the slack at any sample after the warm-up, the slack over the last half
// at the end (final).
func (m *monitor) checkResources(s Sample, final bool) {
	m.mu.Lock()
	warmEnd := m.warmEnd
	m.mu.Unlock()
	if warmEnd == 0 {
		if final {
			m.r.fail("resource", "the run ended before its warm-up did (%v and one use of every MRU): resources cannot be judged flat; run longer", m.r.o.Warmup)
		}
		return
	}
	for _, res := range m.resources() {
		if final {
			if !res.Flat {
				m.r.fail("resource", "%s not flat: %d over the last half, limit %d (warm-up max %d + slack); first %d, last %d",
					res.Name, res.LastHalfMax, res.Limit, res.WarmupMax, res.First, res.Last)
			}
			continue
		}
		v := valueOf(s, res.Name)
		if hard := res.WarmupMax + 2*m.slackFor(res.Name, res.WarmupMax); v > hard {
			m.r.fail("resource", "%s grew to %d at %v, more than twice the slack over the warm-up max %d (limit %d)",
				res.Name, v, s.At.Round(time.Second), res.WarmupMax, hard)
		}
	}
}

// checkStuck fails the run when a channel with work outstanding made no
// progress for Stall.
func (m *monitor) checkStuck() {
	m.mu.Lock()
	rebuild := m.rebuild
	m.rebuild = false
	m.mu.Unlock()
	if rebuild {
		m.buildWatch()
	}
	now := time.Now()
	r := m.r
	if r.recovering.Load() > 0 {
		if since := time.Unix(0, r.recoveringSince.Load()); now.Sub(since) > r.o.Stall {
			r.fail("stuck", "SYS_ERR recovery started %v ago and has not finished (%d recoveries failed so far)",
				now.Sub(since).Round(time.Second), r.recoveryFailed.Load())
			return
		}
	}
	for _, w := range m.watch {
		v := w.value()
		if v != w.last || !w.busy() || r.recovering.Load() > 0 {
			w.last, w.moved = v, now
			continue
		}
		if now.Sub(w.moved) > r.o.Stall {
			r.fail("stuck", "%s: no progress for %v with work outstanding", w.name, now.Sub(w.moved).Round(time.Second))
			return
		}
	}
}

// final takes the last sample and judges flatness.
func (m *monitor) final() {
	s := m.sample()
	if !m.r.failed() {
		m.checkResources(s, true)
	}
}

// Samples returns the samples so far.
func (m *monitor) Samples() []Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Sample(nil), m.samples...)
}

// rssOf returns VmRSS of /proc/<pid>/status in bytes (0 if unreadable).
func rssOf(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// fdCount returns the number of open file descriptors of this process.
func fdCount() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1 // the directory's own descriptor
}
