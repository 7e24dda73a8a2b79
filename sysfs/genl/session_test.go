package genl_test

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// newControlTree binds "mhi0", a mock with an MBIM port and a data
// session (RequireConnect), and "mhi1", a mock without either.
func newControlTree(t testing.TB) (*sysfs.Tree, sysfstest.ControlDevice) {
	t.Helper()
	d := sysfstest.NewControlDevice(t, "mhi0", "")
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", d.Binding())
	tr.AddDevice("mhi1", sysfstest.NewDevice(t, "mhi1", false).Binding())
	return tr, d
}

func TestSessionCommands(t *testing.T) {
	testenv.NeedRoot(t, "CONNECT and DISCONNECT need root or CAP_NET_ADMIN")
	tr, d := newControlTree(t)
	srv := startServer(t, tr)
	c := dial(t, srv.Port())

	s, err := c.Session("mhi0")
	if err != nil || s.State != "disconnected" || s.Protocol != "mbim" || s.Device != "mhi0" || s.IPv4 != "" {
		t.Fatalf("GET_SESSION: %+v %v", s, err)
	}
	ports, err := c.Ports("mhi0")
	if err != nil || len(ports) != 1 || ports[0].Name != "wwan0mbim0" || ports[0].Path != d.Port.Link() {
		t.Fatalf("DUMP_PORTS: %+v %v", ports, err)
	}
	if _, ok := ports[0].Stats["pair_dl_messages"]; !ok {
		t.Errorf("port counters lack pair_dl_messages: %v", ports[0].Stats)
	}

	s, err = c.Connect("mhi0", "internet", "ipv4v6")
	if err != nil {
		t.Fatal(err)
	}
	want := genl.Session{Device: "mhi0", State: "connected", Protocol: "mbim", APN: "internet", IPType: "ipv4v6",
		IPv4: "198.18.0.1/24", Gateway4: "198.18.0.2", DNS4: []string{"198.18.0.2"},
		IPv6: "fd00:6d68:6900::1/64", Gateway6: "fd00:6d68:6900::2", DNS6: []string{"fd00:6d68:6900::2"}, MTU: 1500}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("CONNECT reply\n got %+v\nwant %+v", s, want)
	}
	if !d.Mock.Modem.DataAllowed() {
		t.Fatal("the mock gates data after CONNECT")
	}
	// Connected already: EBUSY, with the session's APN in the message.
	_, err = c.Connect("mhi0", "other", "")
	if !errors.Is(err, genl.ErrBusy) || !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), "internet") {
		t.Errorf("second CONNECT: %v", err)
	}
	// Bad IP type: EINVAL, pointing at the ip-type attribute.
	_, err = c.Connect("mhi0", "internet", "ipv5")
	var ge *genl.Error
	if !errors.Is(err, genl.ErrInvalid) || !errors.As(err, &ge) || ge.Offset == 0 || !strings.Contains(err.Error(), "ipv5") {
		t.Errorf("CONNECT with ip-type ipv5: %v", err)
	}
	if _, err := c.Connect("mhi1", "internet", ""); !errors.Is(err, genl.ErrNotSupported) {
		t.Errorf("CONNECT on a device without a session: %v", err)
	}
	if _, err := c.Connect("mhi9", "internet", ""); !errors.Is(err, genl.ErrNoDevice) {
		t.Errorf("CONNECT on no device: %v", err)
	}
	s, err = c.Disconnect("mhi0")
	if err != nil || s.State != "disconnected" || s.IPv4 != "" {
		t.Fatalf("DISCONNECT: %+v %v", s, err)
	}
	if d.Mock.Modem.DataAllowed() {
		t.Fatal("the mock passes data after DISCONNECT")
	}
	if ports, err := c.Ports("mhi1"); err != nil || len(ports) != 0 {
		t.Errorf("DUMP_PORTS of a device without ports: %+v %v", ports, err)
	}
}

// CONNECT without APN, and with an APN holding white space, are refused
// by the decoder.
func TestConnectDecode(t *testing.T) {
	tr, _ := newControlTree(t)
	srv := startServer(t, tr)
	c := dial(t, srv.Port())
	fam := c.Family()
	for _, tc := range []struct {
		name  string
		attrs func(ae *netlink.AttributeEncoder)
		want  string
	}{
		{"no apn", func(ae *netlink.AttributeEncoder) { ae.String(genl.AttrDevName, "mhi0") }, "needs the apn attribute"},
		{"space", func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.String(genl.AttrAPN, "a b")
		}, "white space"},
		{"long", func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.String(genl.AttrAPN, strings.Repeat("a", 101))
		}, "100-byte limit"},
		{"mru in connect", func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.String(genl.AttrAPN, "x")
			ae.Uint32(genl.AttrMRU, 1)
		}, "not valid in connect"},
	} {
		ae := netlink.NewAttributeEncoder()
		tc.attrs(ae)
		b, _ := ae.Encode()
		raw := append(genlHeaderBytes(genl.CmdConnect), b...)
		_, _, derr := genl.DecodeRequest(nlMessage(fam.ID, raw))
		if derr == nil || !errors.Is(derr, unix.EINVAL) && !errors.Is(derr, unix.ERANGE) || !strings.Contains(derr.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, derr, tc.want)
		}
	}
}

