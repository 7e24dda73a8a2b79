package sweep

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
)

// A timing profile is the set of named parameters of the sweep's timing
// model (docs/FIDELITY.md): what the modelled link, modem and host take.
// With a profile the sweep runs in virtual time: the real host code and
// the mock modem's real ring processing do every bit of the work, and the
// profile says how much time each piece of it takes.

// Parameter is one named parameter of a timing profile.
type Parameter struct {
	// Name is one of the model's parameter names (ParameterNames).
	Name string `json:"name"`
	// Value is in Unit.
	Value float64 `json:"value"`
	// Unit is the parameter's unit; it must be the model's unit for Name.
	Unit string `json:"unit"`
	// Meaning says what it is (filled from the model when empty).
	Meaning string `json:"meaning,omitempty"`
	// Source says where the value comes from: "fitted" (by 'mhictl model
	// fit'), or "set: " and the evidence.
	Source string `json:"source,omitempty"`
	// Start is where the fit of a fitted parameter starts (0: from Value).
	Start float64 `json:"start,omitempty"`
}

// Profile is a timing profile: a name and the model's parameters.
type Profile struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	Parameters  []Parameter `json:"parameters"`
	// Fit records how a fitted profile was fitted (informational).
	Fit *FitRecord `json:"fit,omitempty"`
}

// FitRecord says how a profile was fitted.
type FitRecord struct {
	// Table names the measured table the profile was fitted to.
	Table string `json:"table"`
	// Packets is the number of packets per row the fit simulated.
	Packets int `json:"packets_per_row"`
	// Rounds bounds the fit's pattern search (FitOptions.Rounds).
	Rounds int `json:"rounds,omitempty"`
	// Step is the pattern search's first relative step (FitOptions.Step).
	Step float64 `json:"initial_step,omitempty"`
	// MaxError and MeanError are the relative residuals of the fit, as
	// fractions (0.05 = 5 %).
	MaxError  float64 `json:"max_relative_error"`
	MeanError float64 `json:"mean_relative_error"`
}

// The model's parameters, in the order profiles list them.
const (
	ParamLinkRate       = "link_rate"
	ParamIngressQueue   = "ingress_queue"
	ParamTREBurst       = "tre_burst"
	ParamTREPoll        = "tre_poll"
	ParamModemPacket    = "modem_packet"
	ParamModemHeader    = "modem_header_byte"
	ParamHeaderWindow   = "header_window"
	ParamModemElement   = "modem_element"
	maxProfileParameter = 8
)

// paramSpec is what the model knows of a parameter.
type paramSpec struct {
	name, unit, meaning string
}

var paramSpecs = []paramSpec{
	{ParamLinkRate, "bit/s", "line rate of the generator's link to the modem (Ethernet: each packet also takes its 14-byte header, 4-byte FCS, 8-byte preamble and 12-byte gap on the wire)"},
	{ParamIngressQueue, "B", "the modem's receive queue between the link and its aggregator: a packet takes its frame (IP datagram and 14-byte Ethernet header) rounded up to 64 bytes; what arrives while it is full is lost; when the modem's downlink is idle it takes the whole queue as one batch and sends the batch's last aggregate with it"},
	{ParamTREBurst, "TRE", "the number of host receive buffers (TREs) the modem's DMA engine reads from the ring at a time: a busy period starts with one such read"},
	{ParamTREPoll, "us", "the time until the modem's DMA engine reads the ring again when the TREs of its last read are used up and data still waits"},
	{ParamModemPacket, "us", "the modem's time per packet of an aggregate (taking it from the receive queue, framing it), before the aggregate's DMA starts"},
	{ParamModemHeader, "ns/B", "the modem's CPU time per byte of a packet's headers it handles itself (the packet's first header_window bytes; the hardware moves the rest), spent with modem_packet before the aggregate's DMA starts"},
	{ParamHeaderWindow, "B", "how many of a packet's first bytes the modem's CPU handles itself (its header buffer): a packet of n bytes costs min(n, header_window) × modem_header_byte"},
	{ParamModemElement, "us", "the modem's time per host buffer it writes: reading the TRE, the DMA, writing the completion event"},
}

