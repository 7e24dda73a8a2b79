//go:build linux

package gso

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// inNetns runs f on a locked OS thread moved into a fresh network namespace.
// The thread is never unlocked, so the runtime discards it afterwards and
// the namespace dies with it.
func inNetns(t *testing.T, f func() error) {
	t.Helper()
	testenv.NeedRoot(t, "unshare(CLONE_NEWNET) and /dev/net/tun")
	testenv.NeedPath(t, "/dev/net/tun")
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("skip: unshare: %w", err)
			return
		}
		errc <- f()
	}()
	err := <-errc
	if err != nil && strings.HasPrefix(err.Error(), "skip: ") {
		testenv.Need(t, "a new network namespace", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// vnetTUN opens a TUN device with a 10-byte virtio_net_hdr and all TCP/UDP
// segmentation offloads on, addressed 198.18.0.1/24 and up.
func vnetTUN() (fd int, err error) {
	fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	fail := func(e error) (int, error) { unix.Close(fd); return -1, e }
	ifr, err := unix.NewIfreq("gso%d")
	if err != nil {
		return fail(err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return fail(fmt.Errorf("TUNSETIFF: %w", err))
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, VirtioNetHdrLen); err != nil {
		return fail(fmt.Errorf("TUNSETVNETHDRSZ: %w", err))
	}
	offl := unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_USO4 | unix.TUN_F_USO6
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, offl); err != nil {
		return fail(fmt.Errorf("TUNSETOFFLOAD: %w", err))
	}
	name := ifr.Name()
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(s)
	for _, step := range []struct {
		req  uint
		addr []byte
	}{{unix.SIOCSIFADDR, []byte{198, 18, 0, 1}}, {unix.SIOCSIFNETMASK, []byte{255, 255, 255, 0}}} {
		r, _ := unix.NewIfreq(name)
		if err := r.SetInet4Addr(step.addr); err != nil {
			return fail(err)
		}
		if err := unix.IoctlIfreq(s, step.req, r); err != nil {
			return fail(fmt.Errorf("ioctl %#x: %w", step.req, err))
		}
	}
	r, _ := unix.NewIfreq(name)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, r); err != nil {
		return fail(err)
	}
	r.SetUint16(r.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, r); err != nil {
		return fail(fmt.Errorf("SIOCSIFFLAGS: %w", err))
	}
	return fd, nil
}

// readTUN reads frames (virtio_net_hdr + packet) until keep accepts one.
func readTUN(fd int, buf []byte, keep func(VirtioNetHdr, []byte) bool) (VirtioNetHdr, []byte, error) {
	// Not poll: reads that block in poll(2), up to 500 ms each, nothing to sleep between.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 500); err != nil && !errors.Is(err, unix.EINTR) {
			return VirtioNetHdr{}, nil, err
		} else if n == 0 {
			continue
		}
		n, err := unix.Read(fd, buf)
		if err != nil {
			return VirtioNetHdr{}, nil, err
		}
		var h VirtioNetHdr
		if h.Decode(buf[:n]) != nil {
			continue
		}
		if p := buf[VirtioNetHdrLen:n]; keep(h, p) {
			return h, p, nil
		}
	}
	return VirtioNetHdr{}, nil, errors.New("timed out reading the TUN")
}

// inCsumErrors reads the InCsumErrors counter of proto ("Udp" or "Tcp") in
// this thread's namespace.
func inCsumErrors(proto string) (int, error) {
	f, err := os.Open("/proc/thread-self/net/snmp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != proto+":" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == "InCsumErrors" && i < len(fields) {
				return strconv.Atoi(fields[i])
			}
		}
	}
	return 0, fmt.Errorf("no %s InCsumErrors in snmp", proto)
}

