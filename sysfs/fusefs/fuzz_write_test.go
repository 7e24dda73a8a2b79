package fusefs

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/mhi/testenv/poll"
	"github.com/gomhi/gomhi/mhi/wire"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/sysfstest"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FuzzWrite drives the FUSE file nodes of the attribute tree with
// arbitrary write(2)s, through the node methods go-fuse calls for
// FUSE_OPEN, FUSE_WRITE and FUSE_READ (without a mount: mounting needs
// root and /dev/fuse). The tree is bound to a powered-up mock modem
// ("mhi0", with its network device). The input is a sequence of up to
// eight writes, records of [which][flags][offset][length][data]: which
// picks the attribute among all of them (the writable ones first: mru,
// mtu, soc_reset, timeout_ms), flags the open flags (bit 1 O_RDWR, else
// O_WRONLY; bit 2 O_TRUNC), offset an entry of fuzzOffsets.
//
// It checks for every write: no panic; Open refuses (EACCES) writing a
// read-only attribute; a write to a read-only attribute fails with EACCES;
// a value that does not parse, or lies outside the attribute's range, or
// an action other than "1", fails with EINVAL as documented; a successful
// write returns the whole length and (for a number) reads back as the
// value written; a refused write leaves the value as it was. (A write to
// timeout_ms is undone after its checks.) After the
// sequence the device must be back in M0 with receive buffers posted
// within settleBound (a SoC reset recovers; nothing may leave the data
// path dead), and nothing leaks.
func FuzzWrite(f *testing.F) {
	for _, seed := range fuzzWriteSeeds() {
		f.Add(seed.ops)
	}
	tr, dev := sysfstest.NewTree(f)
	srv := &Server{tree: tr, log: slog.New(slog.DiscardHandler), inos: newInodes(), start: time.Now()}
	// The writable attributes first (mru, mtu, soc_reset, timeout_ms),
	// so small values of which reach them; then every other one, the
	// power-management ones (autosuspend_ms, resume, suspend) last, so
	// that the seeds' indices keep their meaning.
	var writable, readOnly, pm []attrAt
	tr.Walk(func(p string, a *sysfs.Attr) {
		switch {
		case a.Writable() && slices.Contains([]string{"autosuspend_ms", "resume", "suspend"}, path.Base(p)):
			pm = append(pm, attrAt{p, a})
		case a.Writable():
			writable = append(writable, attrAt{p, a})
		default:
			readOnly = append(readOnly, attrAt{p, a})
		}
	})
	if len(writable) != 4 || len(pm) != 3 {
		f.Fatalf("%d + %d writable attributes, want mru, mtu, soc_reset and timeout_ms, then autosuspend_ms, resume and suspend", len(writable), len(pm))
	}
	all := slices.Concat(writable, readOnly, pm)
	timeout, err := tr.Get("devices/mhi0/timeout_ms")
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, ops []byte) {
		before := fuzzcheck.Snapshot()
		for i := 0; i < 8 && len(ops) >= 4; i++ {
			which, flags, off := ops[0], ops[1], fuzzOffsets[int(ops[2])%len(fuzzOffsets)]
			n := min(int(ops[3]), len(ops)-4)
			data := ops[4 : 4+n]
			ops = ops[4+n:]
			e := all[int(which)%len(all)]
			fuzzWriteOne(t, srv, e, data, off, flags)
			if strings.HasSuffix(e.path, "/timeout_ms") {
				// Checked, then undone: a 1 ms timeout would make the
				// next SoC reset's recovery fail, as configured.
				if err := tr.Set(e.path, timeout); err != nil {
					t.Fatalf("restoring %s: %v", e.path, err)
				}
			}
		}
		// Power management written: back to M0, no auto-suspend, before
		// the data path is checked.
		if err := tr.Set("devices/mhi0/autosuspend_ms", "0"); err != nil {
			t.Fatalf("autosuspend_ms: %v", err)
		}
		if st, _ := tr.Get("devices/mhi0/pm_state"); strings.TrimSpace(st) == "M3" {
			if err := tr.Set("devices/mhi0/resume", "1"); err != nil {
				t.Fatalf("resume after the writes: %v", err)
			}
		}
		settle(t, dev)
		before.Check(t)
	})
}

