package soak

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// serveEnv makes the test binary serve the mock modem (the vfio-user test
// runs it as the server process it kills): GOMHI_SOAK_SERVE=socket,model,format.
const serveEnv = "GOMHI_SOAK_SERVE"

func TestMain(m *testing.M) {
	if spec := os.Getenv(serveEnv); spec != "" {
		os.Exit(serve(spec))
	}
	os.Exit(m.Run())
}

// serve is the modem server process: 'mhictl modem serve --ip-mode
// loopback --json-log' in short, its answer to SIGUSR1 included.
func serve(spec string) int {
	parts := strings.Split(spec, ",")
	if len(parts) != 3 {
		return 2
	}
	f, err := framing.Parse(parts[2])
	if err != nil {
		return 2
	}
	var served atomic.Pointer[ipdata.Function]
	dev, err := vfiouser.NewServerDevice(vfiouser.DeviceOptions{
		Model: parts[1], IPData: &ipdata.Config{Format: f},
		Device: func(ec *ep.Config) {
			for _, fn := range ec.Functions {
				if ipd, ok := fn.(*ipdata.Function); ok {
					served.Store(ipd)
				}
			}
		},
	})
	if err != nil {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			if ipd := served.Load(); ipd != nil {
				log.Info(MsgIPDataStats, "stats", ipd.Stats())
			}
		}
	}()
	if err := vfiouser.ListenAndServe(ctx, parts[0], dev); err != nil {
		return 1
	}
	return 0
}

// quick are options for a run of seconds: small phases, frequent faults.
func quick(d time.Duration) Options {
	return Options{
		Duration: d, PhasePackets: 3000, Warmup: 4 * time.Second,
		RestartGap: time.Second, LoopbackRestartGap: time.Second,
		ModemRestartGap: 2 * time.Second,
		// RSS is judged by 'make soak' (a normal build, a minute): in a
		// race-enabled run of seconds it is still growing.
		Slack: Slack{RSSBytes: 1 << 30},
	}
}

func logSummary(t *testing.T, s *Summary) {
	t.Helper()
	if s == nil {
		return
	}
	var b bytes.Buffer
	_ = s.WriteTable(&b, 10)
	t.Log("\n" + b.String())
}

// checkSummary checks what every passing run must show.
func checkSummary(t *testing.T, s *Summary) {
	t.Helper()
	if !s.Passed || len(s.Violations) > 0 {
		t.Fatalf("run failed: %+v", s.Violations)
	}
	if s.Sent == 0 || s.Phases < 2 {
		t.Fatalf("%d packets in %d phases: the run did nothing", s.Sent, s.Phases)
	}
	if s.Sent+s.CountedTwice != s.Delivered+s.Counted {
		t.Errorf("sent %d + counted twice %d ≠ delivered %d + counted %d", s.Sent, s.CountedTwice, s.Delivered, s.Counted)
	}
	if s.MRUChanges < uint64(s.Phases)-1 {
		t.Errorf("%d MRU changes in %d phases", s.MRUChanges, s.Phases)
	}
	if s.DataRestarts == 0 || s.Loopback.Restarts == 0 || s.Loopback.Received == 0 {
		t.Errorf("%d data restarts, %d LOOPBACK reopenings, %d LOOPBACK echoes: faults or traffic missing",
			s.DataRestarts, s.Loopback.Restarts, s.Loopback.Received)
	}
	if b := s.Receiver.bad(); b > 0 {
		t.Errorf("%d bad packets passed", b)
	}
	for _, r := range s.Resources {
		if !r.Flat {
			t.Errorf("%s not flat: %+v", r.Name, r)
		}
	}
}

func TestSoakInproc(t *testing.T) {
	s, err := Run(context.Background(), quick(25*time.Second))
	logSummary(t, s)
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, s)
	if s.SysErrs == 0 || s.Recoveries < s.SysErrs {
		t.Errorf("%d SYS_ERRs injected, %d recoveries", s.SysErrs, s.Recoveries)
	}
	if s.GeneratorPhases == 0 || s.GeneratorPhases == s.Phases {
		t.Errorf("%d generator phases of %d: want both kinds", s.GeneratorPhases, s.Phases)
	}
}

func TestSoakVFIOUser(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o := quick(25 * time.Second)
	o.Transport = VFIOUser
	o.ServeCommand = func(socket, model string, format framing.Format) *exec.Cmd {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), serveEnv+"="+socket+","+model+","+format.String())
		return cmd
	}
	s, err := Run(context.Background(), o)
	logSummary(t, s)
	if err != nil {
		t.Fatal(err)
	}
	checkSummary(t, s)
	if s.ModemRestarts == 0 || s.SoCResets == 0 {
		t.Errorf("%d modem restarts, %d SoC resets: want both", s.ModemRestarts, s.SoCResets)
	}
}

// Each check fails, naming what was violated, when the stack (or the
// soak's own receiver) is broken on purpose.
func TestSoakDetectsSabotage(t *testing.T) {
	for _, tc := range []struct {
		name string
		sab  sabotage
		kind string
		want []string // in the violation's message
	}{
		{"receiver loses packets uncounted", sabotage{skipCountEvery: 7919}, "conservation",
			[]string{"receiver was handed", "unaccounted"}},
		{"goroutine leaked per MRU change", sabotage{leakPerMRU: true}, "resource", []string{"goroutines"}},
		{"file descriptor leaked per MRU change", sabotage{leakFDPerMRU: true}, "resource", []string{"fds"}},
		{"downlink stopped behind the device's back", sabotage{stallDataDevice: true, stallDataAfter: 2 * time.Second},
			"stuck", []string{"no progress"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := quick(30 * time.Second)
			o.PhasePackets = 1000
			o.Warmup = 2 * time.Second
			o.Stall = 3 * time.Second
			o.sabotage = tc.sab
			// Only the check under test: restarts and recoveries would
			// restart a stopped channel.
			if tc.sab.stallDataDevice {
				o.RestartGap, o.SysErrGap = -1, -1
				// Phases long enough that the stall lands while a phase
				// still has far more to send than the queues and rings
				// hold: the sender then blocks and the stuck check sees
				// it. With 1000-packet phases the stall could land after
				// the last send of a phase (≈100 packets in flight), and
				// the phase's own conservation check, at its settle
				// deadline, named the loss first (seen once in CI).
				o.PhasePackets = 20000
			}
			s, err := Run(context.Background(), o)
			if !errors.Is(err, ErrViolation) {
				logSummary(t, s)
				t.Fatalf("err = %v, want a violation", err)
			}
			v := s.Violations[0]
			if v.Kind != tc.kind {
				t.Errorf("violation %q (%s), want kind %s", v.Message, v.Kind, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(v.Message, w) {
					t.Errorf("violation %q does not say %q", v.Message, w)
				}
			}
			t.Logf("%s after %v: %s", v.Kind, v.At.Round(time.Millisecond), v.Message)
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"no end", Options{}},
		{"unknown transport", Options{Duration: time.Second, Transport: "pcie"}},
		{"vfio-user without server", Options{Duration: time.Second, Transport: VFIOUser}},
		{"unknown model", Options{Duration: time.Second, Model: "nokia-3310"}},
		{"bad MRU", Options{Duration: time.Second, MRUs: []int{100}}},
		{"bad size", Options{Duration: time.Second, Sizes: []int{20}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.Validate(); !errors.Is(err, ErrOptions) {
				t.Errorf("Validate = %v, want ErrOptions", err)
			}
		})
	}
}
