package sysfs

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/mhinet"
)

// Device is what the tree binds to one MHI device: its controller, its
// network device (nil when none is up) and a model name.
type Device struct {
	Controller *mhi.Controller
	Net        *mhinet.Device
	Model      string
	// SetMTU, if set, applies MTU writes instead of Net.SetMTU (a TUN
	// bridge sets the interface's MTU and the device's together).
	SetMTU func(int) error
	// Ports are the device's control ports (ports/<name>; counters
	// under stats/ports/<name>).
	Ports []Port
	// Session, if set and Sessions is not, is the device's data session
	// (session/…; counters under stats/session).
	Session *ctrlport.Session
	// Sessions, if set, are the device's data sessions by number:
	// sessions/<N>/… with counters under stats/sessions/<N>/, session 0
	// also as session/ and stats/session (Session is then ignored).
	Sessions *ctrlport.Sessions
	// SessionData, if set, returns the data-path counters of session n
	// (always a struct of the same type; zero for a session without
	// traffic), shown in stats/sessions/<N>/ beside its control counters.
	SessionData func(n uint8) any
	// SessionsStats, if set, returns the counters of the sessions'
	// demultiplexer (stats/sessions/: rx_session_unknown…).
	SessionsStats func() any
	// ModemSessions, if set, returns the embedded mock modem's counters
	// of session n (always a struct of the same type), shown in
	// stats/modem_sessions/<N>/ for every session of Sessions.
	ModemSessions func(n uint8) any
	// Stats adds counter groups under stats/<name>: functions returning
	// structs whose integer fields with JSON names are the counters
	// (e.g. "modem", the embedded mock's own counters).
	Stats map[string]func() any
}

// TimeoutRange bounds timeout_ms.
const (
	MinTimeoutMs = 1
	MaxTimeoutMs = 600000
	// MaxAutosuspendMs bounds autosuspend_ms (one hour).
	MaxAutosuspendMs = 3600000
)

// dumpString renders the last RAM dump for the rddm attribute.
func dumpString(b []byte, at time.Time) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("%d bytes sha256 %x at %s", len(b), sha256.Sum256(b), at.UTC().Format(time.RFC3339))
}

// AddDevice adds devices/<name>/… for d: the device attributes, one
// directory per channel under channels/, and the counters under stats/.
func (t *Tree) AddDevice(name string, d Device) {
	dir := t.Root.Mkdir("devices").Mkdir(name)
	c := d.Controller
	t.dumps.add(name, c)
	dir.Add(controllerAttrs(d)...)
	if d.Net != nil {
		dir.Add(netAttrs(d)...)
	}
	chans := dir.Mkdir("channels")
	for _, cc := range c.Config().Channels {
		ch, err := c.Channel(cc.Num)
		if err != nil {
			continue
		}
		chans.Mkdir(fmt.Sprintf("%d_%s", cc.Num, cc.Name)).Add(channelAttrs(ch)...)
	}
	stats := dir.Mkdir("stats")
	stats.Mkdir("mhi").Add(counterAttrs("mhi", func() any { return c.Stats() })...)
	if n := d.Net; n != nil {
		stats.Mkdir("net").Add(counterAttrs("net", func() any { return n.Stats() })...)
	}
	addControl(dir, d)
}

