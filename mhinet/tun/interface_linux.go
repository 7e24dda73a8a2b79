package tun

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhinet/gso"
)

// DefaultName is the name pattern Open uses when given "".
const DefaultName = "mhi%d"

// tunPath is the TUN clone device.
const tunPath = "/dev/net/tun"

// removeTimeout bounds how long Close waits for the interface to go.
const removeTimeout = 2 * time.Second

// Interface is a Linux TUN interface (IFF_TUN|IFF_NO_PI: every read and
// write is one bare IPv4 or IPv6 packet, behind a virtio_net_hdr when
// opened with OpenOptions.GSO). It lives in the network
// namespace of the thread that opened it, and every later configuration
// call is made there, whichever thread makes it. Its methods are safe for
// concurrent use; Read and Write may run concurrently with each other
// (concurrent Reads, or concurrent Writes, take turns).
type Interface struct {
	f     *os.File
	rc    syscall.RawConn
	ns    *os.File // the network namespace the interface was created in
	name  string
	index uint32

	mu     sync.Mutex // serialises configuration
	mtu    atomic.Int64
	closed atomic.Bool

	vnet     int      // virtio_net_hdr length in front of every packet (0: none)
	offloads Offloads // what TUNSETOFFLOAD accepted

	// The state of the Read and of the Write in progress, and the
	// callbacks handed to the RawConn, made once so that a batch does not
	// allocate. Concurrent Reads (or Writes) take turns.
	rd, wr ioOp
}

// ioOp is one Read or Write in progress.
type ioOp struct {
	mu    sync.Mutex
	bufs  [][]byte
	sizes []int
	want  int
	n     int
	err   error
	fn    func(fd uintptr) bool
}

// done forgets the caller's buffers.
func (o *ioOp) done() {
	o.bufs, o.sizes = nil, nil
}

var (
	_ VnetHdrDevice = (*Interface)(nil)
	_ OffloadDevice = (*Interface)(nil)
)

// Open creates a TUN interface named name ("%d" in it is replaced by the
// kernel with the first free number; "" means DefaultName) in the calling
// thread's network namespace. The interface is down and has no address
// until Configure. It is not persistent: Close deletes it. It is
// OpenWith(name, OpenOptions{}): bare packets, no offloads.
//
// Without /dev/net/tun or the permission to use it the error matches
// ErrNoTUN.
func Open(name string) (*Interface, error) {
	return OpenWith(name, OpenOptions{})
}

// OpenWith is Open with options. With opts.GSO the interface is opened
// with IFF_VNET_HDR, a 10-byte virtio_net_hdr (gso.VirtioNetHdrLen) and
// the offloads of GSOOffloads: the kernel then hands the reader TCP and
// UDP super-packets of up to 64 KiB and packets with partial checksums,
// and every packet read and written carries the header in front
// (VnetHdrLen). A kernel that refuses USO (before 6.2: EINVAL) gets
// checksum and TSO only; Offloads says what is on. A kernel that refuses
// the rest fails the open with an error matching ErrOffload.
func OpenWith(name string, opts OpenOptions) (*Interface, error) {
	if name == "" {
		name = DefaultName
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return nil, fmt.Errorf("%w: interface name %q: %w", ErrInvalidConfig, name, err)
	}
	// The TUN device, the namespace handle and the ioctl socket must all
	// come from the same thread (and so the same namespace).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	fd, err := unix.Open(tunPath, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENXIO):
			return nil, fmt.Errorf("%w: open %s: %w (is the tun module loaded? modprobe tun)", ErrNoTUN, tunPath, err)
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("%w: open %s: %w (%s)", ErrNoTUN, tunPath, err, openDeniedHint(tunPath))
		}
		return nil, fmt.Errorf("tun: open %s: %w", tunPath, err)
	}
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if opts.GSO {
		flags |= unix.IFF_VNET_HDR
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		_ = unix.Close(fd)
		switch {
		case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
			return nil, fmt.Errorf("%w: create TUN %q: %w (needs root or CAP_NET_ADMIN)", ErrNoTUN, name, err)
		case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EEXIST):
			return nil, fmt.Errorf("%w: create TUN %q: %w (name in use by another kind of interface, or invalid)", ErrInvalidConfig, name, err)
		}
		return nil, fmt.Errorf("tun: create TUN %q: %w", name, err)
	}
	name = ifr.Name()
	var offl Offloads
	if opts.GSO {
		if offl, err = setOffloads(fd, name); err != nil {
			_ = unix.Close(fd)
			return nil, err
		}
	}
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("tun: %s: network namespace handle: %w", name, err)
	}
	index, mtu, err := linkIndexMTU(name)
	if err != nil {
		_ = ns.Close()
		_ = unix.Close(fd)
		return nil, err
	}
	// Non-blocking, so the file registers with the netpoller: deadlines
	// work and Close wakes blocked readers.
	f := os.NewFile(uintptr(fd), tunPath+":"+name)
	rc, err := f.SyscallConn()
	if err != nil {
		_ = ns.Close()
		_ = f.Close()
		return nil, fmt.Errorf("tun: %s: %w", name, err)
	}
	i := &Interface{f: f, rc: rc, ns: ns, name: name, index: index, offloads: offl}
	i.rd.fn, i.wr.fn = i.readSome, i.writeSome
	if opts.GSO {
		i.vnet = gso.VirtioNetHdrLen
	}
	i.mtu.Store(int64(mtu))
	return i, nil
}

