package main

import (
	"net"
	"os"
)

// sdNotify tells the service manager about the service's state ("READY=1",
// "STOPPING=1") when it runs under systemd as Type=notify: a datagram to
// the socket $NOTIFY_SOCKET names (a path, or an abstract name starting
// with "@"). Without $NOTIFY_SOCKET it does nothing. The protocol is one
// sendmsg, so no library is used.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
