package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is the result of a soak run. Passed is false when a check
// failed: Violations says which (the first one stopped the run).
// Transport, Model, Format and Seed say what ran; Duration for how long.
type Summary struct {
	Passed    bool          `json:"passed"`
	Transport Transport     `json:"transport"`
	Model     string        `json:"model"`
	Format    string        `json:"format"`
	Seed      uint64        `json:"seed"`
	Duration  time.Duration `json:"duration_ns"`

	// Data packets: Sent = Delivered + Counted − CountedTwice exactly,
	// where Counted is the sum of Drops (ul_consumed_unconfirmed
	// excluded) and CountedTwice is ul_consumed_unconfirmed.
	Sent         uint64            `json:"sent"`
	Delivered    uint64            `json:"delivered"`
	Bytes        uint64            `json:"bytes"`
	Counted      uint64            `json:"counted_drops"`
	CountedTwice uint64            `json:"counted_twice"`
	Drops        map[string]uint64 `json:"drops"`
	Receiver     ReceiverCounts    `json:"receiver"`
	PacketsPerS  float64           `json:"packets_per_s"`

	// What the soak did: phases (of them with the generator), MRU
	// writes through the attribute tree (and refusals retried), faults
	// injected, recoveries seen (and failed attempts), restarts, and the
	// controller's stale completion events (closed sessions).
	Phases          int64 `json:"phases"`
	GeneratorPhases int64 `json:"generator_phases"`
	// PhasesBounded were judged without the modem's counters: over
	// vfio-user, the phases in which the served modem was killed (its
	// losses are lost_in_modem, bounded per kill).
	PhasesBounded  int64  `json:"phases_without_modem_counters"`
	MRUChanges     uint64 `json:"mru_changes"`
	MRURefused     uint64 `json:"mru_writes_refused"`
	SysErrs        uint64 `json:"sys_errs_injected"`
	SoCResets      uint64 `json:"soc_resets"`
	Recoveries     uint64 `json:"recoveries"`
	RecoveryFailed uint64 `json:"recovery_attempts_failed"`
	DataRestarts   uint64 `json:"data_channel_restarts"`
	ModemRestarts  uint64 `json:"modem_restarts"`
	StaleEvents    uint64 `json:"host_stale_completion_events"`

	// Loopback is the LOOPBACK pair's traffic; Host the data devices'
	// counters summed over the run; Resources the flatness verdicts;
	// Samples the resource curves.
	Loopback   LoopbackCounts    `json:"loopback"`
	Host       map[string]uint64 `json:"host"`
	Resources  []Resource        `json:"resources"`
	Samples    []Sample          `json:"samples"`
	Violations []Violation       `json:"violations,omitempty"`
}

func (r *runner) summary() *Summary {
	o := r.o
	s := &Summary{
		Transport: o.Transport, Model: o.Model, Format: o.Format.String(), Seed: o.Seed,
		Duration: time.Since(r.start), Sent: r.sent.Load(),
		Phases: r.phases.Load(), GeneratorPhases: r.genPhases.Load(), PhasesBounded: r.phasesBounded.Load(),
		MRUChanges: r.mruChanges.Load(), MRURefused: r.mruRefused.Load(),
		SysErrs: r.sysErrs.Load(), SoCResets: r.socResets.Load(),
		Recoveries: r.recovered.Load(), RecoveryFailed: r.recoveryFailed.Load(),
		DataRestarts: r.dataRestarts.Load(), ModemRestarts: r.modemRestarts.Load(),
		Loopback: r.lb.snapshot(), Resources: r.mon.resources(), Samples: r.mon.Samples(),
		Host: map[string]uint64{},
	}
	s.Receiver = r.rx.totals()
	s.Delivered, s.Bytes = s.Receiver.Unique, s.Receiver.Bytes
	h := r.retired // every session is closed and retired by now
	for _, f := range h.fields() {
		s.Host[f.name] = *f.v
	}
	s.StaleEvents = r.ctrlRetired.StaleCompletion
	r.mu.Lock()
	s.Drops = map[string]uint64{}
	var closedSent uint64
	for k, v := range r.drops {
		if v == 0 {
			continue
		}
		s.Drops[k] = v
		if k == dropULUnconfirmed {
			s.CountedTwice += v
		} else {
			s.Counted += v
		}
	}
	closedSent = r.closedSent
	s.Violations = append([]Violation(nil), r.violations...)
	r.mu.Unlock()
	// Packets of a phase cut short by a violation are not in the
	// accounting: only closed phases are.
	s.Sent = closedSent
	if sec := s.Duration.Seconds(); sec > 0 {
		s.PacketsPerS = float64(s.Delivered) / sec
	}
	s.Passed = len(s.Violations) == 0
	return s
}

