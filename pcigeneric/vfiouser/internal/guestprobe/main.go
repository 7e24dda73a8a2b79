// Command guestprobe runs inside the Linux-driver test's guest
// (pcigeneric/vfiouser/linux_test.go): it sends UDP datagrams to an echo
// port through the modem's network interface and checks that each comes
// back intact; with -mbim PATH it sends MBIM OPEN and DEVICE_CAPS on
// Linux's MBIM port (mhi_wwan_ctrl's /dev/wwan0mbim0) and reports the
// answer; with -at PATH it types ATI on an AT port (/dev/wwan0at0). It
// prints one line, "CHECK <name> PASS|FAIL <detail>", and exits 1 on
// failure. The busybox in the guest has no UDP client and no MBIM.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	name := flag.String("name", "udp", "check name")
	addr := flag.String("to", "", "echo server address, host:port")
	count := flag.Int("count", 10, "datagrams to send")
	size := flag.Int("size", 200, "payload bytes per datagram")
	timeout := flag.Duration("timeout", 2*time.Second, "wait for each echo")
	mbimPath := flag.String("mbim", "", "MBIM port to query DEVICE_CAPS on, instead of the UDP check")
	atPath := flag.String("at", "", "AT port to type ATI on, instead of the UDP check")
	flag.Parse()
	if *mbimPath != "" || *atPath != "" {
		ctrlMain(*name, *mbimPath, *atPath, 5*time.Second)
		return
	}
	got, err := probe(*addr, *count, *size, *timeout)
	if err != nil || got != *count {
		fmt.Printf("CHECK %s FAIL %d/%d echoes: %v\n", *name, got, *count, err)
		os.Exit(1)
	}
	fmt.Printf("CHECK %s PASS %d/%d echoes of %d bytes from %s\n", *name, got, *count, *size, *addr)
}

func probe(addr string, count, size int, timeout time.Duration) (int, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	out := make([]byte, size)
	in := make([]byte, size+64)
	got := 0
	for i := 0; i < count; i++ {
		for j := range out {
			out[j] = byte(i*7 + j)
		}
		if _, err := c.Write(out); err != nil {
			return got, err
		}
		if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return got, err
		}
		n, err := c.Read(in)
		if err != nil {
			return got, fmt.Errorf("datagram %d: %w", i, err)
		}
		if !bytes.Equal(in[:n], out) {
			return got, errors.New("echo differs from what was sent")
		}
		got++
	}
	return got, nil
}
