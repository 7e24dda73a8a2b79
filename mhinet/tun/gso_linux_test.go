package tun_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// tcpSuperFrame returns a TUN frame (virtio_net_hdr, then an IPv4/TCP
// super-packet with a partial checksum, as the kernel hands one over with
// TSO on) carrying payload from seq.
func tcpSuperFrame(payload []byte, mss int, seq uint32) []byte {
	f := make([]byte, 10+40+len(payload))
	h := gso.VirtioNetHdr{Flags: gso.FlagNeedsCsum, GSOType: gso.GSOTCPv4, HdrLen: 40, GSOSize: uint16(mss), CsumStart: 20, CsumOffset: 16}
	_ = h.Encode(f)
	p := f[10:]
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[6], p[8], p[9] = 0x40, 64, 6
	copy(p[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(p[10:], checksum(p[:20]))
	t := p[20:]
	binary.BigEndian.PutUint16(t[0:], 40000)
	binary.BigEndian.PutUint16(t[2:], 5001)
	binary.BigEndian.PutUint32(t[4:], seq)
	t[12], t[13] = 5<<4, 0x18
	binary.BigEndian.PutUint16(t[14:], 1000)
	copy(t[20:], payload)
	// Partial checksum: the pseudo-header sum, not complemented.
	var ps [12]byte
	copy(ps[:8], p[12:20])
	ps[9] = 6
	binary.BigEndian.PutUint16(ps[10:], uint16(len(t)))
	binary.BigEndian.PutUint16(t[16:], ^checksum(ps[:]))
	return f
}

// A TUN with virtio_net_hdr (the ChannelTUN in VnetHdr mode, no root
// needed): a TCP super-packet read from it is cut into MTU-sized segments
// before the ring, loops through the modem (MBIM, aggregated both ways),
// and comes back merged into super-packets again; re-cut, the frames give
// back every byte in order. A plain packet passes; a frame too short for
// the header and a malformed GSO header are counted.
func TestBridgeGSOChannel(t *testing.T) {
	td := tun.NewChannelTUN()
	td.VnetHdr = true
	r := newRig(t, td, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, TXAggregate: true}, tun.BridgeConfig{}, true)

	payload := make([]byte, 60000)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	plain := append(make([]byte, 10), ipv4(200, 77)...)
	badGSO := tcpSuperFrame(payload[:3000], 1000, 5)
	badGSO[4], badGSO[5] = 0, 0 // gso_size 0
	td.FromStack <- tcpSuperFrame(payload, 1460, 1000)
	td.FromStack <- plain
	td.FromStack <- []byte{0, 0, 0}
	td.FromStack <- badGSO

	const segs = 42 // 60000 / 1460, rounded up
	// The bridge counts a transmit when TransmitGSO returns, which may be
	// after the looped-back segments were counted down: wait for both.
	s := r.waitStats(t, "the segments back and the uplink counted", func(s tun.BridgeStats) bool {
		return s.DownlinkPackets >= segs+1 && s.UplinkPackets >= 3 && s.UplinkSuperPackets >= 2 && s.DropBadVnetHdr >= 1
	})
	var got []byte
	next := uint32(1000)
	plainSeen := 0
	frames := 0
	for len(td.ToStack) > 0 {
		f := <-td.ToStack
		frames++
		var h gso.VirtioNetHdr
		if err := h.Decode(f); err != nil {
			t.Fatal(err)
		}
		p := f[10:]
		if h.GSOType == gso.GSONone {
			if h != (gso.VirtioNetHdr{}) {
				t.Fatalf("plain frame with header %v", h)
			}
			if bytes.Equal(p, plain[10:]) {
				plainSeen++
				continue
			}
		}
		n, err := gso.Count(p, h)
		if err != nil {
			t.Fatalf("frame %v: %v", h, err)
		}
		out := make([][]byte, n)
		for i := range out {
			out[i] = make([]byte, 1500)
		}
		sizes := make([]int, n)
		if _, err := gso.Segment(p, h, out, sizes); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			q := out[i][:sizes[i]]
			if sizes[i] > 1500 || checksum(q[:20]) != 0 {
				t.Fatalf("segment of %d bytes, IP checksum %#x", sizes[i], checksum(q[:20]))
			}
			if seq := binary.BigEndian.Uint32(q[24:]); seq != next {
				t.Fatalf("segment seq %d, want %d", seq, next)
			}
			got = append(got, q[40:]...)
			next += uint32(len(q) - 40)
		}
	}
	if !bytes.Equal(got, payload) || plainSeen != 1 {
		t.Fatalf("got %d of %d payload bytes (equal %v), plain packets %d", len(got), len(payload), bytes.Equal(got, payload), plainSeen)
	}
	s = r.bridge.Stats()
	t.Logf("%d frames down for %d packets; bridge %+v", frames, s.DownlinkPackets, s)
	if s.UplinkPackets != 3 || s.UplinkSuperPackets != 2 || s.DropBadVnetHdr != 1 || s.UplinkDropped() != 1 ||
		s.DownlinkPackets != segs+1 || s.DownlinkWrites != uint64(frames) || s.DownlinkSuperPackets == 0 || s.WriteErrors != 0 {
		t.Fatalf("bridge %+v", s)
	}
	g := r.dev.Stats().GSO
	if g.SuperPackets != 1 || g.Segments != segs || g.Plain != 1 || g.ErrBadHeader != 1 || g.Errors() != 1 {
		t.Fatalf("device GSO %+v", g)
	}
}

