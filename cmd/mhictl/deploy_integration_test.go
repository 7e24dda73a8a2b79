package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/testenv"
	"github.com/gomhi/gomhi/mhi/testenv/logbuf"
	"golang.org/x/sys/unix"
)

const (
	unitPath  = "../../deploy/systemd/mhictl@.service"
	mockDropI = "../../deploy/systemd/mhictl@mock.service.d/mock.conf"
)

// unitFile is a parsed systemd unit: section → key → values in order.
type unitFile map[string]map[string][]string

// parseUnit reads a unit file or drop-in (no line continuations: the
// project's units use none). An empty assignment resets the key's list,
// as systemd does for list settings such as ExecStart=.
func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{}
	section := ""
	for n, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		case strings.HasSuffix(l, "\\"):
			t.Fatalf("%s:%d: a continuation line; the parser does not handle them", path, n+1)
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q", path, n+1, l)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			u[section][k] = append(u[section][k], v) // "": a reset, applied by values

		}
	}
	return u
}

// merge applies a drop-in: its assignments follow the unit's.
func (u unitFile) merge(d unitFile) {
	for s, keys := range d {
		if u[s] == nil {
			u[s] = map[string][]string{}
		}
		for k, vs := range keys {
			u[s][k] = append(u[s][k], vs...)
		}
	}
}

// values returns a key's values after the resets (empty assignments).
func (u unitFile) values(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		if v == "" {
			out = nil
			continue
		}
		out = append(out, v)
	}
	return out
}

func (u unitFile) one(t *testing.T, section, key string) string {
	t.Helper()
	vs := u.values(section, key)
	if len(vs) != 1 {
		t.Fatalf("[%s] %s: %q, want one value", section, key, vs)
	}
	return vs[0]
}

// environment returns the unit's Environment= assignments.
func (u unitFile) environment(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, a := range u.values("Service", "Environment") {
		a = strings.TrimSuffix(strings.TrimPrefix(a, `"`), `"`)
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			t.Fatalf("Environment=%s", a)
		}
		env[k] = v
	}
	return env
}

var unitVarRE = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$|^\$([A-Za-z_][A-Za-z0-9_]*)$`)

// execArgs expands an ExecStart command line as systemd does for what the
// unit uses: %I and %i (the instance), ${VAR} (one word), $VAR alone as a
// word (split at white space).
func execArgs(t *testing.T, line, instance string, env map[string]string) []string {
	t.Helper()
	var out []string
	for _, w := range strings.Fields(line) {
		w = strings.NewReplacer("%I", instance, "%i", instance).Replace(w)
		if m := unitVarRE.FindStringSubmatch(w); m != nil && m[2] != "" {
			out = append(out, strings.Fields(env[m[2]])...)
			continue
		}
		w = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).ReplaceAllStringFunc(w, func(s string) string {
			return env[s[2:len(s)-1]]
		})
		if strings.ContainsAny(w, `$%"'\`) {
			t.Fatalf("ExecStart word %q: the expansion here does not handle it", w)
		}
		out = append(out, w)
	}
	return out
}

