package ctrlport

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/gomhi/gomhi/mhi"
)

// Defaults of a Port.
const (
	// DefaultWriteTimeout bounds the wait for room in the pseudo-terminal
	// when writing a downlink message; past it, what no client has read is
	// discarded and the message dropped.
	DefaultWriteTimeout = 2 * time.Second
	// DefaultStaleTimeout: downlink bytes no client read for this long are
	// discarded, so that the next client does not read a vanished
	// client's answers.
	DefaultStaleTimeout = 3 * time.Second
	// DefaultPartialTimeout: an incomplete uplink message followed by
	// silence this long is discarded (a client died mid-write), so that
	// the next client's bytes do not join it.
	DefaultPartialTimeout = time.Second
	// DefaultDLQueue is the number of downlink messages waiting for the
	// pseudo-terminal before further ones are dropped.
	DefaultDLQueue = 64
)

// Options configure a Port.
type Options struct {
	// Framer cuts the client's stream into messages (default: by the
	// pair's kind, FramerFor(KindOf(pair))).
	Framer Framer
	// Link, when set, is a symbolic link created to the pseudo-terminal
	// (e.g. <rundir>/wwan0mbim0) and removed by Close. An existing
	// symbolic link there is replaced; anything else is an error.
	Link string
	// Pair configures the channel pair.
	Pair PairOptions
	// Logger receives Info records for the port's life and Warn records
	// for drops (nil: discard).
	Logger *slog.Logger
	// WriteTimeout, StaleTimeout, PartialTimeout: see the defaults.
	WriteTimeout, StaleTimeout, PartialTimeout time.Duration
	// DLQueue is the downlink queue length (default DefaultDLQueue).
	DLQueue int
}

// PortStats are a Port's counters (the pair's are in Pair).
type PortStats struct {
	// ULMessages and ULBytes count messages framed from clients and
	// queued on the uplink channel.
	ULMessages uint64 `json:"ul_messages"`
	ULBytes    uint64 `json:"ul_bytes"`
	// ULGarbage counts bytes skipped because no message could start
	// there; ULGarbageRuns the runs of them (framing errors).
	ULGarbage     uint64 `json:"ul_garbage_bytes"`
	ULGarbageRuns uint64 `json:"ul_framing_errors"`
	// ULPartialDropped counts incomplete messages discarded after
	// PartialTimeout of silence; ULSendFailed messages the channel did
	// not take (see Pair's ULDropped).
	ULPartialDropped uint64 `json:"ul_partial_dropped"`
	ULSendFailed     uint64 `json:"ul_send_failed"`
	// DLMessages and DLBytes count downlink messages written to the
	// pseudo-terminal.
	DLMessages uint64 `json:"dl_messages"`
	DLBytes    uint64 `json:"dl_bytes"`
	// DLQueueFull counts downlink messages dropped because the queue to
	// the pseudo-terminal was full; DLWriteTimeouts those that could not
	// be written within WriteTimeout (no client reading).
	DLQueueFull     uint64 `json:"dl_queue_full"`
	DLWriteTimeouts uint64 `json:"dl_write_timeouts"`
	// DLStaleFlushes counts discards of unread downlink bytes (a client
	// that went away without reading its answers), DLStaleBytes their
	// bytes.
	DLStaleFlushes uint64 `json:"dl_stale_flushes"`
	DLStaleBytes   uint64 `json:"dl_stale_bytes"`
	// Pair holds the channel pair's counters.
	Pair PairStats `json:"pair"`
}

// Port exposes a control channel pair as a pseudo-terminal in raw mode.
type Port struct {
	pair   *Pair
	pty    *pty
	framer Framer
	link   string
	opts   Options
	log    *slog.Logger
	cancel func()

	dlq  chan []byte
	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	stats  PortStats
	closed bool
}

