package tun_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// A name the kernel cannot take is refused before anything is opened.
func TestOpenInvalidName(t *testing.T) {
	if _, err := tun.Open(strings.Repeat("x", 16)); !errors.Is(err, tun.ErrInvalidConfig) {
		t.Fatalf("16-byte name: %v", err)
	}
}

// Without the permission to use /dev/net/tun the error says so. Root may
// always create a TUN, so as root the test first drops to uid 65534 on its
// own thread (setresuid(2) itself changes only the calling thread, unlike
// syscall.Setresuid); the thread stays locked and dies with the test.
func TestOpenNoPermission(t *testing.T) {
	testenv.NeedPath(t, "/dev/net/tun")
	if os.Geteuid() == 0 {
		runtime.LockOSThread()
		if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 65534, ^uintptr(0)); errno != 0 {
			t.Fatalf("setresuid(-1, 65534, -1): %v", errno)
		}
	}
	_, err := tun.Open("")
	if !errors.Is(err, tun.ErrNoTUN) {
		t.Fatalf("Open as uid %d: %v", os.Geteuid(), err)
	}
	t.Log(err)
}

// Open + Configure as rtnetlink sees them: the link exists with its name,
// MTU, up flag and address; IPv6 is off; SetMTU and link down apply; Close
// removes the interface.
func TestInterfaceConfigure(t *testing.T) {
	enterNetns(t)
	ifc := openTUN(t)
	if !strings.HasPrefix(ifc.Name(), "mhi") || ifc.Index() <= 1 {
		t.Fatalf("name %q index %d", ifc.Name(), ifc.Index())
	}
	l, ok := link(t, ifc.Index())
	if !ok {
		t.Fatal("link not found")
	}
	if l.Attributes.Name != ifc.Name() || l.Attributes.MTU != 1500 || l.Flags&unix.IFF_UP == 0 || ifc.MTU() != 1500 {
		t.Fatalf("link %s mtu %d flags %#x", l.Attributes.Name, l.Attributes.MTU, l.Flags)
	}
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs, err := c.Address.List()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range addrs {
		if int(a.Index) == ifc.Index() {
			if a.Family == unix.AF_INET6 {
				t.Errorf("IPv6 address %v with IPv6 disabled", a.Attributes.Address)
			}
			if a.Attributes.Address.Equal(localAddr.AsSlice()) && a.PrefixLength == 24 {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("198.18.0.1/24 not on %s: %+v", ifc.Name(), addrs)
	}
	v, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + ifc.Name() + "/disable_ipv6")
	if err == nil && strings.TrimSpace(string(v)) != "1" {
		t.Errorf("disable_ipv6 = %q", v)
	}

	if err := ifc.SetMTU(9000); err != nil {
		t.Fatal(err)
	}
	if l, _ := link(t, ifc.Index()); l.Attributes.MTU != 9000 || ifc.MTU() != 9000 {
		t.Fatalf("after SetMTU(9000): %d", l.Attributes.MTU)
	}
	if err := ifc.SetMTU(40); !errors.Is(err, tun.ErrInvalidConfig) {
		t.Fatalf("SetMTU(40): %v", err)
	}
	if err := ifc.Configure(tun.Config{Up: false}); err != nil {
		t.Fatal(err)
	}
	if l, _ := link(t, ifc.Index()); l.Flags&unix.IFF_UP != 0 || l.Attributes.MTU != 9000 {
		t.Fatalf("after down: flags %#x mtu %d", l.Flags, l.Attributes.MTU)
	}
	if err := ifc.Configure(tun.Config{DisableIPv6: true, Addrs: []netip.Prefix{netip.MustParsePrefix("2001:db8::1/64")}}); !errors.Is(err, tun.ErrInvalidConfig) {
		t.Fatalf("IPv6 address with IPv6 disabled: %v", err)
	}

	if err := ifc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := link(t, ifc.Index()); ok {
		t.Fatal("interface still present after Close")
	}
	if err := ifc.Close(); !errors.Is(err, tun.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := ifc.Read([][]byte{make([]byte, 10)}, []int{0}); !errors.Is(err, tun.ErrClosed) || !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
}

// Configuration calls made from another goroutine — whose thread is in
// the host's namespace, not the test's — still act on the interface in the
// namespace it was created in, and Close removes it there.
func TestInterfaceOtherThread(t *testing.T) {
	enterNetns(t)
	ifc, err := tun.Open("")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		errc <- ifc.Configure(tun.Config{MTU: 1400, Up: true, Addrs: []netip.Prefix{localNet}})
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if l, ok := link(t, ifc.Index()); !ok || l.Attributes.MTU != 1400 || l.Flags&unix.IFF_UP == 0 {
		t.Fatalf("link %+v", l)
	}
	go func() { errc <- ifc.Close() }()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if _, ok := link(t, ifc.Index()); ok {
		t.Fatal("interface still present after Close")
	}
}

// IPv6 addresses go on without DAD, next to IPv4 ones.
func TestInterfaceIPv6(t *testing.T) {
	enterNetns(t)
	ifc, err := tun.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer ifc.Close()
	v6 := netip.MustParsePrefix("2001:db8:198:18::1/64")
	if err := ifc.Configure(tun.Config{MTU: 1400, Up: true, Addrs: []netip.Prefix{localNet, v6}}); err != nil {
		t.Fatal(err)
	}
	// Idempotent: the addresses are there already.
	if err := ifc.Configure(tun.Config{Up: true, Addrs: []netip.Prefix{localNet, v6}}); err != nil {
		t.Fatal(err)
	}
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addrs, err := c.Address.List()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, a := range addrs {
		if int(a.Index) == ifc.Index() {
			ip, _ := netip.AddrFromSlice(a.Attributes.Address)
			have[netip.PrefixFrom(ip.Unmap(), int(a.PrefixLength)).String()] = true
		}
	}
	if !have[localNet.String()] || !have[v6.String()] {
		t.Fatalf("addresses %v", have)
	}
}

// Read: the deadline ends it; packets the kernel routes to the TUN come
// out in batches; a buffer too small for a packet fails the read. Write:
// a packet written into the TUN reaches a local socket. Close wakes a
// pending Read.
func TestInterfaceReadWrite(t *testing.T) {
	enterNetns(t)
	ifc := openTUN(t)

	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	_ = ifc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err := ifc.Read(bufs, sizes); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past deadline: %d %v", n, err)
	}
	_ = ifc.SetReadDeadline(time.Now().Add(5 * time.Second))

	conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, 9)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 10
	for i := range n {
		if _, err := conn.Write([]byte{byte(i), 'x'}); err != nil {
			t.Fatal(err)
		}
	}
	got, reads := 0, 0
	for got < n {
		m, err := ifc.Read(bufs, sizes)
		if err != nil {
			t.Fatalf("after %d packets: %v", got, err)
		}
		reads++
		for i := range m {
			p := bufs[i][:sizes[i]]
			if len(p) != 30 || p[0] != 0x45 || p[9] != 17 || !bytes.Equal(p[16:20], peerAddr.AsSlice()) || p[28] != byte(got) {
				t.Fatalf("packet %d: % x", got, p)
			}
			got++
		}
	}
	t.Logf("%d packets in %d reads", n, reads)
	if reads == n {
		t.Log("no batching observed (the reader kept up with the sender)")
	}

	// Too small a buffer: the kernel truncates the packet; Read notices from
	// the IP header, drops it and says so.
	if _, err := conn.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if m, err := ifc.Read([][]byte{make([]byte, 64)}, []int{0}); m != 0 || !errors.Is(err, tun.ErrTooBig) {
		t.Fatalf("short buffer: %d %v", m, err)
	}

	// Write: a datagram from the peer to a local socket.
	sock, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	to := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	pkt := udp4(netip.AddrPortFrom(peerAddr, 9), to, []byte("from the modem"))
	if w, err := ifc.Write([][]byte{pkt, pkt}); w != 2 || err != nil {
		t.Fatalf("Write: %d %v", w, err)
	}
	_ = sock.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	for range 2 {
		k, from, err := sock.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:k]) != "from the modem" || from != netip.AddrPortFrom(peerAddr, 9) {
			t.Fatalf("socket got %q from %v: %v", buf[:k], from, err)
		}
	}

	// Close wakes a pending Read.
	_ = ifc.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := ifc.Read(bufs, sizes)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := ifc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, tun.ErrClosed) {
			t.Fatalf("pending Read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the pending Read")
	}
}

