package genl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// This file holds who may change things: the kernel-stamped credentials
// of a request and the capability check of the commands that need root or
// CAP_NET_ADMIN.

// parseCred returns the sender's credentials among a datagram's control
// messages (SCM_CREDENTIALS), or nil when there are none.
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

// hasCapNetAdmin reports whether process pid, whose real uid must still
// be uid, holds CAP_NET_ADMIN in its effective set.
func hasCapNetAdmin(pid int32, uid uint32) bool {
	if pid <= 0 {
		return false
	}
	st, err := procStatus(int(pid))
	if err != nil {
		return false
	}
	uids, caps := strings.Fields(st["Uid"]), strings.Fields(st["CapEff"])
	if len(uids) == 0 || len(caps) == 0 || uids[0] != strconv.FormatUint(uint64(uid), 10) {
		return false
	}
	capEff, err := strconv.ParseUint(caps[0], 16, 64)
	return err == nil && capEff&(1<<capNetAdmin) != 0
}

// passCred asks the kernel to stamp every datagram the socket receives
// with its sender's credentials (SO_PASSCRED), which parseCred reads.
func passCred(rc syscall.RawConn) error {
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	})
	if err := errors.Join(cerr, serr); err != nil {
		return fmt.Errorf("genl: SO_PASSCRED: %w", err)
	}
	return nil
}