// setOffloads sets the virtio_net_hdr size and turns on checksum, TSO and
// USO offloads, retrying without USO when the kernel does not know it.
func setOffloads(fd int, name string) (Offloads, error) {
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, gso.VirtioNetHdrLen); err != nil {
		return 0, fmt.Errorf("%w: %s: TUNSETVNETHDRSZ %d: %w", ErrOffload, name, gso.VirtioNetHdrLen, err)
	}
	want := GSOOffloads
	for {
		err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(want))
		if err == nil {
			return want, nil
		}
		if errors.Is(err, unix.EINVAL) && want&(OffloadUSO4|OffloadUSO6) != 0 {
			want &^= OffloadUSO4 | OffloadUSO6 // kernel before 6.2
			continue
		}
		return 0, fmt.Errorf("%w: %s: TUNSETOFFLOAD %v: %w", ErrOffload, name, want, err)
	}
}

// VnetHdrLen returns the length of the virtio_net_hdr in front of every
// packet read and written (gso.VirtioNetHdrLen when opened with
// OpenOptions.GSO, else 0).
func (i *Interface) VnetHdrLen() int { return i.vnet }

// Offloads returns the offloads the kernel accepted at open (0 without
// OpenOptions.GSO).
func (i *Interface) Offloads() Offloads { return i.offloads }

// linkIndexMTU asks the kernel for an interface's index and MTU with
// ioctls on a socket of the calling thread's namespace.
func linkIndexMTU(name string) (uint32, int, error) {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("tun: %s: ioctl socket: %w", name, err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %q: %w", ErrInvalidConfig, name, err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, 0, fmt.Errorf("tun: %s: SIOCGIFINDEX: %w", name, err)
	}
	index := ifr.Uint32()
	ifr, _ = unix.NewIfreq(name)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFMTU, ifr); err != nil {
		return 0, 0, fmt.Errorf("tun: %s: SIOCGIFMTU: %w", name, err)
	}
	return index, int(ifr.Uint32()), nil
}

// Name returns the interface's name (with the number the kernel chose).
func (i *Interface) Name() string { return i.name }

// Index returns the interface's index in its network namespace.
func (i *Interface) Index() int { return int(i.index) }

// MTU returns the MTU last set through this Interface (or the kernel's
// default at Open).
func (i *Interface) MTU() int { return int(i.mtu.Load()) }

// Read reads at least one packet, waiting for it (up to the read
// deadline), then as many more as are queued without waiting, up to
// min(len(bufs), len(sizes)). The kernel truncates a packet longer than
// its buffer; Read recognises that from the IP header, drops the packet
// and returns ErrTooBig after the packets before it. Buffers should hold
// the MTU (plus VnetHdrLen; with GSO offloads, 64 KiB plus the header).
// With a virtio_net_hdr, bufs[i][:sizes[i]] is the header then the packet.
func (i *Interface) Read(bufs [][]byte, sizes []int) (int, error) {
	want := min(len(bufs), len(sizes))
	if want == 0 {
		return 0, nil
	}
	if i.closed.Load() {
		return 0, i.closedErr("read")
	}
	o := &i.rd
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bufs, o.sizes, o.want, o.n, o.err = bufs, sizes, want, 0, nil
	defer o.done()
	err := i.rc.Read(o.fn)
	n, rerr := o.n, o.err
	switch {
	case rerr != nil:
		return n, fmt.Errorf("tun: %s: read: %w", i.name, rerr)
	case err == nil:
		return n, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, fmt.Errorf("tun: %s: read: %w", i.name, err)
	case i.closed.Load():
		return n, i.closedErr("read")
	}
	return n, fmt.Errorf("tun: %s: read: %w", i.name, err)
}

