package modem

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/proto/at"
	"github.com/gomhi/gomhi/mhi/wire"
)

// Names of the AT (DUN) channel pairs: DUN 32/33 and DUN2 92/93 in the
// device table, Linux's /dev/wwan0at0 and /dev/wwan0at1.
const (
	DUNName  = "DUN"
	DUN2Name = "DUN2"
)

// ATOptions configure an AT function.
type ATOptions struct {
	// MaxLine is the longest command line kept (zero means
	// at.DefaultMaxLine); longer lines are answered ERROR.
	MaxLine int
	// Logger receives a Debug record per command line; nil discards.
	Logger *slog.Logger
}

// ATStats are the AT function's counters. Conservation: every executed
// line (Lines + Repeats + TooLong) ends in one final result: Lines +
// Repeats + TooLong = OK + Errors.
type ATStats struct {
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	// Lines counts command lines executed, Repeats "A/" repetitions,
	// TooLong lines over the limit (answered ERROR), NoPrefix lines not
	// starting with AT (ignored, as V.250 says).
	Lines    uint64 `json:"lines"`
	Repeats  uint64 `json:"repeats"`
	TooLong  uint64 `json:"too_long"`
	NoPrefix uint64 `json:"no_prefix"`
	Commands uint64 `json:"commands"`
	OK       uint64 `json:"ok"`
	Errors   uint64 `json:"errors"`
	// SyntaxErrors counts lines that did not parse (answered ERROR).
	SyntaxErrors uint64 `json:"syntax_errors"`
	// Unknown counts commands the mock does not implement, by name (at
	// most 64 names; the rest under "other").
	Unknown map[string]uint64 `json:"unknown,omitempty"`
	// SendFailed counts answers that could not be queued (channel reset).
	SendFailed uint64 `json:"send_failed"`
}

// pdpContext is one +CGDCONT entry.
type pdpContext struct {
	typ, apn string
}

// atPort is the terminal state of one AT port (channel pair): what ATZ
// resets.
type atPort struct {
	pipe       *ep.Pipe
	rd         *at.LineReader
	echo       bool
	verbose    bool
	quiet      bool
	cmee       at.CMEE
	copsFormat int
	regN       [3]int // +CREG, +CGREG, +CEREG unsolicited modes
	last       []byte // the previous command line, for A/
	cmds       []at.Command
	out        []byte // the answer being built; used by the uplink worker only
}

func (p *atPort) reset() {
	p.echo, p.verbose, p.quiet, p.cmee, p.copsFormat, p.regN = true, true, false, at.CMEEOff, 0, [3]int{}
}

// AT is the mock modem's AT command interpreter behind the DUN and DUN2
// pairs. Each uplink transfer is a piece of a terminal's byte stream;
// each port keeps its own line buffer and settings (echo, verbose, +CMEE,
// +COPS format) and they share the Modem and the PDP context table. The
// commands it knows are listed in docs/CONTROL.md, "QMI and AT"; an
// unknown command is answered ERROR, a known one used with arguments it
// does not accept +CME ERROR (when +CMEE is 1 or 2) or ERROR.
type AT struct {
	m    *Modem
	opts ATOptions
	log  *slog.Logger

	// mu guards the fields below up to smu, and is held while a line is
	// executed (the Modem consulted or changed, the counters updated
	// under smu).
	//
	// lockorder: ep.channel.work → AT.mu → AT.smu
	// lockorder: AT.mu → Modem.mu
	mu       sync.Mutex
	ports    map[*ep.Pipe]*atPort
	contexts map[int]pdpContext
	// cfunOff is what +CFUN? reports while the radio is off (0 or 4).
	cfunOff int
	// ws46 is the selected radio access (+WS46), cemode the UE mode of
	// operation (+CEMODE), ctzu automatic time zone update (+CTZU).
	ws46, cemode, ctzu int

	// smu guards st; nothing is taken while it is held.
	smu sync.Mutex
	st  ATStats
}

