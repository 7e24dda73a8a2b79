package sysfstest

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/sysfs"
)

// ControlDevice is a powered-up mock modem of a model with an MBIM pair,
// started with modem.Config.RequireConnect, its network device, its MBIM
// port (a PTY with a link in a temporary directory) and a data session
// over it without a host side.
type ControlDevice struct {
	Device
	Port    *ctrlport.Port
	Session *ctrlport.Session
	// Sessions are sessions 0 (Session) and 1 over the same MBIM client,
	// without a host side; SessionData their fake data counters.
	Sessions    *ctrlport.Sessions
	SessionData *SessionCounters
}

// SessionRow is the data counters of one session, named as the host's
// data path (tun.Mux.SessionStats) names them.
type SessionRow struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxDropped uint64 `json:"rx_dropped"`
	TxDropped uint64 `json:"tx_dropped"`
}

// MuxRow is the demultiplexer's counters, named as tun.MuxStats names
// them.
type MuxRow struct {
	UnknownSession  uint64 `json:"rx_session_unknown"`
	SessionMismatch uint64 `json:"rx_session_mismatch"`
	Batches         uint64 `json:"rx_batches"`
	SplitBatches    uint64 `json:"rx_batches_split"`
}

// SessionCounters are per-session data counters and the demultiplexer's
// counters a test sets.
type SessionCounters struct {
	mu   sync.Mutex
	rows map[uint8]SessionRow
	mux  MuxRow
}

// Set sets session n's counters.
func (c *SessionCounters) Set(n uint8, r SessionRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows[n] = r
}

// SetUnknown sets the unknown-session counter.
func (c *SessionCounters) SetUnknown(v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mux.UnknownSession = v
}

// Row returns session n's counters (zero if unset).
func (c *SessionCounters) Row(n uint8) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rows[n]
}

// Mux returns the demultiplexer's counters.
func (c *SessionCounters) Mux() any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mux
}

// Binding returns the tree binding of d: the device, its port (as
// "wwan0mbim0"), its session and the mock's counters as stats/modem.
func (d ControlDevice) Binding() sysfs.Device {
	b := d.Device.Binding()
	b.Ports = []sysfs.Port{{Name: "wwan0mbim0", Path: d.Port.Link(), Stats: func() any { return d.Port.Stats() }}}
	b.Session = d.Session
	b.Sessions, b.SessionData, b.SessionsStats = d.Sessions, d.SessionData.Row, d.SessionData.Mux
	b.ModemSessions = func(n uint8) any { return d.Mock.Functions.SessionStatsOf(n) }
	b.Stats = map[string]func() any{"modem": func() any { return d.Mock.Functions.Stats() }}
	return b
}

// NewControlDevice starts a ControlDevice named name impersonating model
// ("telit-fn990" if empty). Everything is torn down by tb.Cleanup.
func NewControlDevice(tb testing.TB, name, model string) ControlDevice {
	tb.Helper()
	if model == "" {
		model = "telit-fn990"
	}
	m := startMock(tb, mock.Options{Name: name, Model: model, Modem: modem.Config{RequireConnect: true}})
	n := startNet(tb, m)
	p, err := ctrlport.Open(m.Controller, "MBIM", ctrlport.Options{Link: filepath.Join(tb.TempDir(), "wwan0mbim0")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	s0 := ctrlport.NewMBIMSession(p.Pair())
	ss, err := ctrlport.NewSessions(ctrlport.SessionsOptions{Limit: 2, Client: func(n uint8) (ctrlport.SessionClient, error) {
		if n == 0 {
			return s0, nil
		}
		return s0.Sibling(n)
	}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ss.Close)
	s, _ := ss.Get(0)
	return ControlDevice{Device: Device{Mock: m, Net: n}, Port: p, Session: s, Sessions: ss,
		SessionData: &SessionCounters{rows: map[uint8]SessionRow{}}}
}
