package modem_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/qmi"
	"github.com/gomhi/gomhi/mhi/testenv"
)

// These tests run Debian's qmicli (libqmi-utils 1.32) against the mock
// modem's QMI function, through the host stack and a raw PTY (see
// bridge_linux_test.go), on the qcom-sdx55m channel table (QMI 14/15).

var qmiTestIdentity = modem.Identity{
	Manufacturer: "QUALCOMM INCORPORATED", Model: "SDX55", Firmware: "MPSS.HI.2.0.c3-00186-SDX55_GEN_PACK-1",
	Hardware: "10000", IMEI: "352099001761481", ProviderID: "00101", ProviderName: "gomhi network",
}

// qmiRig is a mock with the QMI function behind a PTY.
type qmiRig struct {
	m      *modem.Modem
	q      *modem.QMI
	path   string
	qmicli string
}

func newQMIRig(t *testing.T, corrupt func([]byte)) *qmiRig {
	t.Helper()
	return newQMIRigConfig(t, modem.Config{RequireConnect: true, Identity: qmiTestIdentity}, corrupt)
}

// newQMIRigConfig is newQMIRig with the modem's configuration.
func newQMIRigConfig(t *testing.T, mc modem.Config, corrupt func([]byte)) *qmiRig {
	t.Helper()
	qmicli := testenv.LookPath(t, "qmicli", "libqmi-utils")
	m, err := modem.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	q, err := modem.NewQMI(m, modem.QMIOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mock := mockWith(t, "qcom-sdx55m", map[string]ep.Function{modem.QMIName: q})
	path, _ := newBridge(t, mock.Controller, modem.QMIName, qmuxFramer, corrupt)
	return &qmiRig{m: m, q: q, path: path, qmicli: qmicli}
}

// run runs qmicli on the PTY and returns its output; fail says whether a
// non-zero exit is expected.
func (r *qmiRig) run(t *testing.T, wantFail bool, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := append([]string{"-d", r.path, "--device-open-qmi"}, args...)
	out, err := exec.CommandContext(ctx, r.qmicli, all...).CombinedOutput()
	t.Logf("$ qmicli %s\n%s", strings.Join(all, " "), out)
	if (err != nil) != wantFail {
		t.Fatalf("qmicli %s: %v (want failure: %v)", strings.Join(args, " "), err, wantFail)
	}
	return string(out)
}

// has checks that out matches every pattern (regular expressions).
func has(t *testing.T, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("output lacks %q", p)
		}
	}
}

func TestQMICLIDirect(t *testing.T) {
	r := newQMIRig(t, nil)
	id := r.m.Identity()
	has(t, r.run(t, false, "--dms-get-ids"), `IMEI: '`+id.IMEI+`'`)
	has(t, r.run(t, false, "--dms-get-manufacturer"), `Manufacturer: '`+id.Manufacturer+`'`)
	has(t, r.run(t, false, "--dms-get-model"), `Model: '`+id.Model+`'`)
	has(t, r.run(t, false, "--dms-get-revision"), `Revision: '`+regexp.QuoteMeta(id.Firmware)+`'`)
	has(t, r.run(t, false, "--dms-get-hardware-revision"), `Revision: '`+id.Hardware+`'`)
	has(t, r.run(t, false, "--dms-get-capabilities"), `Networks: 'umts, lte'`, `SIM: 'supported'`)
	has(t, r.run(t, false, "--device-open-version-info", "--device-open-sync", "--get-service-version-info"),
		`ctl \(1\.5\)`, `wds \(1\.67\)`, `dms \(1\.14\)`, `nas \(1\.25\)`, `wda \(1\.16\)`)
	has(t, r.run(t, false, "--nas-get-serving-system"), `Registration state: 'registered'`, `PS: 'attached'`,
		`\[0\]: 'lte'`, `MCC: '1'`, `MNC: '1'`, `Description: 'gomhi network'`)
	has(t, r.run(t, false, "--nas-get-signal-strength"), `Network 'lte': '-73 dBm'`)
	has(t, r.run(t, false, "--nas-get-signal-info"), `RSRP: '-104 dBm'`)
	has(t, r.run(t, false, "--nas-get-system-info"), `MCC: '001'`, `MNC: '01'`, `Status: 'available'`)
	has(t, r.run(t, false, "--wda-get-data-format=ep-type=pcie,ep-iface-number=0"),
		`Link layer protocol: 'raw-ip'`, `Uplink data aggregation protocol: 'disabled'`, `Downlink data aggregation protocol: 'disabled'`)
	has(t, r.run(t, true, "--dms-get-time"), `InvalidQmiCommand`)
	has(t, r.run(t, true, "--wds-start-network=ip-type=4"), `CallFailed`, `unknown-apn`)

	// The data session: the gate opens on START_NETWORK and closes on
	// STOP_NETWORK.
	if r.m.DataAllowed() {
		t.Fatal("data allowed before START_NETWORK")
	}
	out := r.run(t, false, "--wds-start-network=apn=internet,ip-type=4", "--client-no-release-cid")
	has(t, out, `Network started`)
	handle := regexp.MustCompile(`Packet data handle: '(\d+)'`).FindStringSubmatch(out)
	cid := regexp.MustCompile(`CID: '(\d+)'`).FindStringSubmatch(out)
	if handle == nil || cid == nil {
		t.Fatalf("no handle or CID in %q", out)
	}
	if s := r.m.Session(); !s.Active || fmt.Sprint(s.ID) != handle[1] || s.APN != "internet" || !r.m.DataAllowed() {
		t.Fatalf("after start: session %+v, gate %v, handle %s", s, r.m.DataAllowed(), handle[1])
	}
	has(t, r.run(t, false, "--wds-get-packet-service-status"), `Connection status: 'connected'`)
	a := r.m.Addressing()
	has(t, r.run(t, false, "--wds-get-current-settings"), `IP Family: IPv4`,
		`IPv4 address: `+regexp.QuoteMeta(a.IPv4.Addr().String()), `IPv4 subnet mask: 255\.255\.255\.0`,
		`IPv4 gateway address: `+regexp.QuoteMeta(a.Gateway4.String()), `IPv4 primary DNS: `+regexp.QuoteMeta(a.DNS4[0].String()),
		fmt.Sprintf(`MTU: %d`, a.MTU))
	has(t, r.run(t, false, "--wds-stop-network="+handle[1], "--client-cid="+cid[1]), `Network stopped`)
	if r.m.Session().Active || r.m.DataAllowed() {
		t.Fatalf("after stop: session %+v, gate %v", r.m.Session(), r.m.DataAllowed())
	}
	has(t, r.run(t, false, "--wds-get-packet-service-status"), `Connection status: 'disconnected'`)

	// Operating mode drives the radio.
	r.run(t, false, "--dms-set-operating-mode=low-power")
	if r.m.Radio() {
		t.Fatal("radio on after low-power")
	}
	has(t, r.run(t, false, "--nas-get-serving-system"), `Registration state: 'not-registered'`)
	r.run(t, false, "--dms-set-operating-mode=online")
	has(t, r.run(t, false, "--dms-get-operating-mode"), `Mode: 'online'`)

	st := r.q.Stats()
	t.Logf("QMI stats: %+v", st)
	if st.FramesIn != st.Responses+st.Dropped || st.Dropped != 0 || st.Malformed != 0 || st.ClientsActive != 0 {
		t.Fatalf("stats %+v", st)
	}
	if len(st.Unsupported) != 1 || st.Unsupported[0].Service != "DMS" || st.Unsupported[0].Message != uint16(qmi.DMSGetTime) {
		t.Fatalf("unsupported %+v", st.Unsupported)
	}
}

