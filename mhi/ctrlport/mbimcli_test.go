package ctrlport_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/reexec"
)

// These tests run Debian's mbimcli (package libmbim-utils) and mbim-proxy
// (libmbim-proxy) against a ctrlport.Port on the mock modem. Outside CI
// they skip when the tools are missing; under CI=true they fail.

const mbimProxyPath = "/usr/libexec/mbim-proxy"

// mbimcli runs mbimcli with a timeout and returns its combined output.
func mbimcli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, "mbimcli", args...)
	out, err := cmd.CombinedOutput()
	t.Logf("$ mbimcli %s\n%s", strings.Join(args, " "), out)
	return string(out), err
}

// mbimcliSession is the sequence of the issue: every query, a connect,
// the IP configuration and a disconnect, each answered as the mock's
// state says.
func mbimcliSession(t *testing.T, mm *mockModem, dev []string) {
	t.Helper()
	id := testIdentity
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--query-device-caps"}, []string{"Device ID: '" + id.IMEI + "'", "Firmware info: '" + id.Firmware + "'",
			"Hardware info: '" + id.Model + " " + id.Hardware + "'", "Data class: 'gprs, edge, umts, hsdpa, hsupa, lte'", "Cellular class: 'gsm'"}},
		{[]string{"--query-subscriber-ready-status"}, []string{"Ready state: 'initialized'", "Subscriber ID: '" + id.IMSI + "'", "SIM ICCID: '" + id.ICCID + "'"}},
		{[]string{"--query-registration-state"}, []string{"Register state: 'home'", "Available data classes: 'lte'", "Provider ID: '" + id.ProviderID + "'", "Provider name: '" + id.ProviderName + "'"}},
		{[]string{"--query-signal-state"}, []string{"RSSI [0-31,99]: '20'"}},
		{[]string{"--query-radio-state"}, []string{"Hardware radio state: 'on'", "Software radio state: 'on'"}},
		{[]string{"--query-packet-service-state"}, []string{"Packet service state: 'attached'"}},
		{[]string{"--query-device-services"}, []string{"Service: 'basic-connect'", "connect (12)", "ip-configuration (15)"}},
		{[]string{"--query-pin-state"}, []string{"PIN state: 'unlocked'"}},
		{[]string{"--query-home-provider"}, []string{"Provider ID: '" + id.ProviderID + "'"}},
		{[]string{"--connect=apn=internet"}, []string{"Successfully connected", "Activation state: 'activated'", "IP [0]: '198.18.0.1/24'"}},
		{[]string{"--query-ip-configuration"}, []string{"IPv4 configuration available: 'address, gateway, dns, mtu'",
			"IP [0]: '198.18.0.1/24'", "Gateway: '198.18.0.2'", "DNS [0]: '198.18.0.2'", "MTU: '1500'"}},
		{[]string{"--query-connection-state"}, []string{"Activation state: 'activated'", "IP type: 'ipv4'"}},
		{[]string{"--disconnect"}, []string{"Successfully disconnected", "Activation state: 'deactivated'"}},
		{[]string{"--connect=access-string=internet,ip-type=ipv4v6"}, []string{"Successfully connected", "IP type: 'ipv4v6'", "IP [0]: 'fd00:6d68:6900::1/64'"}},
		{[]string{"--disconnect"}, []string{"Successfully disconnected"}},
	} {
		out, err := mbimcli(t, append(append([]string{}, dev...), c.args...)...)
		if err != nil {
			t.Fatalf("mbimcli %s: %v", c.args[0], err)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("mbimcli %s: output lacks %q", c.args[0], w)
			}
		}
		if c.args[0] == "--query-connection-state" && !mm.modem.DataAllowed() {
			t.Error("the modem gates data while mbimcli says connected")
		}
	}
	if mm.modem.DataAllowed() {
		t.Error("data flows after mbimcli --disconnect")
	}
	if st := mm.modem.Stats(); st.Connects != 2 || st.Disconnects != 2 {
		t.Errorf("modem stats %+v", st)
	}
}

func newToolPort(t *testing.T, mc modem.Config, mo modem.MBIMOptions) (*mockModem, *ctrlport.Port) {
	t.Helper()
	mc.RequireConnect = true
	mm := startMock(t, mc, mo)
	p := openPort(t, mm, ctrlport.Options{Link: filepath.Join(t.TempDir(), "wwan0mbim0")})
	return mm, p
}

func TestMbimcliDirect(t *testing.T) {
	testenv.LookPath(t, "mbimcli", "libmbim-utils")
	mm, p := newToolPort(t, modem.Config{}, modem.MBIMOptions{})
	mbimcliSession(t, mm, []string{"-d", p.Link()})
	st := mm.mbim.Stats()
	t.Logf("modem: %+v\nport: %+v", st, p.Stats())
	if st.FunctionErrors != 0 || st.NotSupported != 0 || st.Opens != st.Closes || st.Opens < 15 {
		t.Errorf("modem stats %+v", st)
	}
}

