// Package quirk is the registry of the mock modem's field failures: named,
// composable behaviours that reproduce on demand what users of real MHI
// modems meet in the field (docs/QUIRKS.md). Each quirk names the public
// report or kernel commit it reproduces, says what it does on the wire and
// adjusts the mock's configuration before it starts: the endpoint's
// (ep.Config), the cellular modem's (modem.Config) and the IP data
// function's (ipdata.Config); a quirk that acts on the running modem
// (crash-on-connect) also gets the device and the modem once they exist
// (Target.Start).
//
// The behaviours themselves live where they belong: MBIM and QMI answers
// in mhi/ep/modem, the network's MTU, session numbering and NTB sequence
// in mhi/ep/ipdata, M3 and READY in mhi/ep. This package only names and
// composes them; pcigeneric/mock applies a Set to the mock it builds.
package quirk

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/ep/modem"
)

// ErrUnknown: a quirk name the registry does not know. The error lists
// the known ones.
var ErrUnknown = errors.New("quirk: unknown quirk")

// ErrParam: a quirk's parameter does not parse or is out of range.
var ErrParam = errors.New("quirk: invalid quirk parameter")

// Quirk is one named field failure.
type Quirk struct {
	// Name is what --quirk takes ("mtu-1400").
	Name string `json:"name"`
	// Description says what the quirk does on the wire, in one line.
	Description string `json:"description"`
	// Source names the public report or kernel commit it reproduces.
	Source string `json:"source"`
	// Param describes the quirk's optional parameter (NAME=VALUE), with
	// its default; "" if it takes none.
	Param string `json:"param,omitempty"`
	// apply adjusts t; arg is the parameter ("" for the default).
	apply func(t *Target, arg string) error
}

// Running is the started mock modem a quirk may act on: its endpoint and
// its cellular state.
type Running struct {
	Device *ep.Device
	Modem  *modem.Modem
}

// Target is what quirks adjust: the mock modem's configuration before it
// starts. IPData is the configuration of the function on the model's IP
// data pair (nil if the model has none).
type Target struct {
	Device *ep.Config
	Modem  *modem.Config
	IPData *ipdata.Config

	onStart []func(Running)
}

// OnStart registers f to be called when the mock modem has started (Start).
func (t *Target) OnStart(f func(Running)) { t.onStart = append(t.onStart, f) }

// Start hands the started modem to the quirks that asked for it. The
// mock's assembler calls it once the endpoint and the modem exist, before
// a host drives them.
func (t *Target) Start(r Running) {
	for _, f := range t.onStart {
		f(r)
	}
}

// Defaults of the quirks' parameters.
const (
	// DefaultSlowReady is slow-ready's delay from reset to READY: within
	// the 20 s of the Telit/Foxconn table entries' timeout, beyond the
	// 8 s of the Qualcomm reference configuration's.
	DefaultSlowReady = 10 * time.Second
	// DefaultNetworkMTU is mtu-1400's MTU.
	DefaultNetworkMTU = 1400
	// DefaultGlitchEvery is ntb-sequence-glitch's period in NTBs.
	DefaultGlitchEvery = 8
	// SDX72MuxBase is the mux id the SDX72 numbers its first data
	// session with in MBIM mode.
	SDX72MuxBase = 112
)

