// Command mhictl drives gomhi: the MHI host stack, its mock modem and (later)
// real modems. By default every command runs against an embedded mock modem.
package main

import (
	"fmt"
	"os"

	// Before go-fuse's splice package, whose init panics under a low
	// open-file limit: see the package's doc.
	_ "github.com/gomhi/gomhi/cmd/mhictl/internal/fdlimit"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		prio := ""
		if stderrIsJournal() {
			prio = "<3>" // the journal's error priority
		}
		fmt.Fprintln(os.Stderr, prio+"mhictl:", err)
		os.Exit(1)
	}
}