// TestKernelUDPGSO has the kernel build a real UDP GSO super-packet
// (UDP_SEGMENT on a socket routed to a TUN with IFF_VNET_HDR), segments it,
// turns the segments around (addresses and ports swapped; Segment computes
// every checksum afresh) and writes them back into the TUN as plain packets
// without NEEDS_CSUM or DATA_VALID, so the kernel verifies every checksum in
// software. All must arrive at the sending socket. A deliberately corrupted
// segment must be dropped and counted in Udp InCsumErrors.
func TestKernelUDPGSO(t *testing.T) {
	const (
		mss   = 1400
		total = 56000 + 123 // 41 segments, the last one short
		port  = 40000
	)
	inNetns(t, func() error {
		tun, err := vnetTUN()
		if err != nil {
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return fmt.Errorf("skip: %w", err)
			}
			return err
		}
		defer unix.Close(tun)

		s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		if err := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20); err != nil {
			return err
		}
		if err := unix.SetsockoptTimeval(s, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2}); err != nil {
			return err
		}
		if err := unix.Bind(s, &unix.SockaddrInet4{Port: port, Addr: [4]byte{198, 18, 0, 1}}); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(s, unix.SOL_UDP, unix.UDP_SEGMENT, mss); err != nil {
			return fmt.Errorf("skip: UDP_SEGMENT: %w", err)
		}
		payload := make([]byte, total)
		for i := range payload {
			payload[i] = byte(i*31 + i>>9)
		}
		peer := &unix.SockaddrInet4{Port: 9999, Addr: [4]byte{198, 18, 0, 2}}
		if err := unix.Sendto(s, payload, 0, peer); err != nil {
			return fmt.Errorf("sendto: %w", err)
		}

		buf := make([]byte, 70000)
		h, pkt, err := readTUN(tun, buf, func(h VirtioNetHdr, p []byte) bool {
			return len(p) >= 20 && p[0]>>4 == 4 && p[9] == 17
		})
		if err != nil {
			return err
		}
		if h.GSOType != GSOUDPL4 || h.GSOSize != mss || h.Flags != FlagNeedsCsum || len(pkt) != 28+total {
			return fmt.Errorf("kernel gave %v with a %d-byte packet, want a UDP_L4 super-packet", h, len(pkt))
		}
		n, err := Count(pkt, h)
		if err != nil {
			return err
		}
		if want := (total + mss - 1) / mss; n != want {
			return fmt.Errorf("Count %d, want %d", n, want)
		}

		// Turn the super-packet around: 198.18.0.2:9999 -> 198.18.0.1:40000.
		back := append([]byte(nil), pkt...)
		copy(back[12:16], pkt[16:20])
		copy(back[16:20], pkt[12:16])
		copy(back[20:22], pkt[22:24])
		copy(back[22:24], pkt[20:22])
		frames := make([][]byte, n)
		segs := make([][]byte, n)
		for i := range frames {
			frames[i] = make([]byte, VirtioNetHdrLen+28+mss)
			segs[i] = frames[i][VirtioNetHdrLen:]
		}
		sizes := make([]int, n)
		if _, err := Segment(back, h, segs, sizes); err != nil {
			return err
		}

		before, err := inCsumErrors("Udp")
		if err != nil {
			return err
		}
		// Negative control first: a segment with one payload bit flipped
		// after checksumming must be dropped.
		bad := append([]byte(nil), frames[0][:VirtioNetHdrLen+sizes[0]]...)
		bad[VirtioNetHdrLen+100] ^= 0x01
		if _, err := unix.Write(tun, bad); err != nil {
			return fmt.Errorf("write corrupted segment: %w", err)
		}
		for i := range frames {
			// Zero header: GSO_NONE, no NEEDS_CSUM, no DATA_VALID.
			if err := (VirtioNetHdr{}).Encode(frames[i]); err != nil {
				return err
			}
			if _, err := unix.Write(tun, frames[i][:VirtioNetHdrLen+sizes[i]]); err != nil {
				return fmt.Errorf("write segment %d: %w", i, err)
			}
		}
		var got []byte
		rb := make([]byte, 65536)
		for i := 0; i < n; i++ {
			m, from, err := unix.Recvfrom(s, rb, 0)
			if err != nil {
				return fmt.Errorf("datagram %d of %d not delivered: %w", i, n, err)
			}
			if sa, ok := from.(*unix.SockaddrInet4); !ok || sa.Port != 9999 || sa.Addr != [4]byte{198, 18, 0, 2} {
				return fmt.Errorf("datagram %d from %v", i, from)
			}
			want := min(mss, total-i*mss)
			if m != want {
				return fmt.Errorf("datagram %d: %d bytes, want %d", i, m, want)
			}
			got = append(got, rb[:m]...)
		}
		if string(got) != string(payload) {
			return errors.New("delivered datagrams do not reassemble to the sent payload")
		}
		after, err := inCsumErrors("Udp")
		if err != nil {
			return err
		}
		if after-before != 1 {
			return fmt.Errorf("Udp InCsumErrors rose by %d, want 1 (the corrupted segment)", after-before)
		}
		return nil
	})
}

