// Package faultsock is the served mock modem's fault socket: 'mhictl
// modem serve --socket PATH' also listens on PATH.faults, where 'mhictl
// modem inject' (and the lab, for a script in its guest) asks the modem to
// fail as a real one does. One request per connection: the fault's name
// on a line; the answer is one line, "ok <what happened>" or "error
// <why>". The socket is 0600 and the peer's credentials are checked: only
// root and the server's user may inject.
package faultsock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// Suffix names the fault socket beside the device socket.
const Suffix = ".faults"

// Path returns the fault socket beside device socket sock (or sock itself
// when it already names one).
func Path(sock string) string {
	if strings.HasSuffix(sock, Suffix) {
		return sock
	}
	return sock + Suffix
}

// Apply applies a fault and says what happened. reply, when the fault
// ends the process, sends the answer first.
type Apply func(fault string, reply func(what string)) (string, error)

// Serve listens on path and applies each request until ctx ends; stop
// closes the socket and removes it.
func Serve(ctx context.Context, path string, apply Apply, log *slog.Logger) (stop func(), err error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("fault socket %s: exists and is not a socket", path)
		}
		_ = os.Remove(path)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("fault socket: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c.(*net.UnixConn), apply, log)
		}
	}()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	return func() {
		ln.Close()
		<-done
		_ = os.Remove(path)
	}, nil
}

// handle answers one request.
func handle(c *net.UnixConn, apply Apply, log *slog.Logger) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if uid, ok := peerUID(c); !ok || (uid != 0 && uid != os.Geteuid()) {
		log.Warn("refuse", "socket", "faults", "peer_uid", uid)
		fmt.Fprintf(c, "error refused: only root and uid %d may inject faults\n", os.Geteuid())
		return
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Fprintf(c, "error reading the request: %v\n", err)
		return
	}
	fault := strings.TrimSpace(line)
	log.Info("inject", "fault", fault)
	what, err := apply(fault, func(what string) {
		fmt.Fprintf(c, "ok %s\n", what)
		c.Close()
	})
	if err != nil {
		log.Warn("inject", "fault", fault, "err", err.Error())
		fmt.Fprintf(c, "error %v\n", err)
		return
	}
	fmt.Fprintf(c, "ok %s\n", what)
}

// peerUID returns the connected peer's uid.
func peerUID(c *net.UnixConn) (int, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, false
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return -1, false
	}
	return int(cred.Uid), true
}

// Request sends fault to the fault socket beside device socket sock and
// returns the modem's answer; the modem's refusal is the error.
func Request(sock, fault string) (string, error) {
	path := Path(sock)
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("the served modem's fault socket: %w (is 'mhictl modem serve --socket %s' running?)", err, strings.TrimSuffix(path, Suffix))
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\n", fault); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("no answer from the served modem: %w", err)
	}
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "ok "); ok {
		return rest, nil
	}
	return "", errors.New(strings.TrimPrefix(line, "error "))
}