// WriteJSON writes the summary as indented JSON.
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteTable writes the summary as text tables: the totals, the drops by
// counter, the resources, a curve of at most maxRows samples and the
// violations.
func (s *Summary) WriteTable(w io.Writer, maxRows int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	verdict := "PASS"
	if !s.Passed {
		verdict = "FAIL"
	}
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("soak", fmt.Sprintf("%s (%s, %s, %s, seed %d)", verdict, s.Transport, s.Model, s.Format, s.Seed))
	row("duration", s.Duration.Round(time.Millisecond))
	row("data packets sent", s.Sent)
	row("delivered", fmt.Sprintf("%d (%.0f packets/s, %d bytes)", s.Delivered, s.PacketsPerS, s.Bytes))
	row("counted drops", fmt.Sprintf("%d − %d counted twice: sent − delivered = %d", s.Counted, s.CountedTwice, int64(s.Sent)-int64(s.Delivered)))
	row("phases", fmt.Sprintf("%d (%d generator, %d loopback; %d judged without the modem's counters)", s.Phases, s.GeneratorPhases, s.Phases-s.GeneratorPhases, s.PhasesBounded))
	row("MRU changes", fmt.Sprintf("%d (%d writes refused while busy)", s.MRUChanges, s.MRURefused))
	row("SYS_ERRs injected", s.SysErrs)
	if s.Transport == VFIOUser {
		row("SoC resets", s.SoCResets)
	}
	row("recoveries", fmt.Sprintf("%d (%d attempts failed)", s.Recoveries, s.RecoveryFailed))
	row("data channel restarts", s.DataRestarts)
	row("LOOPBACK restarts", s.Loopback.Restarts)
	if s.Transport == VFIOUser {
		row("modem restarts", s.ModemRestarts)
	}
	lb := s.Loopback
	row("LOOPBACK transfers", fmt.Sprintf("%d sent, %d received, %d aborted by SYS_ERR, %d lost with the modem, %d mismatched",
		lb.Sent, lb.Received, lb.Aborted, lb.Lost, lb.Mismatched))
	rc := s.Receiver
	row("receiver", fmt.Sprintf("%d duplicates, %d corrupt, %d late, %d out of range", rc.Duplicates, rc.Corrupt, rc.Late, rc.OutOfRange))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "drops by counter:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range sortedKeys(s.Drops) {
		note := ""
		if k == dropULUnconfirmed {
			note = "(subtracted: also in host_tx_dropped)"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", k, s.Drops[k], note)
	}
	if len(s.Drops) == 0 {
		fmt.Fprintln(tw, "  none")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "resource\tfirst\twarm-up max\tlast-half max\tmax\tlast\tlimit\tflat\t")
	for _, r := range s.Resources {
		f := fmtRes(r.Name)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\t\n", r.Name, f(r.First), f(r.WarmupMax), f(r.LastHalfMax), f(r.Max), f(r.Last), f(r.Limit), r.Flat)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := s.writeCurve(w, maxRows, false); err != nil {
		return err
	}
	for i, v := range s.Violations {
		fmt.Fprintf(w, "\nVIOLATION %d at %v (%s): %s\n", i+1, v.At.Round(time.Millisecond), v.Kind, v.Message)
		if v.Dump != "" {
			fmt.Fprintf(w, "%s\n", v.Dump)
		}
	}
	return nil
}