// controllerAttrs returns the attributes of devices/<name>/ that d's
// controller serves: state, power management, BHI, timeouts, actions.
func controllerAttrs(d Device) []*Attr {
	c := d.Controller
	return []*Attr{
		StringAttr("state", "MHI state the device last announced (RESET, READY, M0, M3, SYS_ERR…)",
			func() string { s, _ := c.State(); return s.String() }),
		StringAttr("ee", "execution environment (PBL, SBL, AMSS…)",
			func() string { _, ee := c.State(); return ee.String() }),
		StringAttr("pm_state", "host power-management state (DISABLED, POWER_UP, M0, M3, SYS_ERR_PROCESS, SHUTDOWN; RECOVERY_FAILED: SYS_ERR recovery gave up and the device is left alone until it is powered down; LINK_DOWN: the device stopped answering on the bus, removed or its link down, and is left alone until it is powered down)",
			c.PMState),
		StringAttr("recovery", "SYS_ERR recovery: ok, recovering (consecutive attempts, limit, backoff), or failed with the last error",
			func() string { return recoveryString(c.Recovery()) }),
		StringAttr("model", "modem model (device-table name)", func() string { return d.Model }),
		StringAttr("serial_number", "BHI serial number", func() string { return serialString(c) }),
		StringAttr("oem_pk_hash", "BHI OEM public-key hash, 16 words, as Linux prints it", func() string { return oemPKHashString(c) }),
		UintAttr("timeout_ms", "timeout of MHI commands and state changes",
			func() uint64 { return uint64(c.Timeout().Milliseconds()) },
			func(v uint64) error { return invalid(c.SetTimeout(time.Duration(v) * time.Millisecond)) },
			MinTimeoutMs, MaxTimeoutMs).AsMetric(Gauge, UnitMilliseconds),
		ActionAttr("soc_reset", "write 1: SoC reset, then recovery to M0 with the channels restarted",
			func() error { return busy(c.SoCReset()) }),
		UintAttr("autosuspend_ms", "idle time after which the host suspends the device to M3 by itself, and resumes it when a channel has work (0: off; Linux's mhi_pci_generic uses 2000)",
			func() uint64 { return uint64(c.AutoSuspend().Milliseconds()) },
			func(v uint64) error { return invalid(c.SetAutoSuspend(time.Duration(v) * time.Millisecond)) },
			0, MaxAutosuspendMs).AsMetric(Gauge, UnitMilliseconds),
		ActionAttr("suspend", "write 1: suspend the device (M0 to M3); channels keep their state",
			func() error { return busy(c.Suspend()) }),
		ActionAttr("resume", "write 1: resume the device (M3 to M0) and ring what was held back",
			func() error { return busy(c.Resume()) }),
		StringAttr("rddm", "last RAM dump collected after a crash into RDDM: size, SHA-256 and when (none: no dump yet)",
			func() string { return dumpString(c.LastDump()) }),
	}
}

// netAttrs returns the attributes of devices/<name>/ that d's network
// device (non-nil) serves.
func netAttrs(d Device) []*Attr {
	n := d.Net
	return []*Attr{
		UintAttr("mru", "receive buffer size of the data channel",
			func() uint64 { return uint64(n.MRU()) },
			func(v uint64) error { return invalid(n.SetMRU(int(v))) },
			mhinet.MinMRU, mhinet.MaxMRU).AsMetric(Gauge, UnitBytes),
		UintAttr("mtu", "largest packet the data channel transmits",
			func() uint64 { return uint64(n.MTU()) },
			func(v uint64) error {
				if d.SetMTU != nil {
					return invalid(d.SetMTU(int(v)))
				}
				return invalid(n.SetMTU(int(v)))
			},
			mhinet.MinMTU, mhinet.MaxMTU).AsMetric(Gauge, UnitBytes),
	}
}

// serialString renders the BHI serial number for serial_number.
func serialString(c *mhi.Controller) string {
	info, err := c.ReadBHI()
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%d", info.SerialNumber)
}

// oemPKHashString renders the BHI OEM public-key hash for oem_pk_hash, one
// word a line as Linux prints it.
func oemPKHashString(c *mhi.Controller) string {
	info, err := c.ReadBHI()
	if err != nil {
		return "unknown"
	}
	var b strings.Builder
	for i, w := range info.OEMPKHash {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "OEMPKHASH[%d]: 0x%x", i, w)
	}
	return b.String()
}

// recoveryString renders a RecoveryStatus for the recovery attribute.
func recoveryString(r mhi.RecoveryStatus) string {
	switch {
	case r.Failed:
		return "failed: " + r.LastError
	case r.Consecutive > 0:
		return fmt.Sprintf("recovering: %d consecutive of %d, backoff %v, %d attempts, %d failed",
			r.Consecutive, r.Limit, r.Backoff, r.Attempts, r.Failures)
	}
	return fmt.Sprintf("ok: %d attempts, %d failed", r.Attempts, r.Failures)
}

// RemoveDevice removes devices/<name>.
func (t *Tree) RemoveDevice(name string) {
	t.Root.Mkdir("devices").Remove(name)
	t.dumps.remove(name)
}

