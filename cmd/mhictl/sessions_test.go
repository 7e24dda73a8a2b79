package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/mhinettest"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/sysfs"
)

// idleClient is a SessionClient that never connects: the sessions of
// TestInventedSessionCounted exist for their counters only.
type idleClient struct{}

func (idleClient) Protocol() string { return "mbim" }
func (idleClient) Connect(context.Context, ctrlport.SessionRequest) (ctrlport.SessionConfig, error) {
	return ctrlport.SessionConfig{}, ctrlport.ErrSessionRefused
}
func (idleClient) Disconnect(context.Context) error     { return nil }
func (idleClient) Active(context.Context) (bool, error) { return false, nil }
func (idleClient) Notify(func())                        {}
func (idleClient) Close()                               {}

// countRx counts the packets a session's receiver gets, and those of
// another session.
type countRx struct {
	mu           sync.Mutex
	n            uint8
	got, foreign int
}

func (r *countRx) Receive(pkts []mhinet.Packet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range pkts {
		r.got++
		if p.Session != r.n {
			r.foreign++
		}
		p.Release()
	}
}

func (r *countRx) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got, r.foreign
}

func udp4(seq uint32) []byte {
	p := make([]byte, 60)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], 60)
	p[9] = 17
	binary.BigEndian.PutUint32(p[20:], seq)
	return p
}

// TestInventedSessionCounted: a device that sends packets on a session
// the host has not connected (here: an echo modem answering what the host
// sent on session 5, which has no receiver) has them counted in
// stats/sessions/rx_session_unknown and session 5's rx_dropped, as up's
// tree shows them (muxCounters), and delivered to no other session;
// session 0's packets still reach session 0.
func TestInventedSessionCounted(t *testing.T) {
	for _, f := range []framing.Format{framing.NTB16, framing.QMAP} {
		t.Run(f.String(), func(t *testing.T) {
			mux := tun.NewMux()
			rx0 := &countRx{n: 0}
			mux.Set(0, rx0)
			r, get := echoSessionsRig(t, f, mux)
			for i := range 3 {
				if _, err := r.Net.TransmitSession(5, [][]byte{udp4(uint32(i))}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.Net.TransmitSession(0, [][]byte{udp4(100), udp4(101)}); err != nil {
				t.Fatal(err)
			}
			poll.Wait(t, 5*time.Second, func() bool {
				got, _ := rx0.counts()
				return got == 2 && get("stats/sessions/rx_session_unknown") == "3"
			}, func() string {
				return fmt.Sprintf("mux %+v, session 0's receiver %v", mux.Stats(), rx0)
			})
			if got, foreign := rx0.counts(); got != 2 || foreign != 0 {
				t.Errorf("session 0's receiver got %d packets, %d of another session", got, foreign)
			}
			if get("stats/sessions/5/rx_dropped") != "3" || get("stats/sessions/5/rx_packets") != "0" || get("stats/sessions/0/rx_packets") != "2" {
				t.Errorf("session 5: rx_dropped %s, rx_packets %s; session 0 rx_packets %s", get("stats/sessions/5/rx_dropped"),
					get("stats/sessions/5/rx_packets"), get("stats/sessions/0/rx_packets"))
			}
			rec := httptest.NewRecorder()
			r.tree.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if m := rec.Body.String(); !strings.Contains(m, `mhi_sessions_rx_session_unknown_total{device="mhi0"} 3`) ||
				!strings.Contains(m, `mhi_sessions_rx_dropped_total{device="mhi0",session="5"} 3`) {
				t.Errorf("the metrics lack the unknown session's packets")
			}
		})
	}
}

// udp4To is udp4 addressed to dst.
func udp4To(dst netip.Addr, seq uint32) []byte {
	p := udp4(seq)
	a := dst.As4()
	copy(p[16:20], a[:])
	return p
}

// TestWrongNDPCounted: a device that puts session 1's packets in session
// 0's NDP (here: an echo modem returning on session 0 what the host sent
// there addressed to session 1's address) has them counted in
// stats/sessions/rx_session_mismatch and session 0's rx_dropped once both
// sessions have their prefixes (what tunHost.claim gives the Mux), and
// delivered through neither interface; session 0's own packets pass.
func TestWrongNDPCounted(t *testing.T) {
	mux := tun.NewMux()
	rx0, rx1 := &countRx{n: 0}, &countRx{n: 1}
	mux.Set(0, rx0)
	mux.Set(1, rx1)
	mux.SetPrefixes(0, []netip.Prefix{netip.MustParsePrefix("198.18.0.1/24")})
	mux.SetPrefixes(1, []netip.Prefix{netip.MustParsePrefix("198.18.1.1/24")})
	r, get := echoSessionsRig(t, framing.NTB16, mux)
	s0, s1 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.1.1")
	if _, err := r.Net.TransmitSession(0, [][]byte{udp4To(s1, 1), udp4To(s1, 2), udp4To(s0, 3)}); err != nil {
		t.Fatal(err)
	}
	poll.Wait(t, 5*time.Second, func() bool {
		got, _ := rx0.counts()
		return got == 1 && get("stats/sessions/rx_session_mismatch") == "2"
	}, func() string {
		return fmt.Sprintf("mux %+v, session 0's receiver %v", mux.Stats(), rx0)
	})
	if got, _ := rx1.counts(); got != 0 {
		t.Errorf("session 1's receiver got %d packets from session 0's NDP", got)
	}
	if get("stats/sessions/0/rx_dropped") != "2" || get("stats/sessions/0/rx_packets") != "1" {
		t.Errorf("session 0: rx_dropped %s, rx_packets %s", get("stats/sessions/0/rx_dropped"), get("stats/sessions/0/rx_packets"))
	}
}

// sessionsRig is an echo modem's data path delivering to a tun.Mux, with
// up's tree over it (muxCounters).
type sessionsRig struct {
	*mhinettest.Rig
	tree *sysfs.Tree
}

// echoSessionsRig builds a sessionsRig in framing f and returns it with a
// reader of its tree's attributes under devices/mhi0/.
func echoSessionsRig(t *testing.T, f framing.Format, mux *tun.Mux) (*sessionsRig, func(string) string) {
	t.Helper()
	cfg := mhinet.Config{Format: f}
	r := mhinettest.New(t, mhinettest.Options{Model: "telit-fn990", IPData: &ipdata.Config{Format: f},
		DataFunction: &mhinettest.Echo{}, Net: &cfg, Receiver: mux})
	ss, err := ctrlport.NewSessions(ctrlport.SessionsOptions{Client: func(uint8) (ctrlport.SessionClient, error) { return idleClient{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Close)
	data, own := muxCounters(mux)
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", sysfs.Device{Controller: r.Controller, Net: r.Net, Sessions: ss, SessionData: data, SessionsStats: own})
	get := func(p string) string {
		v, err := tr.Get("devices/mhi0/" + p)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return &sessionsRig{Rig: r, tree: tr}, get
}