// A UDP datagram from 198.18.0.1 to 198.18.0.2:9 goes kernel → TUN →
// bridge → uplink → mock modem (internal loopback) → downlink → bridge →
// TUN write, unchanged. The kernel then drops it (its source is a local
// address and 198.18.0.2 is not), so the proof is on the way: an AF_PACKET
// socket on the interface sees it come in, and the bridge, device, modem
// and link counters each count it once.
func TestBridgeUDPThroughMock(t *testing.T) {
	enterNetns(t)
	ifc := openTUN(t)
	capture := packetSocket(t, ifc.Index())
	r := newRig(t, ifc, mock.DefaultModel, ipdata.Config{}, mhinet.Config{}, tun.BridgeConfig{}, true)

	conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, 9)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := []byte("gomhi through the modem")
	if _, err := conn.Write(payload); err != nil {
		t.Fatal(err)
	}
	want := 20 + 8 + len(payload)
	// The bridge counts the datagram it passed on after Transmit returns,
	// which may be after it came back.
	s := r.waitStats(t, "the datagram counted both ways", func(s tun.BridgeStats) bool {
		return s.UplinkPackets >= 1 && s.DownlinkPackets >= 1
	})
	if s.UplinkPackets != 1 || s.DownlinkPackets != 1 || s.UplinkBytes != uint64(want) || s.DownlinkBytes != uint64(want) || s.UplinkDropped() != 0 || s.WriteErrors != 0 {
		t.Fatalf("bridge %+v", s)
	}
	// The uplink completion may be handled after the downlink delivery.
	eventually(t, "device counters", func() bool { ds := r.dev.Stats(); return ds.TxPackets == 1 && ds.RxPackets == 1 })
	// The modem counts the uplink packet after looping it back and the
	// downlink aggregate after committing it: either may follow delivery.
	eventually(t, "the modem's counters", func() bool { ms := r.mock.IPData.Stats(); return ms.ULPackets >= 1 && ms.DLPackets >= 1 })
	if ms := r.mock.IPData.Stats(); ms.ULPackets != 1 || ms.DLPackets != 1 {
		t.Fatalf("modem %+v", ms)
	}

	// The captured incoming packet is the datagram, unchanged.
	p := readIncoming(t, capture)
	if len(p) != want || p[9] != 17 || !bytes.Equal(p[12:16], localAddr.AsSlice()) || !bytes.Equal(p[16:20], peerAddr.AsSlice()) ||
		binary.BigEndian.Uint16(p[22:]) != 9 || !bytes.Equal(p[28:], payload) {
		t.Fatalf("captured % x", p)
	}
	// The kernel's view: one packet out to the TUN reader, one in.
	l, _ := link(t, ifc.Index())
	if st := l.Attributes.Stats64; st == nil || st.TXPackets != 1 || st.RXPackets != 1 {
		t.Fatalf("link stats %+v", l.Attributes.Stats64)
	}
}

