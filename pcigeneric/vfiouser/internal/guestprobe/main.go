// Command guestprobe runs inside the Linux-driver test's guest
// (pcigeneric/vfiouser/linux_test.go), where busybox has no tool for what
// it checks:
//
//	guestprobe udp  -name N -to HOST:PORT -count C -size S
//	guestprobe mbim -dev /dev/wwan0mbim0 [-reopens K]
//	guestprobe at   -dev /dev/wwan0at0 [-name P] [-reopens K] [-long]
//	guestprobe qmi  -dev /dev/wwan0qmi0 [-reopens K]
//
// udp sends datagrams to an echo port through the modem's network
// interface and checks each comes back intact. mbim, at and qmi talk to
// the modem's control functions through the character devices Linux's
// mhi_wwan_ctrl creates, with one write(2) per message and one read(2)
// per downlink transfer, and check the answers.
//
// Every check prints one line "CHECK <name> PASS|FAIL <detail>"; the
// control probes end with a "CTRL <kind> key=value…" line counting what
// they did (opens, channel sessions, writes, reads, bytes), which the test
// compares with the modem's counters. The probe exits 1 if a check
// failed.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guestprobe udp|mbim|at|qmi [flags]")
		os.Exit(2)
	}
	var ok bool
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "udp":
		ok = runUDP(args)
	case "mbim":
		ok = runMBIM(args)
	case "at":
		ok = runAT(args)
	case "qmi":
		ok = runQMI(args)
	default:
		fmt.Fprintf(os.Stderr, "guestprobe: unknown command %q\n", cmd)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// check prints the verdict line of one check and reports whether it
// passed.
func check(name string, err error, detail string) bool {
	if err != nil {
		fmt.Printf("CHECK %s FAIL %v; %s\n", name, err, detail)
		return false
	}
	fmt.Printf("CHECK %s PASS %s\n", name, detail)
	return true
}
