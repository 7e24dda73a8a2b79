package genl_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
)

// newDumpTree binds "mhi0", a mock modem whose crashes enter RDDM and
// whose host collects RAM dumps, "mhi1", a mock whose host does not
// collect them (RDDM size 0), and "mhi2", whose host would but whose
// crashes do not enter RDDM.
func newDumpTree(t testing.TB) (*sysfs.Tree, *mock.Mock, *mock.Mock) {
	t.Helper()
	m, err := mock.Open(mock.Options{Name: "mhi0", RDDMSize: 1 << 20,
		Device: func(c *ep.Config) { c.Boot = ep.BootConfig{RDDM: true} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", sysfs.Device{Controller: m.Controller, Model: m.Info.Name})
	tr.AddDevice("mhi1", sysfstest.NewDevice(t, "mhi1", false).Binding())
	m2, err := mock.Open(mock.Options{Name: "mhi2", RDDMSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close() })
	if err := m2.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	tr.AddDevice("mhi2", sysfs.Device{Controller: m2.Controller, Model: m2.Info.Name})
	return tr, m, m2
}

// waitM0 waits for the recovery after a crash to bring c back to M0.
func waitM0(t testing.TB, c *mhi.Controller) {
	t.Helper()
	poll.Until(10*time.Second, func() bool { return c.PMState() == "M0" })
	if st, ee := c.State(); st != wire.StateM0 || ee != wire.EEAMSS || c.PMState() != "M0" {
		t.Fatalf("after the dump: %s/%s (pm %s)", st, ee, c.PMState())
	}
}

// TestGetDump: no dump yet is ENOENT with a message; a forced crash's
// dump arrives in chunks that reassemble to the mock's image, with the
// digest the tree shows; the same dump can be read again without a crash;
// the device is back in M0; a device that does not collect dumps is
// EOPNOTSUPP, a suspended one is resumed and crashed, one powered down is
// EBUSY, an unknown one ENODEV.
func TestGetDump(t *testing.T) {
	tr, m, m2 := newDumpTree(t)
	c := dial(t, startServer(t, tr).Port())
	want := ep.DumpPattern(ep.DefaultDumpSize)
	wantSum := sha256.Sum256(want)

	_, err := c.Dump("mhi0", genl.DumpOptions{})
	if !errors.Is(err, genl.ErrNoDump) || !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "mhi0 has no RAM dump") ||
		!strings.Contains(err.Error(), "--crash") {
		t.Fatalf("Dump before any crash = %v, want ErrNoDump (ENOENT) with a message", err)
	}

	d, err := c.Dump("mhi0", genl.DumpOptions{Crash: true, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Data, want) || d.SHA256 != wantSum || d.Size != uint64(len(want)) || !d.Crashed || d.Device != "mhi0" {
		t.Fatalf("dump of %d bytes sha256 %x (%+v), want %d bytes sha256 %x", len(d.Data), sha256.Sum256(d.Data), d.Size, len(want), wantSum)
	}
	if n := (len(want) + genl.DumpChunkSize - 1) / genl.DumpChunkSize; d.Chunks != n {
		t.Errorf("%d chunks, want %d", d.Chunks, n)
	}
	if age := time.Since(d.Time); age < 0 || age > time.Minute {
		t.Errorf("dump time %v", d.Time)
	}
	attr, err := tr.Get("devices/mhi0/rddm")
	if err != nil || !strings.Contains(attr, hex.EncodeToString(wantSum[:])) || !strings.HasPrefix(attr, strconv.Itoa(len(want))+" bytes") {
		t.Errorf("rddm attribute %q, %v; want %d bytes sha256 %x", attr, err, len(want), wantSum)
	}
	waitM0(t, m.Controller)

	again, err := c.Dump("mhi0", genl.DumpOptions{})
	if err != nil || !bytes.Equal(again.Data, want) || again.Crashed || !again.Time.Equal(d.Time) {
		t.Fatalf("second read: %d bytes crashed=%v time %v (first %v), %v", len(again.Data), again.Crashed, again.Time, d.Time, err)
	}
	if s := m.Controller.Stats(); s.Dumps != 1 || s.DumpErrors != 0 {
		t.Errorf("controller counted %d dumps, %d dump errors; want 1, 0", s.Dumps, s.DumpErrors)
	}

	_, err = c.Dump("mhi1", genl.DumpOptions{Crash: true})
	t.Log(err)
	if !errors.Is(err, genl.ErrNotSupported) || !strings.Contains(err.Error(), "--rddm-size") {
		t.Errorf("Dump of a device without collection = %v, want ErrNotSupported naming --rddm-size", err)
	}
	// A crash that does not enter RDDM: no dump, counted, and said so.
	_, err = c.Dump("mhi2", genl.DumpOptions{Crash: true, Wait: 10 * time.Second})
	if !errors.Is(err, genl.ErrNoDump) || !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "no RAM dump came") ||
		!strings.Contains(err.Error(), "not RDDM") {
		t.Errorf("Dump --crash of a device without RDDM = %v, want ErrNoDump saying the crash was not into RDDM", err)
	}
	t.Log(err)
	_, err = c.Dump("mhi2", genl.DumpOptions{})
	t.Log(err)
	if !errors.Is(err, genl.ErrNoDump) || !strings.Contains(err.Error(), "its crashes gave no usable dump (stats/mhi/dump_errors: 1)") {
		t.Errorf("Dump of a device whose crash gave no dump = %v", err)
	}
	if _, err := c.Dump("mhi9", genl.DumpOptions{}); !errors.Is(err, genl.ErrNoDevice) {
		t.Errorf("Dump(mhi9) = %v, want ErrNoDevice", err)
	}

	// A suspended device is resumed, then crashed.
	if err := m.Controller.Suspend(); err != nil {
		t.Fatal(err)
	}
	d, err = c.Dump("mhi0", genl.DumpOptions{Crash: true, Wait: 10 * time.Second})
	if err != nil || !bytes.Equal(d.Data, want) || !d.Crashed {
		t.Fatalf("Dump --crash in M3: %d bytes, %v", len(d.Data), err)
	}
	waitM0(t, m.Controller)
	if s := m.Controller.Stats(); s.Dumps != 2 || s.Resumes != 1 {
		t.Errorf("%d dumps, %d resumes after the crash from M3, want 2, 1", s.Dumps, s.Resumes)
	}
	// A device powered down cannot be crashed.
	if err := m2.Controller.PowerDown(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Dump("mhi2", genl.DumpOptions{Crash: true, Wait: time.Second})
	t.Log(err)
	if !errors.Is(err, genl.ErrBusy) || !strings.Contains(err.Error(), "DISABLED") {
		t.Errorf("Dump --crash of a powered-down device = %v, want ErrBusy naming the state", err)
	}
}

// TestGetDumpWire checks the answer's framing without the package's
// client: a summary, then chunks of at most DumpChunkSize bytes at
// consecutive offsets, every message of the request's command.
func TestGetDumpWire(t *testing.T) {
	tr, m, _ := newDumpTree(t)
	srv := startServer(t, tr)
	if _, err := m.Controller.CollectDump(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	gc, err := genl.DialGenetlink(genl.ClientOptions{Port: srv.Port()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if err := gc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	msgs, err := gc.Execute(genetlink.Message{
		Header: genetlink.Header{Command: genl.CmdGetDump, Version: genl.FamilyVersion},
		Data:   mustAttrs(t, func(ae *netlink.AttributeEncoder) { ae.String(genl.AttrDevName, "mhi0") }),
	}, genl.FamilyID, netlink.Request|netlink.Dump)
	if err != nil {
		t.Fatal(err)
	}
	want := ep.DumpPattern(ep.DefaultDumpSize)
	var got []byte
	for i, msg := range msgs {
		if msg.Header.Command != genl.CmdGetDump {
			t.Fatalf("message %d: command %d", i, msg.Header.Command)
		}
		ad, err := netlink.NewAttributeDecoder(msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		attrs := map[uint16][]byte{}
		for ad.Next() {
			attrs[ad.Type()] = ad.Bytes()
		}
		if i == 0 {
			sum := sha256.Sum256(want)
			if genl.NativeUint64(attrs[genl.AttrDumpSize]) != uint64(len(want)) || !bytes.Equal(attrs[genl.AttrDumpSHA256], sum[:]) ||
				string(attrs[genl.AttrDevName]) != "mhi0\x00" || len(attrs[genl.AttrDumpTime]) != 8 {
				t.Fatalf("summary %v", attrs)
			}
			if _, ok := attrs[genl.AttrDumpCrash]; ok {
				t.Error("the summary says this request crashed the device")
			}
			continue
		}
		data := attrs[genl.AttrDumpData]
		if off := genl.NativeUint64(attrs[genl.AttrDumpOffset]); off != uint64(len(got)) || len(data) == 0 || len(data) > genl.DumpChunkSize {
			t.Fatalf("message %d: chunk of %d bytes at offset %d, after %d bytes", i, len(data), off, len(got))
		}
		got = append(got, data...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("chunks reassemble to %d bytes sha256 %x, want %d bytes sha256 %x", len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

// TestGetDumpBadRequests: malformed, oversized and misplaced attributes
// are refused with EINVAL or ERANGE, a message and the attribute's offset,
// before anything happens to the device.
func TestGetDumpBadRequests(t *testing.T) {
	tr, m, _ := newDumpTree(t)
	srv := startServer(t, tr)
	gc, err := genl.DialGenetlink(genl.ClientOptions{Port: srv.Port()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	name := func(ae *netlink.AttributeEncoder) { ae.String(genl.AttrDevName, "mhi0") }
	for _, c := range []struct {
		name   string
		attrs  func(*netlink.AttributeEncoder)
		errno  unix.Errno
		msg    string
		offset bool
	}{
		{"no dev-name", func(ae *netlink.AttributeEncoder) { ae.Flag(genl.AttrDumpCrash, true) }, unix.EINVAL, "get-dump needs the dev-name attribute", false},
		{"crash flag with payload", func(ae *netlink.AttributeEncoder) { name(ae); ae.Uint32(genl.AttrDumpCrash, 1) }, unix.EINVAL, "dump-crash: a flag attribute carries no payload, this one has 4 bytes", true},
		{"wait 0", func(ae *netlink.AttributeEncoder) {
			name(ae)
			ae.Flag(genl.AttrDumpCrash, true)
			ae.Uint32(genl.AttrDumpWaitMs, 0)
		}, unix.ERANGE, "dump-wait-ms: 0 outside the valid range 1..600000", true},
		{"wait too long", func(ae *netlink.AttributeEncoder) {
			name(ae)
			ae.Flag(genl.AttrDumpCrash, true)
			ae.Uint32(genl.AttrDumpWaitMs, 0xffffffff)
		}, unix.ERANGE, "dump-wait-ms: 4294967295 outside the valid range", true},
		{"wait as u64", func(ae *netlink.AttributeEncoder) {
			name(ae)
			ae.Flag(genl.AttrDumpCrash, true)
			ae.Uint64(genl.AttrDumpWaitMs, 5)
		}, unix.EINVAL, "dump-wait-ms: attribute is 8 bytes, want 4", true},
		{"wait without crash", func(ae *netlink.AttributeEncoder) { name(ae); ae.Uint32(genl.AttrDumpWaitMs, 100) }, unix.EINVAL, "dump-wait-ms applies only with dump-crash", true},
		{"data in a request", func(ae *netlink.AttributeEncoder) { name(ae); ae.Bytes(genl.AttrDumpData, make([]byte, 60000)) }, unix.EINVAL, "attribute dump-data is not valid in get-dump requests", true},
		{"offset in a request", func(ae *netlink.AttributeEncoder) { name(ae); ae.Uint64(genl.AttrDumpOffset, 1<<62) }, unix.EINVAL, "attribute dump-offset is not valid in get-dump requests", true},
		{"huge dev-name", func(ae *netlink.AttributeEncoder) { ae.String(genl.AttrDevName, strings.Repeat("m", 60000)) }, unix.ERANGE, "dev-name: 60000 bytes, longer than the 63-byte limit", true},
		{"mru in get-dump", func(ae *netlink.AttributeEncoder) { name(ae); ae.Uint32(genl.AttrMRU, 1500) }, unix.EINVAL, "attribute mru is not valid in get-dump requests", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := gc.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			_, err := gc.Execute(genetlink.Message{
				Header: genetlink.Header{Command: genl.CmdGetDump, Version: genl.FamilyVersion},
				Data:   mustAttrs(t, c.attrs),
			}, genl.FamilyID, netlink.Request|netlink.Dump)
			var oe *netlink.OpError
			if !errors.Is(err, c.errno) || !errors.As(err, &oe) || !strings.Contains(oe.Message, c.msg) {
				t.Fatalf("error %v, want %v with %q", err, c.errno, c.msg)
			}
			if c.offset && oe.Offset < 16+4 {
				t.Errorf("offset %d does not point at an attribute", oe.Offset)
			}
		})
	}
	if s := m.Controller.Stats(); s.Dumps != 0 || s.DumpErrors != 0 {
		t.Errorf("a refused request touched the device: %d dumps, %d dump errors", s.Dumps, s.DumpErrors)
	}
}

// dumpHelperEnv tells the re-executed test binary the port for
// TestHelperDumpClient; dumpHelperSumEnv the dump's expected SHA-256.
const (
	dumpHelperEnv    = "GOMHI_GENL_DUMP_HELPER_PORT"
	dumpHelperSumEnv = "GOMHI_GENL_DUMP_HELPER_SHA256"
)

// TestGetDumpNonRoot: a client of uid 65534 may not read a RAM dump nor
// force a crash (EPERM); with CAP_NET_ADMIN it reads it.
func TestGetDumpNonRoot(t *testing.T) {
	reexec.RequireSetpriv(t)
	tr, m, _ := newDumpTree(t)
	srv := startServer(t, tr)
	dump, err := m.Controller.CollectDump(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitM0(t, m.Controller)
	sum := sha256.Sum256(dump)
	for _, c := range []struct {
		mode string
		caps []string
	}{{"nobody", nil}, {"netadmin", []string{"net_admin"}}} {
		t.Run(c.mode, func(t *testing.T) {
			out, err := reexec.RunTestAs(t, reexec.User{UID: reexec.Nobody, Caps: c.caps}, "TestHelperDumpClient",
				dumpHelperEnv+"="+strconv.FormatUint(uint64(srv.Port()), 10),
				dumpHelperSumEnv+"="+hex.EncodeToString(sum[:]), helperModeEnv+"="+c.mode)
			t.Logf("helper output:\n%s", out)
			if err != nil || !strings.Contains(out, "HELPER-OK") {
				t.Fatalf("helper as uid 65534: %v", err)
			}
		})
	}
	if s := m.Controller.Stats(); s.Dumps != 1 {
		t.Errorf("%d dumps: an unprivileged client forced a crash", s.Dumps)
	}
}

// TestHelperDumpClient is the unprivileged side of TestGetDumpNonRoot;
// TestMain leaves it out of every run that test did not start.
func TestHelperDumpClient(t *testing.T) {
	port, err := strconv.ParseUint(os.Getenv(dumpHelperEnv), 10, 32)
	if err != nil {
		t.Fatal("runs only as the helper process of TestGetDumpNonRoot")
	}
	if os.Getuid() == 0 {
		t.Fatal("helper runs as root")
	}
	c, err := genl.Dial(genl.ClientOptions{Port: uint32(port)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if os.Getenv(helperModeEnv) == "netadmin" {
		d, err := c.Dump("mhi0", genl.DumpOptions{})
		if err != nil || hex.EncodeToString(d.SHA256[:]) != os.Getenv(dumpHelperSumEnv) {
			t.Fatalf("GET_DUMP as uid %d with CAP_NET_ADMIN: %d bytes, %v", os.Getuid(), len(d.Data), err)
		}
		fmt.Printf("GET_DUMP as uid %d with CAP_NET_ADMIN: %d bytes\nHELPER-OK\n", os.Getuid(), len(d.Data))
		return
	}
	for _, crash := range []bool{false, true} {
		_, err := c.Dump("mhi0", genl.DumpOptions{Crash: crash})
		if !errors.Is(err, genl.ErrPermission) || !errors.Is(err, unix.EPERM) ||
			!strings.Contains(err.Error(), "reading a RAM dump (the modem's memory) needs root or CAP_NET_ADMIN") {
			t.Fatalf("GET_DUMP (crash %v) as uid %d: %v, want ErrPermission", crash, os.Getuid(), err)
		}
		fmt.Printf("GET_DUMP (crash %v) as uid %d refused: %v\n", crash, os.Getuid(), err)
	}
	fmt.Println("HELPER-OK")
}

// The YAML spec names get-dump and its attributes with the numbers the
// code uses, and its limits.
func TestSpecDumpNumbers(t *testing.T) {
	spec := readSpec(t)
	if !regexp.MustCompile(`name: get-dump\s+value: ` + strconv.Itoa(int(genl.CmdGetDump)) + `\b`).MatchString(spec) {
		t.Errorf("the spec lacks operation get-dump = %d", genl.CmdGetDump)
	}
	for name, v := range map[string]uint16{
		"dump-crash": genl.AttrDumpCrash, "dump-wait-ms": genl.AttrDumpWaitMs, "dump-size": genl.AttrDumpSize,
		"dump-sha256": genl.AttrDumpSHA256, "dump-time": genl.AttrDumpTime, "dump-offset": genl.AttrDumpOffset,
		"dump-data": genl.AttrDumpData,
	} {
		if !regexp.MustCompile(`name: ` + name + `\s+type: \w+\s+value: ` + strconv.Itoa(int(v)) + `\b`).MatchString(spec) {
			t.Errorf("the spec lacks attribute %s = %d", name, v)
		}
	}
	for name, v := range map[string]int{"dump-wait-ms-max": genl.MaxDumpWaitMs, "dump-chunk-size": genl.DumpChunkSize} {
		if !regexp.MustCompile(`name: ` + name + `\s+value: ` + strconv.Itoa(v) + `\b`).MatchString(spec) {
			t.Errorf("the spec lacks constant %s = %d", name, v)
		}
	}
}

// TestGetDumpLarge: a dump of several MiB (hundreds of datagrams, more
// than the client's receive queue holds at once) arrives whole.
func TestGetDumpLarge(t *testing.T) {
	dump := make([]byte, 3<<20+12345)
	for i := range dump {
		dump[i] = byte(i*131) ^ byte(i>>13)
	}
	m, err := mock.Open(mock.Options{Name: "mhi0", RDDMSize: 4 << 20, Memory: 32 << 20,
		Device: func(c *ep.Config) { c.Boot = ep.BootConfig{RDDM: true, Dump: dump} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", sysfs.Device{Controller: m.Controller, Model: m.Info.Name})
	c := dial(t, startServer(t, tr).Port())
	start := time.Now()
	d, err := c.Dump("mhi0", genl.DumpOptions{Crash: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Data, dump) || d.Chunks != (len(dump)+genl.DumpChunkSize-1)/genl.DumpChunkSize {
		t.Fatalf("%d bytes in %d chunks, want %d bytes", len(d.Data), d.Chunks, len(dump))
	}
	t.Logf("%d bytes in %d chunks, crash and transfer in %v", len(d.Data), d.Chunks, time.Since(start))
	waitM0(t, m.Controller)
}