// openGSOTUN opens a TUN with GSO offloads in the test's namespace,
// configured as openTUN does, plus extra addresses.
func openGSOTUN(t testing.TB, extra ...netip.Prefix) *tun.Interface {
	t.Helper()
	ifc, err := tun.OpenWith("mhi%d", tun.OpenOptions{GSO: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ifc.Close(); err != nil && !errors.Is(err, tun.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	if ifc.VnetHdrLen() != gso.VirtioNetHdrLen || ifc.Offloads()&(tun.OffloadCsum|tun.OffloadTSO4|tun.OffloadTSO6) != tun.OffloadCsum|tun.OffloadTSO4|tun.OffloadTSO6 {
		t.Fatalf("vnet header %d, offloads %v", ifc.VnetHdrLen(), ifc.Offloads())
	}
	if err := ifc.Configure(tun.Config{MTU: 1500, Up: true, Addrs: append([]netip.Prefix{localNet}, extra...), DisableIPv6: true}); err != nil {
		t.Fatal(err)
	}
	return ifc
}

// The default Open has no header and no offloads.
func TestOpenWithoutGSO(t *testing.T) {
	enterNetns(t)
	ifc := openTUN(t)
	if ifc.VnetHdrLen() != 0 || ifc.Offloads() != 0 {
		t.Fatalf("plain Open: vnet header %d, offloads %v", ifc.VnetHdrLen(), ifc.Offloads())
	}
}

// The kernel's UDP GSO through the real path: one sendmsg of 40 datagrams
// with UDP_SEGMENT reaches the TUN as one super-packet, the bridge cuts it
// before the ring, the modem's responder answers every datagram, and the
// socket receives 40 answers with the bytes sent.
func TestGSOUDPSegmentThroughResponder(t *testing.T) {
	enterNetns(t)
	ifc := openGSOTUN(t)
	t.Logf("offloads %v", ifc.Offloads())
	uso := ifc.Offloads()&tun.OffloadUSO4 != 0
	r := newRig(t, ifc, mock.DefaultModel, ipdata.Config{Format: framing.RawIP, Responder: true}, mhinet.Config{}, tun.BridgeConfig{}, true)

	conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, ipdata.EchoPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadBuffer(4 << 20)
	const n, size = 40, 1400
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, size) }); err != nil || serr != nil {
		t.Fatalf("UDP_SEGMENT: %v %v", err, serr)
	}
	msg := make([]byte, n*size)
	for i := range msg {
		msg[i] = byte(i/size) ^ byte(i*7)
		if i%size == 0 {
			msg[i] = byte(i / size) // each datagram's index first
		}
	}
	if w, err := conn.Write(msg); err != nil || w != len(msg) {
		t.Fatalf("write: %d %v", w, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2*size)
	var got [][]byte
	for range n {
		k, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("after %d answers: %v; bridge %+v device %+v", len(got), err, r.bridge.Stats(), r.dev.Stats().GSO)
		}
		got = append(got, append([]byte(nil), buf[:k]...))
	}
	sort.Slice(got, func(i, j int) bool { return got[i][0] < got[j][0] }) // byte 0 is the datagram's index
	for i, d := range got {
		if !bytes.Equal(d, msg[i*size:(i+1)*size]) {
			t.Fatalf("answer %d: %d bytes, differs from datagram %d", i, len(d), i)
		}
	}
	// The socket may have the last answer before the bridge counted its
	// write, and the answers may come back before the bridge counted the
	// transmit (when TransmitGSO returns): wait for both directions.
	s := r.waitStats(t, "the answers and the datagrams counted", func(s tun.BridgeStats) bool {
		return s.DownlinkPackets >= n && s.UplinkBytes >= n*size
	})
	g := r.dev.Stats().GSO
	t.Logf("bridge %+v; device GSO %+v", s, g)
	if uso && (s.UplinkSuperPackets != 1 || s.UplinkPackets != 1 || g.SuperPackets != 1 || g.Segments != n) {
		t.Fatalf("with USO on, want one super-packet of %d segments: bridge %+v, GSO %+v", n, s, g)
	}
	if s.UplinkDropped() != 0 || g.Errors() != 0 || s.DownlinkPackets != n {
		t.Fatalf("drops: bridge %+v, GSO %+v", s, g)
	}
}

