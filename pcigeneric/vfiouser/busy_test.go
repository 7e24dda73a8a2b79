package vfiouser

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
)

// TestListenAndServeBusy: a client that connects while another is served
// is refused at once (after busyGrace) with ErrBusy, not left to time out
// unanswered; one that connects right after the last one left is served.
func TestListenAndServeBusy(t *testing.T) {
	dev := newDevice(t)
	path := filepath.Join(t.TempDir(), "vu.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ListenAndServe(ctx, path, dev) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(5 * time.Second):
			t.Error("ListenAndServe did not return")
		}
	}()
	var first *client.Transport
	if err := poll.UntilNil(time.Second, func() (err error) {
		first, err = client.Dial(path, client.Options{Memory: 1 << 20})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	const timeout = 4 * busyGrace
	start := time.Now()
	second, err := client.Dial(path, client.Options{Memory: 1 << 20, Timeout: timeout})
	took := time.Since(start)
	if err == nil {
		_ = second.Close()
		t.Fatal("a second client was served while the first is")
	}
	if !errors.Is(err, protocol.ErrBusy) || errors.Is(err, protocol.ErrTimeout) || took >= timeout {
		t.Fatalf("second client: %v after %v; want ErrBusy within %v", err, took, timeout)
	}
	t.Logf("second client: %v after %v", err, took)

	// The first leaves; the next client, right behind it, is served.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third, err := client.Dial(path, client.Options{Memory: 1 << 20, Timeout: timeout})
	if err != nil {
		t.Fatalf("client after the first left: %v", err)
	}
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if s := dev.Stats(); s.Sessions != 2 {
		t.Fatalf("sessions %d, want 2", s.Sessions)
	}
}
