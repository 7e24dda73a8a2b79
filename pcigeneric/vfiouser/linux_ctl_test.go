package vfiouser_test

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric"
)

// The control-port half of the Linux-driver tests: the mock modem's MBIM,
// QMI and AT functions behind Linux's own mhi_wwan_ctrl, reached by the
// guest probe (internal/guestprobe) through /dev/wwan0mbim0,
// /dev/wwan0qmi0, /dev/wwan0at0 and /dev/wwan0at1. The guest's checks say
// what the probe got; the modem's counters, taken at the guest's MARK
// lines, must account for every write and read the probe reports.

// Identities the tests' modems report: distinctive strings, so that an
// answer cannot match by accident.
var (
	fn990Identity = modem.Identity{Manufacturer: "Telit", Model: "FN990", Firmware: "LE2.0.1-gomhi-guest",
		Hardware: "rev 2", IMEI: "359876543210987"}
	sdx55Identity = modem.Identity{Manufacturer: "Qualcomm", Model: "SDX55", Firmware: "MPSS.HI.2.0.c3-gomhi-guest",
		Hardware: "10010", IMEI: "352099001761481"}
)

// ctlSetup is one session's control functions and their channel counters.
type ctlSetup struct {
	modem *modem.Modem
	mbim  *modem.MBIM
	qmi   *modem.QMI
	at    *modem.AT
	pairs map[string]*pairCounter
}

// newCtlSetup builds the control functions for the pairs the model has
// and attaches them to cfg, each behind a pairCounter.
func newCtlSetup(cfg *ep.Config, id modem.Identity) (*ctlSetup, error) {
	m, err := modem.New(modem.Config{Identity: id})
	if err != nil {
		return nil, err
	}
	s := &ctlSetup{modem: m, pairs: map[string]*pairCounter{}}
	has := func(name string) bool {
		return slices.ContainsFunc(cfg.MHI.Channels, func(c wire.ChannelConfig) bool { return c.Name == name })
	}
	if cfg.Functions == nil {
		cfg.Functions = map[string]ep.Function{}
	}
	attach := func(name string, f ep.Function) {
		if has(name) {
			pc := &pairCounter{fn: f}
			s.pairs[name] = pc
			cfg.Functions[name] = pc
		}
	}
	if s.mbim, err = modem.NewMBIM(m, modem.MBIMOptions{}); err != nil {
		return nil, err
	}
	if s.qmi, err = modem.NewQMI(m, modem.QMIOptions{}); err != nil {
		return nil, err
	}
	if s.at, err = modem.NewAT(m, modem.ATOptions{}); err != nil {
		return nil, err
	}
	attach(modem.MBIMName, s.mbim)
	attach(modem.QMIName, s.qmi)
	attach(modem.DUNName, s.at)
	attach(modem.DUN2Name, s.at)
	return s, nil
}

// pairCounter stands between the device and a control function: it
// counts the channel sessions the host ran on the pair (START and RESET,
// as the device reports them to its function) and the uplink transfers,
// and forwards everything.
type pairCounter struct {
	fn ep.Function

	mu                   sync.Mutex
	state                [2]wire.ChannelState // by direction
	starts, resets       [2]int
	ulTransfers, ulBytes int
	firstEvents          []string
}

// pairCounts is a snapshot of a pairCounter.
type pairCounts struct {
	ULStarts, DLStarts, ULResets, DLResets int
	ULTransfers, ULBytes                   int
	Events                                 []string // the first state changes, in order
}

func (c *pairCounter) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	err := c.fn.Receive(ctx, p, transfer)
	if err == nil || ctx.Err() == nil {
		c.mu.Lock()
		c.ulTransfers++
		c.ulBytes += len(transfer)
		c.mu.Unlock()
	}
	return err
}

func (c *pairCounter) Attach(p *ep.Pipe) {
	if a, ok := c.fn.(ep.PipeAttacher); ok {
		a.Attach(p)
	}
}

