package vfiouser

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep/quirk"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
)

// TestQuirkServed: every session of a served modem reproduces the quirks
// it is given, the ones acting on the running modem included: a served
// modem that crashes on connect has its device handed to the quirk.
func TestQuirkServed(t *testing.T) {
	set, err := quirk.Parse("no-m3,crash-on-connect,mtu-1400")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "m.sock")
	dev, err := NewServerDevice(DeviceOptions{Model: "telit-fn990", Quirks: set})
	if err != nil {
		t.Fatal(err)
	}
	listen(t, sock, dev)
	r, err := client.Open(sock, client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	fns := dev.Functions()
	if fns == nil || fns.Modem.Addressing().MTU != 1400 || fns.IPData.Config().NetworkMTU != 1400 {
		t.Fatalf("the served modem's MTU is not the quirk's")
	}
	_ = r.Controller.SetTimeout(200 * time.Millisecond)
	if err := r.Controller.Suspend(); !errors.Is(err, mhi.ErrTimeout) {
		t.Fatalf("suspend of the served no-m3 modem: %v", err)
	}
	// The crash quirk got the session's device: a connect crashes it.
	if _, err := fns.Modem.Connect("internet", 0); err == nil {
		t.Fatal("the first connect succeeded")
	}
	poll.Wait(t, 10*time.Second, func() bool { return r.Controller.Stats().SysErrs > 0 },
		func() string { return "no SYS_ERR after the crash on connect" })
}