// TestSystemdUnitVerifies: `systemd-analyze verify` (Debian's systemd)
// accepts deploy/systemd/mhictl@.service with nothing to say — run in a
// private mount namespace where /usr/local/bin/mhictl exists (a tmpfs
// holding this test binary; verify checks that ExecStart's program is
// executable) and with MANPATH on docs/man (verify runs man for every
// Documentation=man: page). `systemd-analyze security --offline` must rate
// the unit's exposure no worse than 3.0 ("OK"). A unit with a bad setting
// shows that verify's complaints are caught.
func TestSystemdUnitVerifies(t *testing.T) {
	testenv.NeedRoot(t, "a mount namespace with /usr/local/bin/mhictl")
	analyze := testenv.LookPath(t, "systemd-analyze", "systemd")
	unshare := testenv.LookPath(t, "unshare", "util-linux")
	testenv.LookPath(t, "man", "man-db")
	tmp := t.TempDir()
	man1 := filepath.Join(tmp, "man", "man1")
	if err := os.MkdirAll(man1, 0o755); err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob("../../docs/man/*.1")
	for _, p := range pages {
		abs, _ := filepath.Abs(p)
		if err := os.Symlink(abs, filepath.Join(man1, filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	unit, _ := filepath.Abs(unitPath)
	bad := filepath.Join(tmp, "bad", "mhictl@.service")
	_ = os.MkdirAll(filepath.Dir(bad), 0o755)
	b, _ := os.ReadFile(unit)
	_ = os.WriteFile(bad, bytes.Replace(b, []byte("ProtectSystem=strict"), []byte("ProtectSystem=stricter"), 1), 0o644)
	run := func(args ...string) (string, error) {
		sh := fmt.Sprintf("mount -t tmpfs none /usr/local/bin && cp %s /usr/local/bin/mhictl && exec %s \"$@\"", os.Args[0], analyze)
		cmd := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "sh", "-c", sh, "sh"}, args...)...)
		cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(tmp, "man"), "SYSTEMD_LOG_COLOR=0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("verify", unit)
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
	if out, err := run("verify", bad); err == nil && strings.TrimSpace(out) == "" {
		t.Errorf("systemd-analyze verify said nothing about ProtectSystem=stricter")
	} else {
		t.Logf("a bad unit: %s", strings.TrimSpace(out))
	}
	out, err = run("security", "--offline=true", "--no-pager", unit)
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	if lvl, _ := strconv.ParseFloat(m[1], 64); lvl > 3.0 {
		t.Errorf("exposure level %s %s, want at most 3.0:\n%s", m[1], m[2], out)
	}
	t.Logf("systemd-analyze security: exposure %s %s", m[1], m[2])
}

const unitEnv = "GOMHI_IN_TEST_UNIT"

// TestSystemdUnitRunsMock runs mhictl@mock.service — the unit with the
// drop-in deploy/systemd/mhictl@mock.service.d/mock.conf, which puts the
// embedded mock modem in place of --device — as systemd would run it, as
// far as that can be done without systemd as PID 1 (this machine's PID 1
// is not systemd, so neither systemctl nor systemd-run can start it):
//
//   - ExecStart expanded from the unit and the drop-in, with Environment=;
//   - User=: the user gomhi if it exists, else uid 65534 (nobody);
//   - CapabilityBoundingSet=, AmbientCapabilities=, NoNewPrivileges= by
//     setpriv (only CAP_NET_ADMIN, checked in /proc/PID/status);
//   - RuntimeDirectory=gomhi: /run/gomhi owned by that user, on a private
//     /run (a mount namespace, so the host's /run/gomhi is untouched), in a
//     network namespace of its own;
//   - Type=notify: a NOTIFY_SOCKET that must receive READY=1 and, after
//     SIGTERM (KillSignal=), STOPPING=1; the process must exit 0 within
//     TimeoutStopSec= and leave no interface, port link or run file.
//
// In between, root's `mhictl connect` must find the service through its
// run file in /run/gomhi (owned by the service user) and connect the
// session, ping must cross the TUN interface the service made, and its log
// lines must carry journald's priority prefixes. Not emulated: the mount
// and device sandboxing (ProtectSystem=, DevicePolicy=…), which
// TestSystemdUnitVerifies leaves to systemd-analyze.
func TestSystemdUnitRunsMock(t *testing.T) {
	if os.Getenv(unitEnv) != "1" {
		testenv.NeedRoot(t, "namespaces, another user, a TUN interface")
		testenv.NeedPath(t, "/dev/net/tun")
		unshare := testenv.LookPath(t, "unshare", "util-linux")
		testenv.LookPath(t, "setpriv", "util-linux")
		testenv.LookPath(t, "ip", "iproute2")
		cmd := exec.Command(unshare, "--net", "--mount", "--propagation", "private", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), unitEnv+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in new network and mount namespaces:\n%s", out)
		if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
			t.Fatalf("the test did not pass in the namespaces: %v", err)
		}
		return
	}
	u := parseUnit(t, unitPath)
	u.merge(parseUnit(t, mockDropI))
	for k, want := range map[string]string{"Type": "notify", "User": "gomhi", "Group": "gomhi", "RuntimeDirectory": "gomhi",
		"AmbientCapabilities": "CAP_NET_ADMIN", "CapabilityBoundingSet": "CAP_NET_ADMIN", "NoNewPrivileges": "yes",
		"KillSignal": "SIGTERM", "Restart": "on-failure"} {
		if got := u.one(t, "Service", k); got != want {
			t.Errorf("%s=%s, want %s", k, got, want)
		}
	}
	stopTimeout, err := time.ParseDuration(u.one(t, "Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, who := 65534, 65534, "uid 65534 (no user gomhi here)"
	if gu, err := user.Lookup("gomhi"); err == nil {
		uid, _ = strconv.Atoi(gu.Uid)
		gid, _ = strconv.Atoi(gu.Gid)
		who = "user gomhi"
	}
	t.Logf("User=gomhi runs as %s", who)

	must := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	must("ip", "link", "set", "lo", "up")
	// RuntimeDirectory=gomhi on a private /run; /usr/local/bin/mhictl is
	// this test binary.
	must("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/run")
	if err := os.Mkdir("/run/gomhi", 0o755); err != nil {
		t.Fatal(err)
	}
	must("chown", fmt.Sprintf("%d:%d", uid, gid), "/run/gomhi")
	// /dev/net/tun as a stock system has it: udev's default rules make it
	// 0666, and the service user must open it (CAP_NET_ADMIN does not
	// override a file mode). Some images (containers, this project's CI
	// machines before udev is installed) leave it 0600; the unit documents
	// the need (docs/DEPLOY.md), and this namespace gets its own node.
	must("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/dev/net")
	if err := unix.Mknod("/dev/net/tun", unix.S_IFCHR|0o666, int(unix.Mkdev(10, 200))); err != nil {
		t.Fatal(err)
	}
	must("chmod", "0666", "/dev/net/tun")
	must("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/usr/local/bin")
	must("cp", os.Args[0], "/usr/local/bin/mhictl")
	must("chmod", "0755", "/usr/local/bin/mhictl")

	notifyPath := "/run/notify.sock"
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	_ = os.Chmod(notifyPath, 0o777)
	states := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				close(states)
				return
			}
			states <- string(buf[:n])
		}
	}()

	env := u.environment(t)
	args := execArgs(t, u.one(t, "Service", "ExecStart"), "mock", env)
	t.Logf("ExecStart: %q", args)
	caps := "-all,+" + strings.ToLower(strings.TrimPrefix(u.one(t, "Service", "AmbientCapabilities"), "CAP_"))
	setpriv := []string{fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", gid), "--clear-groups",
		"--inh-caps=" + caps, "--ambient-caps=" + caps, "--bounding-set=" + caps, "--no-new-privs"}
	cmd := exec.Command("setpriv", append(setpriv, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "NOTIFY_SOCKET=" + notifyPath, "GOMHI_RUN_MHICTL=1", "LANG=C.UTF-8"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = "/"
	var logBuf logbuf.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	waitState := func(want string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case s := <-states:
				if strings.Contains(s, want) {
					return
				}
			case err := <-exited:
				t.Fatalf("the service exited (%v) before %s:\n%s", err, want, logBuf.String())
			case <-deadline:
				t.Fatalf("no %s on the notify socket:\n%s", want, logBuf.String())
			}
		}
	}
	waitState("READY=1")

	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	for _, want := range []string{fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", uid, uid, uid, uid), "CapEff:\t0000000000001000",
		"CapBnd:\t0000000000001000", "CapAmb:\t0000000000001000", "NoNewPrivs:\t1"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("the service's /proc status lacks %q:\n%s", want, status)
		}
	}
	// The namespace's run file and the device's own (genl-<ns>@mhi0.json).
	runFiles, _ := filepath.Glob("/run/gomhi/genl-*.json")
	if len(runFiles) != 2 || !strings.HasSuffix(runFiles[1], "@mhi0.json") {
		t.Fatalf("run files %v in /run/gomhi, want genl-<ns>.json and genl-<ns>@mhi0.json", runFiles)
	}
	for _, f := range runFiles {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil || int(st.Uid) != uid {
			t.Errorf("run file %s: owner %d, %v; want the service user %d", f, st.Uid, err, uid)
		}
	}

	// Root's client finds the service's run file and connects; data
	// crosses the interface the service made (which has no address before:
	// --tun-addr=).
	if out, err := runCmd(t, mhictl("connect", "mhi0", "--apn", "internet")); err != nil {
		t.Fatalf("root's connect to the service: %v\n%s\nservice log:\n%s", err, out, logBuf.String())
	}
	for i := uint16(1); i < 4; i++ {
		if !ping(t, i) {
			t.Fatalf("ping %d not answered after connect:\n%s", i, logBuf.String())
		}
	}
	if out, err := runCmd(t, mhictl("get", "mhi0", "model")); err != nil || strings.TrimSpace(out) != "telit-fn990" {
		t.Errorf("get mhi0 model: %v %q", err, out)
	}
	links, _ := filepath.Glob("/run/gomhi/mhi0/wwan0*")
	if len(links) != 3 {
		t.Errorf("control port links %v", links)
	}

	start := time.Now()
	if err := cmd.Process.Signal(mustSignal(t, u.one(t, "Service", "KillSignal"))); err != nil {
		t.Fatal(err)
	}
	waitState("STOPPING=1")
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(stopTimeout):
		t.Fatalf("still running %v (TimeoutStopSec) after SIGTERM", stopTimeout)
	}
	t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if _, err := net.InterfaceByName("mhi0"); err == nil {
		t.Error("interface mhi0 left behind")
	}
	if left, _ := filepath.Glob("/run/gomhi/*"); len(left) != 0 {
		t.Errorf("left in /run/gomhi: %v", left)
	}
	log := logBuf.String()
	prio := regexp.MustCompile(`(?m)^<[0-7]>msg=`)
	if n := len(prio.FindAllString(log, -1)); n < 3 || strings.Contains(log, "time=") || !strings.Contains(log, `<6>msg="session connected"`) {
		t.Errorf("the log is not journald's format (%d prefixed records):\n%s", n, log)
	}
	for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
		if !prio.MatchString(l) && !strings.HasPrefix(l, "mhictl up: ") {
			t.Errorf("log line neither a prefixed record nor a step: %q", l)
		}
	}
}

// mustSignal maps KillSignal= to the signal.
func mustSignal(t *testing.T, name string) os.Signal {
	t.Helper()
	if name != "SIGTERM" {
		t.Fatalf("KillSignal=%s: the test sends SIGTERM only", name)
	}
	return syscall.SIGTERM
}