// The modelled host's costs are constants of the model, not parameters:
// gomhi's host measured on the development machine (docs/PERFORMANCE.md,
// docs/FIDELITY.md section 4). The MRU thread's table cannot see the host
// (these costs change none of its rows, even ×10), so the model spends its
// eight parameters on what the table does determine.
const (
	// HostPacketCost is the host's time per delivered packet
	// (de-aggregation, a new socket buffer, the copy, the stack above):
	// BenchmarkHostReplay's 23 ns per 64-byte packet, rounded.
	HostPacketCost = 25 * time.Nanosecond
	// HostBufferCostPerKiB is the host's time to allocate and map a
	// receive buffer it posts, per KiB of the buffer: BenchmarkBufferCost's
	// 10–108 ns/KiB by size, their mean.
	HostBufferCostPerKiB = 55 * time.Nanosecond
)

// ParameterNames returns the model's parameter names, in profile order.
func ParameterNames() []string {
	names := make([]string, len(paramSpecs))
	for i, p := range paramSpecs {
		names[i] = p.name
	}
	return names
}

func specOf(name string) (paramSpec, bool) {
	for _, p := range paramSpecs {
		if p.name == name {
			return p, true
		}
	}
	return paramSpec{}, false
}

// Errors of profiles.
var (
	// ErrProfile: a profile that is not valid (unknown or repeated
	// parameter, wrong unit, bad value).
	ErrProfile = errors.New("sweep: bad timing profile")
	// ErrUnknownProfile: no shipped profile of that name.
	ErrUnknownProfile = errors.New("sweep: unknown timing profile")
)

// Validate checks the profile: at most 8 parameters, each one of the
// model's, once, in the model's unit, finite and not negative, and a
// positive link rate.
func (p *Profile) Validate() error {
	if len(p.Parameters) > maxProfileParameter {
		return fmt.Errorf("%w %q: %d parameters, at most %d", ErrProfile, p.Name, len(p.Parameters), maxProfileParameter)
	}
	seen := map[string]bool{}
	for _, q := range p.Parameters {
		spec, ok := specOf(q.Name)
		if !ok {
			return fmt.Errorf("%w %q: unknown parameter %q (the model's: %s)", ErrProfile, p.Name, q.Name, strings.Join(ParameterNames(), ", "))
		}
		if seen[q.Name] {
			return fmt.Errorf("%w %q: parameter %q given twice", ErrProfile, p.Name, q.Name)
		}
		seen[q.Name] = true
		if q.Unit != spec.unit {
			return fmt.Errorf("%w %q: %s in %q, want %q", ErrProfile, p.Name, q.Name, q.Unit, spec.unit)
		}
		if math.IsNaN(q.Value) || math.IsInf(q.Value, 0) || q.Value < 0 {
			return fmt.Errorf("%w %q: %s = %g", ErrProfile, p.Name, q.Name, q.Value)
		}
	}
	if v, _ := p.Value(ParamLinkRate); v <= 0 {
		return fmt.Errorf("%w %q: %s must be positive", ErrProfile, p.Name, ParamLinkRate)
	}
	return nil
}

// Value returns a parameter's value and whether the profile has it (a
// missing parameter counts as 0: that cost is not modelled).
func (p *Profile) Value(name string) (float64, bool) {
	for _, q := range p.Parameters {
		if q.Name == name {
			return q.Value, true
		}
	}
	return 0, false
}

// set sets a parameter's value, adding it with the model's unit if absent.
func (p *Profile) set(name string, v float64) {
	for i := range p.Parameters {
		if p.Parameters[i].Name == name {
			p.Parameters[i].Value = v
			return
		}
	}
	spec, _ := specOf(name)
	p.Parameters = append(p.Parameters, Parameter{Name: name, Value: v, Unit: spec.unit, Meaning: spec.meaning})
}

// Clone returns a deep copy.
func (p *Profile) Clone() *Profile {
	c := *p
	c.Parameters = slices.Clone(p.Parameters)
	if p.Fit != nil {
		f := *p.Fit
		c.Fit = &f
	}
	return &c
}