// readSome reads packets into i.rd's buffers until they are full or
// nothing more is queued; the RawConn waits when it returns false.
func (i *Interface) readSome(fd uintptr) bool {
	o := &i.rd
	for o.n < o.want {
		b := o.bufs[o.n]
		m, err := unix.Read(int(fd), b)
		switch {
		case err == nil && m == len(b) && m >= i.vnet && i.vnet+ipLen(b[i.vnet:]) > m:
			o.err = fmt.Errorf("packet of %d bytes, buffer of %d: %w", i.vnet+ipLen(b[i.vnet:]), m, ErrTooBig)
			return true
		case err == nil:
			o.sizes[o.n] = m
			o.n++
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return o.n > 0 // wait only while nothing was read
		default:
			o.err = err
			return true
		}
	}
	return true
}

// Write writes each packet of bufs (each a whole IPv4 or IPv6 packet,
// preceded by a virtio_net_hdr when VnetHdrLen is not 0; a zero header
// asks for nothing) to the interface, in order. On an error, bufs[n] is
// the packet that failed.
func (i *Interface) Write(bufs [][]byte) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	if i.closed.Load() {
		return 0, i.closedErr("write")
	}
	o := &i.wr
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bufs, o.n, o.err = bufs, 0, nil
	defer o.done()
	err := i.rc.Write(o.fn)
	n, werr := o.n, o.err
	switch {
	case werr != nil:
		return n, fmt.Errorf("tun: %s: write packet of %d bytes: %w", i.name, len(bufs[n]), werr)
	case err == nil:
		return n, nil
	case i.closed.Load():
		return n, i.closedErr("write")
	}
	return n, fmt.Errorf("tun: %s: write: %w", i.name, err)
}

// writeSome writes i.wr's packets until all are written or the TUN's
// queue is full; the RawConn waits when it returns false.
func (i *Interface) writeSome(fd uintptr) bool {
	o := &i.wr
	for o.n < len(o.bufs) {
		_, err := unix.Write(int(fd), o.bufs[o.n])
		switch {
		case err == nil:
			o.n++
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return false
		default:
			o.err = err
			return true
		}
	}
	return true
}

func (i *Interface) closedErr(op string) error {
	return fmt.Errorf("tun: %s: %s: %w (%w)", i.name, op, ErrClosed, os.ErrClosed)
}

// SetReadDeadline bounds pending and future Reads (zero: no bound).
func (i *Interface) SetReadDeadline(t time.Time) error {
	if err := i.f.SetReadDeadline(t); err != nil {
		return fmt.Errorf("tun: %s: %w", i.name, err)
	}
	return nil
}

// Config is an interface configuration for Configure.
type Config struct {
	// MTU is the interface MTU (0 leaves it unchanged).
	MTU int
	// Up sets the link up; false sets it down.
	Up bool
	// Addrs are IPv4 and IPv6 addresses with their prefix length, added
	// to those already on the interface (IPv6 ones without duplicate
	// address detection, so they are usable at once).
	Addrs []netip.Prefix
	// DisableIPv6 turns IPv6 off on the interface before it goes up
	// (net.ipv6.conf.NAME.disable_ipv6=1), so the kernel sends no router
	// solicitations or MLD reports into it. Incompatible with IPv6 Addrs.
	DisableIPv6 bool
}