// WriteMarkdown writes the report for docs/RELIABILITY.md: the totals,
// the drops and the resource curves as Markdown tables.
func (s *Summary) WriteMarkdown(w io.Writer, command string, maxRows int) error {
	verdict := "passed"
	if !s.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "Soak `%s`: %s (%s, %s, %s framing, seed %d), %v.\n\n", command, verdict, s.Transport, s.Model, s.Format, s.Seed, s.Duration.Round(time.Second))
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	kv := func(k string, v any) { fmt.Fprintf(w, "| %s | %v |\n", k, v) }
	kv("data packets sent", s.Sent)
	kv("delivered", fmt.Sprintf("%d (%.0f packets/s)", s.Delivered, s.PacketsPerS))
	kv("counted drops", fmt.Sprintf("%d (− %d counted twice) = sent − delivered", s.Counted, s.CountedTwice))
	kv("phases", fmt.Sprintf("%d (%d generator, %d loopback; %d judged without the modem's counters)", s.Phases, s.GeneratorPhases, s.Phases-s.GeneratorPhases, s.PhasesBounded))
	kv("MRU changes (attribute tree)", fmt.Sprintf("%d (%d writes refused while busy, retried)", s.MRUChanges, s.MRURefused))
	kv("SYS_ERRs injected / recovered", fmt.Sprintf("%d / %d (%d attempts failed)", s.SysErrs, s.Recoveries, s.RecoveryFailed))
	if s.Transport == VFIOUser {
		kv("SoC resets", s.SoCResets)
		kv("modem restarts (server killed)", s.ModemRestarts)
	}
	kv("data channel restarts", s.DataRestarts)
	kv("LOOPBACK restarts", s.Loopback.Restarts)
	lb := s.Loopback
	kv("LOOPBACK transfers", fmt.Sprintf("%d sent, %d received, %d aborted by SYS_ERR, %d lost with the modem, %d mismatched", lb.Sent, lb.Received, lb.Aborted, lb.Lost, lb.Mismatched))
	kv("duplicates / corrupt / late", fmt.Sprintf("%d / %d / %d", s.Receiver.Duplicates, s.Receiver.Corrupt, s.Receiver.Late))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| drop counter | packets |")
	fmt.Fprintln(w, "|---|---|")
	for _, k := range sortedKeys(s.Drops) {
		v := fmt.Sprint(s.Drops[k])
		if k == dropULUnconfirmed {
			v = "−" + v + " (also in host_tx_dropped)"
		}
		fmt.Fprintf(w, "| `%s` | %s |\n", k, v)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| resource | first | warm-up max | last-half max | max | last | limit | flat |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range s.Resources {
		f := fmtRes(r.Name)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %v |\n", r.Name, f(r.First), f(r.WarmupMax), f(r.LastHalfMax), f(r.Max), f(r.Last), f(r.Limit), r.Flat)
	}
	fmt.Fprintln(w)
	if err := s.writeCurve(w, maxRows, true); err != nil {
		return err
	}
	for _, v := range s.Violations {
		fmt.Fprintf(w, "\nViolation at %v (%s): %s\n", v.At.Round(time.Millisecond), v.Kind, v.Message)
	}
	return nil
}

// writeCurve writes at most maxRows samples, evenly spaced, the last
// included.
func (s *Summary) writeCurve(w io.Writer, maxRows int, markdown bool) error {
	pick := downsample(s.Samples, maxRows)
	if len(pick) == 0 {
		return nil
	}
	every := time.Duration(0)
	if len(pick) > 1 {
		every = (pick[len(pick)-1].At - pick[0].At) / time.Duration(len(pick)-1)
	}
	server := false
	for _, p := range pick {
		server = server || p.ServerRSS > 0
	}
	cols := []string{"t", "packets", "RSS MiB", "heap MiB", "goroutines", "fds"}
	if server {
		cols = append(cols, "server RSS MiB")
	}
	row := func(p Sample) []string {
		r := []string{p.At.Round(time.Second).String(), strconv.FormatUint(p.Packets, 10),
			fmt.Sprintf("%.1f", mib(p.RSS)), fmt.Sprintf("%.1f", mib(int64(p.HeapInuse))),
			strconv.Itoa(p.Goroutines), strconv.Itoa(p.FDs)}
		if server {
			r = append(r, fmt.Sprintf("%.1f", mib(p.ServerRSS)))
		}
		return r
	}
	if markdown {
		fmt.Fprintf(w, "Resource curve (a sample about every %v):\n\n", every.Round(time.Second))
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
		for _, p := range pick {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row(p), " | "))
		}
		return nil
	}
	fmt.Fprintf(w, "resource curve (a sample about every %v):\n", every.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\t\n", strings.Join(cols, "\t"))
	for _, p := range pick {
		fmt.Fprintf(tw, "%s\t\n", strings.Join(row(p), "\t"))
	}
	return tw.Flush()
}