// writeSeed is one FuzzWrite input.
type writeSeed struct {
	name string
	ops  []byte
}

// fuzzWriteSeeds are the hand-made FuzzWrite inputs, also in
// testdata/fuzz/FuzzWrite (TestWriteSeeds -args -write-seeds rewrites
// them). soc_reset_then_mru is the sequence behind the crash FuzzWrite
// found: an MRU change racing the recovery from the SoC reset failed,
// yet changed the MRU and left the downlink dead.
func fuzzWriteSeeds() []writeSeed {
	w := func(which, flags, off uint8, data string) []byte {
		return append([]byte{which, flags, off, uint8(len(data))}, data...)
	}
	join := func(ws ...[]byte) []byte { return bytes.Join(ws, nil) }
	const mru, mtu, socReset, timeout, state = 0, 1, 2, 3, 4
	return []writeSeed{
		{"mru_echo", w(mru, 0, 0, "16384\n")},
		{"mru_hex_trunc", w(mru, 4, 3, "0x4000")},
		{"mtu_spaces_rdwr", w(mtu, 2, 0, "  1500  ")},
		{"soc_reset", w(socReset, 0, 0, "1")},
		{"soc_reset_0", w(socReset, 0, 0, "0")},
		{"mru_above_u32", w(mru, 0, 5, "4294967296")},
		{"timeout_above_u64", w(timeout, 0, 0, "18446744073709551616")},
		{"timeout_negative", w(timeout, 0, 0, "-1")},
		{"timeout_float", w(timeout, 0, 0, "1e3")},
		{"timeout_above_max", w(timeout, 0, 0, "600001")},
		{"mru_embedded_nul", w(mru, 0, 0, "12\x0034")},
		{"state_read_only", w(state, 0, 0, "M0")},
		{"state_empty_trunc", w(state, 4, 4, "")},
		{"soc_reset_then_mru", join(w(socReset, 0, 0, "1"), w(mru, 0, 0, "1500"))},
		{"soc_reset_then_mtu_timeout", join(w(socReset, 0, 0, "1\n"), w(mtu, 0, 0, "9000"), w(timeout, 0, 0, "100"))},
		{"mru_mtu_changes", join(w(mru, 0, 0, "2048"), w(mtu, 0, 0, "4096"), w(mru, 0, 0, "65535"), w(mtu, 0, 0, "1500"))},
	}
}

// writeSeeds makes TestWriteSeeds rewrite testdata/fuzz/FuzzWrite.
var writeSeeds = flag.Bool("write-seeds", false, "rewrite the FuzzWrite seed corpus in testdata/fuzz")

