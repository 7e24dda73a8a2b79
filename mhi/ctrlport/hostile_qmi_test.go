package ctrlport_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/qmi"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"golang.org/x/sys/unix"
)

// qmiSessionRig is `mhictl up`'s session over QMI on a QMI-only model whose
// QMI function is scripted, configuring a fakeHost.
type qmiSessionRig struct {
	*mrig
	fn   *scriptFn
	qs   *ctrlport.QMISession
	s    *ctrlport.Session
	host *fakeHost
}

func newQMISessionRig(t *testing.T, timeout time.Duration) *qmiSessionRig {
	t.Helper()
	r := newMRig(t, "telit-fn920c04", "QMI")
	p := r.port(t, "QMI", ctrlport.Options{})
	host := &fakeHost{}
	qs := ctrlport.NewQMISession(p.Pair())
	s := ctrlport.NewSession(qs, ctrlport.SessionOptions{Host: host, Timeout: timeout})
	t.Cleanup(s.Close)
	return &qmiSessionRig{mrig: r, fn: r.fns["QMI"], qs: qs, s: s, host: host}
}

// onRequests scripts answers: answer returns the frames to send for a
// request, or nil to let the real function answer.
func (r *qmiSessionRig) onRequests(answer func(f qmi.Frame, p *ep.Pipe) [][]byte) {
	r.fn.setHook(func(ctx context.Context, p *ep.Pipe, msg []byte) bool {
		f, err := qmi.ParseFrame(msg)
		if err != nil || f.Type() != qmi.Request {
			return false
		}
		out := answer(f, p)
		if out == nil {
			return false
		}
		for _, b := range out {
			_ = p.Send(ctx, b)
		}
		return true
	})
}

// on scripts the answer to one message of one service.
func (r *qmiSessionRig) on(svc qmi.Service, msg qmi.MessageID, answer func(f qmi.Frame) []byte) {
	r.onRequests(func(f qmi.Frame, _ *ep.Pipe) [][]byte {
		if f.Service != svc || f.Message != msg {
			return nil
		}
		return [][]byte{answer(f)}
	})
}

// qmiReply builds a response to f (result nil: no result TLV).
func qmiReply(f qmi.Frame, h func(h *qmi.Header), res *qmi.Result, tlvs func(b *qmi.Builder)) []byte {
	hdr := qmi.ResponseTo(&f)
	if h != nil {
		h(&hdr)
	}
	var b qmi.Builder
	b.Start(nil, hdr)
	if res != nil {
		b.Result(*res)
	}
	if tlvs != nil {
		tlvs(&b)
	}
	out, err := b.Finish()
	if err != nil {
		panic(err)
	}
	return out
}

// wdsV4 encodes an IPv4 address as WDS carries it.
func wdsV4(a string) []byte {
	b := netip.MustParseAddr(a).As4()
	return binary.LittleEndian.AppendUint32(nil, binary.BigEndian.Uint32(b[:]))
}

// wdsSettings is a GET_CURRENT_SETTINGS answer; edit changes TLVs by type
// (nil value: leave the TLV out).
func wdsSettings(f qmi.Frame, edit map[uint8][]byte) []byte {
	tlvs := map[uint8][]byte{
		0x1E: wdsV4("198.18.0.1"), 0x21: wdsV4("255.255.255.0"), 0x20: wdsV4("198.18.0.2"), 0x15: wdsV4("198.18.0.2"),
		0x29: binary.LittleEndian.AppendUint32(nil, 1500),
	}
	v6 := netip.MustParseAddr("fd00:6d68:6900::1").As16()
	tlvs[0x25] = append(v6[:], 64)
	for k, v := range edit {
		tlvs[k] = v
	}
	return qmiReply(f, nil, &qmi.Success, func(b *qmi.Builder) {
		for _, typ := range []uint8{0x15, 0x1E, 0x20, 0x21, 0x25, 0x29} {
			if v := tlvs[typ]; v != nil {
				b.TLV(typ, v)
			}
		}
	})
}

