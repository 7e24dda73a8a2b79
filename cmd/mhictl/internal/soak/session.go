package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser/client"
	"github.com/gomhi/gomhi/sysfs"
)

// devName is the device's name in the attribute tree.
const devName = "mhi0"

// session is one modem and the host stack on it: for Inproc the whole
// run; over vfio-user, from one start of the served modem to its kill.
type session struct {
	n    int // 1, 2, … in the order opened
	ctrl *mhi.Controller
	pair string
	dev  *mhinet.Device

	mock *mock.Mock       // Inproc
	ipd  *ipdata.Function // Inproc: the modem's IP data function
	epd  *ep.Device       // Inproc: the modem

	remote  *client.Remote // VFIOUser
	proc    *exec.Cmd
	out     *tailBuffer // the server's output
	exited  chan struct{}
	statsMu sync.Mutex        // one request for the served modem's counters at a time
	stats   chan ipdata.Stats // the server's answers (MsgIPDataStats)
}

// Channels returns the data pair's uplink and downlink channels.
func (s *session) channels() (ul, dl *mhi.Channel) {
	ul, dl, _ = s.ctrl.ChannelPair(s.pair)
	return ul, dl
}

// open starts session n: the modem (in this process, or a server process
// it waits for) powered up to M0, and the data device up.
func (r *runner) open(ctx context.Context, n int) (*session, error) {
	s := &session{n: n}
	var err error
	if r.o.Transport == Inproc {
		err = r.openInproc(s)
	} else {
		err = r.openRemote(ctx, s)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	cfg := mhinet.Config{
		Pair: s.pair, Format: r.o.Format, MRU: r.o.MRUs[0], Logger: r.o.Logger,
		TXAggregate: r.o.Format != framing.RawIP,
	}
	if s.dev, err = mhinet.New(s.ctrl, cfg, r.rx); err != nil {
		s.close()
		return nil, err
	}
	if err := s.dev.Up(); err != nil {
		s.close()
		return nil, fmt.Errorf("soak: session %d: data device up: %w", n, err)
	}
	return s, nil
}

func (r *runner) openInproc(s *session) error {
	m, err := mock.Open(mock.Options{
		Model: r.o.Model, Name: devName, Logger: r.o.Logger,
		IPData: &ipdata.Config{Format: r.o.Format},
	})
	if err != nil {
		return err
	}
	s.mock, s.ctrl, s.pair, s.ipd, s.epd = m, m.Controller, m.DataPair, m.IPData, m.Transport.Device()
	if s.ipd == nil {
		return fmt.Errorf("soak: model %s has no IP data function", r.o.Model)
	}
	return s.ctrl.PowerUp()
}

// serveTimeout bounds the wait for a started server to accept a client.
const serveTimeout = 20 * time.Second

func (r *runner) openRemote(ctx context.Context, s *session) error {
	sock := filepath.Join(r.dir, "modem.sock")
	_ = os.Remove(sock)
	s.proc = r.o.ServeCommand(sock, r.o.Model, r.o.Format)
	s.out = &tailBuffer{max: 8 << 10}
	s.stats = make(chan ipdata.Stats, 1)
	s.proc.Stdout, s.proc.Stderr = &serverOutput{tail: s.out, stats: s.stats}, s.out
	if err := s.proc.Start(); err != nil {
		s.proc = nil
		return fmt.Errorf("soak: start the modem server: %w", err)
	}
	s.exited = make(chan struct{})
	go func(p *exec.Cmd, done chan struct{}) {
		_ = p.Wait()
		close(done)
	}(s.proc, s.exited)
	deadline := time.Now().Add(serveTimeout)
	for {
		rem, err := client.Open(sock, client.OpenOptions{Name: devName, Logger: r.o.Logger})
		if err == nil {
			s.remote = rem
			break
		}
		if !errors.Is(err, client.ErrNoServer) || time.Now().After(deadline) {
			return fmt.Errorf("soak: session %d: connect to the modem server (output: %q): %w", s.n, s.out.String(), err)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("soak: session %d: the modem server exited (output: %q)", s.n, s.out.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.ctrl, s.pair = s.remote.Controller, s.remote.DataPair
	if s.pair == "" {
		return fmt.Errorf("soak: served model %s has no IP data channel", s.remote.Info.Name)
	}
	return s.ctrl.PowerUp()
}

// statsTimeout bounds the wait for the served modem's counters.
const statsTimeout = 5 * time.Second

// remoteStats asks the served modem for its IP data counters (SIGUSR1;
// it answers with a MsgIPDataStats line on standard output) and waits for
// them; false if it does not answer (it exited, or the session is not
// served by a process).
func (s *session) remoteStats() (ipdata.Stats, bool) {
	if s.proc == nil || s.proc.Process == nil {
		return ipdata.Stats{}, false
	}
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	select {
	case <-s.stats: // an answer that came too late for an earlier request
	default:
	}
	if err := s.proc.Process.Signal(syscall.SIGUSR1); err != nil {
		return ipdata.Stats{}, false
	}
	t := time.NewTimer(statsTimeout)
	defer t.Stop()
	select {
	case st := <-s.stats:
		return st, true
	case <-s.exited:
	case <-t.C:
	}
	return ipdata.Stats{}, false
}

// serverOutput is the served modem's standard output: kept in the tail
// buffer, and its MsgIPDataStats lines (JSON) handed to stats.
type serverOutput struct {
	tail    *tailBuffer
	stats   chan<- ipdata.Stats
	partial []byte
}

// Write implements io.Writer (exec calls it from one goroutine).
func (o *serverOutput) Write(p []byte) (int, error) {
	_, _ = o.tail.Write(p)
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.line(o.partial[:i])
		o.partial = o.partial[i+1:]
	}
	if len(o.partial) == 0 {
		o.partial = nil
	} else if len(o.partial) > 64<<10 {
		o.partial = nil // not a log line
	}
	return len(p), nil
}

func (o *serverOutput) line(l []byte) {
	if len(l) == 0 || l[0] != '{' {
		return
	}
	var m struct {
		Msg   string        `json:"msg"`
		Stats *ipdata.Stats `json:"stats"`
	}
	if json.Unmarshal(l, &m) != nil || m.Msg != MsgIPDataStats || m.Stats == nil {
		return
	}
	select {
	case o.stats <- *m.Stats:
	default: // nobody asked
	}
}

// pid returns the server's process id (0: none).
func (s *session) pid() int {
	if s.proc == nil || s.proc.Process == nil {
		return 0
	}
	return s.proc.Process.Pid
}

// gone returns a channel closed when a served modem's connection ends
// (nil in process).
func (s *session) gone() <-chan struct{} {
	if s.remote == nil {
		return nil
	}
	return s.remote.Transport.Done()
}

// kill ends the server process with SIGKILL and waits for it.
func (s *session) kill() {
	if s.proc == nil || s.proc.Process == nil {
		return
	}
	_ = s.proc.Process.Kill()
	<-s.exited
}

// close takes the data device down and closes the host and the modem; a
// server process is killed (if still running) after the host let go.
func (s *session) close() {
	if s.dev != nil {
		_ = s.dev.Down()
	}
	if s.mock != nil {
		_ = s.mock.Close()
	}
	if s.remote != nil {
		_ = s.remote.Close()
	}
	s.kill()
}

// bind puts the session's device into the attribute tree, replacing the
// previous session's.
func (r *runner) bind(s *session) {
	r.tree.RemoveDevice(devName)
	model := r.o.Model
	if s.remote != nil {
		model = s.remote.Info.Name
	}
	r.tree.AddDevice(devName, sysfs.Device{Controller: s.ctrl, Net: s.dev, Model: model})
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
