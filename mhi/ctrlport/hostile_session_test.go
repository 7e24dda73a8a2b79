package ctrlport_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// mbimSessionRig is `mhictl up`'s session over MBIM on a mock modem whose
// MBIM function is scripted, configuring a fakeHost.
type mbimSessionRig struct {
	*mrig
	fn   *scriptFn
	port *ctrlport.Port
	ms   *ctrlport.MBIMSession
	s    *ctrlport.Session
	host *fakeHost
}

func newMBIMSessionRig(t *testing.T, timeout time.Duration) *mbimSessionRig {
	t.Helper()
	r := newMRig(t, "telit-fn990", "MBIM")
	p := r.port(t, "MBIM", ctrlport.Options{})
	host := &fakeHost{}
	ms := ctrlport.NewMBIMSession(p.Pair())
	s := ctrlport.NewSession(ms, ctrlport.SessionOptions{Host: host, Timeout: timeout})
	t.Cleanup(s.Close)
	return &mbimSessionRig{mrig: r, fn: r.fns["MBIM"], port: p, ms: ms, s: s, host: host}
}

// onCommand scripts the answer to COMMANDs for cid (of BASIC_CONNECT):
// answer returns the reply to send, or nil to let the real function
// answer.
func (r *mbimSessionRig) onCommand(cid uint32, answer func(req mbim.Message) []byte) {
	r.fn.setHook(func(ctx context.Context, p *ep.Pipe, msg []byte) bool {
		m, err := mbim.ParseMessage(msg)
		if err != nil || m.Type != mbim.TypeCommand || m.Service != mbim.ServiceBasicConnect || m.CID != cid {
			return false
		}
		out := answer(m)
		if out == nil {
			return false
		}
		_ = p.Send(ctx, out)
		return true
	})
}

// refusedConnect: the connect failed, the host was never configured, the
// session is not connected, and the modem's session is not left active.
func (r *mbimSessionRig) refusedConnect(t *testing.T, err error) {
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
	waitFor(t, "the modem's session to be deactivated", func() bool { return !r.mock.Modem.Session().Active })
}

// honest removes the script and checks that an honest connect and
// disconnect work and configure the host with the modem's addressing.
func (r *mbimSessionRig) honest(t *testing.T, ipType string) {
	t.Helper()
	r.fn.setHook(nil)
	a0, r0 := r.host.counts()
	st, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet", IPType: ipType})
	if err != nil {
		t.Fatalf("honest connect after the attack: %v", err)
	}
	if st.IPv4 != modem.DefaultIPv4 || st.MTU != modem.DefaultSessionMTU {
		t.Fatalf("honest connect: %+v", st)
	}
	if _, err := r.s.Disconnect(context.Background()); err != nil {
		t.Fatalf("honest disconnect: %v", err)
	}
	if a, rm := r.host.counts(); a != a0+1 || rm != r0+1 {
		t.Fatalf("host applied %d, removed %d, want %d, %d", a, rm, a0+1, r0+1)
	}
}

// isActivate reports whether req is a CONNECT set that activates.
func isActivate(req mbim.Message) bool {
	cs, err := mbim.ParseConnectSet(req.Info)
	return err == nil && req.Command == mbim.CommandSet && cs.ActivationCommand == mbim.ActivationCommandActivate
}

// ipConfigDone is a COMMAND_DONE of IP_CONFIGURATION for req with c.
func ipConfigDone(req mbim.Message, c mbim.IPConfiguration) []byte {
	return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDIPConfiguration, mbim.StatusSuccess, c.AppendTo(nil))
}

// goodIPConfig is what the mock assigns, with every part available.
func goodIPConfig() mbim.IPConfiguration {
	all := mbim.IPConfigAddress | mbim.IPConfigGateway | mbim.IPConfigDNS | mbim.IPConfigMTU
	return mbim.IPConfiguration{IPv4Available: all, IPv6Available: all,
		IPv4Addresses: []netip.Prefix{modem.DefaultIPv4}, IPv4Gateway: modem.DefaultGateway4, IPv4DNS: []netip.Addr{modem.DefaultGateway4}, IPv4MTU: 1500,
		IPv6Addresses: []netip.Prefix{modem.DefaultIPv6}, IPv6Gateway: modem.DefaultGateway6, IPv6DNS: []netip.Addr{modem.DefaultGateway6}, IPv6MTU: 1500}
}

