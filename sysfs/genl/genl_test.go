package genl_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// newTree binds a tree to a powered-up mock modem with its network device
// as "mhi0". With second set it adds "mhi1", a second mock without a
// network device (so without mru/mtu).
func newTree(t testing.TB, second bool) (*sysfs.Tree, *mhinet.Device) {
	t.Helper()
	tr, d := sysfstest.NewTree(t)
	if second {
		tr.AddDevice("mhi1", sysfstest.NewDevice(t, "mhi1", false).Binding())
	}
	return tr, d.Net
}

// startServer serves tr on a random free port id and stops it at cleanup.
func startServer(t testing.TB, tr *sysfs.Tree) *genl.Server {
	t.Helper()
	return startServerWith(t, tr, genl.ServerOptions{})
}

// startServerWith is startServer with options (the port is chosen here).
func startServerWith(t testing.TB, tr *sysfs.Tree, opts genl.ServerOptions) *genl.Server {
	t.Helper()
	var srv *genl.Server
	for range 100 {
		opts.Port = 0x10000000 + rand.Uint32N(0x60000000)
		s, err := genl.NewServer(tr, opts)
		if errors.Is(err, genl.ErrPortInUse) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		srv = s
		break
	}
	if srv == nil {
		t.Fatal("no free port id")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = srv.Close()
	})
	return srv
}