func genlHeaderBytes(cmd uint8) []byte { return []byte{cmd, genl.FamilyVersion, 0, 0} }

// nlMessage wraps a generic-netlink payload in a request header.
func nlMessage(family uint16, payload []byte) []byte {
	b := make([]byte, 16, 16+len(payload))
	ne := func(off int, v uint32) {
		b[off], b[off+1], b[off+2], b[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	ne(0, uint32(16+len(payload)))
	b[4], b[5] = byte(family), byte(family>>8)
	b[6] = byte(netlink.Request)
	b = append(b, payload...)
	return b
}

// sessionHelperEnv tells the re-executed test binary the port for
// TestHelperSessionClient.
const sessionHelperEnv = "GOMHI_GENL_SESSION_HELPER_PORT"

// TestSessionNonRoot: an unprivileged client reads the session and the
// ports but may not connect.
func TestSessionNonRoot(t *testing.T) {
	reexec.RequireSetpriv(t)
	tr, d := newControlTree(t)
	srv := startServer(t, tr)
	out, err := reexec.RunTestAs(t, reexec.User{UID: reexec.Nobody}, "TestHelperSessionClient",
		sessionHelperEnv+"="+strconv.FormatUint(uint64(srv.Port()), 10))
	t.Logf("helper output:\n%s", out)
	if err != nil || !strings.Contains(out, "HELPER-OK") {
		t.Fatalf("helper as uid 65534: %v", err)
	}
	if d.Mock.Modem.Session().Active {
		t.Fatal("an unprivileged client connected the session")
	}
}

// TestHelperSessionClient is the unprivileged side of TestSessionNonRoot;
// TestMain leaves it out of every run that test did not start.
func TestHelperSessionClient(t *testing.T) {
	portStr := os.Getenv(sessionHelperEnv)
	if portStr == "" {
		t.Fatal("runs only as the helper process of TestSessionNonRoot")
	}
	port, _ := strconv.ParseUint(portStr, 10, 32)
	if os.Getuid() == 0 {
		t.Fatal("helper runs as root")
	}
	c, err := genl.Dial(genl.ClientOptions{Port: uint32(port)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s, err := c.Session("mhi0"); err != nil || s.State != "disconnected" {
		t.Fatalf("GET_SESSION as uid %d: %+v %v", os.Getuid(), s, err)
	}
	if p, err := c.Ports("mhi0"); err != nil || len(p) != 1 {
		t.Fatalf("DUMP_PORTS as uid %d: %+v %v", os.Getuid(), p, err)
	}
	for _, op := range []func() error{
		func() error { _, err := c.Connect("mhi0", "internet", ""); return err },
		func() error { _, err := c.Disconnect("mhi0"); return err },
	} {
		if err := op(); !errors.Is(err, genl.ErrPermission) {
			t.Fatalf("as uid %d: %v, want ErrPermission", os.Getuid(), err)
		}
	}
	fmt.Println("CONNECT and DISCONNECT refused\nHELPER-OK")
}

// The YAML spec names every command and top-level attribute with the
// number the code uses.
func TestSpecNumbers(t *testing.T) {
	spec := readSpec(t)
	for name, v := range map[string]uint8{
		"get-device": genl.CmdGetDevice, "set-device": genl.CmdSetDevice, "get-stats": genl.CmdGetStats,
		"dump-channels": genl.CmdDumpChannels, "connect": genl.CmdConnect, "disconnect": genl.CmdDisconnect,
		"get-session": genl.CmdGetSession, "dump-ports": genl.CmdDumpPorts,
	} {
		if !regexp.MustCompile(`name: ` + name + `\s+value: ` + strconv.Itoa(int(v)) + `\b`).MatchString(spec) {
			t.Errorf("the spec lacks operation %s = %d", name, v)
		}
	}
	for name, v := range map[string]uint16{
		"dev-name": genl.AttrDevName, "mru": genl.AttrMRU, "mtu": genl.AttrMTU, "timeout-ms": genl.AttrTimeoutMs,
		"state": genl.AttrState, "ee": genl.AttrEE, "model": genl.AttrModel, "serial": genl.AttrSerial,
		"stats": genl.AttrStats, "channel": genl.AttrChannel, "device": genl.AttrDevice, "apn": genl.AttrAPN,
		"ip-type": genl.AttrIPType, "session": genl.AttrSession, "port": genl.AttrPort,
		"autosuspend-ms": genl.AttrAutosuspendMs, "pm-request": genl.AttrPMRequest,
		"pm-state": genl.AttrPMState, "recovery": genl.AttrRecovery,
		"session-id": genl.AttrSessionID, "interface": genl.AttrInterface,
	} {
		if !regexp.MustCompile(`name: ` + name + `\s+type: \w+\s+value: ` + strconv.Itoa(int(v)) + `\b`).MatchString(spec) {
			t.Errorf("the spec lacks attribute %s = %d", name, v)
		}
	}
	if !strings.Contains(spec, "maxattr "+strconv.Itoa(int(genl.AttrMax))) {
		t.Errorf("the spec's maxattr is not %d", genl.AttrMax)
	}
}

// readSpec returns the family's YAML spec, docs/netlink-mhi.yaml.
func readSpec(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/netlink-mhi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Sessions by number: GET_SESSION with session-id, its dump, and the
// numbers, interface names and limits the server refuses.
func TestSessionsByNumber(t *testing.T) {
	tr, _ := newControlTree(t)
	srv := startServer(t, tr)
	c := dial(t, srv.Port())
	s, err := c.SessionOf("mhi0", 1)
	if err != nil || s.Session != 1 || s.State != "disconnected" || s.Protocol != "mbim" {
		t.Fatalf("GET_SESSION session-id 1: %+v %v", s, err)
	}
	all, err := c.Sessions("mhi0")
	if err != nil || len(all) != 2 || all[0].Session != 0 || all[1].Session != 1 || all[1].Device != "mhi0" {
		t.Fatalf("GET_SESSION dump: %+v %v", all, err)
	}
	_, err = c.SessionOf("mhi0", 2)
	var ge *genl.Error
	if !errors.Is(err, genl.ErrInvalid) || !errors.As(err, &ge) || ge.Offset == 0 || !strings.Contains(err.Error(), "0..1") {
		t.Errorf("GET_SESSION session-id 2 of a device taking 2: %v", err)
	}
	if _, err := c.SessionOf("mhi1", 1); !errors.Is(err, genl.ErrNotSupported) {
		t.Errorf("GET_SESSION on a device without sessions: %v", err)
	}
	one, err := c.Sessions("mhi1")
	if !errors.Is(err, genl.ErrNotSupported) {
		t.Errorf("GET_SESSION dump on a device without sessions: %+v %v", one, err)
	}
	fam := c.Family()
	for _, tc := range []struct {
		name  string
		cmd   uint8
		attrs func(ae *netlink.AttributeEncoder)
		want  string
	}{
		{"session 256", genl.CmdGetSession, func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.Uint32(genl.AttrSessionID, 256)
		}, "0..255"},
		{"session as u8", genl.CmdDisconnect, func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.Uint8(genl.AttrSessionID, 1)
		}, "want 4"},
		{"interface with a slash", genl.CmdConnect, func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.String(genl.AttrAPN, "ims")
			ae.String(genl.AttrInterface, "a/b")
		}, "not a valid interface name"},
		{"interface too long", genl.CmdConnect, func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.String(genl.AttrAPN, "ims")
			ae.String(genl.AttrInterface, "abcdefghijklmnop")
		}, "15-byte limit"},
		{"interface in get-session", genl.CmdGetSession, func(ae *netlink.AttributeEncoder) {
			ae.String(genl.AttrDevName, "mhi0")
			ae.String(genl.AttrInterface, "x")
		}, "not valid in get-session"},
	} {
		ae := netlink.NewAttributeEncoder()
		tc.attrs(ae)
		b, _ := ae.Encode()
		_, _, derr := genl.DecodeRequest(nlMessage(fam.ID, append(genlHeaderBytes(tc.cmd), b...)))
		if derr == nil || !errors.Is(derr, unix.EINVAL) && !errors.Is(derr, unix.ERANGE) || !strings.Contains(derr.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, derr, tc.want)
		}
	}
}