// NewAT returns the AT function of modem m.
func NewAT(m *Modem, opts ATOptions) (*AT, error) {
	if m == nil {
		return nil, fmt.Errorf("modem: AT: no modem: %w", ErrConfig)
	}
	if opts.MaxLine < 0 {
		return nil, fmt.Errorf("modem: AT: MaxLine %d: %w", opts.MaxLine, ErrConfig)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &AT{m: m, opts: opts, log: log, ports: map[*ep.Pipe]*atPort{}, cfunOff: 4,
		contexts: map[int]pdpContext{1: {typ: "IPV4V6", apn: ""}},
		ws46:     ws46UTRANEUTRAN, cemode: cemodeCSPS2}
	a.st.Unknown = map[string]uint64{}
	return a, nil
}

// Stats returns a snapshot of the counters.
func (a *AT) Stats() ATStats {
	a.smu.Lock()
	defer a.smu.Unlock()
	s := a.st
	s.Unknown = maps.Clone(a.st.Unknown)
	return s
}

func (a *AT) count(f func(s *ATStats)) {
	a.smu.Lock()
	f(&a.st)
	a.smu.Unlock()
}

// Attach implements PipeAttacher.
func (a *AT) Attach(p *ep.Pipe) {
	a.mu.Lock()
	a.portLocked(p)
	a.mu.Unlock()
}

func (a *AT) portLocked(p *ep.Pipe) *atPort {
	port, ok := a.ports[p]
	if !ok {
		port = &atPort{pipe: p, rd: at.NewLineReader(a.opts.MaxLine), cmds: make([]at.Command, 0, at.MaxCommands)}
		port.reset()
		a.ports[p] = port
	}
	return port
}

// PipeStateChanged implements PipeObserver: a reset uplink channel (the
// terminal closed the port) drops the partly typed line.
func (a *AT) PipeStateChanged(p *ep.Pipe, dir wire.Direction, state wire.ChannelState) {
	if dir != wire.Uplink || state != wire.ChannelDisabled {
		return
	}
	a.mu.Lock()
	if port, ok := a.ports[p]; ok {
		port.rd.Reset()
	}
	a.mu.Unlock()
}

// Receive implements Function: the bytes are typed into the port's
// terminal; the echo and the answers to the lines they complete go back
// as one downlink transfer.
func (a *AT) Receive(ctx context.Context, p *ep.Pipe, transfer []byte) error {
	a.mu.Lock()
	port := a.portLocked(p)
	a.mu.Unlock()
	out := a.receive(port, transfer)
	if len(out) == 0 {
		return nil
	}
	// Counted before the host can see the bytes; taken back on failure.
	a.count(func(s *ATStats) { s.BytesOut += uint64(len(out)) })
	if err := p.Send(ctx, out); err != nil {
		a.count(func(s *ATStats) { s.BytesOut -= uint64(len(out)); s.SendFailed++ })
		return err
	}
	return nil
}

// receive processes the bytes of one transfer and returns the output
// (valid until the next call for the port). It is the seam the fuzz
// target drives.
func (a *AT) receive(port *atPort, p []byte) []byte {
	a.count(func(s *ATStats) { s.BytesIn += uint64(len(p)) })
	a.mu.Lock()
	defer a.mu.Unlock()
	port.out = port.out[:0]
	for len(p) > 0 {
		n, line, st := port.rd.Scan(p)
		if port.echo {
			port.out = append(port.out, p[:n]...)
		}
		p = p[n:]
		switch st {
		case at.Line:
			if !hasATPrefix(line) {
				a.count(func(s *ATStats) { s.NoPrefix++ })
				continue
			}
			port.last = append(port.last[:0], line...)
			a.count(func(s *ATStats) { s.Lines++ })
			a.execLine(port, line)
		case at.Repeat:
			a.count(func(s *ATStats) { s.Repeats++ })
			if len(port.last) == 0 {
				a.final(port, false, -1)
				continue
			}
			a.execLine(port, port.last)
		case at.TooLong:
			a.count(func(s *ATStats) { s.TooLong++ })
			a.final(port, false, -1)
		}
	}
	return port.out
}

func hasATPrefix(line []byte) bool {
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] < 0x20) {
		i++
	}
	return len(line)-i >= 2 && line[i]|0x20 == 'a' && line[i+1]|0x20 == 't'
}

// atResult is the outcome of one command: ok, or an error with a CME code
// (-1: plain ERROR whatever +CMEE says).
type atResult struct {
	ok  bool
	cme int
}

var atOK = atResult{ok: true}

func cmeErr(code int) atResult { return atResult{cme: code} }

var atUnknown = atResult{cme: -1}

// execLine runs the commands of a line, stopping at the first error, and
// appends their information text and one final result code.
func (a *AT) execLine(port *atPort, line []byte) {
	cmds, err := at.ParseLine(line, port.cmds[:0])
	a.log.Debug("at: command line", "pipe", pipeName(port.pipe), "line", string(line), "err", err)
	if err != nil {
		a.count(func(s *ATStats) { s.SyntaxErrors++ })
		a.final(port, false, -1)
		return
	}
	for i := range cmds {
		a.count(func(s *ATStats) { s.Commands++ })
		if r := a.exec(port, &cmds[i]); !r.ok {
			a.final(port, false, r.cme)
			return
		}
	}
	a.final(port, true, 0)
}

