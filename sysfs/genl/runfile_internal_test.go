package genl

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

func TestParseNetlinkTable(t *testing.T) {
	const table = `sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode
0000000054715c31 0   0          00000000 0        0        0     2        0        4       
00000000b1b10d17 2   5064777    00000000 0        0        0     2        0        81234   
00000000cb8fb902 2   4294963200 00000000 0        0        0     2        0        81235   
`
	socks, err := parseNetlinkTable([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []nlSocket{{0, 0, 4}, {2, DefaultPort, 81234}, {2, 4294963200, 81235}}
	if len(socks) != len(want) {
		t.Fatalf("%d sockets, want %d", len(socks), len(want))
	}
	for i := range want {
		if socks[i] != want[i] {
			t.Errorf("socket %d = %+v, want %+v", i, socks[i], want[i])
		}
	}
	for name, bad := range map[string]string{
		"empty":      "",
		"new header": "sk Proto Port Inode\n",
		"short line": "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n0 2 5\n",
		"bad port":   "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n0 2 -5 0 0 0 0 2 0 9\n",
	} {
		if _, err := parseNetlinkTable([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// The real table of this machine parses.
	b, err := os.ReadFile(procNetNetlink)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseNetlinkTable(b); err != nil {
		t.Fatalf("this machine's %s: %v", procNetNetlink, err)
	}
}

func TestParseStartTime(t *testing.T) {
	// Field 22 is 4242; the command name holds spaces and parentheses.
	line := "123 (a (b) c) S 1 123 123 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 4242 1000 10 18446744073709551615"
	st, err := parseStartTime([]byte(line))
	if err != nil || st != 4242 {
		t.Fatalf("parseStartTime = %d, %v; want 4242", st, err)
	}
	for _, bad := range []string{"", "123 (x", "123 (x) S 1 2"} {
		if _, err := parseStartTime([]byte(bad)); err == nil {
			t.Errorf("parseStartTime(%q) succeeded", bad)
		}
	}
	if _, err := procStartTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRunFile(t *testing.T) {
	good := `{"family":"mhi","pid":12,"uid":0,"port":5064777,"start_time":99,"netns":4026531840,"started":"2026-01-02T03:04:05Z"}`
	r, err := decodeRunFile([]byte(good))
	if err != nil || r.PID != 12 || r.Port != DefaultPort || r.StartTime != 99 {
		t.Fatalf("decodeRunFile = %+v, %v", r, err)
	}
	for name, bad := range map[string]string{
		"not json":    "pid=12",
		"family":      `{"family":"nl80211","pid":12,"port":1}`,
		"pid 0":       `{"family":"mhi","pid":0,"port":1}`,
		"negative":    `{"family":"mhi","pid":-3,"port":1}`,
		"port 0":      `{"family":"mhi","pid":12,"port":0}`,
		"port > u32":  `{"family":"mhi","pid":12,"port":4294967296}`,
		"too large":   `{"family":"mhi","pid":12,"port":1,"x":"` + strings.Repeat("a", maxRunFile) + `"}`,
		"wrong types": `{"family":"mhi","pid":"12","port":1}`,
	} {
		if _, err := decodeRunFile([]byte(bad)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

// FuzzParseNetlinkTable: any bytes give sockets or an error, never a
// panic; what parses is re-parsed the same from its canonical form.
// Seeds: the f.Add calls and testdata/fuzz/FuzzParseNetlinkTable.
func FuzzParseNetlinkTable(f *testing.F) {
	hdr := "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode\n"
	f.Add([]byte(hdr + "00000000b1b10d17 2   5064777    00000000 0        0        0     2        0        81234\n"))
	f.Add([]byte(hdr))
	f.Add([]byte(hdr + "x 2 3 4 5 6 7 8 9 10 11\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, err := parseNetlinkTable(b)
		if err != nil {
			return
		}
		var sb strings.Builder
		sb.WriteString(hdr)
		for _, s := range socks {
			sb.WriteString("0 " + itoa(uint64(s.Proto)) + " " + itoa(uint64(s.Port)) + " 0 0 0 0 0 0 " + itoa(s.Inode) + "\n")
		}
		again, err := parseNetlinkTable([]byte(sb.String()))
		if err != nil || len(again) != len(socks) {
			t.Fatalf("re-parse: %v, %d vs %d sockets", err, len(again), len(socks))
		}
		for i := range socks {
			if again[i] != socks[i] {
				t.Fatalf("socket %d: %+v then %+v", i, socks[i], again[i])
			}
		}
	})
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// FuzzDecodeRunFile: any bytes decode to a valid run file or an error
// wrapping ErrProtocol, never a panic. Seeds: the f.Add calls and
// testdata/fuzz/FuzzDecodeRunFile.
func FuzzDecodeRunFile(f *testing.F) {
	f.Add([]byte(`{"family":"mhi","pid":12,"uid":0,"port":5064777,"start_time":99,"netns":4026531840,"started":"2026-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"family":"mhi","pid":12,"port":1}{"x":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRunFile(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if r.Family != FamilyName || r.PID <= 0 || r.Port == 0 {
			t.Fatalf("accepted %+v", r)
		}
	})
}

// TestRunDirDelegation: a run directory root handed to a service user
// (owned by it, in root's directories) makes that user's run files
// trusted; the same directory under a directory anyone may write to, or
// writable by others, or not one of the delegable directories, does not.
func TestRunDirDelegation(t *testing.T) {
	testenv.NeedRoot(t, "directories of another owner")
	base, err := os.MkdirTemp("/run", "genl-delegation-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	const svc = 65534
	dir := base + "/gomhi"
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, svc, svc); err != nil {
		t.Fatal(err)
	}
	defer func(old []string) { delegableRunDirs = old }(delegableRunDirs)
	delegableRunDirs = []string{dir}

	r := RunFile{Family: FamilyName, PID: os.Getpid(), UID: svc, Port: 0x4d4849}
	path := dir + "/genl-1.json"
	if err := writeRunFile(path, r); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, svc, svc); err != nil {
		t.Fatal(err)
	}
	if uid, ok := delegatedOwner(dir); !ok || uid != svc {
		t.Fatalf("delegatedOwner = %d, %v; want %d, true", uid, ok, svc)
	}
	if got, err := ReadRunFile(path); err != nil || got.UID != svc {
		t.Fatalf("ReadRunFile of the delegated directory: %+v, %v", got, err)
	}
	for name, spoil := range map[string]func() func(){
		"not delegable": func() func() {
			delegableRunDirs = nil
			return func() { delegableRunDirs = []string{dir} }
		},
		"directory writable by others": func() func() {
			_ = os.Chmod(dir, 0o777)
			return func() { _ = os.Chmod(dir, 0o755) }
		},
		"parent writable by others, even sticky": func() func() {
			_ = os.Chmod(base, 0o1777)
			return func() { _ = os.Chmod(base, 0o755) }
		},
		"parent not root's": func() func() {
			_ = os.Chown(base, svc, svc)
			return func() { _ = os.Chown(base, 0, 0) }
		},
	} {
		undo := spoil()
		_, err := ReadRunFile(path)
		undo()
		if !errors.Is(err, ErrUnsafeRunFile) {
			t.Errorf("%s: ReadRunFile = %v, want ErrUnsafeRunFile", name, err)
		}
	}
}