// registry lists the quirks in the order `mhictl modem quirks` shows them.
var registry = []Quirk{
	{
		Name: "sdx72-mux-112",
		Description: "the modem numbers its data session from mux id 112: downlink MBIM NDPs of the host's session 0 " +
			"are signed IPS<112> (QMAP frames carry mux id 112); uplink is taken on any session",
		Source: "linux-arm-msm, June 2024 (\"bad packet session (112)\"); Linux commits for the Foxconn T99W760 (915a5f60), DW5934e and T99W640 setting the mux-id base",
		apply: func(t *Target, _ string) error {
			if t.IPData == nil {
				return nil
			}
			// Only the downlink is renumbered: the reports show the
			// host dropping the modem's session 112, not the modem
			// refusing the host's session 0 (ipdata.Config.StrictSession
			// models that, should a report show it).
			t.IPData.Session, t.IPData.QMAPMux = SDX72MuxBase, SDX72MuxBase
			return nil
		},
	},
	{
		Name: "autoconnect-pdn",
		Description: "the modem's own autoconnect holds the default PDN: every activation fails (MBIM CONNECT: " +
			"CONTEXT_NOT_ACTIVATED; QMI WDS START_NETWORK: CallFailed, call-end reason 241) until the host first " +
			"deactivates (MBIM CONNECT deactivate, QMI STOP_NETWORK with the global handle, or WDS SET_AUTOCONNECT_SETTINGS disabled)",
		Source: "Ysurac/openmptcprouter #4030; FUjr/QModem #251",
		apply: func(t *Target, _ string) error {
			t.Modem.AutoconnectPDN = true
			return nil
		},
	},
	{
		Name: "fcc-locked",
		Description: "the radio stays off: MBIM RADIO_STATE set on answers OPERATION_NOT_ALLOWED with the software " +
			"radio off, QMI DMS SET_OPERATING_MODE online InvalidTransition, AT+CFUN=1 +CME ERROR 3; a connect " +
			"meets a radio that is off (MBIM RADIO_POWER_OFF); the lock survives a crash; Quectel's public unlock lifts it " +
			"(MBIM Quectel service RADIO_STATE: query fcc-locked, set on unlocks: 'mbimcli --quectel-set-radio-state=on')",
		Source: "Ysurac/openmptcprouter #3979; ModemManager's FCC unlock procedure (fcc-unlock.d, docs)",
		apply: func(t *Target, _ string) error {
			t.Modem.FCCLocked = true
			return nil
		},
	},
	{
		Name: "no-m3",
		Description: "the device does not support M3: a host's M3 request (MHICTRL.MHISTATE = M3) is ignored, the " +
			"device stays in M0 and posts no state change, so a suspend times out",
		Source: "Linux 0494cf9793b7 (QDU100 \"does not support the MHI M3 state\"); mhi_pci_generic's no_m3 (6.16)",
		apply: func(t *Target, _ string) error {
			t.Device.NoM3 = true
			return nil
		},
	},
	{
		Name: "slow-ready",
		Description: "the device takes long to become READY after every reset (MHISTATUS.READY set after the delay, " +
			"at power-up and after a SYS_ERR recovery's reset)",
		Source: "Linux ready_timeout_ms (SDX75, 6.8: 6ab3d50b, 55715190)",
		Param:  "the delay, e.g. slow-ready=30s (default " + DefaultSlowReady.String() + ")",
		apply: func(t *Target, arg string) error {
			d := DefaultSlowReady
			if arg != "" {
				var err error
				if d, err = time.ParseDuration(arg); err != nil || d <= 0 || d > 10*time.Minute {
					return fmt.Errorf("%w: slow-ready=%s: want a duration in (0, 10m]", ErrParam, arg)
				}
			}
			t.Device.ReadyDelay = d
			return nil
		},
	},
	{
		Name: "mtu-1400",
		Description: "the network's MTU is 1400: the IP configuration reports MTU 1400 (MBIM IP_CONFIGURATION, QMI " +
			"WDS GET_CURRENT_SETTINGS) and uplink packets longer than that are dropped silently (counted as dropped_over_mtu)",
		Source: "FUjr/QModem #147 (\"drop skb_len=5b8 larger than mtu=1400\"); openwrt/packages #11383; lf-edge/eve #2740",
		Param:  "another MTU, e.g. mtu-1400=1430 (default 1400)",
		apply: func(t *Target, arg string) error {
			mtu := DefaultNetworkMTU
			if arg != "" {
				var err error
				if mtu, err = strconv.Atoi(arg); err != nil || mtu < 1280 || mtu > 65535 {
					return fmt.Errorf("%w: mtu-1400=%s: want an MTU in 1280..65535", ErrParam, arg)
				}
			}
			t.Modem.Addressing.MTU = mtu
			if t.IPData != nil {
				t.IPData.NetworkMTU = mtu
			}
			return nil
		},
	},
	{
		Name: "ntb-sequence-glitch",
		Description: "downlink NTB sequence numbers jump: every Nth NTB's wSequence skips 5 ahead (the NTBs are " +
			"otherwise well formed and every datagram arrives)",
		Source: "Linux 0d1fac6d26af (6.14, mhi_wwan_mbim's \"sequence number glitch\" log silenced); fwupd/firmware-lenovo #415",
		Param:  "the period in NTBs, e.g. ntb-sequence-glitch=100 (default 8)",
		apply: func(t *Target, arg string) error {
			n := DefaultGlitchEvery
			if arg != "" {
				var err error
				if n, err = strconv.Atoi(arg); err != nil || n < 1 {
					return fmt.Errorf("%w: ntb-sequence-glitch=%s: want a period of at least 1 NTB", ErrParam, arg)
				}
			}
			if t.IPData != nil {
				t.IPData.NTBSequenceGlitch = n
			}
			return nil
		},
	},
	{
		Name: "crash-on-connect",
		Description: "the firmware crashes on the first session activation (MBIM CONNECT activate, QMI START_NETWORK): " +
			"no answer, SYS_ERR (MHISTATUS, STATE_CHANGE event, INTVEC), the baseband restarts; later connects work",
		Source: "fwupd/firmware-lenovo #415, #426 (\"firmware crashed\", ModemManager \"no longer controllable, reprobing\")",
		apply: func(t *Target, _ string) error {
			var run atomic.Pointer[Running]
			t.OnStart(func(r Running) { run.Store(&r) })
			t.Modem.CrashOnConnect = func() {
				r := run.Load()
				if r == nil || r.Device == nil {
					return
				}
				// SYS_ERR first, from the answerer's goroutine: the
				// device stops processing before the answer could
				// leave. The baseband's restart tells the modem's
				// subscribers (the answerers, which hold their locks
				// here), so it runs apart.
				r.Device.InjectSysErr()
				if r.Modem != nil {
					go r.Modem.Restart()
				}
			}
			return nil
		},
	},
}