// Configure applies cfg through rtnetlink, in the interface's namespace:
// IPv6 switch, addresses, then MTU and link state in one request.
func (i *Interface) Configure(cfg Config) error {
	if cfg.MTU != 0 {
		if err := validateMTU(cfg.MTU); err != nil {
			return fmt.Errorf("tun: %s: %w", i.name, err)
		}
	}
	for _, p := range cfg.Addrs {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return fmt.Errorf("%w: %s: address %v", ErrInvalidConfig, i.name, p)
		}
		if cfg.DisableIPv6 && p.Addr().Is6() && !p.Addr().Is4In6() {
			return fmt.Errorf("%w: %s: IPv6 address %v with IPv6 disabled", ErrInvalidConfig, i.name, p)
		}
	}
	if i.closed.Load() {
		return i.closedErr("configure")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	err := i.inNS(func() error {
		if cfg.DisableIPv6 {
			if err := disableIPv6(i.name); err != nil {
				return err
			}
		}
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			return fmt.Errorf("%w: %s: dial: %w", ErrNetlink, i.name, err)
		}
		defer c.Close()
		for _, p := range cfg.Addrs {
			if err := i.addAddr(c, p); err != nil {
				return err
			}
		}
		msg := &rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: i.index, Change: unix.IFF_UP}
		if cfg.Up {
			msg.Flags = unix.IFF_UP
		}
		if cfg.MTU != 0 {
			msg.Attributes = &rtnetlink.LinkAttributes{MTU: uint32(cfg.MTU)}
		}
		if err := c.Link.Set(msg); err != nil {
			return fmt.Errorf("%w: %s: set link up=%v mtu=%d: %w", ErrNetlink, i.name, cfg.Up, cfg.MTU, err)
		}
		if cfg.Up {
			return i.waitIPv6Ready(c, cfg.Addrs)
		}
		return nil
	})
	if err == nil && cfg.MTU != 0 {
		i.mtu.Store(int64(cfg.MTU))
	}
	return err
}

// ipv6ReadyTimeout bounds Configure's wait for its IPv6 addresses to
// become usable.
const ipv6ReadyTimeout = 2 * time.Second

