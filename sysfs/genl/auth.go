package genl

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// This file holds who may change things: the kernel-stamped credentials
// of a request and the capability check of the commands that need root or
// CAP_NET_ADMIN.

func parseCred(oob []byte) *unix.Ucred {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for i := range msgs {
		if msgs[i].Header.Level == unix.SOL_SOCKET && msgs[i].Header.Type == unix.SCM_CREDENTIALS {
			if c, err := unix.ParseUnixCredentials(&msgs[i]); err == nil {
				return c
			}
		}
	}
	return nil
}

// capNetAdmin is CAP_NET_ADMIN's bit in CapEff.
const capNetAdmin = 12

// authorize lets a SET through when the kernel-stamped credentials say
// uid 0, or when the sending process holds CAP_NET_ADMIN. The capability is
// read from /proc/<pid>/status after the message arrived, so it is subject
// to a race: the sender may have exited and its pid been reused, or changed
// its capabilities since. To narrow it the process found at the pid must
// still have the credential's real uid; an exited sender is refused.
func authorize(cred *unix.Ucred) error {
	if cred == nil {
		return reqErr(unix.EPERM, 0, "changing device settings needs root or CAP_NET_ADMIN (no sender credentials)")
	}
	if cred.Uid == 0 || hasCapNetAdmin(cred.Pid, cred.Uid) {
		return nil
	}
	return reqErr(unix.EPERM, 0, "changing device settings needs root or CAP_NET_ADMIN (sender uid %d, pid %d)", cred.Uid, cred.Pid)
}

func hasCapNetAdmin(pid int32, uid uint32) bool {
	if pid <= 0 {
		return false
	}
	f, err := os.Open("/proc/" + strconv.Itoa(int(pid)) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	var (
		capEff  uint64
		haveCap bool
		uidOK   bool
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		switch key {
		case "Uid":
			uidOK = fields[0] == strconv.FormatUint(uint64(uid), 10)
		case "CapEff":
			v, err := strconv.ParseUint(fields[0], 16, 64)
			capEff, haveCap = v, err == nil
		}
	}
	return uidOK && haveCap && capEff&(1<<capNetAdmin) != 0
}
