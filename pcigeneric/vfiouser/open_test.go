package vfiouser

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
)

// TestOpen: Open finds the model by the served function's IDs and builds a
// controller that powers the served modem up; a second Open after Close
// gets a fresh session.
func TestOpen(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "m.sock")
	dev, err := NewServerDevice(DeviceOptions{Model: "telit-fn990"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ListenAndServe(ctx, sock, dev) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if !poll.Until(5*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatal("no socket")
	}
	for i := range 2 {
		r, err := client.Open(sock, client.OpenOptions{Name: "mhi7"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Info.Name != "telit-fn990" || r.DataPair != ipdata.MBIMName || r.Path != sock {
			t.Errorf("open %d: model %s, pair %s, path %s", i, r.Info.Name, r.DataPair, r.Path)
		}
		if err := r.Controller.PowerUp(); err != nil {
			t.Fatal(err)
		}
		if st, _ := r.Controller.State(); st != wire.StateM0 {
			t.Errorf("open %d: state %s after PowerUp", i, st)
		}
		if _, _, err := r.Controller.ChannelPair(ep.LoopbackName); err != nil {
			t.Errorf("open %d: LOOPBACK pair: %v", i, err)
		}
		if err := r.Close(); err != nil {
			t.Errorf("close %d: %v", i, err)
		}
	}
	if got := dev.Stats().Sessions; got != 2 {
		t.Errorf("%d sessions, want 2", got)
	}
}