// TestQMICLIProxy runs the same session through libqmi's qmi-proxy, in a
// fresh network namespace (the proxy's abstract socket is per namespace)
// and PID namespace (so the auto-spawned proxy dies with the script).
func TestQMICLIProxy(t *testing.T) {
	r := newQMIRig(t, nil)
	testenv.LookPath(t, "/usr/libexec/qmi-proxy", "libqmi-proxy")
	unshare := testenv.LookPath(t, "unshare", "util-linux")
	testenv.NeedRoot(t, "unshare of network and PID namespaces")
	script := `set -e
Q="` + r.qmicli + ` -p -d ` + r.path + ` --device-open-qmi"
$Q --dms-get-ids
$Q --dms-get-model
$Q --nas-get-serving-system
out=$($Q --wds-start-network=apn=internet,ip-type=4 --client-no-release-cid)
echo "$out"
handle=$(echo "$out" | sed -n "s/.*Packet data handle: '\([0-9]*\)'.*/\1/p")
cid=$(echo "$out" | sed -n "s/.*CID: '\([0-9]*\)'.*/\1/p")
$Q --wds-get-current-settings
$Q --wds-stop-network=$handle --client-cid=$cid
$Q --wds-get-packet-service-status
`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, unshare, "--net", "--pid", "--fork", "--", "sh", "-c", script).CombinedOutput()
	t.Logf("qmicli -p session:\n%s", out)
	if err != nil {
		t.Fatalf("qmicli -p: %v", err)
	}
	id := r.m.Identity()
	has(t, string(out), `IMEI: '`+id.IMEI+`'`, `Model: '`+id.Model+`'`, `Registration state: 'registered'`,
		`Network started`, `IPv4 address: `+regexp.QuoteMeta(r.m.Addressing().IPv4.Addr().String()),
		`Network stopped`, `Connection status: 'disconnected'`)
	if st := r.m.Stats(); st.Connects != 1 || st.Disconnects != 1 || r.m.DataAllowed() {
		t.Fatalf("modem %+v gate %v", st, r.m.DataAllowed())
	}
	st := r.q.Stats()
	t.Logf("QMI stats: %+v", st)
	if st.FramesIn != st.Responses || st.ClientsActive != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestQMICLIRejectsCorruptReply is the harness's own check: a reply whose
// TLV length is off by one (the bridge corrupts DMS GET_MODEL responses)
// makes libqmi drop it, so qmicli fails.
func TestQMICLIRejectsCorruptReply(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for qmicli's 10 s timeout")
	}
	corrupt := func(b []byte) {
		f, err := qmi.ParseFrame(b)
		if err != nil || f.Service != qmi.DMS || f.Message != qmi.DMSGetModel {
			return
		}
		// The last TLV's length field: grow it by one.
		off := len(b) - len(f.TLVs)
		for tl := f.TLVs; ; {
			_, v, rest, ok, _ := tl.Next()
			if !ok || len(rest) == 0 {
				binary.LittleEndian.PutUint16(b[off+1:], uint16(len(v)+1))
				return
			}
			off += qmi.TLVHeaderLen + len(v)
			tl = rest
		}
	}
	r := newQMIRig(t, corrupt)
	r.run(t, true, "--dms-get-model")
	r.run(t, false, "--dms-get-manufacturer") // other replies pass
}
