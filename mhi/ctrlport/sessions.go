package ctrlport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// This file is a device's set of data sessions, by number: session 0 is
// the one `mhictl connect` drives without --session; sessions 1..limit-1
// are more PDN contexts at once (MBIM CONNECT's SessionId, a QMI WDS
// client bound to a mux id), each with its own client and host side.

// DefaultMaxSessions is the number of sessions a Sessions set takes when
// its options name none: what the mock modem allows by default.
const DefaultMaxSessions = 8

// Errors of a Sessions set.
var (
	// ErrSessionLimit: a session number at or beyond the set's limit.
	ErrSessionLimit = errors.New("ctrlport: session number beyond the limit")
	// ErrSessionNotConnected: disconnect of a session N > 0 that is not
	// connected.
	ErrSessionNotConnected = errors.New("ctrlport: session not connected")
)

// SessionsOptions configure a Sessions set.
type SessionsOptions struct {
	// Limit is the number of sessions, 1..256 (0: DefaultMaxSessions).
	Limit int
	// Client returns the session client of session n, called once per
	// number when the set is made (required).
	Client func(n uint8) (SessionClient, error)
	// Host returns the host side of session n (nil: none), called once
	// per number when the set is made.
	Host func(n uint8) HostConfigurer
	// Timeout and Logger are every Session's (SessionOptions).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Sessions is a device's data sessions, one Session per number below
// its limit. Its methods are safe for concurrent use; each session's
// operations are serialised by its Session, different sessions' run at
// once.
type Sessions struct {
	all []*Session
}

// NewSessions makes the sessions 0..Limit-1. A client that cannot be
// made fails it (the sessions already made are closed).
func NewSessions(opts SessionsOptions) (*Sessions, error) {
	limit := opts.Limit
	if limit == 0 {
		limit = DefaultMaxSessions
	}
	if limit < 1 || limit > 256 {
		return nil, fmt.Errorf("%w: a limit of %d sessions: want 1..256", ErrSessionLimit, limit)
	}
	if opts.Client == nil {
		return nil, fmt.Errorf("%w: no session client", ErrSessionRequest)
	}
	ss := &Sessions{}
	for i := range limit {
		n := uint8(i)
		c, err := opts.Client(n)
		if err != nil {
			ss.Close()
			return nil, fmt.Errorf("ctrlport: session %d: %w", n, err)
		}
		so := SessionOptions{Number: n, Timeout: opts.Timeout, Logger: opts.Logger}
		if opts.Host != nil {
			if h := opts.Host(n); h != nil {
				so.Host = h
			}
		}
		ss.all = append(ss.all, NewSession(c, so))
	}
	return ss, nil
}

// Limit returns the number of sessions.
func (ss *Sessions) Limit() int { return len(ss.all) }

// Get returns session n, or ErrSessionLimit.
func (ss *Sessions) Get(n int) (*Session, error) {
	if n < 0 || n >= len(ss.all) {
		return nil, fmt.Errorf("%w: session %d: this device takes sessions 0..%d", ErrSessionLimit, n, len(ss.all)-1)
	}
	return ss.all[n], nil
}

// All returns every session, by number.
func (ss *Sessions) All() []*Session { return ss.all }

// Connect connects session n (Session.Connect), or fails with
// ErrSessionLimit for a number beyond the limit.
func (ss *Sessions) Connect(ctx context.Context, n int, req SessionRequest) (SessionState, error) {
	s, err := ss.Get(n)
	if err != nil {
		return SessionState{}, err
	}
	return s.Connect(ctx, req)
}

// Disconnect disconnects session n. Session 0 is deactivated on the
// modem whoever connected it, as Session.Disconnect does; a session N > 0
// that is not connected fails with ErrSessionNotConnected.
func (ss *Sessions) Disconnect(ctx context.Context, n int) (SessionState, error) {
	s, err := ss.Get(n)
	if err != nil {
		return SessionState{}, err
	}
	if n > 0 && !s.State().Connected() {
		return s.State(), fmt.Errorf("%w: session %d", ErrSessionNotConnected, n)
	}
	return s.Disconnect(ctx)
}

// States returns every session's state, by number.
func (ss *Sessions) States() []SessionState {
	out := make([]SessionState, len(ss.all))
	for i, s := range ss.all {
		out[i] = s.State()
	}
	return out
}

// Close closes every session, removing the interfaces made for
// connected sessions N > 0 (the modem's sessions are left as they are).
func (ss *Sessions) Close() {
	for _, s := range ss.all {
		st := s.State()
		s.Close()
		if _, ok := s.opts.Host.(HostPreparer); ok && st.Connected() {
			_ = s.unconfigure(st.SessionConfig)
		}
	}
}