// refusedConnect: failed, the host never configured, no client id left
// allocated at the modem, and (call true) the modem's call stopped.
func (r *qmiSessionRig) refusedConnect(t *testing.T, err error, call bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("connect succeeded: state %+v", r.s.State())
	}
	if a, _ := r.host.counts(); a != 0 {
		t.Errorf("the host was configured with %+v", r.host.applied)
	}
	if r.s.State().Connected() {
		t.Error("the session says connected")
	}
	waitFor(t, "the session's client ids to be released", func() bool { return r.mock.Functions.QMI.Stats().ClientsActive == 0 })
	if call {
		waitFor(t, "the modem's call to be stopped", func() bool { return !r.mock.Modem.Session().Active })
	}
}

// honest removes the script and checks a dual-stack connect and
// disconnect.
func (r *qmiSessionRig) honest(t *testing.T) {
	t.Helper()
	r.fn.setHook(nil)
	a0, r0 := r.host.counts()
	st, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet", IPType: "ipv4v6"})
	if err != nil {
		t.Fatalf("honest connect after the attack: %v", err)
	}
	if st.IPv4 != modem.DefaultIPv4 || st.IPv6 != modem.DefaultIPv6 {
		t.Fatalf("honest connect: %+v", st)
	}
	if _, err := r.s.Disconnect(context.Background()); err != nil {
		t.Fatalf("honest disconnect: %v", err)
	}
	if a, rm := r.host.counts(); a != a0+1 || rm != r0+1 {
		t.Fatalf("host applied %d, removed %d, want %d, %d", a, rm, a0+1, r0+1)
	}
	if n := r.mock.Functions.QMI.Stats().ClientsActive; n != 0 {
		t.Fatalf("%d client ids left after an honest disconnect", n)
	}
}

