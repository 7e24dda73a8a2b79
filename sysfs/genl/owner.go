package genl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Who holds a NETLINK_USERSOCK port: the kernel lists the netlink sockets
// of the reader's network namespace in /proc/net/netlink, one line each
// with the protocol ("Eth"), the port id (the column named "Pid") and the
// socket's inode; a process holding the socket has a /proc/<pid>/fd/<n>
// link reading "socket:[<inode>]". Root sees every process's fds; other
// users only their own (the kernel hides the links of other users'
// processes), so for them a holder may stay unidentified, and the client
// then relies on the credentials of the replies alone.

// procNetNetlink is the kernel's table of the netlink sockets of the
// reading process's network namespace.
const procNetNetlink = "/proc/net/netlink"

// Peer is a process found holding a netlink port, or the sender of a
// reply as its kernel-stamped credentials name it.
type Peer struct {
	// PID is the process id (the thread-group id), 0 if unknown.
	PID int
	// UID is the process's real uid.
	UID uint32
	// Comm is the process's command name (/proc/<pid>/comm), "" if
	// unknown.
	Comm string
}

// String names the peer: `pid 1234 (uid 65534, "squat")`.
func (p Peer) String() string {
	if p.Comm != "" {
		return fmt.Sprintf("pid %d (uid %d, %q)", p.PID, p.UID, p.Comm)
	}
	return fmt.Sprintf("pid %d (uid %d)", p.PID, p.UID)
}

// DescribePeers names the processes (`pid 1234 (uid 65534, "squat")`, …),
// or says "an unidentified process" when there are none.
func DescribePeers(ps []Peer) string { return describePeers(ps, 0) }

// describePeers names every peer, or says the holder is unidentified.
func describePeers(ps []Peer, inode uint64) string {
	if len(ps) == 0 {
		if inode == 0 {
			return "an unidentified process"
		}
		return fmt.Sprintf("an unidentified process (socket inode %d; its fds are not visible here)", inode)
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// nlSocket is one line of /proc/net/netlink.
type nlSocket struct {
	Proto int
	Port  uint32
	Inode uint64
}

// parseNetlinkTable parses /proc/net/netlink: a header line, then one
// line per socket with at least ten fields (sk Eth Pid Groups Rmem Wmem
// Dump Locks Drops Inode). Lines that do not parse are errors, so that a
// changed format is noticed rather than read as "no socket".
func parseNetlinkTable(b []byte) ([]nlSocket, error) {
	var out []nlSocket
	sc := bufio.NewScanner(bytes.NewReader(b))
	first := true
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if first {
			first = false
			if len(f) < 10 || f[1] != "Eth" || f[2] != "Pid" || f[9] != "Inode" {
				return nil, fmt.Errorf("genl: %s: unexpected header %q", procNetNetlink, sc.Text())
			}
			continue
		}
		if len(f) == 0 {
			continue
		}
		if len(f) < 10 {
			return nil, fmt.Errorf("genl: %s: short line %q", procNetNetlink, sc.Text())
		}
		proto, err1 := strconv.ParseUint(f[1], 10, 8)
		port, err2 := strconv.ParseUint(f[2], 10, 32)
		ino, err3 := strconv.ParseUint(f[9], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("genl: %s: line %q: %w", procNetNetlink, sc.Text(), err)
		}
		out = append(out, nlSocket{Proto: int(proto), Port: uint32(port), Inode: ino})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("genl: %s: %w", procNetNetlink, err)
	}
	if first {
		return nil, fmt.Errorf("genl: %s is empty", procNetNetlink)
	}
	return out, nil
}

// portInode returns the inode of the NETLINK_USERSOCK socket bound at port
// in this network namespace; ok is false when none is.
func portInode(port uint32) (ino uint64, ok bool, err error) {
	b, err := os.ReadFile(procNetNetlink)
	if err != nil {
		return 0, false, fmt.Errorf("genl: %w", err)
	}
	socks, err := parseNetlinkTable(b)
	if err != nil {
		return 0, false, err
	}
	for _, s := range socks {
		if s.Proto == unix.NETLINK_USERSOCK && s.Port == port {
			return s.Inode, true, nil
		}
	}
	return 0, false, nil
}

// procHasSocket reports whether process pid holds the socket with inode
// ino. An error (typically EACCES: another user's process, or ENOENT: it
// exited) means it could not be told.
func procHasSocket(pid int, ino uint64) (bool, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	want := "socket:[" + strconv.FormatUint(ino, 10) + "]"
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if l, lerr := os.Readlink(dir + "/" + n); lerr == nil && l == want {
				return true, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// socketHolders returns the processes (that this process may inspect)
// holding the socket with inode ino.
func socketHolders(ino uint64) []Peer {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	var out []Peer
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		if ok, _ := procHasSocket(pid, ino); ok {
			if p, err := procPeer(pid); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// procPeer reads the real uid and command name of process pid.
func procPeer(pid int) (Peer, error) {
	st, err := procStatus(pid)
	if err != nil {
		return Peer{}, err
	}
	p := Peer{PID: pid, Comm: st["Name"]}
	uid := strings.Fields(st["Uid"])
	if len(uid) == 0 {
		return Peer{}, fmt.Errorf("genl: /proc/%d/status has no Uid line", pid)
	}
	u, err := strconv.ParseUint(uid[0], 10, 32)
	if err != nil {
		return Peer{}, fmt.Errorf("genl: /proc/%d/status: Uid %q: %w", pid, st["Uid"], err)
	}
	p.UID = uint32(u)
	return p, nil
}

// procStatus reads /proc/<pid>/status as a map from each line's key
// ("Uid", "CapEff"…) to its value, white space trimmed; lines without a
// value are left out.
func procStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if val = strings.TrimSpace(val); ok && val != "" {
			st[key] = val
		}
	}
	return st, nil
}

// procStartTime returns field 22 of /proc/<pid>/stat, the time the process
// started in clock ticks after boot: with the pid it names one process
// for good, as pids are reused.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStartTime(b)
}

// parseStartTime extracts starttime from a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted after the last ')'.
func parseStartTime(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("genl: /proc/<pid>/stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("genl: /proc/<pid>/stat: %d fields after the command name", len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// netnsID returns the inode of this process's network namespace, which
// names the namespace while it exists.
func netnsID() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("genl: network namespace: %w", err)
	}
	return st.Ino, nil
}
