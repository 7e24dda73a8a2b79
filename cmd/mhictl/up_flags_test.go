package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestUpTUNFlagsNeedTUN: the flags that configure the TUN interface are
// refused without --tun (they used to be silently ignored), and --gro is
// refused with --gso=false; before anything starts.
func TestUpTUNFlagsNeedTUN(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gso=false"}, "--gso: flag needs --tun"},
		{[]string{"--gso"}, "--gso: flag needs --tun"},
		{[]string{"--gro=false"}, "--gro: flag needs --tun"},
		{[]string{"--tun-addr", "10.9.0.1/24"}, "--tun-addr: flag needs --tun"},
		{[]string{"--tun", "mhitest0", "--gso=false", "--gro"}, "--gro with --gso=false: mutually exclusive flags"},
	} {
		// In a child: an `up` that wrongly starts runs until killed.
		cmd := mhictl(append([]string{"up", "--netlink-port", testPort(5)}, tc.args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), tc.want) {
				t.Errorf("up %v: %v, want an error with %q:\n%s", tc.args, err, tc.want, &out)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("up %v started:\n%s", tc.args, &out)
		}
	}
}