func qmiSessionAttacks() []attack {
	return []attack{
		{"QMI replies with wrong TIDs", 20 * time.Second, func(t *testing.T) {
			r := newQMISessionRig(t, time.Second)
			r.on(qmi.WDS, qmi.WDSStartNetwork, func(f qmi.Frame) []byte {
				return qmiReply(f, func(h *qmi.Header) { h.TID++ }, &qmi.Success, func(b *qmi.Builder) { b.TLVU32(0x01, 1) })
			})
			start := time.Now()
			_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			t.Logf("after %v: %v", time.Since(start), err)
			if !errors.Is(err, ctrlport.ErrSessionRefused) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("connect: %v", err)
			}
			if n := r.qs.Stray(); n < 1 {
				t.Errorf("stray %d", n)
			}
			// The client id allocated before the timeout is released all
			// the same (with time of its own).
			r.refusedConnect(t, err, false)
			r.on(qmi.CTL, qmi.CTLAllocateCID, func(f qmi.Frame) []byte {
				return qmiReply(f, func(h *qmi.Header) { h.TID = 17 }, &qmi.Success, func(b *qmi.Builder) { b.TLV(0x01, []byte{byte(qmi.WDS), 9}) })
			})
			_, err = r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("ALLOCATE_CID with a wrong TID: %v", err)
			}
			r.refusedConnect(t, err, false)
			r.honest(t)
		}},
		{"QMI result TLV missing or failure codes", 20 * time.Second, func(t *testing.T) {
			r := newQMISessionRig(t, 5*time.Second)
			fail := func(c qmi.ErrorCode) *qmi.Result { res := qmi.Failure(c); return &res }
			for _, c := range []struct {
				name string
				svc  qmi.Service
				msg  qmi.MessageID
				ans  func(f qmi.Frame) []byte
				want error
				call bool
			}{
				{"START_NETWORK without result", qmi.WDS, qmi.WDSStartNetwork, func(f qmi.Frame) []byte {
					return qmiReply(f, nil, nil, func(b *qmi.Builder) { b.TLVU32(0x01, 1) })
				}, qmi.ErrNoResult, false},
				{"result of 3 bytes", qmi.WDS, qmi.WDSStartNetwork, func(f qmi.Frame) []byte {
					return qmiReply(f, nil, nil, func(b *qmi.Builder) { b.TLV(0x02, []byte{0, 0, 0}) })
				}, qmi.ErrValue, false},
				{"ALLOCATE_CID failure", qmi.CTL, qmi.CTLAllocateCID, func(f qmi.Frame) []byte {
					return qmiReply(f, nil, fail(qmi.ErrClientIDsExhausted), nil)
				}, ctrlport.ErrQMIStatus, false},
				{"START_NETWORK failure with a lying call end reason", qmi.WDS, qmi.WDSStartNetwork, func(f qmi.Frame) []byte {
					return qmiReply(f, nil, fail(qmi.ErrCallFailed), func(b *qmi.Builder) { b.TLV(0x10, []byte{1, 2, 3}) })
				}, ctrlport.ErrQMIStatus, false},
				{"GET_CURRENT_SETTINGS failure", qmi.WDS, qmi.WDSGetCurrentSettings, func(f qmi.Frame) []byte {
					return qmiReply(f, nil, fail(qmi.ErrOutOfCall), nil)
				}, ctrlport.ErrQMIStatus, true},
			} {
				r.on(c.svc, c.msg, c.ans)
				_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
				t.Logf("%s: %v", c.name, err)
				if !errors.Is(err, ctrlport.ErrSessionRefused) || !errors.Is(err, c.want) {
					t.Errorf("%s: %v, want %v", c.name, err, c.want)
				}
				r.refusedConnect(t, err, c.call)
			}
			r.honest(t)
		}},
		{"QMI GET_CURRENT_SETTINGS lies", 60 * time.Second, func(t *testing.T) {
			r := newQMISessionRig(t, 5*time.Second)
			v6 := func(a string, bits byte) []byte { b := netip.MustParseAddr(a).As16(); return append(b[:], bits) }
			u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
			cases := []struct {
				name   string
				ipType string
				edit   map[uint8][]byte
				text   string
			}{
				{"IPv4 address TLV of 5 bytes", "ipv4", map[uint8][]byte{0x1E: {1, 2, 3, 4, 5}}, "5 bytes"},
				{"IPv4 0.0.0.0", "ipv4", map[uint8][]byte{0x1E: wdsV4("0.0.0.0")}, "0.0.0.0/24"},
				{"IPv4 multicast", "ipv4", map[uint8][]byte{0x1E: wdsV4("239.1.2.3")}, "239.1.2.3/24"},
				{"IPv4 255.255.255.255", "ipv4", map[uint8][]byte{0x1E: wdsV4("255.255.255.255")}, "255.255.255.255"},
				{"mask not contiguous", "ipv4", map[uint8][]byte{0x21: wdsV4("255.0.255.0")}, "255.0.255.0"},
				{"mask 0.0.0.0", "ipv4", map[uint8][]byte{0x21: wdsV4("0.0.0.0")}, "198.18.0.1/0"},
				{"gateway multicast", "ipv4", map[uint8][]byte{0x20: wdsV4("224.0.0.1")}, "gateway 224.0.0.1"},
				{"MTU 0", "ipv4", map[uint8][]byte{0x29: u32(0)}, "MTU 0"},
				{"MTU 70000", "ipv4", map[uint8][]byte{0x29: u32(70000)}, "MTU 70000"},
				{"MTU TLV of 2 bytes", "ipv4", map[uint8][]byte{0x29: {0xdc, 0x05}}, "2 bytes"},
				{"IPv6 prefix 200", "ipv6", map[uint8][]byte{0x25: v6("fd00::1", 200)}, "prefix length 200"},
				{"IPv6 link-local", "ipv6", map[uint8][]byte{0x25: v6("fe80::1", 64)}, "fe80::1/64"},
				{"IPv6 IPv4-mapped", "ipv6", map[uint8][]byte{0x25: v6("::ffff:198.18.0.1", 120)}, "::ffff:198.18.0.1/120"},
				{"MTU 1000 for IPv6", "ipv6", map[uint8][]byte{0x29: u32(1000)}, "MTU 1000"},
			}
			for _, c := range cases {
				r.on(qmi.WDS, qmi.WDSGetCurrentSettings, func(f qmi.Frame) []byte { return wdsSettings(f, c.edit) })
				_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet", IPType: c.ipType})
				t.Logf("%s: %v", c.name, err)
				if !errors.Is(err, ctrlport.ErrSessionRefused) || !strings.Contains(err.Error(), c.text) {
					t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.text)
				}
				r.refusedConnect(t, err, true)
			}
			// TLV lengths that run past the frame: a clear error at once,
			// not a timeout.
			r.on(qmi.WDS, qmi.WDSGetCurrentSettings, func(f qmi.Frame) []byte {
				b := wdsSettings(f, nil)
				binary.LittleEndian.PutUint16(b[qmi.QMUXHeaderLen+qmi.ServiceHeaderLen+1:], 0x0400) // the result TLV's length
				return b
			})
			start := time.Now()
			_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			t.Logf("TLV past the frame, after %v: %v", time.Since(start), err)
			if !errors.Is(err, qmi.ErrTLVOverrun) || time.Since(start) > 2*time.Second {
				t.Errorf("TLV past the frame: %v after %v, want ErrTLVOverrun at once", err, time.Since(start))
			}
			r.refusedConnect(t, err, true)
			r.honest(t)
		}},
		{"QMI packet data handle never given", 20 * time.Second, func(t *testing.T) {
			r := newQMISessionRig(t, 5*time.Second)
			for _, c := range []struct {
				name   string
				handle []byte
			}{{"no handle TLV", nil}, {"handle of 2 bytes", []byte{1, 0}}} {
				r.onRequests(func(f qmi.Frame, _ *ep.Pipe) [][]byte {
					switch {
					case f.Service == qmi.WDS && f.Message == qmi.WDSStartNetwork:
						return [][]byte{qmiReply(f, nil, &qmi.Success, func(b *qmi.Builder) {
							if c.handle != nil {
								b.TLV(0x01, c.handle)
							}
						})}
					case f.Service == qmi.WDS && f.Message == qmi.WDSGetCurrentSettings:
						return [][]byte{wdsSettings(f, nil)}
					}
					return nil
				})
				_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
				t.Logf("%s: %v", c.name, err)
				if !errors.Is(err, ctrlport.ErrSessionRefused) || !strings.Contains(err.Error(), "packet data handle") {
					t.Errorf("%s: %v, want a refusal naming the packet data handle", c.name, err)
				}
				r.refusedConnect(t, err, false)
			}
			r.honest(t)
		}},
		{"QMI indication claiming disconnection mid-connect", 20 * time.Second, func(t *testing.T) {
			r := newQMISessionRig(t, 5*time.Second)
			var once sync.Once
			r.onRequests(func(f qmi.Frame, p *ep.Pipe) [][]byte {
				if f.Service != qmi.WDS {
					return nil
				}
				switch f.Message {
				case qmi.WDSGetCurrentSettings:
					// The call drops between START_NETWORK and the settings:
					// the indication comes before the (honest) answer.
					once.Do(func() {
						ind := qmiReply(f, func(h *qmi.Header) { h.Type, h.TID = qmi.Indication, 0; h.Message = qmi.WDSGetPacketServiceStatus }, nil,
							func(b *qmi.Builder) { b.TLV(0x01, []byte{1, 0}) })
						ctx, cancel := context.WithTimeout(context.Background(), time.Second)
						_ = p.Send(ctx, ind)
						cancel()
					})
				case qmi.WDSGetPacketServiceStatus:
					return [][]byte{qmiReply(f, nil, &qmi.Success, func(b *qmi.Builder) { b.TLV(0x01, []byte{1, 0}) })}
				}
				return nil
			})
			if _, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the session to act on the indication it got while connecting", func() bool { return !r.s.State().Connected() })
			if _, rm := r.host.counts(); rm != 1 {
				t.Errorf("host removed %d times, want 1", rm)
			}
			wantCounter(t, r.s.Stats(), "network_disconnects", 1)
			waitFor(t, "the call's client id to be released", func() bool { return r.mock.Functions.QMI.Stats().ClientsActive == 0 })
			r.honest(t)
		}},
	}
}

