package modem_test

import (
	"context"
	"encoding/binary"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/testenv"
)

// These tests drive several data sessions of the mock modem with Debian's
// mbimcli (libmbim-utils 1.28) and qmicli (libqmi-utils 1.32), through
// the host stack and a raw PTY (bridge_linux_test.go): MBIM session ids
// and QMI clients bound to mux ids.

// mbimFramer cuts MBIM messages by the MessageLength of their header.
func mbimFramer(buf []byte) int {
	if len(buf) < 12 {
		return 0
	}
	n := int(binary.LittleEndian.Uint32(buf[4:]))
	switch {
	case n < 12 || n > 32768:
		return -1
	case n > len(buf):
		return 0
	}
	return n
}

// mbimRig is a mock with the MBIM function behind a PTY.
type mbimRig struct {
	m       *modem.Modem
	f       *modem.MBIM
	path    string
	mbimcli string
}

func newMBIMCLIRig(t *testing.T, mc modem.Config) *mbimRig {
	t.Helper()
	mbimcli := testenv.LookPath(t, "mbimcli", "libmbim-utils")
	m, err := modem.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modem.NewMBIM(m, modem.MBIMOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mock := mockWith(t, "qcom-sdx55m", map[string]ep.Function{modem.MBIMName: f})
	path, _ := newBridge(t, mock.Controller, modem.MBIMName, mbimFramer, nil)
	return &mbimRig{m: m, f: f, path: path, mbimcli: mbimcli}
}

func (r *mbimRig) run(t *testing.T, wantFail bool, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := append([]string{"-d", r.path}, args...)
	out, err := exec.CommandContext(ctx, r.mbimcli, all...).CombinedOutput()
	t.Logf("$ mbimcli %s\n%s", strings.Join(all, " "), out)
	if (err != nil) != wantFail {
		t.Fatalf("mbimcli %s: %v (want failure: %v)", strings.Join(args, " "), err, wantFail)
	}
	return string(out)
}

// TestMBIMCLISessions connects sessions 0 and 1 with mbimcli, each with
// its own APN and addresses, refuses a session beyond the limit and a
// second activation, and disconnects session 1 alone.
func TestMBIMCLISessions(t *testing.T) {
	r := newMBIMCLIRig(t, modem.Config{RequireConnect: true, MaxSessions: 4})
	has(t, r.run(t, false, "--query-device-caps"), `Max sessions: '4'`)
	has(t, r.run(t, false, "--connect=apn=internet"), `Successfully connected`, `Session ID: '0'`, `IP \[0\]: '198\.18\.0\.1/24'`)
	has(t, r.run(t, false, "--connect=session-id=1,apn=ims,ip-type=ipv4v6"), `Successfully connected`, `Session ID: '1'`,
		`IP \[0\]: '198\.18\.1\.1/24'`, `IP \[0\]: 'fd00:6d68:6900:1::1/64'`)
	has(t, r.run(t, false, "--query-ip-configuration=1"), `Gateway: '198\.18\.1\.2'`, `DNS \[0\]: '198\.18\.1\.2'`,
		`Gateway: 'fd00:6d68:6900:1::2'`, `MTU: '1500'`)
	has(t, r.run(t, false, "--query-connection-state=1"), `Activation state: 'activated'`, `IP type: 'ipv4v6'`)
	if s0, s1 := r.m.SessionOf(0), r.m.SessionOf(1); !s0.Active || !s1.Active || s0.APN != "internet" || s1.APN != "ims" ||
		!r.m.SessionAllowed(1) || r.m.SessionAllowed(2) {
		t.Fatalf("sessions %+v", r.m.Sessions())
	}
	has(t, r.run(t, true, "--connect=session-id=4,apn=x"), `MaxActivatedContexts|max-activated-contexts`)
	has(t, r.run(t, true, "--connect=session-id=1,apn=ims"), `MaxActivatedContexts|max-activated-contexts`)
	has(t, r.run(t, false, "--disconnect=1"), `Successfully disconnected`, `Session ID: '1'`, `Activation state: 'deactivated'`)
	if !r.m.SessionOf(0).Active || r.m.SessionOf(1).Active || r.m.SessionAllowed(1) {
		t.Fatalf("after disconnecting 1: %+v", r.m.Sessions())
	}
	has(t, r.run(t, false, "--query-connection-state=0"), `Activation state: 'activated'`)
	if st := r.f.Stats(); st.FunctionErrors != 0 || st.NotSupported != 0 || st.ByStatus["MaxActivatedContexts"] != 2 {
		t.Fatalf("MBIM stats %+v", st)
	}
}

// TestMBIMCLIProxySession1 is the line: 'mbimcli -p
// --connect=session-id=1,apn=ims' through libmbim's mbim-proxy, in fresh
// network and PID namespaces (the proxy's abstract socket is per network
// namespace; the auto-spawned proxy dies with the script).
func TestMBIMCLIProxySession1(t *testing.T) {
	r := newMBIMCLIRig(t, modem.Config{RequireConnect: true})
	testenv.LookPath(t, "/usr/libexec/mbim-proxy", "libmbim-proxy")
	unshare := testenv.LookPath(t, "unshare", "util-linux")
	testenv.NeedRoot(t, "unshare of network and PID namespaces")
	script := `set -e
M="` + r.mbimcli + ` -p -d ` + r.path + `"
$M --connect=session-id=1,apn=ims
$M --query-ip-configuration=1
$M --query-connection-state=0
`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, unshare, "--net", "--pid", "--fork", "--", "sh", "-c", script).CombinedOutput()
	t.Logf("mbimcli -p session 1:\n%s", out)
	if err != nil {
		t.Fatalf("mbimcli -p: %v", err)
	}
	has(t, string(out), `Successfully connected`, `Session ID: '1'`, `IP \[0\]: '198\.18\.1\.1/24'`,
		`Gateway: '198\.18\.1\.2'`, `Activation state: 'deactivated'`)
	if s := r.m.SessionOf(1); !s.Active || s.APN != "ims" || r.m.Session().Active {
		t.Fatalf("sessions %+v", r.m.Sessions())
	}
}