// packetSocket opens an AF_PACKET socket bound to the interface.
func packetSocket(t testing.TB, index int) int {
	t.Helper()
	proto := int(htons(unix.ETH_P_ALL))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: index}); err != nil {
		t.Fatal(err)
	}
	tv := unix.Timeval{Sec: 5}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return fd
}

// readIncoming returns the next packet the interface received (as opposed
// to sent).
func readIncoming(t testing.TB, fd int) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype != unix.PACKET_OUTGOING {
			return buf[:n]
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// A real round trip: with the modem's IP responder (ipdata.ModeResponder) a
// UDP datagram to the echo port and an ICMP echo request sent from the
// host stack come back through the bridge as answers the stack accepts.
func TestPingThroughResponder(t *testing.T) {
	enterNetns(t)
	ifc := openTUN(t)
	r := newRig(t, ifc, mock.DefaultModel, ipdata.Config{Format: framing.RawIP, Responder: true}, mhinet.Config{}, tun.BridgeConfig{}, true)
	if m := r.mock.IPData.Mode(); m != ipdata.ModeResponder {
		t.Fatalf("modem mode %v", m)
	}

	// UDP echo.
	conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, ipdata.EchoPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	for i := range 3 {
		msg := []byte("echo " + string(rune('a'+i)))
		start := time.Now()
		if _, err := conn.Write(msg); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("UDP echo %d: %q %v; bridge %+v", i, buf[:n], err, r.bridge.Stats())
		}
		t.Logf("UDP echo round trip %v", time.Since(start))
	}

	// ICMP echo over a raw socket.
	pc, err := net.ListenPacket("ip4:icmp", localAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	const id, seq = 0x4d48, 7
	req := icmpEcho(8, id, seq, []byte("gomhi ping"))
	start := time.Now()
	if _, err := pc.WriteTo(req, &net.IPAddr{IP: peerAddr.AsSlice()}); err != nil {
		t.Fatal(err)
	}
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("ICMP echo: %v; bridge %+v modem %+v", err, r.bridge.Stats(), r.mock.IPData.Stats())
		}
		p := buf[:n]
		if n >= 8 && p[0] == 0 && binary.BigEndian.Uint16(p[4:]) == id && binary.BigEndian.Uint16(p[6:]) == seq {
			if from.String() != peerAddr.String() || !bytes.Equal(p[8:], []byte("gomhi ping")) {
				t.Fatalf("reply from %v: % x", from, p)
			}
			break
		}
	}
	t.Logf("ping round trip %v", time.Since(start))
	if ms := r.mock.IPData.Stats(); ms.Answered != 4 {
		t.Errorf("modem answered %d, want 4: %+v", ms.Answered, ms)
	}
	s := r.waitStats(t, "four packets each way", func(s tun.BridgeStats) bool {
		return s.UplinkPackets >= 4 && s.DownlinkPackets >= 4
	})
	if s.UplinkPackets != 4 || s.DownlinkPackets != 4 {
		t.Errorf("bridge %+v", s)
	}
}

