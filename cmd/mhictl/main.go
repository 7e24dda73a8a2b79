// Command mhictl drives gomhi: the MHI host stack, its mock modem and (later)
// real modems. By default every command runs against an embedded mock modem.
package main

import (
	"errors"
	"fmt"
	"os"

	// Before go-fuse's splice package, whose init panics under a low
	// open-file limit: see the package's doc.
	_ "github.com/gomhi/gomhi/cmd/mhictl/internal/fdlimit"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		status := 1
		var es *exitStatusError
		if errors.As(err, &es) {
			// A status set on purpose ('lab run' passes its script's on):
			// printed only when there is something to say.
			status = es.status
			if es.err == nil {
				os.Exit(status)
			}
		}
		prio := ""
		if stderrIsJournal() {
			prio = "<3>" // the journal's error priority
		}
		fmt.Fprintln(os.Stderr, prio+"mhictl:", err)
		os.Exit(status)
	}
}