// loopRouting makes traffic between two local addresses of the TUN, from
// sockets marked with SO_MARK 1, leave through the TUN and come back in
// through it (the modem's internal loopback is the wire): marked packets
// use a table that routes the prefix to the TUN, looked up before the
// local table; the TUN accepts IPv4 packets with a local source address.
// Needs the ip command.
func loopRouting(t testing.TB, name string) {
	t.Helper()
	loopRoutingFor(t, name, "-4", "198.18.0.0/24")
	for _, kv := range [][2]string{
		{"net/ipv4/conf/" + name + "/accept_local", "1"},
		{"net/ipv4/conf/all/rp_filter", "0"},
		{"net/ipv4/conf/" + name + "/rp_filter", "0"},
	} {
		if err := os.WriteFile("/proc/sys/"+kv[0], []byte(kv[1]), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// loopRoutingFor installs the rules and the route of loopRouting for one
// address family ("-4" or "-6").
func loopRoutingFor(t testing.TB, name, family, prefix string) {
	t.Helper()
	ipCmd := testenv.LookPath(t, "ip", "iproute2")
	for _, args := range [][]string{
		{family, "rule", "add", "pref", "10", "fwmark", "1", "lookup", "100"},
		{family, "rule", "del", "pref", "0"},
		{family, "rule", "add", "pref", "20", "lookup", "local"},
		{family, "route", "add", prefix, "dev", name, "table", "100"},
	} {
		// The test goroutine's thread is in the namespace; a child forked
		// from it is too.
		if out, err := exec.Command(ipCmd, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// markControl sets SO_MARK 1 on a socket before it binds.
func markControl(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, 1) }); err != nil {
		return err
	}
	return serr
}

// tcpLoop is a TCP connection from 198.18.0.1 to 198.18.0.2 that runs
// through the TUN and the modem both ways.
type tcpLoop struct {
	client, server net.Conn
}

func dialLoop(t testing.TB) *tcpLoop {
	t.Helper()
	return dialLoopBetween(t, localAddr, peerAddr)
}

// dialLoopBetween connects from local to peer with marked sockets.
func dialLoopBetween(t testing.TB, local, peer netip.Addr) *tcpLoop {
	t.Helper()
	lc := net.ListenConfig{Control: markControl}
	ln, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(peer, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0)), Control: markControl, Timeout: 5 * time.Second}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return &tcpLoop{client: c, server: s}
}

// snmp returns a counter of /proc/net/snmp in the calling thread's
// namespace, e.g. ("Tcp", "InCsumErrors").
func snmp(t testing.TB, group, name string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], group+": ") || !strings.HasPrefix(lines[i+1], group+": ") {
			continue
		}
		keys, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for k := range keys {
			if keys[k] == name && k < len(vals) {
				v, _ := strconv.ParseUint(vals[k], 10, 64)
				return v
			}
		}
	}
	t.Fatalf("%s %s not in /proc/net/snmp", group, name)
	return 0
}