// icmpEcho builds an ICMP echo message (typ 8 request, 0 reply).
func icmpEcho(typ byte, id, seq uint16, data []byte) []byte {
	p := make([]byte, 8+len(data))
	p[0] = typ
	binary.BigEndian.PutUint16(p[4:], id)
	binary.BigEndian.PutUint16(p[6:], seq)
	copy(p[8:], data)
	binary.BigEndian.PutUint16(p[2:], checksum(p))
	return p
}

// udp4 builds an IPv4/UDP packet (UDP checksum 0: none).
func udp4(src, dst netip.AddrPort, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8] = 64
	p[9] = 17
	copy(p[12:16], src.Addr().AsSlice())
	copy(p[16:20], dst.Addr().AsSlice())
	binary.BigEndian.PutUint16(p[10:], checksum(p[:20]))
	binary.BigEndian.PutUint16(p[20:], src.Port())
	binary.BigEndian.PutUint16(p[22:], dst.Port())
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	return p
}

// checksum is the Internet checksum of b.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return ^uint16(s)
}

// An IPv6 address is usable as soon as Configure returns: the kernel
// finishes a new address in a workqueue after the link comes up (even
// without DAD), and a bind in that window failed with EADDRNOTAVAIL in 2
// of 200 tries before Configure waited for it (seen in CI as a failed
// TestGSOTCP6ThroughLoopback).
func TestConfigureIPv6Usable(t *testing.T) {
	enterNetns(t)
	local := netip.MustParseAddr("2001:db8::1")
	for i := range 200 {
		ifc, err := tun.Open("")
		if err != nil {
			t.Fatal(err)
		}
		if err := ifc.Configure(tun.Config{MTU: 1500, Up: true, Addrs: []netip.Prefix{netip.PrefixFrom(local, 64)}}); err != nil {
			t.Fatal(err)
		}
		l, err := net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
		if err != nil {
			_ = ifc.Close()
			t.Fatalf("try %d: bind right after Configure: %v", i, err)
		}
		_ = l.Close()
		if err := ifc.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