// TestKernelTCPTSO has the kernel send a real TCP TSO super-packet: a
// kernel socket at 198.18.0.1 connects through the TUN to 198.18.0.2, the
// test plays the peer (a hand-built SYN-ACK), and a write on the socket
// comes out as one GSOTCPv4 packet. The test turns it around into the
// peer's own data (addresses, ports, sequence and acknowledgement numbers
// rewritten), segments it and writes the segments back as plain packets; the
// kernel verifies each TCP checksum in software and the socket must read the
// data back in order. A corrupted segment must be counted in Tcp
// InCsumErrors.
func TestKernelTCPTSO(t *testing.T) {
	const (
		dataLen = 10000 // below the initial congestion window of 10 MSS
		peerISN = 0x7fffff00
	)
	inNetns(t, func() error {
		tun, err := vnetTUN()
		if err != nil {
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return fmt.Errorf("skip: %w", err)
			}
			return err
		}
		defer unix.Close(tun)
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		err = unix.Connect(s, &unix.SockaddrInet4{Port: 80, Addr: [4]byte{198, 18, 0, 2}})
		if !errors.Is(err, unix.EINPROGRESS) {
			return fmt.Errorf("connect: %v", err)
		}
		buf := make([]byte, 70000)
		isTCP := func(flag byte) func(VirtioNetHdr, []byte) bool {
			return func(_ VirtioNetHdr, p []byte) bool {
				return len(p) >= 40 && p[0] == 0x45 && p[9] == 6 && p[33]&flag != 0
			}
		}
		_, syn, err := readTUN(tun, buf, isTCP(0x02))
		if err != nil {
			return fmt.Errorf("SYN: %w", err)
		}
		kport := binary.BigEndian.Uint16(syn[20:])
		kISN := binary.BigEndian.Uint32(syn[24:])

		// SYN-ACK from 198.18.0.2:80, MSS option only (no timestamps,
		// window scaling or SACK), checksums from the tests' reference.
		sa := make([]byte, VirtioNetHdrLen+44)
		p := sa[VirtioNetHdrLen:]
		p[0], p[6], p[8], p[9] = 0x45, 0x40, 64, 6
		binary.BigEndian.PutUint16(p[2:], 44)
		copy(p[12:], []byte{198, 18, 0, 2, 198, 18, 0, 1})
		binary.BigEndian.PutUint16(p[10:], refCsum(p[:20]))
		tcp := p[20:]
		binary.BigEndian.PutUint16(tcp[0:], 80)
		binary.BigEndian.PutUint16(tcp[2:], kport)
		binary.BigEndian.PutUint32(tcp[4:], peerISN)
		binary.BigEndian.PutUint32(tcp[8:], kISN+1)
		tcp[12], tcp[13] = 6<<4, 0x12
		binary.BigEndian.PutUint16(tcp[14:], 65535)
		copy(tcp[20:], []byte{2, 4, 0x05, 0xb4}) // MSS 1460
		binary.BigEndian.PutUint16(tcp[16:], refCsum(pseudoHdr(p[:20], 6, 24), tcp))
		if _, err := unix.Write(tun, sa); err != nil {
			return fmt.Errorf("write SYN-ACK: %w", err)
		}
		pfd := []unix.PollFd{{Fd: int32(s), Events: unix.POLLOUT}}
		if n, err := unix.Poll(pfd, 3000); err != nil || n == 0 {
			return fmt.Errorf("connect did not complete: %v", err)
		}
		if e, _ := unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_ERROR); e != 0 {
			return fmt.Errorf("connect: %v", unix.Errno(e))
		}

		data := make([]byte, dataLen)
		for i := range data {
			data[i] = byte(i*13 + i>>8)
		}
		if n, err := unix.Write(s, data); err != nil || n != dataLen {
			return fmt.Errorf("socket write: %d %v", n, err)
		}
		h, pkt, err := readTUN(tun, buf, func(_ VirtioNetHdr, p []byte) bool {
			return len(p) > 40 && p[0] == 0x45 && p[9] == 6 && int(binary.BigEndian.Uint16(p[2:])) > 20+int(p[32]>>4)*4
		})
		if err != nil {
			return fmt.Errorf("data: %w", err)
		}
		n, err := Count(pkt, h)
		if err != nil {
			return err
		}
		if h.GSOType&^GSOECN != GSOTCPv4 || n < 2 {
			return fmt.Errorf("kernel gave %v, %d segments; want a TCPV4 super-packet", h, n)
		}
		hl := 20 + int(pkt[32]>>4)*4
		sent := len(pkt) - hl

		// Turn it around: the peer sends the same bytes as its own data.
		back := append([]byte(nil), pkt...)
		copy(back[12:16], pkt[16:20])
		copy(back[16:20], pkt[12:16])
		copy(back[20:22], pkt[22:24])
		copy(back[22:24], pkt[20:22])
		binary.BigEndian.PutUint32(back[24:], peerISN+1)
		binary.BigEndian.PutUint32(back[28:], binary.BigEndian.Uint32(pkt[24:])+uint32(sent))
		frames := make([][]byte, n)
		segs := make([][]byte, n)
		for i := range frames {
			frames[i] = make([]byte, VirtioNetHdrLen+hl+int(h.GSOSize))
			segs[i] = frames[i][VirtioNetHdrLen:]
		}
		sizes := make([]int, n)
		if _, err := Segment(back, h, segs, sizes); err != nil {
			return err
		}
		before, err := inCsumErrors("Tcp")
		if err != nil {
			return err
		}
		bad := append([]byte(nil), frames[0][:VirtioNetHdrLen+sizes[0]]...)
		bad[VirtioNetHdrLen+hl+5] ^= 0x40
		if _, err := unix.Write(tun, bad); err != nil {
			return fmt.Errorf("write corrupted segment: %w", err)
		}
		for i := range frames {
			if _, err := unix.Write(tun, frames[i][:VirtioNetHdrLen+sizes[i]]); err != nil {
				return fmt.Errorf("write segment %d: %w", i, err)
			}
		}
		var got []byte
		rb := make([]byte, 65536)
		// Not poll: reads that block in poll(2), up to 200 ms each, nothing to sleep between.
		deadline := time.Now().Add(3 * time.Second)
		for len(got) < sent && time.Now().Before(deadline) {
			pfd := []unix.PollFd{{Fd: int32(s), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, 200); err != nil && !errors.Is(err, unix.EINTR) {
				return err
			}
			m, err := unix.Read(s, rb)
			if errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil || m == 0 {
				return fmt.Errorf("socket read: %d %v", m, err)
			}
			got = append(got, rb[:m]...)
		}
		if string(got) != string(data[:sent]) {
			return fmt.Errorf("socket read %d bytes, want the %d sent, in order", len(got), sent)
		}
		after, err := inCsumErrors("Tcp")
		if err != nil {
			return err
		}
		if after-before != 1 {
			return fmt.Errorf("Tcp InCsumErrors rose by %d, want 1 (the corrupted segment)", after-before)
		}
		t.Logf("kernel TSO super-packet: %v, %d payload bytes, %d segments, all accepted", h, sent, n)
		return nil
	})
}