func (c *pairCounter) PipeStateChanged(p *ep.Pipe, dir wire.Direction, st wire.ChannelState) {
	i := 0
	if dir == wire.Downlink {
		i = 1
	}
	c.mu.Lock()
	prev := c.state[i]
	c.state[i] = st
	switch {
	case st == wire.ChannelRunning && prev != wire.ChannelRunning:
		c.starts[i]++
	case st == wire.ChannelDisabled && (prev == wire.ChannelRunning || prev == wire.ChannelStop):
		c.resets[i]++
	}
	if len(c.firstEvents) < 8 && st != prev {
		c.firstEvents = append(c.firstEvents, fmt.Sprintf("%v %v", dir, st))
	}
	c.mu.Unlock()
	if o, ok := c.fn.(ep.PipeObserver); ok {
		o.PipeStateChanged(p, dir, st)
	}
}

func (c *pairCounter) counts() pairCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return pairCounts{ULStarts: c.starts[0], DLStarts: c.starts[1], ULResets: c.resets[0], DLResets: c.resets[1],
		ULTransfers: c.ulTransfers, ULBytes: c.ulBytes, Events: slices.Clone(c.firstEvents)}
}

// ctlSnap is the control functions' view at a guest's MARK line.
type ctlSnap struct {
	mbim  modem.MBIMStats
	qmi   modem.QMIStats
	at    modem.ATStats
	pairs map[string]pairCounts
}

func (s *ctlSetup) snapshot() ctlSnap {
	out := ctlSnap{mbim: s.mbim.Stats(), qmi: s.qmi.Stats(), at: s.at.Stats(), pairs: map[string]pairCounts{}}
	for n, c := range s.pairs {
		out.pairs[n] = c.counts()
	}
	return out
}

var ctrlLine = regexp.MustCompile(`(?m)^CTRL (\S+) (.*)$`)

// ctrlTallies parses the probe's "CTRL <kind> key=value…" lines.
func ctrlTallies(t *testing.T, serial string) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, m := range ctrlLine.FindAllStringSubmatch(serial, -1) {
		kv := map[string]int{}
		for _, f := range statsFields.FindAllStringSubmatch(m[2], -1) {
			v, _ := strconv.Atoi(f[2])
			kv[f[1]] = v
		}
		out[m[1]] = kv
	}
	return out
}

// quoted extracts key="value" from a check's detail.
func quoted(t *testing.T, detail, key string) string {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(key) + `=("(?:[^"\\]|\\.)*")`).FindStringSubmatch(detail)
	if m == nil {
		t.Errorf("no %s=\"…\" in %q", key, detail)
		return ""
	}
	s, err := strconv.Unquote(m[1])
	if err != nil {
		t.Errorf("%s: %v", key, err)
	}
	return s
}

