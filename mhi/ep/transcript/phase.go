package transcript

import (
	"strconv"
	"strings"

	"github.com/gomhi/gomhi/mhi/wire"
)

// The phases of a transcript. A phase that comes back is numbered from its
// second time: channel-start#2 after an MRU change restarted a channel.
const (
	PhasePowerUp      = "power-up"      // from the start to the first START_CHAN
	PhaseChannelStart = "channel-start" // from a START_CHAN on
	PhaseChannelStop  = "channel-stop"  // a STOP_CHAN or RESET_CHAN a START_CHAN follows
	PhaseData         = "data"          // the data channels' records, compared by shape
	PhaseSysErr       = "sys-err"       // from SYS_ERR to the channels' restart
	PhaseSuspend      = "suspend"       // from M3
	PhaseResume       = "resume"        // from M0 after M3
	PhaseShutdown     = "shutdown"      // from the last STOP/RESET_CHAN or MHI reset
	PhaseDMA          = "dma"           // the transport's DMA maps, compared by shape
)

// item is a record prepared for comparison: its phase, the stream it is
// aligned in, and what is compared (for data records, their shape).
type item struct {
	rec    *Record
	index  int // of rec in its transcript
	phase  string
	stream string
	key    string
	data   bool
}

// phaser follows the phases of a transcript record by record.
type phaser struct {
	cur, label  string
	count       map[string]int
	lastRestart int // index of the last START_CHAN or M0: no shutdown before it
}

func (p *phaser) enter(name string) {
	if p.cur == name {
		return
	}
	p.cur = name
	p.count[name]++
	p.label = name
	if n := p.count[name]; n > 1 {
		p.label = name + "#" + strconv.Itoa(n)
	}
}

// step moves to the phase record i begins, if it begins one.
func (p *phaser) step(i int, rec *Record) {
	stopping := isCommand(rec, wire.PktStopChanCmd) || isCommand(rec, wire.PktResetChanCmd)
	switch {
	case isState(rec, wire.StateSysErr):
		p.enter(PhaseSysErr)
	case isState(rec, wire.StateM3):
		p.enter(PhaseSuspend)
	case isState(rec, wire.StateM0) && p.cur == PhaseSuspend:
		p.enter(PhaseResume)
	case isCommand(rec, wire.PktStartChanCmd):
		p.enter(PhaseChannelStart)
	case (stopping || isMHIReset(rec)) && i > p.lastRestart:
		p.enter(PhaseShutdown)
	case stopping && p.cur != PhaseSysErr:
		p.enter(PhaseChannelStop)
	}
}

func isState(rec *Record, st wire.State) bool {
	return rec.Kind == KindState && rec.Fields["state"] == st.String()
}

// isCommand reports a command of type t, or the doorbell that rings it
// (commandsRung): the doorbell begins the command's phase.
func isCommand(rec *Record, t wire.PacketType) bool {
	if rec.Kind == KindDoorbell && rec.Name == "cmd" {
		return strings.HasPrefix(rec.Fields["for"], t.String()+" ")
	}
	return rec.Kind == KindElement && rec.Name == "cmd" && rec.Fields["type"] == t.String()
}

// isMHIReset reports a write of MHICTRL with RESET set.
func isMHIReset(rec *Record) bool {
	if rec.Kind != KindRegWrite || rec.Name != "MHICTRL" {
		return false
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(rec.Fields["value"], "0x"), 16, 32)
	return err == nil && v&wire.MHICTRLReset != 0
}

// Phases returns the phase of each record of recs (a transcript in
// sequence order, as Read returns it), as Diff assigns them; a record left
// out of the comparison has the phase "".
func Phases(recs []Record) []string {
	phases := make([]string, len(recs))
	for _, it := range prepare(recs) {
		phases[it.index] = it.phase
	}
	return phases
}