// All returns the registry's quirks.
func All() []Quirk { return slices.Clone(registry) }

// Names returns the known quirks' names.
func Names() []string {
	names := make([]string, len(registry))
	for i, q := range registry {
		names[i] = q.Name
	}
	return names
}

// Lookup returns the quirk named name.
func Lookup(name string) (Quirk, bool) {
	for _, q := range registry {
		if q.Name == name {
			return q, true
		}
	}
	return Quirk{}, false
}

// Spec is one quirk asked for, with its parameter ("" for the default).
type Spec struct {
	Name string `json:"name"`
	Arg  string `json:"arg,omitempty"`
}

// String returns NAME or NAME=ARG.
func (s Spec) String() string {
	if s.Arg == "" {
		return s.Name
	}
	return s.Name + "=" + s.Arg
}

// Set is a composition of quirks.
type Set []Spec

// String returns the set as --quirk takes it.
func (s Set) String() string {
	parts := make([]string, len(s))
	for i, sp := range s {
		parts[i] = sp.String()
	}
	return strings.Join(parts, ",")
}

// Parse parses the --quirk values: each a comma-separated list of NAME or
// NAME=ARG. Unknown names fail with ErrUnknown, naming the known ones; a
// parameter is checked as the quirk applies it; a quirk named twice
// counts once (the last parameter wins).
func Parse(values ...string) (Set, error) {
	var set Set
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			name, arg, _ := strings.Cut(item, "=")
			q, ok := Lookup(name)
			if !ok {
				return nil, fmt.Errorf("%w %q (known: %s; 'mhictl modem quirks' lists them)", ErrUnknown, name, strings.Join(Names(), ", "))
			}
			if arg != "" && q.Param == "" {
				return nil, fmt.Errorf("%w: %s takes no parameter (%q given)", ErrParam, name, arg)
			}
			if err := q.apply(&Target{Device: &ep.Config{}, Modem: &modem.Config{}, IPData: &ipdata.Config{}}, arg); err != nil {
				return nil, err
			}
			if i := slices.IndexFunc(set, func(s Spec) bool { return s.Name == name }); i >= 0 {
				set[i].Arg = arg
				continue
			}
			set = append(set, Spec{Name: name, Arg: arg})
		}
	}
	return set, nil
}

// Has reports whether the set holds the quirk named name.
func (s Set) Has(name string) bool {
	return slices.ContainsFunc(s, func(sp Spec) bool { return sp.Name == name })
}

// Apply applies every quirk of the set to t, in order.
func (s Set) Apply(t *Target) error {
	for _, sp := range s {
		q, ok := Lookup(sp.Name)
		if !ok {
			return fmt.Errorf("%w %q (known: %s)", ErrUnknown, sp.Name, strings.Join(Names(), ", "))
		}
		if err := q.apply(t, sp.Arg); err != nil {
			return err
		}
	}
	return nil
}