// final appends OK or the error (ERROR, or +CME ERROR per +CMEE when cme
// is a code).
func (a *AT) final(port *atPort, ok bool, cme int) {
	a.count(func(s *ATStats) {
		if ok {
			s.OK++
		} else {
			s.Errors++
		}
	})
	if port.quiet {
		return
	}
	switch {
	case ok:
		port.out = at.AppendResult(port.out, at.OK, port.verbose)
	case cme < 0:
		port.out = at.AppendResult(port.out, at.Error, port.verbose)
	default:
		port.out = at.AppendError(port.out, cme, port.cmee, port.verbose)
	}
}

func pipeName(p *ep.Pipe) string {
	if p == nil {
		return "-"
	}
	return p.Name()
}

// info appends a block of information text.
func (port *atPort) info(lines ...string) { port.out = at.AppendInfo(port.out, port.verbose, lines...) }

func (a *AT) unknown(c *at.Command) atResult {
	name := strings.ToUpper(string(c.Name))
	if c.Prefix != 0 {
		name = string(c.Prefix) + name
	}
	a.count(func(s *ATStats) {
		if _, ok := s.Unknown[name]; ok || len(s.Unknown) < 64 {
			s.Unknown[name]++
		} else {
			s.Unknown["other"]++
		}
	})
	return atUnknown
}

// args returns a set command's arguments (nil and false on a syntax error).
func args(c *at.Command) ([]at.Arg, bool) {
	var out []at.Arg
	it := c.Arguments()
	for {
		arg, ok := it.Next()
		if !ok {
			break
		}
		out = append(out, arg)
	}
	return out, it.Err() == nil
}

// intArg returns argument i as a number within [lo, hi].
func intArg(as []at.Arg, i, lo, hi int) (int, bool) {
	if i >= len(as) {
		return 0, false
	}
	n, err := as[i].Int()
	return n, err == nil && n >= lo && n <= hi
}

// oneInt returns the only argument of a set command, a number within
// [lo, hi]; false on a syntax error, another number of arguments or
// another value.
func oneInt(c *at.Command, lo, hi int) (int, bool) {
	as, ok := args(c)
	n, valid := intArg(as, 0, lo, hi)
	return n, ok && valid && len(as) == 1
}

// exec runs one command. a.mu is held.
func (a *AT) exec(port *atPort, c *at.Command) atResult {
	switch c.Prefix {
	case 0:
		return a.basic(port, c)
	case '&':
		switch strings.ToUpper(string(c.Name)) {
		case "C", "D":
			if n, err := c.Number(); err != nil || n > 2 {
				return cmeErr(at.CMEIncorrectParameters)
			}
			return atOK
		case "F":
			port.reset()
			return atOK
		}
		return a.unknown(c)
	case '+':
		return a.extended(port, c)
	case '#':
		return a.telit(port, c)
	}
	return a.unknown(c)
}

// basic runs a V.250 basic command.
func (a *AT) basic(port *atPort, c *at.Command) atResult {
	switch c.Name[0] | 0x20 {
	case 'e', 'v', 'q', 'x', 'z', 'i', 'h':
	default:
		return a.unknown(c)
	}
	if c.Kind != at.Action {
		return cmeErr(at.CMEOperationNotSupported)
	}
	n, err := c.Number()
	if err != nil {
		return cmeErr(at.CMEIncorrectParameters)
	}
	flag := func(dst *bool, v bool) atResult {
		if n > 1 {
			return cmeErr(at.CMEIncorrectParameters)
		}
		*dst = v
		return atOK
	}
	switch c.Name[0] | 0x20 {
	case 'e':
		return flag(&port.echo, n == 1)
	case 'v':
		return flag(&port.verbose, n == 1)
	case 'q':
		return flag(&port.quiet, n == 1)
	case 'x':
		if n > 4 {
			return cmeErr(at.CMEIncorrectParameters)
		}
		return atOK
	case 'z':
		port.reset()
		return atOK
	case 'h':
		return atOK // no circuit-switched call to hang up
	case 'i':
		if n != 0 {
			return cmeErr(at.CMEOperationNotSupported)
		}
		id := a.m.Identity()
		port.info(id.Manufacturer, id.Model, "Revision: "+id.Firmware)
	}
	return atOK
}