func downsample(s []Sample, n int) []Sample {
	if n <= 0 || len(s) <= n {
		return s
	}
	out := make([]Sample, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, s[i*(len(s)-1)/(n-1)])
	}
	return out
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func fmtRes(name string) func(int64) string {
	if name == "rss" {
		return func(v int64) string { return fmt.Sprintf("%.1f MiB", mib(v)) }
	}
	return func(v int64) string { return fmt.Sprint(v) }
}

func sortedKeys(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// dump is the state of the stack, as 'mhictl status' shows it, with the
// counters and every goroutine's stack.
func (r *runner) dump() string {
	var b strings.Builder
	s, release := r.current()
	if s != nil {
		st := s.ctrl.Status()
		fmt.Fprintf(&b, "%s: MHI state %s, EE %s, host PM %s (session %d)\n", st.Name, st.State, st.EE, st.PM, s.n)
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CH\tNAME\tDIR\tSTATE\tCTX\tELEMS\tER\tRP\tWP\tCTX_RP\tCTX_WP\tPENDING\tCOMPLETED")
		for _, c := range st.Channels {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t0x%x\t0x%x\t0x%x\t0x%x\t%d\t%d\n",
				c.Num, c.Name, c.Dir, c.State, c.CtxState, c.Elements, c.EventRing, c.HostRP, c.HostWP, c.CtxRP, c.CtxWP, c.Pending, c.Completed)
		}
		_ = tw.Flush()
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ER\tKIND\tELEMS\tVECTOR\tRP\tWP\tDEVICE_RP\tEVENTS")
		for _, e := range st.EventRings {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t0x%x\t0x%x\t0x%x\t%d\n", e.Index, e.Kind, e.Elements, e.Vector, e.HostRP, e.HostWP, e.DeviceRP, e.Events)
		}
		_ = tw.Flush()
		js, _ := json.Marshal(st.Stats)
		fmt.Fprintf(&b, "controller stats: %s\n", js)
		js, _ = json.Marshal(s.dev.Stats())
		fmt.Fprintf(&b, "data device (up %v): %s\n", s.dev.IsUp(), js)
		if s.epd != nil {
			ds := s.epd.Status()
			fmt.Fprintf(&b, "modem: state %s, EE %s\n", ds.State, ds.EE)
			for _, c := range ds.Channels {
				fmt.Fprintf(&b, "  modem channel %d %s %s: %s, rp 0x%x, %d downlink transfers queued, host buffer %d\n",
					c.Num, c.Name, c.Dir, c.State, c.ReadPointer, c.PendingDL, c.HostBufferLen)
			}
			js, _ = json.Marshal(s.ipd.Stats())
			fmt.Fprintf(&b, "modem IP data: %s\n", js)
		}
	}
	release()
	if p := r.mon.currentPhase(); p != nil {
		c := r.rx.counts()
		fmt.Fprintf(&b, "phase %d (%s): %d sent, %d delivered, settling %v\n", p.n, modeName(p.generator), p.sent.Load(), c.Unique, p.settling.Load())
	}
	fmt.Fprintf(&b, "LOOPBACK: %+v\n", r.lb.snapshot())
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	fmt.Fprintf(&b, "goroutines:\n%s", buf)
	return b.String()
}
