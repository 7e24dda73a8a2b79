package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/atterm"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// These tests run `mhictl up` on a mock modem with MBIM control channels
// and drive it with Debian's mbimcli (libmbim-utils) and mbim-proxy
// (libmbim-proxy), directly and through the proxy, and with `mhictl
// connect`/`disconnect`, as root in a network namespace of their own.
// Missing tools skip the tests outside CI and fail them under CI=true
// (testenv).

const mbimProxyBin = "/usr/libexec/mbim-proxy"

func needFile(t *testing.T, path, pkg string) {
	t.Helper()
	_, err := os.Stat(path)
	testenv.Need(t, path+" (Debian package "+pkg+")", err)
}

// mbimcli runs mbimcli with a timeout; it returns the combined output.
func mbimcli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "mbimcli", args...).CombinedOutput()
	t.Logf("$ mbimcli %s\n%s", strings.Join(args, " "), out)
	return string(out), err
}

// mbimQueries runs the queries of the issue and checks the answers carry
// the identity of the table entry the modem impersonates.
func mbimQueries(t *testing.T, dev []string, id modem.Identity) {
	t.Helper()
	for _, c := range []struct {
		arg  string
		want []string
	}{
		{"--query-device-caps", []string{"Device ID: '" + id.IMEI + "'", "Firmware info: '" + id.Firmware + "'",
			"Hardware info: '" + id.Model + " " + id.Hardware + "'", "Data class: 'gprs, edge, umts, hsdpa, hsupa, lte'"}},
		{"--query-subscriber-ready-status", []string{"Ready state: 'initialized'", "Subscriber ID: '" + modem.DefaultIMSI + "'"}},
		{"--query-registration-state", []string{"Register state: 'home'", "Provider ID: '" + modem.DefaultProviderID + "'", "Available data classes: 'lte'"}},
		{"--query-signal-state", []string{"RSSI [0-31,99]: '20'"}},
	} {
		out, err := mbimcli(t, append(append([]string{}, dev...), c.arg)...)
		if err != nil {
			t.Fatalf("mbimcli %s: %v", c.arg, err)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("mbimcli %s: output lacks %q", c.arg, w)
			}
		}
	}
}

// connectOut is `mhictl connect --json`.
type connectOut struct {
	Device, State, Protocol, APN string
	IPType                       string `json:"ip_type"`
	IPv4, Gateway4, IPv6         string
	Gateway6                     string
	DNS4, DNS6                   []string
	MTU                          int
	Interface                    string
}

func mhictlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := mhictl(append(args, "--json")...).CombinedOutput()
	if err != nil {
		t.Fatalf("mhictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("$ mhictl %s --json\n%s", strings.Join(args, " "), out)
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("mhictl %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// localStats reads the counters of mhi0 from the `up` of this namespace.
func localStats(t *testing.T) map[string]uint64 {
	t.Helper()
	var st map[string]uint64
	mhictlJSON(t, &st, "stats", "mhi0")
	return st
}

// pings sends n pings to 198.18.0.2 and returns how many were answered.
func pings(t *testing.T, first uint16, n int) int {
	t.Helper()
	got := 0
	for i := range n {
		if ping(t, first+uint16(i)) {
			got++
		}
	}
	return got
}

// ifaceHas reports whether mhi0 has address a.
func ifaceHas(t *testing.T, a string) bool {
	t.Helper()
	ifc, err := net.InterfaceByName("mhi0")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range addrs {
		if x.String() == a {
			return true
		}
	}
	return false
}

// sessionRound: ping through the TUN fails (gated, counted) before
// `mhictl connect`, passes 5/5 after it, fails again after `mhictl
// disconnect`; the IPv6 address of an ipv4v6 session comes and goes.
func sessionRound(t *testing.T, u *upProc, round int) {
	t.Helper()
	seq := uint16(100 * round)
	before := localStats(t)["modem/ip_dropped_gated"]
	if got := pings(t, seq, 2); got != 0 {
		t.Fatalf("round %d: %d of 2 pings answered before connect", round, got)
	}
	afterGated := localStats(t)["modem/ip_dropped_gated"]
	if afterGated < before+2 {
		t.Errorf("round %d: the mock counted %d gated packets for 2 pings", round, afterGated-before)
	}

	var c connectOut
	mhictlJSON(t, &c, "connect", "mhi0", "--apn", "internet", "--ip-type", "ipv4v6")
	if c.State != "connected" || c.Protocol != "mbim" || c.APN != "internet" || c.IPType != "ipv4v6" ||
		c.IPv4 != "198.18.0.1/24" || c.Gateway4 != "198.18.0.2" || c.IPv6 != "fd00:6d68:6900::1/64" ||
		c.Gateway6 != "fd00:6d68:6900::2" || c.MTU != 1500 || c.Interface != "mhi0" || len(c.DNS4) != 1 || c.DNS4[0] != "198.18.0.2" {
		t.Fatalf("round %d: connect printed %+v", round, c)
	}
	if !ifaceHas(t, "fd00:6d68:6900::1/64") {
		t.Errorf("round %d: mhi0 lacks the session's IPv6 address after connect", round)
	}
	if got := pings(t, seq+10, 5); got != 5 {
		t.Fatalf("round %d: %d of 5 pings answered after connect:\n%s", round, got, u.logText())
	}
	t.Logf("round %d: 5/5 pings after connect", round)
	var s connectOut
	mhictlJSON(t, &s, "get", "mhi0", "session")
	if s.State != "connected" || s.APN != "internet" {
		t.Errorf("round %d: get session %+v", round, s)
	}

	mhictlJSON(t, &s, "disconnect", "mhi0")
	if s.State != "disconnected" || s.IPv4 != "" {
		t.Fatalf("round %d: disconnect printed %+v", round, s)
	}
	if ifaceHas(t, "fd00:6d68:6900::1/64") {
		t.Errorf("round %d: the session's IPv6 address stays after disconnect", round)
	}
	if !ifaceHas(t, "198.18.0.1/24") {
		t.Errorf("round %d: disconnect removed --tun-addr's 198.18.0.1/24", round)
	}
	before = localStats(t)["modem/ip_dropped_gated"]
	if got := pings(t, seq+20, 2); got != 0 {
		t.Fatalf("round %d: %d of 2 pings answered after disconnect", round, got)
	}
	if n := localStats(t)["modem/ip_dropped_gated"]; n < before+2 {
		t.Errorf("round %d: the mock counted %d gated packets after disconnect", round, n-before)
	}
}

// startMBIMProxy runs mbim-proxy in this namespace and stops it, and any
// proxy a client spawned here, at the end of the test (by pid).
func startMBIMProxy(t *testing.T) {
	t.Helper()
	needFile(t, mbimProxyBin, "libmbim-proxy")
	killMBIMProxies(t)
	var log bytes.Buffer
	cmd := exec.Command(mbimProxyBin, "--no-exit", "--verbose")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		killMBIMProxies(t)
		if t.Failed() {
			t.Logf("mbim-proxy log:\n%s", log.String())
		}
	})
	if !poll.Until(5*time.Second, func() bool {
		b, _ := os.ReadFile("/proc/net/unix")
		return bytes.Contains(b, []byte("@mbim-proxy"))
	}) {
		t.Fatal("mbim-proxy did not listen")
	}
}

// killMBIMProxies stops the mbim-proxy processes of this network
// namespace, by pid.
func killMBIMProxies(t *testing.T) {
	self, _ := os.Readlink("/proc/self/ns/net")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if exe == mbimProxyBin && ns == self {
			if p, err := os.FindProcess(pid); err == nil {
				t.Logf("stopping mbim-proxy pid %d", pid)
				_ = p.Kill()
			}
		}
	}
}

var metricsRE = regexp.MustCompile(`metrics at (http://\S+/metrics)`)