// extended runs a '+' command.
func (a *AT) extended(port *atPort, c *at.Command) atResult {
	name := strings.ToUpper(string(c.Name))
	id := a.m.Identity()
	ident := func(v string) atResult {
		switch c.Kind {
		case at.Action:
			port.info(v)
			return atOK
		case at.Test:
			return atOK
		}
		return cmeErr(at.CMEOperationNotSupported)
	}
	switch name {
	case "GCAP":
		if c.Kind != at.Action {
			return cmeErr(at.CMEOperationNotSupported)
		}
		port.info("+GCAP: +CGSM,+CLTE")
		return atOK
	case "CGMI", "GMI":
		return ident(id.Manufacturer)
	case "CGMM", "GMM":
		return ident(id.Model)
	case "CGMR", "GMR":
		return ident(id.Firmware)
	case "CGSN", "GSN":
		return ident(id.IMEI)
	case "CIMI":
		return ident(id.IMSI)
	case "CSQ":
		switch c.Kind {
		case at.Action:
			port.info("+CSQ: " + strconv.Itoa(a.m.RSSI()) + ",99")
			return atOK
		case at.Test:
			port.info("+CSQ: (0-31,99),(0-7,99)")
			return atOK
		}
		return cmeErr(at.CMEOperationNotSupported)
	case "CPIN":
		switch c.Kind {
		case at.Read:
			port.info("+CPIN: READY")
			return atOK
		case at.Test:
			return atOK
		}
		return cmeErr(at.CMEOperationNotAllowed) // no PIN is asked for
	case "CMEE":
		return a.cmee(port, c)
	case "CFUN":
		return a.cfun(port, c)
	case "COPS":
		return a.cops(port, c)
	case "CREG", "CGREG", "CEREG":
		return a.creg(port, c, name)
	case "CGATT":
		return a.cgatt(port, c)
	case "CGDCONT":
		return a.cgdcont(port, c)
	case "CGACT":
		return a.cgact(port, c)
	case "WS46":
		return a.wsel(port, c)
	case "CPOL":
		return a.cpol(port, c)
	case "CPLS":
		return a.cpls(port, c)
	case "CEMODE":
		return a.setting(port, c, "+CEMODE", &a.cemode, 0, 3)
	case "CTZU":
		return a.setting(port, c, "+CTZU", &a.ctzu, 0, 1)
	case "CESQ":
		return a.cesq(port, c)
	case "CRSM":
		return a.crsm(port, c)
	}
	return a.unknown(c)
}

func (a *AT) cmee(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		port.info("+CMEE: " + strconv.Itoa(int(port.cmee)))
	case at.Test:
		port.info("+CMEE: (0-2)")
	case at.Set:
		n, ok := oneInt(c, 0, 2)
		if !ok {
			return cmeErr(at.CMEIncorrectParameters)
		}
		port.cmee = at.CMEE(n)
	default:
		port.cmee = at.CMEEOff
	}
	return atOK
}

