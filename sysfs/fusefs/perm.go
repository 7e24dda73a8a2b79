package fusefs

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Who may write: every attribute belongs to root (uid 0, gid 0) and no
// mode gives group or others write access, so only root may change
// anything. The kernel enforces the mode bits itself (the mount always has
// default_permissions), and without the allow_other option (Options.
// AllowOther, off in `mhictl up`) it lets no other user into the mount at
// all. mayWrite repeats the rule in the server, so that it holds even if
// the mount options were changed: a write open needs the caller's fsuid
// to be 0, or CAP_DAC_OVERRIDE, which is what the kernel's own check
// accepts.

// capDACOverride is CAP_DAC_OVERRIDE's bit in CapEff.
const capDACOverride = 1

// mayWrite reports whether the caller of a FUSE request may open an
// attribute for writing, and names the caller for the log.
func mayWrite(ctx context.Context) (ok bool, uid, pid uint32) {
	c, found := fuse.FromContext(ctx)
	if !found {
		return false, 0, 0
	}
	if c.Uid == 0 {
		return true, 0, c.Pid
	}
	return hasCapDACOverride(c.Pid, c.Uid), c.Uid, c.Pid
}

// hasCapDACOverride reads CapEff from /proc/<pid>/status. The process must
// still have fsuid uid (pids are reused: the check runs after the request
// arrived); a process that is gone or not visible is refused.
func hasCapDACOverride(pid, uid uint32) bool {
	if pid == 0 {
		return false
	}
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	var uidOK, capOK bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		switch {
		case key == "Uid" && len(fields) == 4:
			uidOK = fields[3] == strconv.FormatUint(uint64(uid), 10) // fsuid
		case key == "CapEff" && len(fields) == 1:
			v, err := strconv.ParseUint(fields[0], 16, 64)
			capOK = err == nil && v&(1<<capDACOverride) != 0
		}
	}
	return uidOK && capOK
}