func scrape(t *testing.T, u *upProc) string {
	t.Helper()
	m := metricsRE.FindStringSubmatch(u.logText())
	if m == nil {
		t.Fatalf("no metrics address in the up log:\n%s", u.logText())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUpControlMBIM: `mhictl up --require-connect` on the embedded mock of
// an MBIM model: mbimcli's queries answer with the table entry's identity,
// directly and through mbim-proxy; ping crosses the TUN only while a
// session `mhictl connect` made is up; the ports are listed in the tree,
// over netlink and in the metrics; the links go with `up`.
func TestUpControlMBIM(t *testing.T) {
	testenv.LookPath(t, "mbimcli", "libmbim-utils")
	if !inNetns(t) {
		return
	}
	killMBIMProxies(t)
	runDir := filepath.Join(t.TempDir(), "run")
	u := startUp(t, "--model", "telit-fn990", "--require-connect", "--run-dir", runDir)
	link := filepath.Join(runDir, "wwan0mbim0")
	id := mock.Identity(pcigeneric.EntriesFor("telit-fn990")[0])
	if id.Manufacturer != "Telit" || id.Model != "FN990" {
		t.Fatalf("identity %+v", id)
	}

	mbimQueries(t, []string{"-d", link}, id)
	sessionRound(t, u, 1)

	// The ports: the tree (FUSE), netlink, metrics.
	b, err := os.ReadFile(filepath.Join(u.mount, "devices/mhi0/ports/wwan0mbim0"))
	if err != nil || strings.TrimSpace(string(b)) != link {
		t.Errorf("ports/wwan0mbim0 reads %q, %v; want %s", b, err, link)
	}
	var ports []struct {
		Name, Path string
		Stats      map[string]uint64
	}
	mhictlJSON(t, &ports, "get", "mhi0", "ports")
	names := map[string]string{}
	for _, p := range ports {
		names[p.Name] = p.Path
	}
	if len(ports) != 3 || names["wwan0mbim0"] != link || names["wwan0at0"] != filepath.Join(runDir, "wwan0at0") || names["wwan0at1"] == "" {
		t.Errorf("ports %+v", ports)
	}
	for _, p := range ports {
		if p.Name == "wwan0mbim0" && (p.Stats["ul_messages"] < 12 || p.Stats["dl_messages"] < 12 || p.Stats["ul_framing_errors"] != 0) {
			t.Errorf("wwan0mbim0 counters %v", p.Stats)
		}
	}
	if out, err := runCmd(t, mhictl("get", "mhi0", "ports")); err != nil || !strings.Contains(out, "wwan0mbim0") || !strings.Contains(out, "/dev/pts/") {
		t.Errorf("get ports: %v\n%s", err, out)
	} else {
		t.Logf("$ mhictl get mhi0 ports\n%s", out)
	}
	metrics := scrape(t, u)
	for _, want := range []string{
		`mhi_port_ul_messages_total{device="mhi0",port="wwan0mbim0"}`,
		`mhi_session_up{device="mhi0"} 0`,
		`mhi_session_connects_total{device="mhi0"} 1`,
		`mhi_modem_ip_dropped_gated_total{device="mhi0"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// Through mbim-proxy: it holds the MBIM function open; the session
	// runs beside it.
	startMBIMProxy(t)
	mbimQueries(t, []string{"-p", "-d", link}, id)
	sessionRound(t, u, 2)
	if out, err := mbimcli(t, "-p", "-d", link, "--query-connection-state"); err != nil || !strings.Contains(out, "Activation state: 'deactivated'") {
		t.Errorf("connection state through the proxy after disconnect: %v", err)
	}

	st := localStats(t)
	if st["modem/connects"] != 2 || st["modem/disconnects"] != 2 || st["session/connects"] != 2 || st["session/connect_failures"] != 0 {
		t.Errorf("counters: modem connects %d disconnects %d, session connects %d failures %d",
			st["modem/connects"], st["modem/disconnects"], st["session/connects"], st["session/connect_failures"])
	}
	u.stop(t)
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("link %s left behind: %v", link, err)
	}
}

// TestUpControlVFIOUser: the same MBIM queries and `mhictl connect` against
// `mhictl modem serve --require-connect` over vfio-user; the TUN has no
// address until the session gives it one.
func TestUpControlVFIOUser(t *testing.T) {
	testenv.LookPath(t, "mbimcli", "libmbim-utils")
	if !inNetns(t) {
		return
	}
	srv, sock, srvLog := serveModem(t, "--model", "telit-fn990", "--require-connect")
	runDir := filepath.Join(t.TempDir(), "run")
	u := startUp(t, "--vfio-user", sock, "--tun-addr", "", "--run-dir", runDir)
	link := filepath.Join(runDir, "wwan0mbim0")
	mbimQueries(t, []string{"-d", link}, mock.Identity(pcigeneric.EntriesFor("telit-fn990")[0]))
	if ifaceHas(t, "198.18.0.1/24") {
		t.Fatal("mhi0 has an address before connect with --tun-addr \"\"")
	}
	var c connectOut
	mhictlJSON(t, &c, "connect", "mhi0", "--apn", "internet")
	if c.State != "connected" || c.IPType != "ipv4" || c.IPv4 != "198.18.0.1/24" || c.IPv6 != "" || c.Interface != "mhi0" {
		t.Fatalf("connect printed %+v", c)
	}
	if !ifaceHas(t, "198.18.0.1/24") {
		t.Fatal("connect did not give mhi0 the session's address")
	}
	if got := pings(t, 1, 5); got != 5 {
		t.Fatalf("%d of 5 pings answered after connect:\n%s", got, u.logText())
	}
	var s connectOut
	mhictlJSON(t, &s, "disconnect", "mhi0")
	if s.State != "disconnected" || ifaceHas(t, "198.18.0.1/24") {
		t.Fatalf("after disconnect: %+v, address still there: %v", s, ifaceHas(t, "198.18.0.1/24"))
	}
	u.stop(t)
	sigterm(t, srv, srvLog)
	if !strings.Contains(srvLog.String(), "msg=control connects=1 disconnects=1") {
		t.Errorf("the served modem did not count one connect and one disconnect:\n%s", srvLog)
	}
}

// TestUpRequireConnectFlags: --require-connect configures the embedded
// mock; with --vfio-user or --device the serving side decides.
func TestUpRequireConnectFlags(t *testing.T) {
	for _, args := range [][]string{
		{"up", "--vfio-user", "/nonexistent.sock", "--require-connect"},
		{"up", "--device", "0000:01:00.0", "--require-connect"},
	} {
		out, err := run(t, args...)
		if !errors.Is(err, errExclusive) || !strings.Contains(out+fmt.Sprint(err), "--require-connect") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	for _, args := range [][]string{
		{"connect", "mhi0"},
		{"connect", "mhi0", "--apn", "x", "--ip-type", "ipv5"},
	} {
		if out, err := run(t, args...); err == nil {
			t.Errorf("%v accepted:\n%s", args, out)
		}
	}
}

const qmiProxyBin = "/usr/libexec/qmi-proxy"

// qmicli runs qmicli with a timeout; it returns the combined output.
func qmicli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "qmicli", args...).CombinedOutput()
	t.Logf("$ qmicli %s\n%s", strings.Join(args, " "), out)
	return string(out), err
}

// killProxies stops the processes running bin in this network namespace,
// by pid (qmicli -p spawns qmi-proxy, which outlives it).
func killProxies(t *testing.T, bin string) {
	self, _ := os.Readlink("/proc/self/ns/net")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if exe == bin && ns == self {
			if p, err := os.FindProcess(pid); err == nil {
				t.Logf("stopping %s pid %d", bin, pid)
				_ = p.Kill()
			}
		}
	}
}

// qmicliSession: the identity and registration queries, then a call
// qmicli starts opens the mock's gate (ping 5/5) and stopping it closes
// it again.
func qmicliSession(t *testing.T, dev []string, id modem.Identity, seq uint16) {
	t.Helper()
	q := func(args ...string) string {
		t.Helper()
		out, err := qmicli(t, append(append([]string{}, dev...), args...)...)
		if err != nil {
			t.Fatalf("qmicli %s: %v", args[0], err)
		}
		return out
	}
	for _, c := range []struct {
		arg  string
		want []string
	}{
		{"--dms-get-ids", []string{"IMEI: '" + id.IMEI + "'"}},
		{"--dms-get-revision", []string{"Revision: '" + id.Firmware + "'"}},
		{"--dms-get-model", []string{"Model: '" + id.Model + "'"}},
		{"--nas-get-serving-system", []string{"Registration state: 'registered'", "PS: 'attached'"}},
	} {
		out := q(c.arg)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("qmicli %s: output lacks %q", c.arg, w)
			}
		}
	}
	if got := pings(t, seq, 2); got != 0 {
		t.Fatalf("%d of 2 pings answered before --wds-start-network", got)
	}
	out := q("--wds-start-network=apn=internet,ip-type=4", "--client-no-release-cid")
	handle := regexp.MustCompile(`Packet data handle: '(\d+)'`).FindStringSubmatch(out)
	cid := regexp.MustCompile(`CID: '(\d+)'`).FindStringSubmatch(out)
	if !strings.Contains(out, "Network started") || handle == nil || cid == nil {
		t.Fatalf("--wds-start-network: no handle or CID in %q", out)
	}
	if got := pings(t, seq+10, 5); got != 5 {
		t.Fatalf("%d of 5 pings answered with qmicli's call up", got)
	}
	t.Logf("qmicli's call: 5/5 pings")
	if out := q("--wds-get-current-settings", "--client-cid="+cid[1], "--client-no-release-cid"); !strings.Contains(out, "IPv4 address: 198.18.0.1") {
		t.Errorf("--wds-get-current-settings lacks the address")
	}
	if out := q("--wds-stop-network="+handle[1], "--client-cid="+cid[1]); !strings.Contains(out, "Network stopped") {
		t.Errorf("--wds-stop-network: %q", out)
	}
	if got := pings(t, seq+20, 2); got != 0 {
		t.Fatalf("%d of 2 pings answered after --wds-stop-network", got)
	}
}

// TestUpControlQMI: on the embedded mock of qcom-sdx55m (MBIM and QMI),
// Debian's qmicli answers on wwan0qmi0, directly and through qmi-proxy,
// and the call it starts is the modem's session (the gate opens and
// closes with it).
func TestUpControlQMI(t *testing.T) {
	testenv.LookPath(t, "qmicli", "libqmi-utils")
	if !inNetns(t) {
		return
	}
	killProxies(t, qmiProxyBin)
	t.Cleanup(func() { killProxies(t, qmiProxyBin) })
	runDir := filepath.Join(t.TempDir(), "run")
	startUp(t, "--model", "qcom-sdx55m", "--require-connect", "--run-dir", runDir)
	link := filepath.Join(runDir, "wwan0qmi0")
	id := mock.Identity(pcigeneric.EntriesFor("qcom-sdx55m")[0])
	// A PTY has no /sys/class/wwan type: qmicli needs --device-open-qmi.
	qmicliSession(t, []string{"-d", link, "--device-open-qmi"}, id, 300)
	needFile(t, qmiProxyBin, "libqmi-proxy")
	qmicliSession(t, []string{"-p", "-d", link, "--device-open-qmi"}, id, 400)
	st := localStats(t)
	if st["modem/qmi_frames_in"] == 0 || st["modem/qmi_malformed"] != 0 || st["modem/connects"] != 2 || st["modem/disconnects"] != 2 {
		t.Errorf("modem counters: qmi_frames_in %d, qmi_malformed %d, connects %d, disconnects %d",
			st["modem/qmi_frames_in"], st["modem/qmi_malformed"], st["modem/connects"], st["modem/disconnects"])
	}
}

// TestUpControlQMIConnect: `mhictl connect` on a model whose only control
// channel is QMI (telit-fn920c04) drives the session over QMI: a dual-stack
// session is two WDS calls; ping 5/5, then nothing after disconnect.
func TestUpControlQMIConnect(t *testing.T) {
	if !inNetns(t) {
		return
	}
	runDir := filepath.Join(t.TempDir(), "run")
	u := startUp(t, "--model", "telit-fn920c04", "--require-connect", "--run-dir", runDir)
	if !strings.Contains(u.logText(), "data session over QMI") {
		t.Fatalf("up does not drive the session over QMI:\n%s", u.logText())
	}
	if got := pings(t, 500, 2); got != 0 {
		t.Fatalf("%d of 2 pings answered before connect", got)
	}
	var c connectOut
	mhictlJSON(t, &c, "connect", "mhi0", "--apn", "internet", "--ip-type", "ipv4v6")
	if c.State != "connected" || c.Protocol != "qmi" || c.IPv4 != "198.18.0.1/24" || c.Gateway4 != "198.18.0.2" ||
		c.IPv6 != "fd00:6d68:6900::1/64" || c.MTU != 1500 || c.Interface != "mhi0" {
		t.Fatalf("connect printed %+v", c)
	}
	if got := pings(t, 510, 5); got != 5 {
		t.Fatalf("%d of 5 pings answered after connect:\n%s", got, u.logText())
	}
	var s connectOut
	mhictlJSON(t, &s, "disconnect", "mhi0")
	if s.State != "disconnected" {
		t.Fatalf("disconnect printed %+v", s)
	}
	if got := pings(t, 520, 2); got != 0 {
		t.Fatalf("%d of 2 pings answered after disconnect", got)
	}
	st := localStats(t)
	if st["modem/connects"] != 1 || st["modem/disconnects"] != 1 || st["modem/qmi_clients_active"] != 0 || st["modem/ip_dropped_gated"] < 4 {
		t.Errorf("modem counters: connects %d, disconnects %d, qmi clients active %d, gated %d",
			st["modem/connects"], st["modem/disconnects"], st["modem/qmi_clients_active"], st["modem/ip_dropped_gated"])
	}
}

// TestUpControlAT: ATI on the AT ports of `mhictl up` (telit-fn990: DUN
// and DUN2) answers with the model's strings, opened as a terminal
// program opens them.
func TestUpControlAT(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	cmd := mhictl("up", "--model", "telit-fn990", "--netlink-port", testPort(7), "--run-dir", runDir)
	l := startProc(t, cmd, "ready")
	id := mock.Identity(pcigeneric.EntriesFor("telit-fn990")[0])
	for _, name := range []string{"wwan0at0", "wwan0at1"} {
		term, err := os.OpenFile(filepath.Join(runDir, name), os.O_RDWR|syscall.O_NOCTTY, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := atterm.Converse(t, term, "ATI\r")
		want := "ATI\r\r\n" + id.Manufacturer + "\r\n" + id.Model + "\r\nRevision: " + id.Firmware + "\r\n\r\nOK\r\n"
		if got != want {
			t.Errorf("%s: ATI answered %q, want %q", name, got, want)
		}
		if got := atterm.Converse(t, term, "AT+CGSN\r"); !strings.Contains(got, id.IMEI) {
			t.Errorf("%s: AT+CGSN answered %q, want the IMEI %s", name, got, id.IMEI)
		}
		if got := atterm.Converse(t, term, "AT+NOSUCH\r"); !strings.HasSuffix(got, "ERROR\r\n") {
			t.Errorf("%s: an unknown command answered %q", name, got)
		}
		t.Logf("%s: ATI answered %q", name, got)
		_ = term.Close()
	}
	st := statsOf(t, testPort(7))
	if st["modem/at_lines"] != 6 || st["modem/at_ok"] != 4 || st["modem/at_errors"] != 2 {
		t.Errorf("AT counters: lines %d ok %d errors %d", st["modem/at_lines"], st["modem/at_ok"], st["modem/at_errors"])
	}
	sigterm(t, cmd, l)
}
