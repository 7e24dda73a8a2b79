package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"time"
)

// runUDP is the udp command: datagrams to an echo port, each checked on
// its way back.
func runUDP(args []string) bool {
	fs := flag.NewFlagSet("udp", flag.ExitOnError)
	name := fs.String("name", "udp", "check name")
	addr := fs.String("to", "", "echo server address, host:port")
	count := fs.Int("count", 10, "datagrams to send")
	size := fs.Int("size", 200, "payload bytes per datagram")
	timeout := fs.Duration("timeout", 2*time.Second, "wait for each echo")
	_ = fs.Parse(args)
	got, err := probeUDP(*addr, *count, *size, *timeout)
	if err == nil && got != *count {
		err = fmt.Errorf("%d of %d echoes", got, *count)
	}
	return check(*name, err, fmt.Sprintf("%d/%d echoes of %d bytes from %s", got, *count, *size, *addr))
}

func probeUDP(addr string, count, size int, timeout time.Duration) (int, error) {
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