// A client killed while its transaction is in flight leaves an answer
// nobody reads; the next client works.
func TestMbimcliKilledMidTransaction(t *testing.T) {
	testenv.LookPath(t, "mbimcli", "libmbim-utils")
	hold := make(chan struct{})
	var once sync.Once
	held := make(chan struct{})
	mm, p := newToolPort(t, modem.Config{}, modem.MBIMOptions{Mangle: func(msg []byte) {
		if isCommandDone(msg, mbim.CIDDeviceCaps) {
			once.Do(func() { close(held); <-hold })
		}
	}})
	cmd := exec.Command("mbimcli", "-d", p.Link(), "--query-device-caps")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("mbimcli's DEVICE_CAPS never reached the modem")
	}
	cmd.Process.Kill()
	cmd.Wait()
	close(hold) // the answer goes out now, to nobody
	waitFor(t, "the orphan answer", func() bool { return mm.mbim.Stats().CommandsOK >= 1 })
	out, err := mbimcli(t, "-d", p.Link(), "--query-device-caps")
	if err != nil || !strings.Contains(out, testIdentity.IMEI) {
		t.Fatalf("the next client: %v", err)
	}
	t.Logf("port: %+v", p.Stats())
}

func isCommandDone(msg []byte, cid uint32) bool {
	m, err := mbim.ParseMessage(msg)
	return err == nil && m.Type == mbim.TypeCommandDone && m.CurrentFragment == 0 && m.CID == cid
}

// Broken on purpose: a modem that answers with the wrong transaction id
// must make mbimcli fail (libmbim matches replies by TID).
func TestMbimcliWrongTIDFails(t *testing.T) {
	testenv.LookPath(t, "mbimcli", "libmbim-utils")
	_, p := newToolPort(t, modem.Config{}, modem.MBIMOptions{Mangle: func(msg []byte) {
		if isCommandDone(msg, mbim.CIDSignalState) {
			binary.LittleEndian.PutUint32(msg[8:], binary.LittleEndian.Uint32(msg[8:])+1000)
		}
	}})
	out, err := mbimcli(t, "-d", p.Link(), "--query-signal-state")
	if err == nil || strings.Contains(out, "RSSI") {
		t.Fatal("mbimcli accepted a reply with the wrong transaction id")
	}
	if out, err := mbimcli(t, "-d", p.Link(), "--query-radio-state"); err != nil || !strings.Contains(out, "Software radio state: 'on'") {
		t.Fatalf("an unmangled command after that: %v", err)
	}
}

// ---- through mbim-proxy, in a network namespace of our own ----

// inNetns re-runs the test in a fresh network namespace (mbim-proxy's
// abstract socket is per namespace) and reports whether the caller is
// already there.
func inNetns(t *testing.T) bool {
	t.Helper()
	return reexec.InNetns(t, func(t *testing.T) {
		testenv.NeedRoot(t, "network namespaces; mbim-proxy serves uid 0 only")
		testenv.LookPath(t, "unshare", "util-linux")
	})
}

// startProxy runs mbim-proxy in this namespace and, at the end of the
// test, stops it and any proxy a client spawned here (by pid, after
// checking it lives in this namespace).
func startProxy(t *testing.T) {
	t.Helper()
	_, err := os.Stat(mbimProxyPath)
	testenv.Need(t, "mbim-proxy (Debian's libmbim-proxy)", err)
	var log bytes.Buffer
	cmd := exec.Command(mbimProxyPath, "--no-exit", "--verbose")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		killProxiesInNetns(t)
		if t.Failed() {
			t.Logf("mbim-proxy log:\n%s", log.String())
		}
	})
	waitFor(t, "mbim-proxy's socket", func() bool {
		b, _ := os.ReadFile("/proc/net/unix")
		return bytes.Contains(b, []byte("@mbim-proxy"))
	})
}

func killProxiesInNetns(t *testing.T) {
	self, _ := os.Readlink("/proc/self/ns/net")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if exe == mbimProxyPath && ns == self {
			if p, err := os.FindProcess(pid); err == nil {
				t.Logf("stopping mbim-proxy pid %d", pid)
				p.Kill()
			}
		}
	}
}

func TestMbimcliProxy(t *testing.T) {
	testenv.LookPath(t, "mbimcli", "libmbim-utils")
	if !inNetns(t) {
		return
	}
	startProxy(t)
	mm, p := newToolPort(t, modem.Config{}, modem.MBIMOptions{})
	mbimcliSession(t, mm, []string{"-p", "-d", p.Link()})

	// Two clients side by side, several rounds.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i, q := range []struct{ arg, want string }{
		{"--query-signal-state", "RSSI"}, {"--query-device-caps", testIdentity.IMEI},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 4 {
				out, err := mbimcli(t, "-p", "-d", p.Link(), q.arg)
				if err != nil || !strings.Contains(out, q.want) {
					errs <- fmt.Errorf("client %d round %d %s: %v", i, r, q.arg, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// A proxy client killed mid-transaction; then another one.
	hold := make(chan struct{})
	held := make(chan struct{})
	var once sync.Once
	mm2, p2 := newToolPort(t, modem.Config{}, modem.MBIMOptions{Mangle: func(msg []byte) {
		if isCommandDone(msg, mbim.CIDHomeProvider) {
			once.Do(func() { close(held); <-hold })
		}
	}})
	cmd := exec.Command("mbimcli", "-p", "-d", p2.Link(), "--query-home-provider")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("HOME_PROVIDER never reached the modem")
	}
	cmd.Process.Kill()
	cmd.Wait()
	close(hold)
	out, err := mbimcli(t, "-p", "-d", p2.Link(), "--query-home-provider")
	if err != nil || !strings.Contains(out, "Provider name: '"+testIdentity.ProviderName+"'") {
		t.Fatalf("the next proxy client: %v", err)
	}
	st := mm.mbim.Stats()
	t.Logf("modem: %+v\nport: %+v\nsecond modem: %+v", st, p.Stats(), mm2.mbim.Stats())
	if st.FunctionErrors != 0 || st.Opens == 0 {
		t.Errorf("modem stats %+v", st)
	}
}
