package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gomhi/gomhi/mhi/proto/mbim"
)

// readWithin reads one chunk from f (a wwan port: one read is one
// transfer), failing after d.
func readWithin(f *os.File, buf []byte, d time.Duration) (int, error) {
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := f.Read(buf)
		ch <- res{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-time.After(d):
		return 0, fmt.Errorf("no answer within %v", d)
	}
}

// mbimProbe sends OPEN and a DEVICE_CAPS query on Linux's MBIM port and
// returns the capabilities the modem reported.
func mbimProbe(path string, timeout time.Duration) (mbim.DeviceCaps, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return mbim.DeviceCaps{}, err
	}
	defer f.Close()
	buf := make([]byte, 32768)
	// await reads until a message with the TID arrives (indications and
	// other transactions are skipped).
	await := func(tid uint32) (mbim.Message, error) {
		deadline := time.Now().Add(timeout)
		for {
			n, err := readWithin(f, buf, time.Until(deadline))
			if err != nil {
				return mbim.Message{}, err
			}
			m, err := mbim.ParseMessage(buf[:n])
			if err != nil {
				return m, fmt.Errorf("unreadable reply (%d bytes): %w", n, err)
			}
			if m.TID == tid {
				return m, nil
			}
		}
	}
	if _, err := f.Write(mbim.AppendOpen(nil, 1, 4096)); err != nil {
		return mbim.DeviceCaps{}, fmt.Errorf("OPEN: %w", err)
	}
	m, err := await(1)
	if err != nil {
		return mbim.DeviceCaps{}, fmt.Errorf("OPEN: %w", err)
	}
	if m.Type != mbim.TypeOpenDone || m.DoneStatus() != mbim.StatusSuccess {
		return mbim.DeviceCaps{}, fmt.Errorf("OPEN answered %s status %s", m.Type, m.DoneStatus())
	}
	if _, err := f.Write(mbim.AppendCommand(nil, 2, mbim.ServiceBasicConnect, mbim.CIDDeviceCaps, mbim.CommandQuery, nil)); err != nil {
		return mbim.DeviceCaps{}, fmt.Errorf("DEVICE_CAPS: %w", err)
	}
	m, err = await(2)
	if err != nil {
		return mbim.DeviceCaps{}, fmt.Errorf("DEVICE_CAPS: %w", err)
	}
	if m.Type != mbim.TypeCommandDone || m.Status != mbim.StatusSuccess || m.CID != mbim.CIDDeviceCaps {
		return mbim.DeviceCaps{}, fmt.Errorf("DEVICE_CAPS answered %s CID %d status %s", m.Type, m.CID, m.Status)
	}
	caps, err := mbim.ParseDeviceCaps(m.Info)
	if err != nil {
		return caps, err
	}
	_, _ = f.Write(mbim.AppendClose(nil, 3))
	_, _ = await(3)
	return caps, nil
}

// atProbe types a command line on Linux's AT port and returns the answer
// up to the final result code.
func atProbe(path, line string, timeout time.Duration) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write([]byte(line + "\r")); err != nil {
		return "", err
	}
	var got []byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(timeout)
	for {
		n, err := readWithin(f, buf, time.Until(deadline))
		if err != nil {
			return string(got), err
		}
		got = append(got, buf[:n]...)
		if bytes.HasSuffix(got, []byte("OK\r\n")) || bytes.HasSuffix(got, []byte("ERROR\r\n")) {
			return string(got), nil
		}
	}
}

// ctrlMain runs the -mbim or -at check and prints its CHECK line.
func ctrlMain(name, mbimPath, atPath string, timeout time.Duration) {
	if mbimPath != "" {
		caps, err := mbimProbe(mbimPath, timeout)
		if err != nil {
			fmt.Printf("CHECK %s FAIL %s: %v\n", name, mbimPath, err)
			os.Exit(1)
		}
		fmt.Printf("CHECK %s PASS device-id=%q firmware=%q hardware=%q on %s\n", name, caps.DeviceID, caps.FirmwareInfo, caps.HardwareInfo, mbimPath)
		return
	}
	out, err := atProbe(atPath, "ATI", timeout)
	line := strings.ReplaceAll(strings.ReplaceAll(out, "\r", `\r`), "\n", `\n`)
	if err != nil || !strings.HasSuffix(out, "OK\r\n") {
		fmt.Printf("CHECK %s FAIL %s: %s: %v\n", name, atPath, line, err)
		os.Exit(1)
	}
	fmt.Printf("CHECK %s PASS ATI answered %s on %s\n", name, line, atPath)
}
