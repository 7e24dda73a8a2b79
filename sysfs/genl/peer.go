package genl

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// expected is whom a client trusts at its server port.
type expected struct {
	port    uint32
	uids    []uint32 // uids a reply's credentials may carry
	pids    []int    // pids a reply's credentials may carry; empty: any
	runFile string   // the run file that named the port, "" if none
	notes   []string // run files ignored, and why
}

// accepts reports whether the kernel-stamped credentials of a reply name
// a trusted sender.
func (e *expected) accepts(cred *unix.Ucred) bool {
	if cred == nil || !slices.Contains(e.uids, cred.Uid) {
		return false
	}
	return len(e.pids) == 0 || slices.Contains(e.pids, int(cred.Pid))
}

// who describes the trusted owner for messages.
func (e *expected) who() string {
	if e.runFile != "" && len(e.pids) > 0 {
		return fmt.Sprintf("the server %s names (pid %d)", e.runFile, e.pids[0])
	}
	var ids []string
	for _, u := range e.uids {
		if u == 0 {
			ids = append(ids, "root")
		} else {
			ids = append(ids, "uid "+strconv.FormatUint(uint64(u), 10))
		}
	}
	return strings.Join(ids, " or ")
}

// untrustedError is a port holder or a reply sender that fails the check.
type untrustedError struct {
	exp   *expected
	peer  *Peer  // nil: unidentified
	ino   uint64 // socket inode, for an unidentified holder
	reply bool   // true: found by a reply's credentials, else by /proc
}

// Error names the holder the client refused and whom it trusts instead.
func (u *untrustedError) Error() string {
	var b strings.Builder
	holder := describePeers(nil, u.ino)
	if u.peer != nil {
		holder = u.peer.String()
	}
	if u.reply {
		fmt.Fprintf(&b, "refusing the reply from netlink port %#x: it was sent by %s, not by %s", u.exp.port, holder, u.exp.who())
	} else {
		fmt.Fprintf(&b, "refusing netlink port %#x: it is held by %s, not by %s; nothing was sent to it", u.exp.port, holder, u.exp.who())
	}
	b.WriteString(" (another local user may be squatting the port; a running `mhictl up` serves elsewhere and says so in its log and its run file)")
	for _, n := range u.exp.notes {
		b.WriteString("; ")
		b.WriteString(n)
	}
	return b.String()
}

// Unwrap makes the error match ErrUntrustedServer.
func (u *untrustedError) Unwrap() error { return ErrUntrustedServer }

// locate decides where the client sends its requests and whose replies
// it accepts. Port 0 means: the port of the live server named in a
// trusted run file (opts.RunFile, or root's and then the user's own, see
// DefaultRunFile), else DefaultPort. Replies are accepted from root and
// from the client's own user, plus the run file's uid, and only from the
// run file's pid when there is one. Then, before anything is sent, the
// port's holder is looked up in /proc (checkHolder).
func locate(opts ClientOptions) (*expected, error) {
	e := &expected{port: opts.Port, uids: trustedOwners()}
	general := runFileCandidates()
	if opts.RunFile != "" {
		general = []string{opts.RunFile}
	}
	var paths []string
	for _, p := range general {
		if d := DeviceRunFile(p, opts.Device); d != "" {
			paths = append(paths, d)
		}
		paths = append(paths, p)
	}
	ns, _ := netnsID()
	for _, p := range paths {
		r, err := ReadRunFile(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			e.notes = append(e.notes, fmt.Sprintf("ignored %v", err))
			continue
		case !r.Live():
			e.notes = append(e.notes, fmt.Sprintf("ignored the stale run file %s (pid %d is gone)", p, r.PID))
			continue
		case r.NetNS != 0 && ns != 0 && r.NetNS != ns:
			e.notes = append(e.notes, fmt.Sprintf("ignored the run file %s (another network namespace)", p))
			continue
		case e.port != 0 && r.Port != e.port:
			continue // another instance than the port asked for
		}
		e.port, e.pids, e.runFile = r.Port, []int{r.PID}, p
		if !slices.Contains(e.uids, r.UID) {
			e.uids = append(e.uids, r.UID)
		}
		break
	}
	if e.port == 0 {
		e.port = DefaultPort
	}
	return e, e.checkHolder()
}

// checkHolder looks up who holds the port, before the client sends
// anything there: the socket's inode from /proc/net/netlink, then the
// processes whose fds hold it. A holder that is not trusted (its real uid
// is not one the client accepts, or it is not the run file's pid) is
// refused with an untrustedError. When the holder cannot be identified —
// nothing bound yet, /proc unreadable, or another user's process whose fds
// this user may not list — the check passes and the replies' credentials
// decide alone; the trusted holders' pids, when found, are the only pids
// replies may then come from.
func (e *expected) checkHolder() error {
	ino, ok, err := portInode(e.port)
	if err != nil || !ok {
		return nil
	}
	definitive := false // the run file's process certainly does not hold it
	if len(e.pids) > 0 {
		has, err := procHasSocket(e.pids[0], ino)
		if has {
			return nil
		}
		definitive = err == nil
	}
	holders := socketHolders(ino)
	if len(holders) == 0 {
		if definitive {
			return &untrustedError{exp: e, ino: ino}
		}
		return nil
	}
	var pids []int
	for _, h := range holders {
		if !slices.Contains(e.uids, h.UID) || (len(e.pids) > 0 && !slices.Contains(e.pids, h.PID)) {
			return &untrustedError{exp: e, peer: &h, ino: ino}
		}
		pids = append(pids, h.PID)
	}
	if len(e.pids) == 0 {
		e.pids = pids
	}
	return nil
}

// replyError is the error for a reply whose credentials fail the check.
func (e *expected) replyError(cred *unix.Ucred) error {
	u := &untrustedError{exp: e, reply: true}
	if cred != nil {
		p := Peer{PID: int(cred.Pid), UID: cred.Uid}
		if info, err := procPeer(int(cred.Pid)); err == nil && info.UID == cred.Uid {
			p.Comm = info.Comm
		}
		u.peer = &p
	}
	return u
}