// atAttacks: the AT port against a modem that never ends its answer.
func atAttacks() []attack {
	return []attack{
		{"AT modem that never sends a final result code", 20 * time.Second, func(t *testing.T) {
			r := newMRig(t, "telit-fn990", "DUN")
			p := r.port(t, "DUN", ctrlport.Options{})
			fn := r.fns["DUN"]
			fn.setHook(func(ctx context.Context, pp *ep.Pipe, msg []byte) bool {
				_ = pp.Send(ctx, []byte("\r\n+CSQ: 20,99\r\n")) // and no OK, ever
				return true
			})
			c := openClient(t, p)
			for range 3 {
				if _, err := c.Write([]byte("AT+CSQ\r")); err != nil {
					t.Fatal(err)
				}
				// Read until the answer is there (a loaded machine may take
				// longer than any fixed read), bounded.
				var got []byte
				if !poll.Until(5*time.Second, func() bool {
					got = append(got, readFor(c, 100*time.Millisecond)...)
					return bytes.Contains(got, []byte("+CSQ: 20,99"))
				}) {
					t.Fatalf("waiting for the +CSQ line without OK: the client read %q", got)
				}
			}
			// Nothing on the host waits for the OK: the next line, to an
			// honest modem, is answered.
			fn.setHook(nil)
			atExchange(t, c)
			if st := p.Stats(); st.ULMessages != 4 || st.Pair.DLMessages < 4 {
				t.Errorf("stats %+v", st)
			}
		}},
		{"AT endless line without CR", 40 * time.Second, func(t *testing.T) {
			r := newMRig(t, "telit-fn990", "DUN")
			const queue = 16
			p := r.port(t, "DUN", ctrlport.Options{WriteTimeout: 50 * time.Millisecond, DLQueue: queue, StaleTimeout: time.Hour,
				PartialTimeout: 200 * time.Millisecond})
			c := openClient(t, p) // does not read while the modem streams
			var ms0 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			line := bytes.Repeat([]byte{'A'}, 16<<10)
			for range 256 { // 4 MiB, no CR
				if err := r.fns["DUN"].sendUnsolicited(line); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the stream to reach the pair", func() bool { return p.Stats().Pair.DLMessages >= 256 })
			checkConservation(t, p, queue)
			var ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			if grow := int64(ms1.HeapInuse) - int64(ms0.HeapInuse); grow > 16<<20 {
				t.Errorf("the heap grew by %d bytes", grow)
			}
			if st := p.Stats(); st.DLWriteTimeouts+st.DLQueueFull == 0 {
				t.Errorf("no drop counted while nobody read: %+v", st)
			}
			// And a client that sends an endless line: skipped in pieces
			// of MaxMTU, the rest discarded after a silence.
			flushClient(t, c, unix.TCIOFLUSH)
			endless := bytes.Repeat([]byte{'B'}, 100<<10)
			if _, err := c.Write(endless); err != nil {
				t.Fatal(err)
			}
			// On a loaded machine the port may also meet a silence in the
			// middle of the line (the writer or the port not scheduled for
			// PartialTimeout) and drop the piece it held (less than
			// MaxMTU, ULPartialDropped): wait until it has read every byte
			// and skipped all but those pieces and the tail.
			waitFor(t, "the port to read the client's endless line and skip it", func() bool {
				n, err := p.UplinkUnread()
				st := p.Stats()
				return err == nil && n == 0 &&
					st.ULGarbage > uint64(len(endless))-(st.ULPartialDropped+1)*ctrlport.MaxMTU
			})
			time.Sleep(300 * time.Millisecond) // past PartialTimeout: the rest is discarded
			atExchange(t, c)
			// Skipped whole (read in pieces of MaxMTU or more), or the
			// last piece discarded after the silence.
			if st := p.Stats(); st.ULMessages != 1 || (st.ULGarbage != uint64(len(endless)) && st.ULPartialDropped == 0) {
				t.Errorf("%d uplink messages, %d bytes skipped, %d partial drops, want only the honest line and all of the endless one dropped: %+v",
					st.ULMessages, st.ULGarbage, st.ULPartialDropped, st)
			}
		}},
	}
}

// atExchange sends ATI and waits (up to 5 s) for the final OK; anything
// before it is the modem's earlier output.
func atExchange(t *testing.T, c *os.File) {
	t.Helper()
	flushClient(t, c, unix.TCIFLUSH)
	if _, err := c.Write([]byte("ATI\r")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if !poll.Until(5*time.Second, func() bool {
		got = append(got, readFor(c, 100*time.Millisecond)...)
		return bytes.Contains(got, []byte("\r\nOK\r\n"))
	}) {
		t.Fatalf("no OK to ATI; read %q", tail(got))
	}
	if !bytes.Contains(got, []byte("FN990")) {
		t.Errorf("ATI answered %q", tail(got))
	}
}

func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}
