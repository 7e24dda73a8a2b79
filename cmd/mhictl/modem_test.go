package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/poll"
)

// `mhictl modem serve` in one process, `mhictl modem loopback` in another:
// the host stack drives the mock modem across vfio-user.
func TestModemServeAcrossProcesses(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "modem.sock")
	srv := mhictl("modem", "serve", "--socket", sock, "--model", "foxconn-sdx55")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if srv.ProcessState == nil {
			_ = srv.Process.Kill()
			_ = srv.Wait()
		}
	})
	if !poll.Until(10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatal("the server did not create its socket")
	}
	for i := 0; i < 2; i++ { // the server takes a second client after the first
		out, err := mhictl("modem", "loopback", "--socket", sock, "--count", "200", "--json").Output()
		if err != nil {
			t.Fatalf("loopback %d: %v\n%s", i, err, out)
		}
		var res struct{ Sent, Received, Mismatched, Timeouts int }
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if res.Sent != 200 || res.Received != 200 || res.Mismatched != 0 || res.Timeouts != 0 {
			t.Fatalf("loopback %d across vfio-user: %+v", i, res)
		}
	}
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		// Kill and reap it here: the cleanup must not see it running
		// while this Wait goroutine still is.
		_ = srv.Process.Kill()
		<-done
		t.Fatal("serve did not exit after SIGTERM")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}