// TestWriteSeeds checks that the FuzzWrite seeds parse as whole records
// and, with -write-seeds, writes them to testdata/fuzz/FuzzWrite.
func TestWriteSeeds(t *testing.T) {
	for _, s := range fuzzWriteSeeds() {
		for ops := s.ops; len(ops) > 0; {
			if len(ops) < 4 || int(ops[3]) > len(ops)-4 {
				t.Fatalf("%s: a cut record", s.name)
			}
			ops = ops[4+int(ops[3]):]
		}
		if *writeSeeds {
			if err := fuzzcheck.WriteCorpus(filepath.Join("testdata", "fuzz", "FuzzWrite"), s.name, s.ops); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// attrAt is an attribute and its path in the tree.
type attrAt struct {
	path string
	attr *sysfs.Attr
}

// fuzzOffsets are the write offsets FuzzWrite uses (the nodes ignore
// them, as sysfs does).
var fuzzOffsets = []int64{0, 1, 4095, 4096, 1 << 40, -1, 1<<63 - 1}

// settleBound bounds the device's return to M0 with receive buffers
// posted after a sequence of writes.
const settleBound = 10 * time.Second

// settle waits for the device to be in M0 with receive buffers posted.
func settle(t *testing.T, dev sysfstest.Device) {
	t.Helper()
	var st wire.State
	var posted int
	if !poll.Until(settleBound, func() bool {
		st, _ = dev.Mock.Controller.State()
		posted = dev.Net.Stats().RxPosted
		return st == wire.StateM0 && posted > 0
	}) {
		t.Fatalf("the device is in %s with %d receive buffers posted %v after the writes", st, posted, settleBound)
	}
}

// fuzzWriteOne opens e's file with flags, writes data at off and checks
// the outcome.
func fuzzWriteOne(t *testing.T, srv *Server, e attrAt, data []byte, off int64, flags uint8) {
	t.Helper()
	// The caller is root (the kernel checked the mode bits before the
	// request reached the server), or, with flag bit 3, uid 65534, whom the
	// server itself must refuse any write open.
	caller := &fuse.Caller{Owner: fuse.Owner{Uid: 0, Gid: 0}, Pid: uint32(os.Getpid())}
	if flags&8 != 0 {
		caller.Owner = fuse.Owner{Uid: 65534, Gid: 65534}
	}
	ctx := fuse.NewContext(context.Background(), caller)
	a := e.attr
	n := &attrNode{srv: srv, attr: a, path: e.path}
	open := uint32(syscall.O_WRONLY)
	if flags&2 != 0 {
		open = syscall.O_RDWR
	}
	if flags&4 != 0 {
		open |= syscall.O_TRUNC
	}
	fh, _, errno := n.Open(ctx, open)
	switch {
	case caller.Uid != 0:
		if errno != syscall.EACCES {
			t.Errorf("%s: write open by uid %d: %v, want EACCES", e.path, caller.Uid, errno)
		}
		return // the kernel gives no write without an open
	case !a.Writable():
		if errno != syscall.EACCES {
			t.Errorf("%s: open for writing a read-only attribute: %v, want EACCES", e.path, errno)
		}
	case open&syscall.O_ACCMODE == syscall.O_RDWR && !a.Readable():
		if errno != syscall.EACCES {
			t.Errorf("%s: open O_RDWR of a write-only attribute: %v, want EACCES", e.path, errno)
		}
	case errno != 0:
		t.Fatalf("%s: open %#x: %v", e.path, open, errno)
	}
	if fh == nil {
		fh = &handle{}
	}

	old, oldErr := a.Read()
	written, errno := n.Write(ctx, fh, data, off)
	now, nowErr := a.Read()

	v := strings.TrimSpace(string(data))
	switch {
	case !a.Writable():
		if errno != syscall.EACCES {
			t.Errorf("%s: write to a read-only attribute: %v, want EACCES", e.path, errno)
		}
	case a.Type == sysfs.Uint:
		num, perr := strconv.ParseUint(v, 0, 64)
		valid := perr == nil && num >= a.Min && num <= a.Max
		if !valid && errno != syscall.EINVAL {
			t.Errorf("%s: write of %q (range %d..%d): %v, want EINVAL", e.path, data, a.Min, a.Max, errno)
		}
		if errno == 0 && nowErr == nil && now != strconv.FormatUint(num, 10) {
			t.Errorf("%s: write of %q succeeded, reads back %q", e.path, data, now)
		}
	case a.Type == sysfs.Action:
		if v != "1" && errno != syscall.EINVAL {
			t.Errorf("%s: write of %q to an action: %v, want EINVAL", e.path, data, errno)
		}
		if errno != 0 && errno != syscall.EINVAL && errno != syscall.EBUSY {
			t.Errorf("%s: action failed with %v, want EBUSY when the device cannot", e.path, errno)
		}
	}
	if errno == 0 && written != uint32(len(data)) {
		t.Errorf("%s: write of %d bytes returned %d", e.path, len(data), written)
	}
	if errno != 0 && a.Writable() && a.Readable() && (oldErr != nil || nowErr != nil || old != now) {
		t.Errorf("%s: refused write of %q (%v) changed the value from %q (%v) to %q (%v)", e.path, data, errno, old, oldErr, now, nowErr)
	}
	if a.Readable() && errno == 0 {
		// The file reads what the tree holds, with a newline.
		res, rerrno := n.Read(ctx, &handle{}, make([]byte, attrSize), 0)
		if rerrno != 0 {
			t.Fatalf("%s: read after write: %v", e.path, rerrno)
		}
		got, _ := res.Bytes(make([]byte, attrSize))
		if cur, err := a.Read(); err == nil && string(got) != cur+"\n" {
			t.Errorf("%s: file reads %q, the tree holds %q", e.path, got, cur)
		}
	}
}