// TestQMICLIBindMux binds WDS clients to mux ids with qmicli (base 112,
// as the SDX72 numbers its sessions) and starts a network on each: mux
// 113 is session 1, with its own addresses, beside session 0 on an
// unbound client; stopping session 1 leaves session 0.
func TestQMICLIBindMux(t *testing.T) {
	r := newQMIRigConfig(t, modem.Config{RequireConnect: true, Identity: qmiTestIdentity, WireBase: 112, MaxSessions: 2}, nil)
	cidOf := func(out string) string {
		t.Helper()
		m := regexp.MustCompile(`CID: '(\d+)'`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no CID in %q", out)
		}
		return m[1]
	}
	out := r.run(t, false, "--wds-start-network=apn=internet,ip-type=4", "--client-no-release-cid")
	cid0 := cidOf(out)
	out = r.run(t, false, "--wds-bind-mux-data-port=mux-id=113,ep-type=pcie,ep-iface-number=2", "--client-no-release-cid")
	cid1 := cidOf(out)
	out = r.run(t, false, "--client-cid="+cid1, "--client-no-release-cid", "--wds-start-network=apn=ims,ip-type=4")
	has(t, out, `Network started`)
	handle := regexp.MustCompile(`Packet data handle: '(\d+)'`).FindStringSubmatch(out)
	if handle == nil {
		t.Fatalf("no handle in %q", out)
	}
	has(t, r.run(t, false, "--client-cid="+cid1, "--client-no-release-cid", "--wds-get-current-settings"),
		`IPv4 address: 198\.18\.1\.1`, `IPv4 gateway address: 198\.18\.1\.2`)
	has(t, r.run(t, false, "--client-cid="+cid0, "--client-no-release-cid", "--wds-get-current-settings"),
		`IPv4 address: 198\.18\.0\.1`)
	if s0, s1 := r.m.SessionOf(0), r.m.SessionOf(1); s0.APN != "internet" || s1.APN != "ims" || !s1.Active {
		t.Fatalf("sessions %+v", r.m.Sessions())
	}
	// Mux 114 is session 2 of 2: refused.
	out = r.run(t, true, "--wds-bind-mux-data-port=mux-id=114,ep-type=pcie,ep-iface-number=2")
	has(t, out, `InvalidArgument`)
	has(t, r.run(t, false, "--client-cid="+cid1, "--wds-stop-network="+handle[1]), `Network stopped`)
	if !r.m.SessionOf(0).Active || r.m.SessionOf(1).Active {
		t.Fatalf("after stopping session 1: %+v", r.m.Sessions())
	}
	has(t, r.run(t, false, "--client-cid="+cid0, "--client-no-release-cid", "--wds-get-packet-service-status"),
		`Connection status: 'connected'`)
}
