package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Log formats of --log-format.
const (
	logText    = "text"    // slog's key=value lines with a timestamp
	logJSON    = "json"    // one JSON object per line
	logJournal = "journal" // key=value lines prefixed with a syslog priority, no timestamp
)

// newLogHandler returns the slog handler of a --log-format.
func newLogHandler(w io.Writer, format string, level slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case logText:
		return slog.NewTextHandler(w, opts), nil
	case logJSON:
		return slog.NewJSONHandler(w, opts), nil
	case logJournal:
		return newJournalHandler(w, level), nil
	}
	return nil, fmt.Errorf("--log-format %q: want %s, %s or %s", format, logText, logJSON, logJournal)
}

// journalHandler writes each record as one line "<N>msg=… key=value…",
// where N is the record's syslog priority: systemd-journald reads the
// prefix of a service's stdout and stderr lines (SyslogLevelPrefix=, on by
// default) and stores the line at that priority with its own timestamp,
// so none is written.
type journalHandler struct {
	inner slog.Handler
	out   *journalOut
}

// journalOut is what every handler derived from one journalHandler
// shares: the line being built and the writer.
type journalOut struct {
	mu  sync.Mutex
	buf bytes.Buffer
	w   io.Writer
}

func newJournalHandler(w io.Writer, level slog.Level) *journalHandler {
	out := &journalOut{w: w}
	inner := slog.NewTextHandler(&out.buf, &slog.HandlerOptions{Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
				return slog.Attr{}
			}
			return a
		}})
	return &journalHandler{inner: inner, out: out}
}

// syslogPriority maps a level to a syslog priority: error 3, warning 4,
// info 6, debug 7.
func syslogPriority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3
	case l >= slog.LevelWarn:
		return 4
	case l >= slog.LevelInfo:
		return 6
	}
	return 7
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	o := h.out
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Reset()
	o.buf.WriteString("<" + strconv.Itoa(syslogPriority(r.Level)) + ">")
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	_, err := o.w.Write(o.buf.Bytes())
	return err
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{inner: h.inner.WithAttrs(as), out: h.out}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{inner: h.inner.WithGroup(name), out: h.out}
}

// stderrIsJournal reports whether stderr is the journal stream systemd
// connected ($JOURNAL_STREAM names its device and inode), so that an
// error line can carry the error priority.
func stderrIsJournal() bool {
	dev, ino, ok := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(os.Stderr.Fd()), &st); err != nil {
		return false
	}
	return dev == strconv.FormatUint(st.Dev, 10) && ino == strconv.FormatUint(st.Ino, 10)
}