// CONNECT and DISCONNECT of a session by number, through the server.
func TestSessionsConnectByNumber(t *testing.T) {
	testenv.NeedRoot(t, "CONNECT and DISCONNECT need root or CAP_NET_ADMIN")
	tr, _ := newControlTree(t)
	srv := startServer(t, tr)
	c := dial(t, srv.Port())
	if _, err := c.DisconnectSession("mhi0", 1); !errors.Is(err, genl.ErrInvalid) || !strings.Contains(err.Error(), "not connected") {
		t.Errorf("DISCONNECT of an idle session 1: %v", err)
	}
	if _, err := c.ConnectSession("mhi0", genl.ConnectRequest{Session: 5, APN: "ims"}); !errors.Is(err, genl.ErrInvalid) || !strings.Contains(err.Error(), "beyond the limit") {
		t.Errorf("CONNECT session 5 of a device taking 2: %v", err)
	}
	// The control device's sessions have no host side: no interface to name.
	_, err := c.ConnectSession("mhi0", genl.ConnectRequest{Session: 1, APN: "ims", Interface: "ims0"})
	var ge *genl.Error
	if !errors.Is(err, genl.ErrInvalid) || !errors.As(err, &ge) || ge.Offset == 0 || !strings.Contains(err.Error(), "ims0") {
		t.Errorf("CONNECT with an interface on a session without one: %v", err)
	}
	s, err := c.ConnectSession("mhi0", genl.ConnectRequest{Session: 0, APN: "internet"})
	if err != nil || s.Session != 0 || s.State != "connected" {
		t.Fatalf("CONNECT session 0: %+v %v", s, err)
	}
	if s, err := c.SessionOf("mhi0", 0); err != nil || s.APN != "internet" {
		t.Errorf("GET_SESSION 0 after connect: %+v %v", s, err)
	}
}