// waitIPv6Ready waits until none of the IPv6 addresses among addrs is
// tentative on the interface. The kernel finishes an IPv6 address in its
// address workqueue, even one added without DAD (IFA_F_NODAD, as addAddr
// adds them) on an interface without neighbour discovery, once the link
// is up: until then the address cannot be bound (EADDRNOTAVAIL). Measured
// here: 2 of 200 binds right after Configure failed without this wait.
func (i *Interface) waitIPv6Ready(c *rtnetlink.Conn, addrs []netip.Prefix) error {
	want := map[netip.Addr]bool{}
	for _, p := range addrs {
		if a := p.Addr(); a.Is6() && !a.Is4In6() {
			want[a] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	deadline := time.Now().Add(ipv6ReadyTimeout)
	for {
		list, err := c.Address.List()
		if err != nil {
			return fmt.Errorf("%w: %s: list addresses: %w", ErrNetlink, i.name, err)
		}
		pending := 0
		for _, m := range list {
			if m.Index != i.index || m.Family != unix.AF_INET6 || m.Attributes == nil {
				continue
			}
			a, ok := netip.AddrFromSlice(m.Attributes.Address)
			if !ok || !want[a] {
				continue
			}
			if (uint32(m.Flags)|m.Attributes.Flags)&unix.IFA_F_TENTATIVE != 0 {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s: %d IPv6 addresses still tentative after %v", ErrNetlink, i.name, pending, ipv6ReadyTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func (i *Interface) addAddr(c *rtnetlink.Conn, p netip.Prefix) error {
	m := i.addrMessage(p)
	if err := c.Address.New(m); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%w: %s: add address %v: %w", ErrNetlink, i.name, p, err)
	}
	return nil
}

// disableIPv6 sets disable_ipv6 on the interface. It runs in the
// interface's namespace (sysctls under /proc/sys/net follow the opening
// thread's namespace). A kernel without IPv6 has nothing to disable.
func disableIPv6(name string) error {
	p := filepath.Join("/proc/sys/net/ipv6/conf", name, "disable_ipv6")
	err := os.WriteFile(p, []byte("1\n"), 0)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat("/proc/sys/net/ipv6"); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("tun: %s: disable IPv6: %w", name, err)
	}
	return nil
}

// SetMTU sets the interface's MTU.
func (i *Interface) SetMTU(n int) error {
	if err := validateMTU(n); err != nil {
		return fmt.Errorf("tun: %s: %w", i.name, err)
	}
	if i.closed.Load() {
		return i.closedErr("set MTU")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	err := i.inNS(func() error {
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			return fmt.Errorf("%w: %s: dial: %w", ErrNetlink, i.name, err)
		}
		defer c.Close()
		msg := &rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: i.index, Attributes: &rtnetlink.LinkAttributes{MTU: uint32(n)}}
		if err := c.Link.Set(msg); err != nil {
			return fmt.Errorf("%w: %s: set MTU %d: %w", ErrNetlink, i.name, n, err)
		}
		return nil
	})
	if err == nil {
		i.mtu.Store(int64(n))
	}
	return err
}

// Close closes the TUN, which deletes the interface, wakes pending Reads
// (they return ErrClosed) and checks that the interface is gone (waiting
// up to two seconds for in-flight reads and writes to finish); if it is
// not, the error matches ErrStillPresent. Closing twice returns ErrClosed.
func (i *Interface) Close() error {
	if i.closed.Swap(true) {
		return i.closedErr("close")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	err := i.f.Close()
	if err != nil {
		err = fmt.Errorf("tun: %s: close: %w", i.name, err)
	}
	verr := i.inNS(func() error {
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			return fmt.Errorf("%w: %s: dial: %w", ErrNetlink, i.name, err)
		}
		defer c.Close()
		deadline := time.Now().Add(removeTimeout)
		for {
			present, err := linkPresent(c, i.index, i.name)
			if err != nil {
				return fmt.Errorf("%w: %s: list links: %w", ErrNetlink, i.name, err)
			}
			if !present {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: %s (index %d) after %v", ErrStillPresent, i.name, i.index, removeTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	})
	return errors.Join(err, verr, i.ns.Close())
}

// linkPresent reports whether a link with this index and name exists.
func linkPresent(c *rtnetlink.Conn, index uint32, name string) (bool, error) {
	links, err := c.Link.List()
	if err != nil {
		return false, err
	}
	for _, l := range links {
		if l.Index == index && l.Attributes != nil && l.Attributes.Name == name {
			return true, nil
		}
	}
	return false, nil
}

// inNS runs fn on a thread in the interface's network namespace: the
// calling thread when it is already there, otherwise a thread that joins
// the namespace and is discarded afterwards (joining another namespace
// needs CAP_SYS_ADMIN).
func (i *Interface) inNS(fn func() error) error {
	runtime.LockOSThread()
	same, err := sameNS(i.ns)
	if err == nil && same {
		defer runtime.UnlockOSThread()
		return fn()
	}
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("tun: %s: %w", i.name, err)
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves the process's namespace, so
		// the runtime discards it when this goroutine ends.
		runtime.LockOSThread()
		if err := unix.Setns(int(i.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("tun: %s: enter the interface's network namespace: %w", i.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// sameNS reports whether the calling (locked) thread is in namespace ns.
func sameNS(ns *os.File) (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &a); err != nil {
		return false, fmt.Errorf("stat namespace handle: %w", err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &b); err != nil {
		return false, fmt.Errorf("stat thread namespace: %w", err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// ipLen is the length an IPv4 or IPv6 packet's header claims (0 when it
// is neither or too short to say).
func ipLen(p []byte) int {
	switch {
	case len(p) >= 20 && p[0]>>4 == 4:
		return int(p[2])<<8 | int(p[3])
	case len(p) >= 40 && p[0]>>4 == 6:
		return 40 + (int(p[4])<<8 | int(p[5]))
	}
	return 0
}

// openDeniedHint says why opening the TUN clone device at path was refused.
// Opening it is a matter of the node's file mode, not of CAP_NET_ADMIN
// (which creating the interface then needs): a stock system's udev makes
// it 0666, some minimal or container images leave it 0600, root's alone.
func openDeniedHint(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "needs root or CAP_NET_ADMIN"
	}
	mode := st.Mode & 0o777
	if mode&0o006 == 0o006 {
		// Readable and writable by anyone: a device policy (a cgroup's, a
		// systemd unit's DevicePolicy=) refused it.
		return fmt.Sprintf("the node is mode %04o; a device policy refuses it: allow %s rw", mode, path)
	}
	return fmt.Sprintf("the node is mode %04o, owner uid %d, group %d: the user needs read and write on it (stock udev rules make it 0666), or run as root", mode, st.Uid, st.Gid)
}