func mbimSessionAttacks() []attack {
	return []attack{
		{"MBIM reply with a wrong TID", 15 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, time.Second)
			r.onCommand(mbim.CIDConnect, func(req mbim.Message) []byte {
				ci := mbim.ConnectInfo{ActivationState: mbim.ActivationStateActivated, IPType: mbim.IPTypeIPv4}
				return mbim.AppendCommandDone(nil, req.TID+1000, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.StatusSuccess, ci.AppendTo(nil))
			})
			start := time.Now()
			_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			t.Logf("after %v: %v", time.Since(start), err)
			if !errors.Is(err, ctrlport.ErrSessionRefused) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("connect: %v", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("connect took %v with a 1 s timeout", d)
			}
			if n := r.ms.Client().Stray(); n < 1 {
				t.Errorf("stray %d, want the wrong-TID reply counted", n)
			}
			r.refusedConnect(t, err)
			r.honest(t, "ipv4")
		}},
		{"MBIM reply of the wrong type, service or CID", 20 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			for _, c := range []struct {
				name  string
				reply func(req mbim.Message) []byte
			}{
				{"OPEN_DONE for a COMMAND", func(req mbim.Message) []byte { return mbim.AppendOpenDone(nil, req.TID, mbim.StatusSuccess) }},
				{"IP_CONFIGURATION for CONNECT", func(req mbim.Message) []byte {
					return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDIPConfiguration, mbim.StatusSuccess, nil)
				}},
				{"another service", func(req mbim.Message) []byte {
					return mbim.AppendCommandDone(nil, req.TID, mbim.UUID{0x42}, mbim.CIDConnect, mbim.StatusSuccess, nil)
				}},
				{"INDICATE_STATUS with the TID", func(req mbim.Message) []byte {
					// An indication is not a reply, whatever its TID: the
					// transaction still waits and the next reply is right.
					ci := mbim.ConnectInfo{ActivationState: mbim.ActivationStateActivated, IPType: mbim.IPTypeIPv4}
					out := mbim.AppendIndicateStatus(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDConnect, ci.AppendTo(nil))
					return append(out, mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.StatusFailure, nil)...)
				}},
			} {
				r.onCommand(mbim.CIDConnect, c.reply)
				_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
				t.Logf("%s: %v", c.name, err)
				if c.name == "INDICATE_STATUS with the TID" {
					if !errors.Is(err, ctrlport.ErrStatus) {
						t.Errorf("%s: %v", c.name, err)
					}
				} else if !errors.Is(err, mbim.ErrWrongMessage) {
					t.Errorf("%s: %v, want ErrWrongMessage", c.name, err)
				}
				r.refusedConnect(t, err)
			}
			r.honest(t, "ipv4")
		}},
		{"MBIM status errors and FUNCTION_ERROR", 20 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			r.onCommand(mbim.CIDConnect, func(req mbim.Message) []byte {
				return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.StatusFailure, nil)
			})
			_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			var se *ctrlport.StatusError
			if !errors.As(err, &se) || se.Status != mbim.StatusFailure {
				t.Errorf("status Failure: %v", err)
			}
			r.refusedConnect(t, err)
			r.onCommand(mbim.CIDConnect, func(req mbim.Message) []byte { return mbim.AppendFunctionError(nil, req.TID, mbim.ErrorUnknown) })
			_, err = r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			var fe *ctrlport.FunctionError
			if !errors.As(err, &fe) || fe.Code != mbim.ErrorUnknown {
				t.Errorf("FUNCTION_ERROR: %v", err)
			}
			r.refusedConnect(t, err)
			// NotOpened to everything, whatever OPEN says: one OPEN, one
			// retry, then an error.
			var opens, commands atomic.Int32
			r.fn.setHook(func(ctx context.Context, p *ep.Pipe, msg []byte) bool {
				m, err := mbim.ParseMessage(msg)
				if err != nil {
					return false
				}
				switch m.Type {
				case mbim.TypeOpen:
					opens.Add(1)
					_ = p.Send(ctx, mbim.AppendOpenDone(nil, m.TID, mbim.StatusSuccess))
				case mbim.TypeCommand:
					commands.Add(1)
					_ = p.Send(ctx, mbim.AppendFunctionError(nil, m.TID, mbim.ErrorNotOpened))
				default:
					return false
				}
				return true
			})
			_, err = r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			if !errors.As(err, &fe) || fe.Code != mbim.ErrorNotOpened || opens.Load() != 1 || commands.Load() != 2 {
				t.Errorf("NotOpened forever: %v after %d OPEN, %d COMMAND", err, opens.Load(), commands.Load())
			}
			r.refusedConnect(t, err)
			// A failed IP_CONFIGURATION after a real CONNECT: the modem's
			// session is deactivated again.
			r.onCommand(mbim.CIDIPConfiguration, func(req mbim.Message) []byte {
				return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDIPConfiguration, mbim.StatusFailure, nil)
			})
			_, err = r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			if !errors.As(err, &se) {
				t.Errorf("IP_CONFIGURATION Failure: %v", err)
			}
			r.refusedConnect(t, err)
			r.honest(t, "ipv4")
		}},
		{"MBIM InformationBuffer lies", 30 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			gc := goodIPConfig()
			good := gc.AppendTo(nil)
			patch := func(off int, v uint32) []byte {
				b := append([]byte(nil), good...)
				binary.LittleEndian.PutUint32(b[off:], v)
				return b
			}
			a4 := int(binary.LittleEndian.Uint32(good[16:])) // offset of the IPv4 address array
			for _, c := range []struct {
				name string
				info []byte
				want error
				text string
			}{
				{"IPv4 address count that overflows", patch(12, 0x20000000), mbim.ErrBadLength, "count 536870912"},
				{"IPv6 address count that overflows", patch(20, 0xFFFFFFFF), mbim.ErrBadLength, "count 4294967295"},
				{"IPv4 addresses outside", patch(16, 0xFFFFFF00), mbim.ErrBadOffset, "4294967040"},
				{"IPv4 gateway outside", patch(28, uint32(len(good)-2)), mbim.ErrBadOffset, "array"},
				{"IPv6 DNS outside", patch(48, 0x7FFFFFFF), mbim.ErrBadOffset, "2147483647"},
				{"IPv4 prefix /33", patch(a4, 33), mbim.ErrBadLength, "prefix length 33"},
				{"IPv6 prefix /129", patch(int(binary.LittleEndian.Uint32(good[24:])), 129), mbim.ErrBadLength, "prefix length 129"},
				{"truncated", good[:10], mbim.ErrShort, "buffer of 10 bytes"},
			} {
				r.onCommand(mbim.CIDIPConfiguration, func(req mbim.Message) []byte {
					return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDIPConfiguration, mbim.StatusSuccess, c.info)
				})
				_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet", IPType: "ipv4v6"})
				t.Logf("%s: %v", c.name, err)
				if !errors.Is(err, ctrlport.ErrSessionRefused) || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
					t.Errorf("%s: %v, want %v naming %q", c.name, err, c.want, c.text)
				}
				r.refusedConnect(t, err)
			}
			// A CONNECT reply too short to say anything, after the modem
			// did connect: the host deactivates it.
			r.onCommand(mbim.CIDConnect, func(req mbim.Message) []byte {
				if !isActivate(req) {
					return nil
				}
				if _, err := r.mock.Modem.Connect("internet", modem.IPv4); err != nil {
					t.Error(err)
				}
				return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.StatusSuccess, make([]byte, 8))
			})
			_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			if !errors.Is(err, mbim.ErrShort) {
				t.Errorf("short CONNECT reply: %v", err)
			}
			r.refusedConnect(t, err)
			// A string of odd length (DEVICE_CAPS' DeviceId).
			r.onCommand(mbim.CIDDeviceCaps, func(req mbim.Message) []byte {
				caps := mbim.DeviceCaps{DeviceID: "351234567890123"}
				info := caps.AppendTo(nil)
				binary.LittleEndian.PutUint32(info[44:], 5) // DeviceId's length
				return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.StatusSuccess, info)
			})
			if _, err := r.ms.Client().DeviceCaps(ctx(t)); !errors.Is(err, mbim.ErrBadLength) {
				t.Errorf("odd-length string: %v", err)
			} else {
				t.Logf("odd-length string: %v", err)
			}
			r.honest(t, "ipv4v6")
		}},
		{"MBIM CONNECT reply for another session or IP type", 20 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			for _, c := range []struct {
				name string
				ci   mbim.ConnectInfo
				text string
			}{
				{"session 5", mbim.ConnectInfo{SessionID: 5, ActivationState: mbim.ActivationStateActivated, IPType: mbim.IPTypeIPv4}, "session 5"},
				{"IPv6 for an IPv4 request", mbim.ConnectInfo{ActivationState: mbim.ActivationStateActivated, IPType: mbim.IPTypeIPv6}, "ipv6"},
				{"IP type 77", mbim.ConnectInfo{ActivationState: mbim.ActivationStateActivated, IPType: 77}, "77"},
				{"activation state 9", mbim.ConnectInfo{ActivationState: 9, IPType: mbim.IPTypeIPv4}, "activation state 9"},
			} {
				r.onCommand(mbim.CIDConnect, func(req mbim.Message) []byte {
					if !isActivate(req) {
						return nil
					}
					if _, err := r.mock.Modem.Connect("internet", modem.IPv4); err != nil {
						t.Error(err)
					}
					return mbim.AppendCommandDone(nil, req.TID, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.StatusSuccess, c.ci.AppendTo(nil))
				})
				_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
				t.Logf("%s: %v", c.name, err)
				if !errors.Is(err, ctrlport.ErrSessionRefused) || !strings.Contains(err.Error(), c.text) {
					t.Errorf("%s: %v, want ErrSessionRefused naming %q", c.name, err, c.text)
				}
				r.refusedConnect(t, err)
			}
			r.honest(t, "ipv4")
		}},
		{"MBIM IP_CONFIGURATION assigns nonsense", 60 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			v4 := func(p string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(p)} }
			var dns300 []netip.Addr
			for i := range 300 {
				dns300 = append(dns300, netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}))
			}
			cases := []struct {
				name   string
				ipType string
				edit   func(c *mbim.IPConfiguration)
				text   string
			}{
				{"IPv4 0.0.0.0", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("0.0.0.0/24") }, "0.0.0.0/24"},
				{"IPv4 multicast", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("224.0.0.1/24") }, "224.0.0.1/24"},
				{"IPv4 limited broadcast", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("255.255.255.255/32") }, "255.255.255.255/32"},
				{"IPv4 loopback", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("127.0.0.1/8") }, "127.0.0.1/8"},
				{"IPv4 link-local", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("169.254.7.7/16") }, "169.254.7.7/16"},
				{"IPv4 reserved", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("240.0.0.1/24") }, "240.0.0.1/24"},
				{"IPv4 /0", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("198.18.0.1/0") }, "198.18.0.1/0"},
				{"IPv4 /1", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("198.18.0.1/1") }, "198.18.0.1/1"},
				{"IPv4 subnet broadcast", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Addresses = v4("198.18.0.255/24") }, "198.18.0.255/24"},
				{"IPv4 gateway 255.255.255.255", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Gateway = netip.MustParseAddr("255.255.255.255") }, "gateway 255.255.255.255"},
				{"IPv4 gateway multicast", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Gateway = netip.MustParseAddr("224.0.0.9") }, "gateway 224.0.0.9"},
				{"IPv6 link-local", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6Addresses = v4("fe80::1/64") }, "fe80::1/64"},
				{"IPv6 unspecified", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6Addresses = v4("::/64") }, "::/64"},
				{"IPv6 multicast", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6Addresses = v4("ff02::1/64") }, "ff02::1/64"},
				{"IPv6 loopback", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6Addresses = v4("::1/128") }, "::1/128"},
				{"IPv6 IPv4-mapped", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6Addresses = v4("::ffff:198.18.0.1/120") }, "::ffff:198.18.0.1/120"},
				{"IPv6 /16", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6Addresses = v4("fd00::1/16") }, "fd00::1/16"},
				{"IPv6 gateway multicast", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6Gateway = netip.MustParseAddr("ff02::2") }, "gateway ff02::2"},
				{"MTU 0", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4MTU = 0 }, "MTU 0"},
				{"MTU 1", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4MTU = 1 }, "MTU 1"},
				{"MTU 70000", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4MTU = 70000 }, "MTU 70000"},
				{"MTU 4294967295", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4MTU = 0xFFFFFFFF }, "MTU 4294967295"},
				{"MTU 1000 with IPv6", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6MTU = 1000 }, "MTU 1000"},
				{"300 DNS servers", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4DNS = dns300 }, "300 IPv4 DNS servers"},
				{"DNS multicast", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4DNS = []netip.Addr{netip.MustParseAddr("224.0.0.251")} }, "DNS server 224.0.0.251"},
				{"DNS loopback", "ipv6", func(c *mbim.IPConfiguration) { c.IPv6DNS = []netip.Addr{netip.MustParseAddr("::1")} }, "DNS server ::1"},
				{"no address at all", "ipv4", func(c *mbim.IPConfiguration) { c.IPv4Available &^= mbim.IPConfigAddress }, "no address"},
				{"a good IPv4 and a bad IPv6", "ipv4v6", func(c *mbim.IPConfiguration) { c.IPv6Addresses = v4("ff02::1/64") }, "ff02::1/64"},
			}
			for _, c := range cases {
				ipc := goodIPConfig()
				c.edit(&ipc)
				r.onCommand(mbim.CIDIPConfiguration, func(req mbim.Message) []byte { return ipConfigDone(req, ipc) })
				_, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet", IPType: c.ipType})
				t.Logf("%s: %v", c.name, err)
				if !configRefused(err) || !strings.Contains(err.Error(), c.text) {
					t.Errorf("%s: %v, want a refused configuration naming %q", c.name, err, c.text)
				}
				r.refusedConnect(t, err)
			}
			wantCounter(t, r.s.Stats(), "config_refused", uint64(len(cases)))
			// A second DNS server of 0.0.0.0 (a modem with one server)
			// and no gateway are not errors: absent values.
			ipc := goodIPConfig()
			ipc.IPv4DNS = append(ipc.IPv4DNS, netip.IPv4Unspecified())
			ipc.IPv4Available &^= mbim.IPConfigGateway
			r.onCommand(mbim.CIDIPConfiguration, func(req mbim.Message) []byte { return ipConfigDone(req, ipc) })
			st, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"})
			if err != nil || len(st.DNS4) != 1 || st.Gateway4.IsValid() {
				t.Fatalf("an unspecified second DNS server: %+v %v", st, err)
			}
			if _, err := r.s.Disconnect(context.Background()); err != nil {
				t.Fatal(err)
			}
			r.honest(t, "ipv4v6")
		}},
		{"MBIM fragments out of sequence, never completed, endless", 30 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			cl := r.ms.Client()
			if err := cl.Open(ctx(t)); err != nil {
				t.Fatal(err)
			}
			caps := mbim.DeviceCaps{DeviceID: "351234567890123", FirmwareInfo: strings.Repeat("f", 4000)}
			whole := func(tid uint32) []byte {
				return mbim.AppendCommandDone(nil, tid, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.StatusSuccess, caps.AppendTo(nil))
			}
			frag := func(msg []byte, i int) []byte {
				b, err := mbim.AppendFragment(nil, msg, 2048, i)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			for _, c := range []struct {
				name string
				send func(tid uint32) [][]byte
			}{
				{"out of sequence", func(tid uint32) [][]byte {
					m := whole(tid)
					return [][]byte{frag(m, 0), frag(m, 2), frag(m, 1), frag(m, 3)}
				}},
				{"never completed", func(tid uint32) [][]byte { return [][]byte{frag(whole(tid), 0)} }},
				{"endless", func(tid uint32) [][]byte {
					var out [][]byte
					for i := range 40 {
						f := mbim.StartCommandDone(nil, tid, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.StatusSuccess)
						f = append(f[:mbim.FragmentPrefixLen], make([]byte, 4000)...)
						binary.LittleEndian.PutUint32(f[4:], uint32(len(f)))
						binary.LittleEndian.PutUint32(f[12:], 0xFFFFFFFF)
						binary.LittleEndian.PutUint32(f[16:], uint32(i))
						out = append(out, f)
					}
					return out
				}},
			} {
				r.fn.setHook(func(ctx context.Context, p *ep.Pipe, msg []byte) bool {
					m, err := mbim.ParseMessage(msg)
					if err != nil || m.Type != mbim.TypeCommand || m.CID != mbim.CIDDeviceCaps {
						return false
					}
					for _, f := range c.send(m.TID) {
						_ = p.Send(ctx, f)
					}
					return true
				})
				before := badFragments(cl)
				c2, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
				_, err := cl.DeviceCaps(c2)
				cancel()
				t.Logf("%s: %v (stats %+v)", c.name, err, mbimClientStats(cl))
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v, want the transaction to time out", c.name, err)
				}
				if badFragments(cl) == before {
					t.Errorf("%s: bad_fragments did not move (%d)", c.name, before)
				}
			}
			r.fn.setHook(nil)
			if caps, err := cl.DeviceCaps(ctx(t)); err != nil || caps.DeviceID == "" {
				t.Fatalf("an honest DEVICE_CAPS after the fragments: %v", err)
			}
			r.honest(t, "ipv4")
		}},
		{"MBIM indication storm", 40 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			if _, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"}); err != nil {
				t.Fatal(err)
			}
			var queries atomic.Int32
			r.fn.setHook(func(ctx context.Context, p *ep.Pipe, msg []byte) bool {
				if m, err := mbim.ParseMessage(msg); err == nil && m.Type == mbim.TypeCommand && m.CID == mbim.CIDConnect && m.Command == mbim.CommandQuery {
					queries.Add(1)
				}
				return false
			})
			ci := mbim.ConnectInfo{ActivationState: mbim.ActivationStateDeactivated}
			ind := mbim.AppendIndicateStatus(nil, 0, mbim.ServiceBasicConnect, mbim.CIDConnect, ci.AppendTo(nil))
			// For two seconds, as fast as the host takes them.
			dl0 := r.port.Stats().Pair.DLMessages
			n, start := 0, time.Now()
			for time.Since(start) < 2*time.Second {
				if err := r.fn.sendUnsolicited(ind); err != nil {
					t.Fatal(err)
				}
				n++
			}
			waitFor(t, "the host to take the storm", func() bool { return r.port.Stats().Pair.DLMessages >= dl0+uint64(n) })
			storm := time.Since(start)
			time.Sleep(500 * time.Millisecond)
			q := queries.Load()
			limit := int32(storm/(200*time.Millisecond)) + 3
			t.Logf("%d indications in %v: %d CONNECT queries (bound %d), stats %+v", n, storm, q, limit, r.s.Stats())
			wantCounter(t, r.s.Stats(), "state_checks", uint64(q))
			if q < 1 || q > limit {
				t.Errorf("%d CONNECT queries for a storm of %v, want 1..%d", q, storm, limit)
			}
			if !r.s.State().Connected() {
				t.Fatal("the storm of false indications disconnected the session")
			}
			if _, rm := r.host.counts(); rm != 0 {
				t.Fatal("the storm unconfigured the host")
			}
			// A real end is still noticed.
			r.mock.Modem.Disconnect()
			waitFor(t, "the session to notice the real end", func() bool { return !r.s.State().Connected() })
			wantCounter(t, r.s.Stats(), "network_disconnects", 1)
			r.honest(t, "ipv4")
		}},
		{"MBIM indication claiming disconnection mid-connect", 20 * time.Second, func(t *testing.T) {
			r := newMBIMSessionRig(t, 5*time.Second)
			var once sync.Once
			r.fn.setHook(func(ctx context.Context, p *ep.Pipe, msg []byte) bool {
				m, err := mbim.ParseMessage(msg)
				if err != nil || m.Type != mbim.TypeCommand {
					return false
				}
				switch {
				case m.CID == mbim.CIDIPConfiguration:
					// The session ends between CONNECT and IP_CONFIGURATION:
					// the indication comes before the (honest) reply.
					once.Do(func() {
						ci := mbim.ConnectInfo{ActivationState: mbim.ActivationStateDeactivated}
						_ = p.Send(ctx, mbim.AppendIndicateStatus(nil, 0, mbim.ServiceBasicConnect, mbim.CIDConnect, ci.AppendTo(nil)))
					})
				case m.CID == mbim.CIDConnect && m.Command == mbim.CommandQuery:
					ci := mbim.ConnectInfo{ActivationState: mbim.ActivationStateDeactivated}
					_ = p.Send(ctx, mbim.AppendCommandDone(nil, m.TID, mbim.ServiceBasicConnect, mbim.CIDConnect, mbim.StatusSuccess, ci.AppendTo(nil)))
					return true
				}
				return false
			})
			if _, err := r.s.Connect(context.Background(), ctrlport.SessionRequest{APN: "internet"}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the session to act on the indication it got while connecting", func() bool { return !r.s.State().Connected() })
			if _, rm := r.host.counts(); rm != 1 {
				t.Errorf("host removed %d times, want 1", rm)
			}
			wantCounter(t, r.s.Stats(), "network_disconnects", 1)
			r.honest(t, "ipv4")
		}},
	}
}