// A real TCP connection whose every packet crosses the TUN, the bridge
// and the modem's internal loopback (policy routing: see loopRouting).
// The client writes 4 MiB in 60 KiB writes; with TSO on the TUN the
// kernel hands over super-packets, the bridge cuts them before the ring,
// and (with GRO) merges the looped-back segments into super-packets for
// the kernel again. The server must read every byte in order, the kernel
// must see no checksum error, and nothing may be dropped.
func TestGSOTCPThroughLoopback(t *testing.T) {
	for _, gro := range []bool{true, false} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			enterNetns(t)
			ifc := openGSOTUN(t, netip.PrefixFrom(peerAddr, 32))
			loopRouting(t, ifc.Name())
			r := newRig(t, ifc, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, TXAggregate: true}, tun.BridgeConfig{NoGRO: !gro}, true)
			checkTCPLoop(t, r, dialLoop(t), gro, "Tcp")
		})
	}
}

// The same over IPv6 (TSO6, TCPV6 super-packets both ways), between
// 2001:db8::1 and 2001:db8::2 on the TUN.
func TestGSOTCP6ThroughLoopback(t *testing.T) {
	enterNetns(t)
	ifc, err := tun.OpenWith("mhi%d", tun.OpenOptions{GSO: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ifc.Close() })
	local, peer := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	if err := ifc.Configure(tun.Config{MTU: 1500, Up: true, Addrs: []netip.Prefix{netip.PrefixFrom(local, 64), netip.PrefixFrom(peer, 128)}}); err != nil {
		t.Fatal(err)
	}
	loopRoutingFor(t, ifc.Name(), "-6", "2001:db8::/64")
	r := newRig(t, ifc, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, TXAggregate: true}, tun.BridgeConfig{}, true)
	checkTCPLoop(t, r, dialLoopBetween(t, local, peer), true, "Tcp")
}