func (a *AT) cfun(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		v := 1
		if !a.m.Radio() {
			v = a.cfunOff
		}
		port.info("+CFUN: " + strconv.Itoa(v))
	case at.Test:
		port.info("+CFUN: (0,1,4),(0-1)")
	case at.Set:
		as, ok := args(c)
		fun, valid := intArg(as, 0, 0, 127)
		if !ok || !valid || len(as) > 2 {
			return cmeErr(at.CMEIncorrectParameters)
		}
		if len(as) == 2 {
			if rst, ok := intArg(as, 1, 0, 1); !ok || rst == 1 {
				return cmeErr(at.CMEOperationNotSupported) // reset is not modelled
			}
		}
		switch fun {
		case 1:
			if err := a.m.PowerRadio(true); err != nil {
				return cmeErr(at.CMEOperationNotAllowed)
			}
		case 0, 4:
			a.cfunOff = fun
			a.m.SetRadio(false)
		default:
			return cmeErr(at.CMEOperationNotSupported)
		}
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

func (a *AT) cops(port *atPort, c *at.Command) atResult {
	id := a.m.Identity()
	oper := func(format int) string {
		if format == 2 {
			return id.ProviderID
		}
		return id.ProviderName
	}
	switch c.Kind {
	case at.Read:
		if a.m.Registration() != RegHome {
			port.info("+COPS: 0")
			return atOK
		}
		port.info(fmt.Sprintf("+COPS: 0,%d,%q,7", port.copsFormat, oper(port.copsFormat)))
	case at.Test:
		port.info(fmt.Sprintf("+COPS: (2,%q,%q,%q,7),,(0-4),(0-2)", id.ProviderName, id.ProviderName, id.ProviderID))
	case at.Set:
		as, ok := args(c)
		mode, valid := intArg(as, 0, 0, 4)
		if !ok || !valid || len(as) > 4 {
			return cmeErr(at.CMEIncorrectParameters)
		}
		if len(as) >= 2 && !as[1].Empty() {
			f, ok := intArg(as, 1, 0, 2)
			if !ok {
				return cmeErr(at.CMEIncorrectParameters)
			}
			if mode == 3 || mode == 0 {
				port.copsFormat = f
			}
		}
		switch mode {
		case 0:
			if !a.m.Radio() {
				return cmeErr(at.CMENoNetworkService)
			}
		case 3:
		default:
			return cmeErr(at.CMEOperationNotSupported) // manual selection and deregistration are not modelled
		}
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

var regCommandIndex = map[string]int{"CREG": 0, "CGREG": 1, "CEREG": 2}

func (a *AT) creg(port *atPort, c *at.Command, name string) atResult {
	i := regCommandIndex[name]
	switch c.Kind {
	case at.Read:
		stat := 0
		if a.m.Registration() == RegHome {
			stat = 1
		}
		port.info(fmt.Sprintf("+%s: %d,%d", name, port.regN[i], stat))
	case at.Test:
		port.info("+" + name + ": (0-2)")
	case at.Set:
		n, ok := oneInt(c, 0, 2)
		if !ok {
			return cmeErr(at.CMEIncorrectParameters)
		}
		port.regN[i] = n // accepted; the mock sends no unsolicited codes
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

func (a *AT) cgatt(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		v := 0
		if a.m.Attached() {
			v = 1
		}
		port.info("+CGATT: " + strconv.Itoa(v))
	case at.Test:
		port.info("+CGATT: (0,1)")
	case at.Set:
		v, ok := oneInt(c, 0, 1)
		if !ok {
			return cmeErr(at.CMEIncorrectParameters)
		}
		if err := a.m.SetAttached(v == 1); err != nil {
			return cmeErr(at.CMENoNetworkService)
		}
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

// PDP types +CGDCONT accepts.
var pdpTypes = []string{"IP", "IPV6", "IPV4V6"}

const maxCID = 16

func (a *AT) cgdcont(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		var lines []string
		for _, cid := range slices.Sorted(maps.Keys(a.contexts)) {
			ctx := a.contexts[cid]
			lines = append(lines, fmt.Sprintf("+CGDCONT: %d,%q,%q,\"0.0.0.0\",0,0", cid, ctx.typ, ctx.apn))
		}
		if len(lines) > 0 {
			port.info(lines...)
		}
	case at.Test:
		var lines []string
		for _, t := range pdpTypes {
			lines = append(lines, fmt.Sprintf("+CGDCONT: (1-%d),%q,,,(0-2),(0-4)", maxCID, t))
		}
		port.info(lines...)
	case at.Set:
		as, ok := args(c)
		cid, valid := intArg(as, 0, 1, maxCID)
		if !ok || !valid || len(as) > 6 {
			return cmeErr(at.CMEIncorrectParameters)
		}
		if len(as) == 1 {
			delete(a.contexts, cid)
			return atOK
		}
		typ := strings.ToUpper(string(as[1].Value))
		if !as[1].Quoted || !slices.Contains(pdpTypes, typ) {
			return cmeErr(at.CMEIncorrectParameters)
		}
		apn := ""
		if len(as) >= 3 {
			if !as[2].Quoted && !as[2].Empty() {
				return cmeErr(at.CMEIncorrectParameters)
			}
			apn = string(as[2].Value)
		}
		if len(apn) > 100 {
			return cmeErr(at.CMETextTooLong)
		}
		a.contexts[cid] = pdpContext{typ: typ, apn: apn}
	default:
		return cmeErr(at.CMEOperationNotSupported)
	}
	return atOK
}

// cgact reports which contexts are active (the one whose APN the Modem's
// session uses); activating over AT is not modelled.
func (a *AT) cgact(port *atPort, c *at.Command) atResult {
	switch c.Kind {
	case at.Read:
		s := a.m.Session()
		var lines []string
		for _, cid := range slices.Sorted(maps.Keys(a.contexts)) {
			state := 0
			if s.Active && strings.EqualFold(a.contexts[cid].apn, s.APN) {
				state = 1
			}
			lines = append(lines, fmt.Sprintf("+CGACT: %d,%d", cid, state))
		}
		if len(lines) > 0 {
			port.info(lines...)
		}
		return atOK
	case at.Test:
		port.info("+CGACT: (0,1)")
		return atOK
	}
	return cmeErr(at.CMEOperationNotSupported)
}
