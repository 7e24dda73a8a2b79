package ctrlport_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/gomhi/gomhi/mhi/ctrlport"
	"github.com/gomhi/gomhi/mhi/ep/modem"
	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

func TestPairMBIMSession(t *testing.T) {
	mm := startMock(t, modem.Config{RequireConnect: true}, modem.MBIMOptions{})
	pair, err := ctrlport.OpenPair(mm.mock.Controller, "MBIM", ctrlport.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	var mu sync.Mutex
	var inds []uint32
	c := ctrlport.NewMBIMClient(pair, ctrlport.MBIMClientOptions{OnIndication: func(svc mbim.UUID, cid uint32, _ mbim.Info) {
		mu.Lock()
		inds = append(inds, cid)
		mu.Unlock()
	}})
	defer c.Close()
	if _, err := c.DeviceCaps(ctx(t)); !errors.Is(err, ctrlport.ErrFunctionError) {
		t.Fatalf("command before OPEN: %v", err)
	}
	if err := c.Open(ctx(t)); err != nil {
		t.Fatal(err)
	}
	caps, err := c.DeviceCaps(ctx(t))
	if err != nil || caps.DeviceID != testIdentity.IMEI || caps.FirmwareInfo != testIdentity.Firmware {
		t.Fatalf("DEVICE_CAPS %+v %v", caps, err)
	}
	if reg, err := c.RegistrationState(ctx(t)); err != nil || reg.RegisterState != mbim.RegisterStateHome {
		t.Fatalf("REGISTER_STATE %+v %v", reg, err)
	}
	if ps, err := c.Attach(ctx(t)); err != nil || ps.PacketServiceState != mbim.PacketServiceAttached {
		t.Fatalf("attach %+v %v", ps, err)
	}
	if mm.modem.DataAllowed() {
		t.Fatal("data flows before connect")
	}
	ci, err := c.Connect(ctx(t), "internet", mbim.IPTypeIPv4)
	if err != nil || ci.ActivationState != mbim.ActivationStateActivated {
		t.Fatalf("connect %+v %v", ci, err)
	}
	cfg, err := c.IPConfiguration(ctx(t))
	if err != nil || len(cfg.IPv4Addresses) != 1 || cfg.IPv4Addresses[0] != modem.DefaultIPv4 || cfg.IPv4Gateway != modem.DefaultGateway4 ||
		cfg.IPv4MTU != modem.DefaultSessionMTU || len(cfg.IPv6Addresses) != 0 {
		t.Fatalf("IP configuration %+v %v", cfg, err)
	}
	if !mm.modem.DataAllowed() {
		t.Fatal("data gated after connect")
	}
	waitFor(t, "a CONNECT indication", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range inds {
			if c == mbim.CIDConnect {
				return true
			}
		}
		return false
	})
	if ci, err := c.Disconnect(ctx(t)); err != nil || ci.ActivationState != mbim.ActivationStateDeactivated {
		t.Fatalf("disconnect %+v %v", ci, err)
	}
	if mm.modem.DataAllowed() {
		t.Fatal("data flows after disconnect")
	}
	if err := c.CloseSession(ctx(t)); err != nil {
		t.Fatal(err)
	}
	ps, ms := pair.Stats(), mm.mbim.Stats()
	if ps.ULMessages != ms.MessagesIn || ps.DLMessages != ms.MessagesOut {
		t.Fatalf("host sent %d, modem got %d; modem sent %d, host got %d", ps.ULMessages, ms.MessagesIn, ms.MessagesOut, ps.DLMessages)
	}
	if c.Stray() != 0 {
		t.Fatalf("%d stray messages", c.Stray())
	}
}

// A channel reset (the port closed and opened again, as every open of
// /dev/wwan0mbim0 does) keeps the MBIM session open; SYS_ERR recovery
// brings the pair back by itself.
func TestPairResetAndSysErr(t *testing.T) {
	mm := startMock(t, modem.Config{}, modem.MBIMOptions{})
	ctrl := mm.mock.Controller
	pair, err := ctrlport.OpenPair(ctrl, "MBIM", ctrlport.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ctrlport.NewMBIMClient(pair, ctrlport.MBIMClientOptions{})
	if err := c.Open(ctx(t)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := pair.Close(); err != nil {
		t.Fatal(err)
	}
	pair, err = ctrlport.OpenPair(ctrl, "MBIM", ctrlport.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	c = ctrlport.NewMBIMClient(pair, ctrlport.MBIMClientOptions{})
	defer c.Close()
	if _, err := c.DeviceCaps(ctx(t)); err != nil {
		t.Fatalf("after a channel reset: %v", err)
	}
	if err := ctrl.SoCReset(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "recovery", func() bool { return pair.Stats().Recoveries == 1 })
	if _, err := c.DeviceCaps(ctx(t)); err != nil {
		t.Fatalf("after SYS_ERR recovery: %v", err)
	}
	if st := pair.Stats(); st.SysErrs != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Downlink messages larger than the posted buffers arrive over several
// (OVERFLOW) elements and are joined; uplink messages larger than
// MaxControlTransfer are fragmented by the client and reassembled by the
// modem.
func TestPairLargeMessages(t *testing.T) {
	long := "firmware " + string(make([]byte, 3000)) // 6 KB of UTF-16 in the reply
	id := testIdentity
	id.Firmware = long
	mm := startMock(t, modem.Config{Identity: id}, modem.MBIMOptions{})
	pair, err := ctrlport.OpenPair(mm.mock.Controller, "MBIM", ctrlport.PairOptions{DLBufferSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	c := ctrlport.NewMBIMClient(pair, ctrlport.MBIMClientOptions{MaxControlTransfer: 20000})
	defer c.Close()
	if err := c.Open(ctx(t)); err != nil {
		t.Fatal(err)
	}
	caps, err := c.DeviceCaps(ctx(t))
	if err != nil || caps.FirmwareInfo != long {
		t.Fatalf("DEVICE_CAPS: %v (firmware of %d bytes)", err, len(caps.FirmwareInfo))
	}
	if st := pair.Stats(); st.DLChained == 0 {
		t.Fatalf("no chained downlink transfer: %+v", st)
	}
	// A connect request of 9 KB, fragmented at 4096.
	c2 := ctrlport.NewMBIMClient(pair, ctrlport.MBIMClientOptions{FirstTID: 1 << 20})
	defer c2.Close()
	apn := string(make([]byte, 0, 4500))
	for len(apn) < 4500 {
		apn += "a"
	}
	if _, err := c2.Connect(ctx(t), apn, mbim.IPTypeIPv4v6); err != nil {
		t.Fatal(err)
	}
	if s := mm.modem.Session(); !s.Active || s.APN != apn {
		t.Fatalf("session %+v", s)
	}
	if st := mm.mbim.Stats(); st.FragmentsIn < 3 {
		t.Fatalf("modem saw %d fragments", st.FragmentsIn)
	}
	cfg, err := c2.IPConfiguration(ctx(t))
	if err != nil || len(cfg.IPv6Addresses) != 1 || cfg.IPv6Addresses[0] != modem.DefaultIPv6 || cfg.IPv6Gateway != netip.MustParseAddr("fd00:6d68:6900::2") {
		t.Fatalf("%+v %v", cfg, err)
	}
}