// Open starts the channel pair named pair ("MBIM", "QMI", "DUN"…) of ctrl
// (powered up) and exposes it as a pseudo-terminal: Path names the slave
// device a tool opens (`mbimcli -d PATH`), Link the stable symbolic link
// if one was asked for.
func Open(ctrl *mhi.Controller, pair string, opts Options) (*Port, error) {
	if opts.Framer == nil {
		k, _ := KindOf(pair)
		opts.Framer = FramerFor(k)
		if opts.Framer == nil {
			return nil, fmt.Errorf("ctrlport: %s: pair %q has no known message framing; set Options.Framer", ctrl.Name(), pair)
		}
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.StaleTimeout <= 0 {
		opts.StaleTimeout = DefaultStaleTimeout
	}
	if opts.PartialTimeout <= 0 {
		opts.PartialTimeout = DefaultPartialTimeout
	}
	if opts.DLQueue <= 0 {
		opts.DLQueue = DefaultDLQueue
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Pair.Logger == nil {
		opts.Pair.Logger = log
	}
	t, err := openPTY()
	if err != nil {
		return nil, err
	}
	pp, err := OpenPair(ctrl, pair, opts.Pair)
	if err != nil {
		t.close()
		return nil, err
	}
	p := &Port{pair: pp, pty: t, framer: opts.Framer, opts: opts, dlq: make(chan []byte, opts.DLQueue), done: make(chan struct{}),
		log: log.With("dev", ctrl.Name(), "pair", pair, "pty", t.path)}
	if opts.Link != "" {
		if err := makeLink(t.path, opts.Link); err != nil {
			pp.Close()
			t.close()
			return nil, err
		}
		p.link = opts.Link
	}
	p.cancel = pp.Subscribe(p.onDownlink)
	p.wg.Add(2)
	go p.readLoop()
	go p.writeLoop()
	p.log.Info("control port open", "link", p.link, "framing", p.framer.Name())
	return p, nil
}

// makeLink points link at target, replacing a stale symbolic link.
func makeLink(target, link string) error {
	if fi, err := os.Lstat(link); err == nil {
		if fi.Mode()&os.ModeSymlink == 0 {
			return fmt.Errorf("ctrlport: link %s exists and is not a symbolic link", link)
		}
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("ctrlport: replacing link %s: %w", link, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("ctrlport: link directory: %w", err)
	}
	if err := os.Symlink(target, link); err != nil {
		return fmt.Errorf("ctrlport: link %s → %s: %w", link, target, err)
	}
	return nil
}

// Path returns the pseudo-terminal's slave device, e.g. /dev/pts/3.
func (p *Port) Path() string { return p.pty.path }

// Link returns the symbolic link to Path ("" if none was asked for).
func (p *Port) Link() string { return p.link }

// Pair returns the port's channel pair (for Stats, or an MBIMClient
// sharing the channel with the port's clients).
func (p *Port) Pair() *Pair { return p.pair }

// Stats returns the port's counters.
func (p *Port) Stats() PortStats {
	p.mu.Lock()
	s := p.stats
	p.mu.Unlock()
	s.Pair = p.pair.Stats()
	return s
}

func (p *Port) count(f func(s *PortStats)) {
	p.mu.Lock()
	f(&p.stats)
	p.mu.Unlock()
}

// onDownlink queues a copy of a downlink message for the pseudo-terminal.
func (p *Port) onDownlink(msg []byte) {
	select {
	case p.dlq <- append([]byte(nil), msg...):
	default:
		p.count(func(s *PortStats) { s.DLQueueFull++ })
		p.log.Warn("control port: downlink queue full; message dropped", "len", len(msg))
	}
}

// writeLoop writes downlink messages to the master, one whole message at
// a time, and discards what clients leave unread.
func (p *Port) writeLoop() {
	defer p.wg.Done()
	tick := time.NewTicker(p.opts.StaleTimeout / 4)
	defer tick.Stop()
	lastUnread, since := 0, time.Now()
	for {
		select {
		case <-p.done:
			return
		case msg := <-p.dlq:
			_ = p.pty.master.SetWriteDeadline(time.Now().Add(p.opts.WriteTimeout))
			_, err := p.pty.master.Write(msg)
			if err != nil {
				if errors.Is(err, os.ErrClosed) {
					return
				}
				// No client is reading: whatever is queued, including
				// the part of msg written, is for nobody.
				n, _ := p.pty.unread()
				_ = p.pty.flushUnread()
				p.count(func(s *PortStats) { s.DLWriteTimeouts++; s.DLStaleFlushes++; s.DLStaleBytes += uint64(n) })
				p.log.Warn("control port: no client reads; downlink message dropped", "len", len(msg), "err", err)
				lastUnread = 0
				continue
			}
			p.count(func(s *PortStats) { s.DLMessages++; s.DLBytes += uint64(len(msg)) })
		case now := <-tick.C:
			n, err := p.pty.unread()
			if err != nil || n == 0 || n != lastUnread {
				lastUnread, since = n, now
				continue
			}
			if now.Sub(since) >= p.opts.StaleTimeout {
				_ = p.pty.flushUnread()
				p.count(func(s *PortStats) { s.DLStaleFlushes++; s.DLStaleBytes += uint64(n) })
				p.log.Info("control port: discarded downlink bytes no client read", "bytes", n, "after", p.opts.StaleTimeout)
				lastUnread = 0
			}
		}
	}
}

// readLoop reads what clients write, frames it and queues each message
// on the uplink channel.
func (p *Port) readLoop() {
	defer p.wg.Done()
	buf := make([]byte, 0, 2*MaxMTU)
	last := time.Now()
	inGarbage := false
	for {
		if len(buf) == cap(buf) { // cannot happen with a conforming framer
			p.count(func(s *PortStats) { s.ULGarbage += uint64(len(buf)); s.ULGarbageRuns++ })
			buf = buf[:0]
		}
		n, err := p.pty.master.Read(buf[len(buf):cap(buf)])
		now := time.Now()
		if err != nil {
			if errors.Is(err, os.ErrClosed) || p.isClosed() {
				return
			}
			if errors.Is(err, syscall.EIO) || errors.Is(err, io.EOF) {
				time.Sleep(50 * time.Millisecond) // no slave open: cannot happen while we hold one
				continue
			}
			p.log.Warn("control port: read", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if len(buf) > 0 && now.Sub(last) > p.opts.PartialTimeout {
			p.count(func(s *PortStats) { s.ULPartialDropped++ })
			p.log.Warn("control port: incomplete message followed by silence; discarded", "bytes", len(buf))
			copy(buf[:n], buf[len(buf):len(buf)+n])
			buf = buf[:n]
		} else {
			buf = buf[:len(buf)+n]
		}
		last = now
		for len(buf) > 0 {
			k := p.framer.Frame(buf)
			if k == 0 {
				break
			}
			if k < 0 {
				k = min(-k, len(buf))
				if !inGarbage {
					p.count(func(s *PortStats) { s.ULGarbageRuns++ })
				}
				inGarbage = true
				p.count(func(s *PortStats) { s.ULGarbage += uint64(k) })
			} else {
				k = min(k, len(buf))
				inGarbage = false
				if err := p.pair.Send(buf[:k]); err != nil {
					p.count(func(s *PortStats) { s.ULSendFailed++ })
					p.log.Warn("control port: uplink message not sent", "len", k, "err", err)
				} else {
					p.count(func(s *PortStats) { s.ULMessages++; s.ULBytes += uint64(k) })
				}
			}
			buf = buf[:copy(buf, buf[k:])]
		}
	}
}

func (p *Port) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close removes the link, closes the pseudo-terminal (clients that have
// it open see a hang-up) and the channel pair.
func (p *Port) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	if p.link != "" {
		if t, err := os.Readlink(p.link); err == nil && t == p.pty.path {
			_ = os.Remove(p.link)
		}
	}
	p.cancel()
	close(p.done)
	p.pty.close()
	p.wg.Wait()
	err := p.pair.Close()
	p.log.Info("control port closed")
	return err
}