// ReadProfile reads a profile in JSON and validates it; meanings left
// empty are filled from the model.
func ReadProfile(r io.Reader) (*Profile, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProfile, err)
	}
	for i := range p.Parameters {
		if spec, ok := specOf(p.Parameters[i].Name); ok && p.Parameters[i].Meaning == "" {
			p.Parameters[i].Meaning = spec.meaning
		}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// WriteJSON writes the profile as indented JSON.
func (p *Profile) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

//go:embed profiles/*.json profiles/*.csv
var shippedProfiles embed.FS

// ReferenceTable returns the measured table shipped with a profile
// (profiles/NAME.csv: the rows the profile was fitted to), or nil when
// there is none.
func ReferenceTable(name string) []Row {
	b, err := shippedProfiles.ReadFile("profiles/" + name + ".csv")
	if err != nil {
		return nil
	}
	rows, err := ReadTable(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	return rows
}

// ProfileNames returns the names of the shipped profiles.
func ProfileNames() []string {
	ents, _ := shippedProfiles.ReadDir("profiles")
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// LoadProfile returns the shipped profile called name, or reads the file
// name when it names one (a path containing a slash or ending in .json).
func LoadProfile(name string) (*Profile, error) {
	if strings.ContainsRune(name, '/') || strings.HasSuffix(name, ".json") {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("sweep: timing profile: %w", err)
		}
		defer f.Close()
		return ReadProfile(f)
	}
	b, err := shippedProfiles.ReadFile("profiles/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("%w %q (shipped: %s; or a .json file)", ErrUnknownProfile, name, strings.Join(ProfileNames(), ", "))
	}
	return ReadProfile(bytes.NewReader(b))
}

// model is a validated profile in the units the simulation uses.
type model struct {
	linkRate     float64 // bit/s
	ingress      int     // bytes
	treBurst     int
	trePoll      time.Duration
	modemPacket  time.Duration
	headerByte   float64 // ns per header byte
	headerWindow int     // bytes
	modemElement time.Duration
	hostPacket   float64 // ns
	hostBuffer   float64 // ns per KiB of buffer posted
}

// IngressBlock is the allocation unit of the modelled modem's receive
// queue (ingress_queue): a packet's frame is rounded up to it.
const IngressBlock = 64

// virtualDLQueueDepth is the modelled modem's downlink transfer slots: as
// many as a batch of the largest receive queue can need.
const virtualDLQueueDepth = 256

func newModel(p *Profile) (model, error) {
	if err := p.Validate(); err != nil {
		return model{}, err
	}
	v := func(name string) float64 { x, _ := p.Value(name); return x }
	us := func(name string) time.Duration { return time.Duration(math.Round(v(name) * 1e3)) }
	m := model{
		linkRate:     v(ParamLinkRate),
		ingress:      int(math.Round(v(ParamIngressQueue))),
		treBurst:     int(math.Round(v(ParamTREBurst))),
		trePoll:      us(ParamTREPoll),
		modemPacket:  us(ParamModemPacket),
		headerByte:   v(ParamModemHeader),
		headerWindow: int(math.Round(v(ParamHeaderWindow))),
		modemElement: us(ParamModemElement),
		hostPacket:   float64(HostPacketCost),
		hostBuffer:   float64(HostBufferCostPerKiB),
	}
	if m.ingress > 0 && m.ingress < IngressBlock {
		return model{}, fmt.Errorf("%w %q: %s = %d B, want 0 (none) or at least %d", ErrProfile, p.Name, ParamIngressQueue, m.ingress, IngressBlock)
	}
	return m, nil
}

// link returns the generator's link.
func (m *model) link() *ipdata.Link {
	return &ipdata.Link{BitsPerSecond: m.linkRate, FrameOverhead: ipdata.EthernetOverhead}
}

// ingressQueue returns the modem's receive queue (nil: none, the packets
// go straight into aggregates as they arrive).
func (m *model) ingressQueue() *ipdata.Ingress {
	if m.ingress <= 0 {
		return nil
	}
	return &ipdata.Ingress{Bytes: m.ingress, Block: IngressBlock, FrameHeader: FrameHeader}
}

// modemTiming returns the mock modem's data-path timing.
func (m *model) modemTiming() ep.Timing {
	return ep.Timing{
		PacketCost: m.modemPacket, HeaderWindow: m.headerWindow, HeaderByteCost: m.headerByte,
		ElementSetup: m.modemElement, TREBurst: m.treBurst, TREPoll: m.trePoll,
	}
}

// hostCost is the host's time for a round of work: packets delivered,
// buffers of mru bytes posted.
func (m *model) hostCost(packets, posted uint64, mru int) time.Duration {
	ns := m.hostPacket*float64(packets) + m.hostBuffer*float64(posted)*float64(mru)/1024
	return time.Duration(math.Round(ns))
}

// FrameHeader is what the sweep's packet size includes beyond the IP
// datagram in timing mode: the thread's packet sizes (64 … 1518) are
// Ethernet frames without their FCS, so the modem aggregates datagrams of
// size−14 bytes (docs/FIDELITY.md says why).
const FrameHeader = 14

// LineRatePPS returns the packets/s of a link of linkRate bit/s carrying
// frames of size bytes (the thread's size: header and IP datagram), with
// the FCS, preamble and inter-frame gap on the wire.
func LineRatePPS(linkRate float64, size int) float64 {
	return linkRate / (8 * float64(size-FrameHeader+ipdata.EthernetOverhead))
}