func channelAttrs(ch *mhi.Channel) []*Attr {
	st := func(f func(mhi.ChannelStatus) string) func() string {
		return func() string { return f(ch.Status()) }
	}
	hex := func(f func(mhi.ChannelStatus) uint64) func() string {
		return func() string { return fmt.Sprintf("0x%x", f(ch.Status())) }
	}
	num := func(f func(mhi.ChannelStatus) uint64) func() uint64 {
		return func() uint64 { return f(ch.Status()) }
	}
	s := ch.Stats()
	return []*Attr{
		StringAttr("state", "host view of the channel state", st(func(c mhi.ChannelStatus) string { return c.State })),
		StringAttr("ctx_state", "channel state in the context (device view)", st(func(c mhi.ChannelStatus) string { return c.CtxState })),
		StringAttr("dir", "UL or DL", st(func(c mhi.ChannelStatus) string { return c.Dir })),
		UintAttr("elements", "size of the channel's transfer ring, in elements", num(func(c mhi.ChannelStatus) uint64 { return uint64(c.Elements) }), nil, 0, 0).AsMetric(Gauge, ""),
		UintAttr("event_ring", "index of the event ring the channel's completions arrive on", num(func(c mhi.ChannelStatus) uint64 { return uint64(c.EventRing) }), nil, 0, 0).AsMetric(Gauge, ""),
		StringAttr("ring_base", "IOVA of the transfer ring", hex(func(c mhi.ChannelStatus) uint64 { return c.RingBase })),
		StringAttr("host_rp", "host read pointer", hex(func(c mhi.ChannelStatus) uint64 { return c.HostRP })),
		StringAttr("host_wp", "host write pointer", hex(func(c mhi.ChannelStatus) uint64 { return c.HostWP })),
		StringAttr("ctx_rp", "context read pointer (written by the device)", hex(func(c mhi.ChannelStatus) uint64 { return c.CtxRP })),
		StringAttr("ctx_wp", "context write pointer", hex(func(c mhi.ChannelStatus) uint64 { return c.CtxWP })),
		UintAttr("pending", "elements queued on the transfer ring and not completed yet", num(func(c mhi.ChannelStatus) uint64 { return uint64(c.Pending) }), nil, 0, 0).AsMetric(Gauge, ""),
		UintAttr("queued", "transfer elements queued on the ring", s.Queued.Load, nil, 0, 0).AsMetric(Counter, ""),
		UintAttr("completed", "transfer elements the device completed", s.Completed.Load, nil, 0, 0).AsMetric(Counter, ""),
		UintAttr("bytes", "bytes the device completed (the lengths of its completion events)", s.Bytes.Load, nil, 0, 0).AsMetric(Counter, UnitBytes),
		UintAttr("overflows", "OVERFLOW completions: a transfer larger than its buffer, continued in the next element", s.Overflows.Load, nil, 0, 0).AsMetric(Counter, ""),
		UintAttr("aborted", "elements returned unused by a channel reset or SYS_ERR", s.Aborted.Load, nil, 0, 0).AsMetric(Counter, ""),
		UintAttr("doorbells", "channel doorbells rung", s.Doorbells.Load, nil, 0, 0).AsMetric(Counter, ""),
		UintAttr("doorbell_errors", "doorbell writes the transport failed (the elements stayed queued)", s.DoorbellErrors.Load, nil, 0, 0).AsMetric(Counter, ""),
		UintAttr("db_mode_events", "OOB and DB_MODE completions (the device asks for a doorbell)", s.DBModes.Load, nil, 0, 0).AsMetric(Counter, ""),
		UintAttr("bad_events", "transfer events for this channel the host rejected (unknown code, pointer outside the queued elements, length clamped)", s.BadEvents.Load, nil, 0, 0).AsMetric(Counter, ""),
	}
}

// counterAttrs makes one read-only Uint attribute per integer field of the
// struct snapshot() returns, named by the field's JSON name, for the
// counter group stats/<group>: its description, metric kind and unit come
// from the group's entry in statDocs.
func counterAttrs(group string, snapshot func() any) []*Attr {
	attrs := structCounters(snapshot, reflect.TypeOf(snapshot()), nil, "")
	for _, a := range attrs {
		describeStat(group, a)
	}
	return attrs
}

// structCounters makes one attribute per unsigned or int field of typ
// that has a json name; a nested struct's counters are named
// "<struct>_<field>" (Stats.GSO.Segments → gso_segments).
func structCounters(snapshot func() any, typ reflect.Type, index []int, prefix string) []*Attr {
	var out []*Attr
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		idx := append(slices.Clone(index), i)
		switch f.Type.Kind() {
		case reflect.Uint64, reflect.Int:
		case reflect.Struct:
			out = append(out, structCounters(snapshot, f.Type, idx, prefix+name+"_")...)
			continue
		default:
			continue
		}
		out = append(out, UintAttr(prefix+name, "counter "+f.Name, func() uint64 {
			v := reflect.ValueOf(snapshot()).FieldByIndex(idx)
			if v.Kind() == reflect.Int {
				return uint64(max(v.Int(), 0))
			}
			return v.Uint()
		}, nil, 0, 0))
	}
	return out
}

// invalid wraps a validation error from the data path as ErrInvalid.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, mhinet.ErrInvalidMRU) || errors.Is(err, mhinet.ErrInvalidMTU) || errors.Is(err, wire.ErrConfig) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return fmt.Errorf("%w: %w", ErrBusy, err)
}

// busy wraps a state error as ErrBusy.
func busy(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrBusy, err)
}