// checkTCPLoop sends 4 MiB over l and checks it all arrived, through the
// bridge, as super-packets, without drops or checksum errors.
func checkTCPLoop(t *testing.T, r *rig, l *tcpLoop, gro bool, snmpGroup string) {
	t.Helper()
	const total = 4 << 20
	data := make([]byte, total)
	for i := range data {
		data[i] = byte(i*31 + i>>12)
	}
	errc := make(chan error, 1)
	go func() {
		_ = l.client.SetWriteDeadline(time.Now().Add(30 * time.Second))
		for off := 0; off < total; off += 60000 {
			if _, err := l.client.Write(data[off:min(off+60000, total)]); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	_ = l.server.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, total)
	if _, err := io.ReadFull(l.server, got); err != nil {
		t.Fatalf("server read: %v; bridge %+v device %+v", err, r.bridge.Stats(), r.dev.Stats())
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the server read other bytes than the client wrote")
	}
	// The bridge counts a batch after Transmit returns, which may be after
	// the server read it.
	s := r.waitStats(t, "the uplink counted", func(s tun.BridgeStats) bool { return s.UplinkBytes >= total })
	g := r.dev.Stats().GSO
	t.Logf("bridge %+v", s)
	t.Logf("device GSO %+v", g)
	if s.UplinkBytes < total || s.UplinkSuperPackets == 0 || g.Segments == 0 {
		t.Fatalf("the data did not go through the bridge as super-packets: bridge %+v GSO %+v", s, g)
	}
	if gro != (s.DownlinkSuperPackets > 0) {
		t.Fatalf("GRO %v but %d super-packets written", gro, s.DownlinkSuperPackets)
	}
	if s.UplinkDropped() != 0 || s.DropBusySegments != 0 || s.WriteErrors != 0 || g.Errors() != 0 || g.DroppedSegments != 0 {
		t.Fatalf("drops: bridge %+v GSO %+v", s, g)
	}
	if n := snmp(t, snmpGroup, "InCsumErrors"); n != 0 {
		t.Fatalf("kernel counted %d TCP checksum errors", n)
	}
}

// UDP datagrams whose every packet crosses the TUN, the bridge and the
// modem's internal loopback (policy routing: see loopRouting), sent with
// UDP_SEGMENT in bursts of 40: with GRO, and a TUN that took the USO
// offloads, the looped-back datagrams reach the kernel merged into UDP_L4
// super-packets, which it cuts again for the receiving socket. Every
// datagram must arrive with its bytes, the kernel must count no UDP
// checksum error, and nothing may be dropped; without GRO (or without
// USO) nothing is merged.
func TestGROUDPThroughLoopback(t *testing.T) {
	for _, gro := range []bool{true, false} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			enterNetns(t)
			ifc := openGSOTUN(t, netip.PrefixFrom(peerAddr, 32))
			loopRouting(t, ifc.Name())
			uso := ifc.Offloads()&tun.OffloadUSO4 != 0
			r := newRig(t, ifc, "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, TXAggregate: true}, tun.BridgeConfig{NoGRO: !gro}, true)

			lc := net.ListenConfig{Control: markControl}
			rx, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(peerAddr, 0).String())
			if err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			_ = rx.(*net.UDPConn).SetReadBuffer(4 << 20)
			d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), Control: markControl}
			c, err := d.Dial("udp4", rx.LocalAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rc, err := c.(*net.UDPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			const bursts, n, size = 5, 40, 1200
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, size) }); err != nil || serr != nil {
				t.Fatalf("UDP_SEGMENT: %v %v", err, serr)
			}
			csum0 := snmp(t, "Udp", "InCsumErrors")
			msg := make([]byte, n*size)
			buf := make([]byte, 2*size)
			for b := range bursts {
				for i := range msg {
					msg[i] = byte(i*7) ^ byte(b)
					if i%size == 0 {
						msg[i] = byte(i / size) // each datagram's index first
					}
				}
				if w, err := c.Write(msg); err != nil || w != len(msg) {
					t.Fatalf("write: %d %v", w, err)
				}
				_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
				seen := make([]bool, n)
				for k := range n {
					m, _, err := rx.ReadFrom(buf)
					if err != nil {
						t.Fatalf("burst %d: after %d datagrams: %v; bridge %+v", b, k, err, r.bridge.Stats())
					}
					i := int(buf[0])
					if m != size || i >= n || seen[i] || !bytes.Equal(buf[:m], msg[i*size:(i+1)*size]) {
						t.Fatalf("burst %d: datagram %d of %d bytes is not one that was sent (or came twice)", b, i, m)
					}
					seen[i] = true
				}
			}
			// The bridge counts a downlink write after it returns, which
			// may be after the socket read the datagrams: wait for both
			// directions' counts.
			s := r.waitStats(t, "the uplink and the downlink counted", func(s tun.BridgeStats) bool {
				return s.UplinkBytes >= bursts*n*size && s.DownlinkPackets >= bursts*n
			})
			t.Logf("offloads %v; bridge %+v", ifc.Offloads(), s)
			if s.UplinkDropped() != 0 || s.WriteErrors != 0 || s.DownlinkPackets != bursts*n {
				t.Fatalf("drops: bridge %+v", s)
			}
			if merged := s.DownlinkSuperPackets > 0; merged != (gro && uso) {
				t.Fatalf("GRO %v, USO %v, but %d super-packets written (%d datagrams in them)", gro, uso, s.DownlinkSuperPackets, s.DownlinkCoalesced)
			}
			if e := snmp(t, "Udp", "InCsumErrors") - csum0; e != 0 {
				t.Fatalf("kernel counted %d UDP checksum errors", e)
			}
		})
	}
}