// prepare turns a transcript into the items compared. State and EE
// records after the host's last register write are left out, and so are
// READY and EE records in the shutdown phase: what the device does on its
// own after the host's final reset (READY a moment later) happens before
// or after the host's last writes, as it happens, since no host waits for
// it.
func prepare(recs []Record) []item {
	p := &phaser{cur: PhasePowerUp, label: PhasePowerUp, count: map[string]int{PhasePowerUp: 1}, lastRestart: -1}
	lastHost := -1
	for i := range recs {
		rec := &recs[i]
		if isCommand(rec, wire.PktStartChanCmd) || isState(rec, wire.StateM0) {
			p.lastRestart = i
		}
		if rec.Kind == KindRegWrite || rec.Kind == KindDoorbell {
			lastHost = i
		}
	}
	// The event rings whose first doorbell since the host last programmed
	// the event context array (ECABAP) was seen: that doorbell is the
	// host's initial wp, compared in order; a doorbell that comes late from
	// before a reset (an event the host was still handling) is not it.
	seenER := map[string]bool{}
	about := commandsRung(recs)
	items := make([]item, 0, len(recs))
	for i := range recs {
		rec := &recs[i]
		if c, ok := about[i]; ok {
			rec = withCommand(rec, c)
		}
		p.step(i, rec)
		if rec.Kind == KindRegWrite && rec.Name == "ECABAP_LOWER" {
			clear(seenER)
		}
		if (rec.Kind == KindState || rec.Kind == KindEE) && i > lastHost ||
			p.cur == PhaseShutdown && (isState(rec, wire.StateReady) || rec.Kind == KindEE) {
			continue
		}
		it := classify(rec, seenER)
		it.rec, it.index = rec, i
		it.phase = p.label
		switch {
		case it.stream == "dma":
			it.phase = PhaseDMA
		case it.data:
			it.phase = PhaseData
		}
		items = append(items, it)
	}
	return items
}

// classify says in which stream a record is compared and what is
// compared. Control records (registers, contexts, commands, states, the
// first doorbell of each event ring after ECABAP) are aligned in order
// within their phase; data records (transfer rings, transfer events, the
// other event ring doorbells, interrupts, and in their own phase the DMA
// maps) by their shape, whatever their number.
func classify(rec *Record, seenER map[string]bool) item {
	f := rec.Fields
	switch rec.Kind {
	case KindRegRead:
		return item{stream: "reg-read", key: rec.Name}
	case KindRegWrite:
		return item{stream: "reg-write", key: rec.Name + "=" + f["value"]}
	case KindContext:
		return item{stream: "context:" + rec.Name, key: fieldString(f)}
	case KindElement:
		if rec.Name == "cmd" {
			return item{stream: "cmd", key: "element" + fieldString(f, "slot")}
		}
		return item{stream: "element:" + rec.Name, key: fieldString(f, "slot"), data: true}
	case KindDoorbell:
		switch {
		case rec.Name == "cmd":
			return item{stream: "cmd", key: "doorbell" + fieldString(f, "slot")}
		case strings.HasPrefix(rec.Name, "er") && !seenER[rec.Name]:
			seenER[rec.Name] = true
			return item{stream: "doorbell:" + rec.Name, key: fieldString(f)}
		}
		return item{stream: "doorbell:" + rec.Name, key: fieldString(f, "slot"), data: true}
	case KindEvent:
		switch f["type"] {
		case wire.PktTxEvent.String():
			return item{stream: "event:" + rec.Name + "/ch" + f["chan"], key: fieldString(f, "slot", "len", "tre"), data: true}
		case wire.PktCmdCompletion.String():
			return item{stream: "cmd", key: "event" + fieldString(f, "slot", "cmd")}
		}
		return item{stream: "state", key: "event" + fieldString(f, "slot")}
	case KindIRQ:
		return item{stream: "irq", key: fieldString(f), data: true}
	case KindDMAMap, KindDMAUnmap:
		return item{stream: "dma", key: string(rec.Kind) + fieldString(f), data: true}
	}
	return item{stream: "state", key: string(rec.Kind) + fieldString(f)}
}