func dial(t testing.TB, port uint32) *genl.Client {
	t.Helper()
	c, err := genl.Dial(genl.ClientOptions{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func u32(v uint32) *uint32 { return &v }

func TestGetFamilyViaGenetlink(t *testing.T) {
	tr, _ := newTree(t, false)
	srv := startServer(t, tr)
	gc, err := genl.DialGenetlink(genl.ClientOptions{Port: srv.Port()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if err := gc.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	f, err := gc.GetFamily("mhi")
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "mhi" || f.ID != genl.FamilyID || f.Version != genl.FamilyVersion {
		t.Errorf("GetFamily = %+v", f)
	}
	if _, err := gc.GetFamily("nl80211"); !errors.Is(err, unix.ENOENT) {
		t.Errorf("GetFamily(nl80211) = %v, want ENOENT", err)
	}
	fams, err := gc.ListFamilies()
	if err != nil || len(fams) != 1 || fams[0].Name != "mhi" {
		t.Errorf("ListFamilies = %+v, %v", fams, err)
	}
	// The resolved id works with plain genetlink Execute.
	msgs, err := gc.Execute(genetlink.Message{
		Header: genetlink.Header{Command: genl.CmdGetDevice, Version: 1},
		Data:   mustAttrs(t, func(ae *netlink.AttributeEncoder) { ae.String(genl.AttrDevName, "mhi0") }),
	}, f.ID, netlink.Request)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Execute GET_DEVICE = %v, %v", msgs, err)
	}
	// An unknown command is EOPNOTSUPP with a message.
	_, err = gc.Execute(genetlink.Message{Header: genetlink.Header{Command: 42, Version: 1}}, f.ID, netlink.Request)
	var oe *netlink.OpError
	if !errors.Is(err, unix.EOPNOTSUPP) || !errors.As(err, &oe) || !strings.Contains(oe.Message, "unknown command 42") {
		t.Errorf("command 42 = %v, want EOPNOTSUPP with a message", err)
	}
}

func mustAttrs(t testing.TB, fn func(*netlink.AttributeEncoder)) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	fn(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGetDevice(t *testing.T) {
	tr, _ := newTree(t, false)
	c := dial(t, startServer(t, tr).Port())
	d, err := c.GetDevice("mhi0")
	if err != nil {
		t.Fatal(err)
	}
	want := genl.Device{Name: "mhi0", State: "M0", EE: "AMSS", Model: "qcom-sdx55m", MRU: 32768, MTU: 1500, TimeoutMs: 8000,
		PMState: "M0", Recovery: "ok: 0 attempts, 0 failed"}
	serial := d.Serial
	d.Serial = ""
	if d != want || serial == "" {
		t.Errorf("GetDevice = %+v (serial %q), want %+v", d, serial, want)
	}
	if f := c.Family(); f.ID != genl.FamilyID || f.Name != "mhi" {
		t.Errorf("Family = %+v", f)
	}
}

func TestDevicesDump(t *testing.T) {
	tr, _ := newTree(t, true)
	c := dial(t, startServer(t, tr).Port())
	ds, err := c.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Name != "mhi0" || ds[1].Name != "mhi1" {
		t.Fatalf("Devices = %+v", ds)
	}
	if ds[0].MRU != 32768 || ds[1].MRU != 0 || ds[1].State != "M0" || ds[1].TimeoutMs == 0 {
		t.Errorf("Devices = %+v", ds)
	}
}

func TestSetDevice(t *testing.T) {
	tr, n := newTree(t, false)
	c := dial(t, startServer(t, tr).Port())
	d, err := c.SetDevice("mhi0", genl.SetRequest{MRU: u32(16384)})
	if err != nil {
		t.Fatal(err)
	}
	if n.MRU() != 16384 || d.MRU != 16384 {
		t.Fatalf("after SET mru 16384: mhinet MRU %d, reply %+v", n.MRU(), d)
	}
	d, err = c.SetDevice("mhi0", genl.SetRequest{MTU: u32(9000), TimeoutMs: u32(5000)})
	if err != nil {
		t.Fatal(err)
	}
	if n.MTU() != 9000 || d.MTU != 9000 || d.TimeoutMs != 5000 || d.MRU != 16384 {
		t.Errorf("after SET mtu 9000 timeout 5000: mhinet MTU %d, reply %+v", n.MTU(), d)
	}
	got, err := c.GetDevice("mhi0")
	if err != nil || got != d {
		t.Errorf("GetDevice = %+v, %v; want %+v", got, err, d)
	}
	if v, _ := tr.Get("devices/mhi0/timeout_ms"); v != "5000" {
		t.Errorf("tree timeout_ms = %q", v)
	}
}

func TestSetDeviceInvalid(t *testing.T) {
	tr, n := newTree(t, true)
	c := dial(t, startServer(t, tr).Port())
	for _, tc := range []struct {
		dev  string
		req  genl.SetRequest
		want error
		msg  string
	}{
		{"mhi0", genl.SetRequest{MRU: u32(70000)}, genl.ErrInvalid, "mru: 70000 outside the valid range 256..65535"},
		{"mhi0", genl.SetRequest{MRU: u32(100)}, genl.ErrInvalid, "256..65535"},
		{"mhi0", genl.SetRequest{MTU: u32(20)}, genl.ErrInvalid, "68..65507"},
		{"mhi0", genl.SetRequest{TimeoutMs: u32(0)}, genl.ErrInvalid, "1..600000"},
		{"mhi0", genl.SetRequest{}, genl.ErrInvalid, "nothing to set"},
		{"mhi0", genl.SetRequest{TimeoutMs: u32(4000), MRU: u32(1)}, genl.ErrInvalid, "256..65535"},
		{"mhi1", genl.SetRequest{MRU: u32(16384)}, genl.ErrNotSupported, "mhi1 has no mru"},
		{"mhi9", genl.SetRequest{MRU: u32(16384)}, genl.ErrNoDevice, `no MHI device "mhi9"`},
		{"a/b", genl.SetRequest{MRU: u32(16384)}, genl.ErrInvalid, "not a valid device name"},
	} {
		_, err := c.SetDevice(tc.dev, tc.req)
		var ge *genl.Error
		if !errors.Is(err, tc.want) || !errors.As(err, &ge) || !strings.Contains(ge.Message, tc.msg) {
			t.Errorf("SetDevice(%s, %+v) = %v, want %v with %q", tc.dev, tc.req, err, tc.want, tc.msg)
			continue
		}
		if tc.want == genl.ErrInvalid && !errors.Is(err, unix.EINVAL) {
			t.Errorf("SetDevice(%s, %+v) = %v, not EINVAL", tc.dev, tc.req, err)
		}
		if tc.req.MRU != nil && *tc.req.MRU == 70000 {
			if ge.Offset == 0 {
				t.Errorf("no attribute offset in %v", err)
			}
			t.Logf("error as the user sees it: %v", err)
		}
	}
	if n.MRU() != mhinet.DefaultMRU {
		t.Errorf("rejected SETs changed the MRU to %d", n.MRU())
	}
}

func TestUnknownDevice(t *testing.T) {
	tr, _ := newTree(t, false)
	c := dial(t, startServer(t, tr).Port())
	checks := map[string]error{}
	_, checks["get"] = c.GetDevice("mhi9")
	_, checks["stats"] = c.Stats("mhi9")
	_, checks["channels"] = c.Channels("mhi9")
	_, checks["set"] = c.SetDevice("mhi9", genl.SetRequest{MTU: u32(1500)})
	for op, err := range checks {
		if !errors.Is(err, genl.ErrNoDevice) || !errors.Is(err, unix.ENODEV) {
			t.Errorf("%s mhi9: %v, want ErrNoDevice", op, err)
		}
	}
}

func TestStats(t *testing.T) {
	tr, _ := newTree(t, false)
	c := dial(t, startServer(t, tr).Port())
	st, err := c.Stats("mhi0")
	if err != nil {
		t.Fatal(err)
	}
	if len(st) < 10 || !slices.IsSortedFunc(st, func(a, b genl.Stat) int { return strings.Compare(a.Name, b.Name) }) {
		t.Errorf("Stats = %+v", st)
	}
	m, err := c.StatsMap("mhi0")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m["net/rx_packets"]; !ok || v != 0 {
		t.Errorf("net/rx_packets = %d, %v", v, ok)
	}
	if m["net/mru"] != 32768 {
		t.Errorf("net/mru = %d", m["net/mru"])
	}
	var mhiCounters int
	for name := range m {
		if strings.HasPrefix(name, "mhi/") {
			mhiCounters++
		}
	}
	if mhiCounters == 0 {
		t.Errorf("no mhi/ counters in %v", m)
	}
}

func TestChannelsDump(t *testing.T) {
	tr, _ := newTree(t, false)
	c := dial(t, startServer(t, tr).Port())
	chs, err := c.Channels("mhi0")
	if err != nil {
		t.Fatal(err)
	}
	byNum := map[uint32]genl.Channel{}
	for _, ch := range chs {
		byNum[ch.Num] = ch
	}
	if len(byNum) != len(chs) || len(chs) < 4 {
		t.Fatalf("Channels = %+v", chs)
	}
	dl, ok := byNum[101]
	if !ok || dl.Name != "IP_HW0" || dl.Dir != "DL" || dl.State != "ENABLED" || dl.CtxState != "RUNNING" ||
		dl.Elements == 0 || dl.Pending == 0 || dl.HostWP == 0 || dl.CtxRP == 0 {
		t.Errorf("channel 101 = %+v", dl)
	}
	if ul := byNum[100]; ul.Dir != "UL" || ul.Name != "IP_HW0" {
		t.Errorf("channel 100 = %+v", ul)
	}
	if q := byNum[14]; q.Name != "QMI" || q.State != "DISABLED" {
		t.Errorf("channel 14 = %+v", q)
	}
}

func TestNoServer(t *testing.T) {
	// Bind a port ourselves and close it so nobody listens there.
	conn, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		t.Fatal(err)
	}
	port := conn.PID()
	_ = conn.Close()
	_, err = genl.Dial(genl.ClientOptions{Port: port})
	if !errors.Is(err, genl.ErrNoServer) || !errors.Is(err, unix.ECONNREFUSED) || !strings.Contains(err.Error(), "mhictl up") {
		t.Fatalf("Dial with nobody listening = %v, want ErrNoServer mentioning mhictl up", err)
	}
	t.Logf("as the user sees it: %v", err)
}

func TestTimeout(t *testing.T) {
	// Something holds the port but never answers.
	mute, err := netlink.Dial(unix.NETLINK_USERSOCK, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	start := time.Now()
	_, err = genl.Dial(genl.ClientOptions{Port: mute.PID(), Timeout: 100 * time.Millisecond})
	if !errors.Is(err, genl.ErrTimeout) {
		t.Fatalf("Dial to a mute port = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

func TestPortInUse(t *testing.T) {
	tr, _ := newTree(t, false)
	srv := startServer(t, tr)
	_, err := genl.NewServer(tr, genl.ServerOptions{Port: srv.Port()})
	if !errors.Is(err, genl.ErrPortInUse) {
		t.Fatalf("second server on port %#x: %v", srv.Port(), err)
	}
}

func TestConcurrentClients(t *testing.T) {
	tr, _ := newTree(t, false)
	srv := startServer(t, tr)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, srv.Port())
			for range 50 {
				if _, err := c.GetDevice("mhi0"); err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				if _, err := c.SetDevice("mhi0", genl.SetRequest{TimeoutMs: u32(uint32(1000 + i))}); err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestServeStopsOnCancel(t *testing.T) {
	tr, _ := newTree(t, false)
	srv, err := genl.NewServer(tr, genl.ServerOptions{Port: 0x7e000000 + rand.Uint32N(0x100000)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	c := dial(t, srv.Port())
	if _, err := c.GetDevice("mhi0"); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	// Serve can run again on the same socket.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- srv.Serve(ctx2) }()
	if _, err := c.GetDevice("mhi0"); err != nil {
		t.Fatal(err)
	}
	_ = srv.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cancel2()
}

// TestSetDevicePower: pm-request suspends and resumes the device and
// autosuspend-ms sets the idle delay (`mhictl suspend|resume DEV`); a bad
// request is refused.
func TestSetDevicePower(t *testing.T) {
	tr, _ := newTree(t, false)
	c := dial(t, startServer(t, tr).Port())
	d, err := c.SetDevice("mhi0", genl.SetRequest{PMRequest: u32(genl.PMRequestSuspend), AutosuspendMs: u32(0)})
	if err != nil {
		t.Fatal(err)
	}
	if pm, _ := tr.Get("devices/mhi0/pm_state"); pm != "M3" || d.State != "M3" {
		t.Fatalf("after pm-request suspend: pm_state %q, reply %+v", pm, d)
	}
	d, err = c.SetDevice("mhi0", genl.SetRequest{PMRequest: u32(genl.PMRequestResume), AutosuspendMs: u32(60000)})
	if err != nil {
		t.Fatal(err)
	}
	if pm, _ := tr.Get("devices/mhi0/pm_state"); pm != "M0" || d.State != "M0" || d.AutosuspendMs != 60000 {
		t.Fatalf("after pm-request resume: pm_state %q, reply %+v", pm, d)
	}
	if got, err := c.GetDevice("mhi0"); err != nil || got.AutosuspendMs != 60000 {
		t.Fatalf("GetDevice = %+v, %v", got, err)
	}
	for _, r := range []genl.SetRequest{{PMRequest: u32(3)}, {AutosuspendMs: u32(3600001)}, {PMRequest: u32(genl.PMRequestResume)}} {
		if _, err := c.SetDevice("mhi0", r); err == nil {
			t.Errorf("SetDevice(%+v) accepted", r)
		}
	}
	if _, err := c.SetDevice("mhi0", genl.SetRequest{AutosuspendMs: u32(0)}); err != nil {
		t.Fatal(err)
	}
}