// number extracts key=N from a check's detail.
func number(t *testing.T, detail, key string) int {
	t.Helper()
	m := regexp.MustCompile(`\b` + regexp.QuoteMeta(key) + `=(\d+)`).FindStringSubmatch(detail)
	if m == nil {
		t.Errorf("no %s=N in %q", key, detail)
		return -1
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

// tallyOf returns the probe's CTRL line for kind, failing the test without one.
func tallyOf(t *testing.T, r *guestRun, kind string) map[string]int {
	t.Helper()
	tl, ok := ctrlTallies(t, r.serial)[kind]
	if !ok {
		t.Fatalf("no CTRL %s line in the serial log:\n%s", kind, r.serial)
	}
	return tl
}

// ctlSnapAt returns the control functions' counters at MARK step.
func (r *guestRun) ctlSnapAt(t *testing.T, step string) ctlSnap {
	t.Helper()
	s := r.mark(t, step)
	if s.ctl == nil {
		t.Fatalf("no control functions at MARK %s", step)
	}
	return *s.ctl
}

// wantHardware is the HardwareInfo docs/CONTROL.md promises: the model
// and the hardware revision.
func wantHardware(id modem.Identity) string { return id.Model + " " + id.Hardware }

// checkSessions compares a pair's channel sessions with the probe's.
func checkSessions(t *testing.T, pair string, pc pairCounts, sessions, writes, wbytes int) {
	t.Helper()
	if pc.ULStarts != sessions || pc.DLStarts != sessions || pc.ULResets != sessions || pc.DLResets != sessions {
		t.Errorf("%s: channel START ul/dl %d/%d, RESET ul/dl %d/%d; the guest ran %d sessions (first node open to last close)",
			pair, pc.ULStarts, pc.DLStarts, pc.ULResets, pc.DLResets, sessions)
	}
	if pc.ULTransfers != writes || pc.ULBytes != wbytes {
		t.Errorf("%s: %d uplink transfers (%d bytes), the guest wrote %d times (%d bytes): one write is not one transfer",
			pair, pc.ULTransfers, pc.ULBytes, writes, wbytes)
	}
}

// checkMBIMPort checks the mbim probe's run: the guest's checks and the
// DEVICE_CAPS strings, then the modem's counters against the probe's.
func checkMBIMPort(t *testing.T, r *guestRun, id modem.Identity) {
	t.Helper()
	got := checks(r.serial)
	for _, name := range []string{"mbim-device-caps", "mbim-fragmented"} {
		d := got[name]
		if v := quoted(t, d, "device_id"); v != id.IMEI {
			t.Errorf("%s: DeviceId %q, the modem's IMEI is %q", name, v, id.IMEI)
		}
		if v := quoted(t, d, "firmware"); v != id.Firmware {
			t.Errorf("%s: FirmwareInfo %q, want %q", name, v, id.Firmware)
		}
		if v := quoted(t, d, "hardware"); v != wantHardware(id) {
			t.Errorf("%s: HardwareInfo %q, want %q", name, v, wantHardware(id))
		}
	}
	tl := tallyOf(t, r, "mbim")
	s := r.ctlSnapAt(t, "ctl")
	m := s.mbim
	t.Logf("guest mbim probe: %v", tl)
	t.Logf("modem MBIM: in %d messages (%d bytes), out %d (%d bytes, %d fragments); opens %d, closes %d, commands %d (ok %d), function errors %v, unsupported %v",
		m.MessagesIn, m.BytesIn, m.MessagesOut, m.BytesOut, m.FragmentsOut, m.Opens, m.Closes, m.Commands, m.CommandsOK, m.ByError, m.Unsupported)
	if m.MessagesIn != uint64(tl["writes"]) || m.BytesIn != uint64(tl["wbytes"]) {
		t.Errorf("MBIM: the modem received %d messages (%d bytes), the guest wrote %d (%d bytes)", m.MessagesIn, m.BytesIn, tl["writes"], tl["wbytes"])
	}
	if m.MessagesOut != uint64(tl["reads"]) || m.BytesOut != uint64(tl["rbytes"]) {
		t.Errorf("MBIM: the modem sent %d messages (%d bytes), the guest read %d (%d bytes): one downlink transfer is not one read", m.MessagesOut, m.BytesOut, tl["reads"], tl["rbytes"])
	}
	if m.Opens != 3 || m.Closes != 1 || m.Commands != m.CommandsOK || m.NotSupported != 0 || m.FunctionErrors != 0 ||
		m.DroppedShort != 0 || m.DroppedReplies != 0 || m.Indications != 0 || m.IndicationsDropped != 0 || m.HostErrors != 0 {
		t.Errorf("MBIM: opens %d (want 3), closes %d (want 1), commands %d ok %d, not supported %d, function errors %d %v, dropped short %d replies %d, indications %d dropped %d, host errors %d",
			m.Opens, m.Closes, m.Commands, m.CommandsOK, m.NotSupported, m.FunctionErrors, m.ByError, m.DroppedShort, m.DroppedReplies, m.Indications, m.IndicationsDropped, m.HostErrors)
	}
	if m.FragmentsOut == 0 {
		t.Errorf("MBIM: no fragmented reply, though the guest asked for 64-byte transfers")
	}
	pc := s.pairs[modem.MBIMName]
	t.Logf("MBIM pair: %+v", pc)
	checkSessions(t, modem.MBIMName, pc, tl["sessions"], tl["writes"], tl["wbytes"])

	// What mhi_wwan_ctrl does on open: START both channels, then queue
	// one receive buffer per free descriptor (ring elements - 1), each
	// announced by a doorbell, with no uplink transfer.
	ul, dl := controlChannels(t, r.model, modem.MBIMName)
	closed, opened := r.mark(t, "mbim-closed"), r.mark(t, "mbim-opened")
	ulDB := r.doorbells(closed.regs, opened.regs, ul.Num)
	dlDB := r.doorbells(closed.regs, opened.regs, dl.Num)
	t.Logf("mhi_wwan_ctrl open of %s: %d downlink doorbells (ring of %d elements), %d uplink", modem.MBIMName, dlDB, dl.Elements, ulDB)
	if dlDB != dl.Elements-1 || ulDB != 0 {
		t.Errorf("on open the driver rang the downlink doorbell of channel %d %d times and the uplink one %d times; want %d (one buffer per free descriptor) and 0",
			dl.Num, dlDB, ulDB, dl.Elements-1)
	}
	t.Logf("register writes of that open: %s", r.writeSequence(closed.regs, opened.regs))
	for _, c := range r.mark(t, "ctl").status.Channels {
		if c.Num == dl.Num {
			t.Logf("channel %d (%s downlink): host buffers of %d bytes", c.Num, c.Name, c.HostBufferLen)
			if c.HostBufferLen != 32768 {
				t.Errorf("channel %d: host buffers of %d bytes, want 32768 (MHI_WWAN_MAX_MTU)", c.Num, c.HostBufferLen)
			}
		}
	}
}

// controlChannels returns the uplink and downlink channels of a pair of
// the model.
func controlChannels(t *testing.T, model, pair string) (ul, dl wire.ChannelConfig) {
	t.Helper()
	info, ok := pcigeneric.Model(model)
	if !ok {
		t.Fatalf("model %q unknown", model)
	}
	for _, c := range info.Config.Channels {
		if c.Name != pair {
			continue
		}
		if c.Dir == wire.Uplink {
			ul = c
		} else {
			dl = c
		}
	}
	if ul.Name == "" || dl.Name == "" {
		t.Fatalf("model %s has no %s channel pair", model, pair)
	}
	return ul, dl
}

// doorbells counts the host's doorbell writes (low halves) for channel ch
// between two points of the register log.
func (r *guestRun) doorbells(from, to int, ch uint8) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	off := uint32(ep.ChannelDoorbellOffset) + 8*uint32(ch)
	n := 0
	for _, a := range r.regs[from:to] {
		if a.Write && a.Offset == off {
			n++
		}
	}
	return n
}

// writeSequence lists the host's register writes between two points of
// the register log, doorbells by name (the low halves only).
func (r *guestRun) writeSequence(from, to int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.regs[from:to] {
		name := ep.RegisterName(a.Offset)
		if !a.Write || strings.HasSuffix(name, ".hi") || strings.HasSuffix(name, "_HIGHER") {
			continue
		}
		if a.Offset == uint32(ep.ChannelDoorbellOffset)+8*127 {
			name += fmt.Sprintf("=%d", a.Value) // device wake: 1 assert, 0 release
		}
		out = append(out, name)
	}
	return strings.Join(out, " ")
}

// checkATPorts checks the at probes on DUN (at0) and DUN2 (at1).
func checkATPorts(t *testing.T, r *guestRun, id modem.Identity) {
	t.Helper()
	got := checks(r.serial)
	want := strings.Join([]string{id.Manufacturer, id.Model, "Revision: " + id.Firmware}, "|")
	for _, p := range []string{"at0", "at1"} {
		d := got[p+"-ati"]
		if v := quoted(t, d, "ati"); v != want {
			t.Errorf("%s: ATI answered %q, want %q", p, v, want)
		}
		if v := quoted(t, d, "imei"); v != id.IMEI {
			t.Errorf("%s: AT+CGSN answered %q, want %q", p, v, id.IMEI)
		}
	}
	// The 32 768-byte line, echoed with ERROR: 32 777 bytes in one
	// downlink transfer, which the driver's 32 KiB buffers take in two
	// pieces (OVERFLOW, then EOT), each handed to user space as a read.
	long := got["at1-long-line"]
	if reads, n := number(t, long, "reads"), number(t, long, "bytes"); reads != 2 || n != 32768+9 {
		t.Errorf("at1: the echoed long line came in %d reads, %d bytes; want 2 reads of 32768 + 9 bytes", reads, n)
	}
	t0, t1 := tallyOf(t, r, "at0"), tallyOf(t, r, "at1")
	s := r.ctlSnapAt(t, "ctl")
	a := s.at
	t.Logf("guest at probes: at0 %v, at1 %v", t0, t1)
	t.Logf("modem AT: %+v", a)
	if a.BytesIn != uint64(t0["wbytes"]+t1["wbytes"]) || a.BytesOut != uint64(t0["rbytes"]+t1["rbytes"]) {
		t.Errorf("AT: the modem received %d bytes and sent %d; the guest wrote %d and read %d",
			a.BytesIn, a.BytesOut, t0["wbytes"]+t1["wbytes"], t0["rbytes"]+t1["rbytes"])
	}
	// Every write is one command line; the one over the line limit is
	// answered ERROR, every other OK; the refused write never arrived.
	lines := uint64(t0["writes"] + t1["writes"])
	if a.Lines+a.TooLong != lines || a.TooLong != 1 || a.Errors != 1 || a.OK != lines-1 ||
		a.SyntaxErrors != 0 || len(a.Unknown) != 0 || a.SendFailed != 0 || a.NoPrefix != 0 {
		t.Errorf("AT: lines %d + too long %d (want %d + 1), OK %d, errors %d (want 1), syntax errors %d, unknown %v, send failed %d, no prefix %d",
			a.Lines, a.TooLong, lines-1, a.OK, a.Errors, a.SyntaxErrors, a.Unknown, a.SendFailed, a.NoPrefix)
	}
	if t1["rejected"] != 1 {
		t.Errorf("at1: %d writes refused, want 1 (the 32769-byte one)", t1["rejected"])
	}
	checkSessions(t, modem.DUNName, s.pairs[modem.DUNName], t0["sessions"], t0["writes"], t0["wbytes"])
	checkSessions(t, modem.DUN2Name, s.pairs[modem.DUN2Name], t1["sessions"], t1["writes"], t1["wbytes"])
	t.Logf("DUN pair: %+v; DUN2 pair: %+v", s.pairs[modem.DUNName], s.pairs[modem.DUN2Name])
}

// checkQMIPort checks the qmi probe's run.
func checkQMIPort(t *testing.T, r *guestRun, id modem.Identity) {
	t.Helper()
	d := checks(r.serial)["qmi-dms"]
	for key, want := range map[string]string{"manufacturer": id.Manufacturer, "model": id.Model, "revision": id.Firmware, "imei": id.IMEI} {
		if v := quoted(t, d, key); v != want {
			t.Errorf("QMI DMS %s %q, want %q", key, v, want)
		}
	}
	if v := quoted(t, checks(r.serial)["qmi-version"], "services"); !strings.Contains(v, "DMS 1.") {
		t.Errorf("CTL GET_VERSION_INFO lists %q, without DMS", v)
	}
	tl := tallyOf(t, r, "qmi")
	s := r.ctlSnapAt(t, "ctl")
	q := s.qmi
	t.Logf("guest qmi probe: %v", tl)
	t.Logf("modem QMI: frames in %d, out %d, responses %d (errors %d %v), dropped %d %v, clients allocated %d released %d active %d, by service %v",
		q.FramesIn, q.FramesOut, q.Responses, q.ErrorResponses, q.ErrorCodes, q.Dropped, q.Errors, q.ClientsAllocated, q.ClientsReleased, q.ClientsActive, q.InByService)
	if q.FramesIn != uint64(tl["writes"]) || q.FramesOut != uint64(tl["reads"]) || q.Responses != q.FramesIn {
		t.Errorf("QMI: the modem received %d frames and sent %d (%d responses); the guest wrote %d and read %d",
			q.FramesIn, q.FramesOut, q.Responses, tl["writes"], tl["reads"])
	}
	if q.ErrorResponses != 0 || q.Dropped != 0 || q.Malformed != 0 || len(q.Unsupported) != 0 || q.Indications != 0 ||
		q.ClientsAllocated != 1 || q.ClientsReleased != 1 || q.ClientsActive != 0 {
		t.Errorf("QMI: error responses %d %v, dropped %d %v, malformed %d, unsupported %v, indications %d; clients allocated %d released %d active %d (want 1, 1, 0)",
			q.ErrorResponses, q.ErrorCodes, q.Dropped, q.Errors, q.Malformed, q.Unsupported, q.Indications, q.ClientsAllocated, q.ClientsReleased, q.ClientsActive)
	}
	checkSessions(t, modem.QMIName, s.pairs[modem.QMIName], tl["sessions"], tl["writes"], tl["wbytes"])
}

// ctlSummary logs the time the control probes took and the pairs' first
// channel state changes (the order of START and RESET as the device saw
// them).
func ctlSummary(t *testing.T, r *guestRun) {
	s := r.ctlSnapAt(t, "ctl")
	t.Logf("control-port checks: %v (MARK mbim-closed to MARK ctl)", r.mark(t, "ctl").at.Sub(r.mark(t, "mbim-closed").at).Round(time.Millisecond))
	for _, n := range slices.Sorted(maps.Keys(s.pairs)) {
		t.Logf("%s: first channel state changes: %s", n, strings.Join(s.pairs[n].Events, ", "))
	}
}

// The guest checks of the control probes.
var (
	mbimChecks = []string{"mbim-node", "mbim-open", "mbim-device-caps", "mbim-large-fragmented", "mbim-reopen-32k",
		"mbim-large-single", "mbim-reopen-64", "mbim-fragmented", "mbim-reopen", "mbim-shared", "mbim-close"}
	qmiChecks = []string{"node-wwan0qmi0", "qmi-node", "qmi-version", "qmi-allocate", "qmi-dms", "qmi-reopen", "qmi-release"}
	atChecks  = []string{"node-wwan0at0", "node-wwan0at1", "at0-node", "at0-ate0", "at0-ati", "at0-reopen",
		"at1-node", "at1-ate0", "at1-ati", "at1-reopen", "at1-node-long", "at1-ate1", "at1-long-line", "at1-oversize", "at1-after-oversize"}
	afterSysErrChecks = []string{"mbim-after-syserr-node", "mbim-after-syserr-open", "mbim-after-syserr-device-caps", "mbim-after-syserr-close"}
)

// checkMBIMAfterSysErr checks the MBIM port Linux created again after
// SYS_ERR: one more channel session, OPEN, DEVICE_CAPS, CLOSE, all
// answered.
func checkMBIMAfterSysErr(t *testing.T, r *guestRun, id modem.Identity) {
	t.Helper()
	d := checks(r.serial)["mbim-after-syserr-device-caps"]
	if v := quoted(t, d, "device_id"); v != id.IMEI {
		t.Errorf("after SYS_ERR: DeviceId %q, want %q", v, id.IMEI)
	}
	tl := tallyOf(t, r, "mbim-after-syserr")
	before, after := r.ctlSnapAt(t, "ctl"), r.ctlSnapAt(t, "recovered")
	b, a := before.mbim, after.mbim
	if a.MessagesIn-b.MessagesIn != uint64(tl["writes"]) || a.MessagesOut-b.MessagesOut != uint64(tl["reads"]) ||
		a.Opens-b.Opens != 1 || a.Closes-b.Closes != 1 || a.FunctionErrors != b.FunctionErrors || a.DroppedReplies != b.DroppedReplies {
		t.Errorf("after SYS_ERR: the modem's MBIM counters moved by in %d, out %d, opens %d, closes %d, function errors %d, dropped replies %d; the guest wrote %d and read %d",
			a.MessagesIn-b.MessagesIn, a.MessagesOut-b.MessagesOut, a.Opens-b.Opens, a.Closes-b.Closes,
			a.FunctionErrors-b.FunctionErrors, a.DroppedReplies-b.DroppedReplies, tl["writes"], tl["reads"])
	}
	pb, pa := before.pairs[modem.MBIMName], after.pairs[modem.MBIMName]
	if pa.ULStarts-pb.ULStarts != tl["sessions"] || pa.DLStarts-pb.DLStarts != tl["sessions"] {
		t.Errorf("after SYS_ERR: %d/%d more START ul/dl on MBIM, the guest ran %d sessions", pa.ULStarts-pb.ULStarts, pa.DLStarts-pb.DLStarts, tl["sessions"])
	}
}
