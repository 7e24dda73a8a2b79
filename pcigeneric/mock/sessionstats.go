package mock

import "github.com/gomhi/gomhi/mhi/ep/ipdata"

// SessionStats returns the IP data function's counters per data session
// (ipdata.Function.SessionStats): one row per session that has had
// traffic, by session number; nil without a data function. The rows'
// JSON names are snake_case (session, wire, ul_packets, …).
func (f *Functions) SessionStats() []ipdata.SessionStats {
	if f.IPData == nil {
		return nil
	}
	return f.IPData.SessionStats()
}

// SessionStatsOf returns session n's counters (all zero with Session and
// Wire set if it has had no traffic; the zero value without a data
// function): a snapshot function for a per-session counter group, e.g.
// func() any { return fns.SessionStatsOf(n) }.
func (f *Functions) SessionStatsOf(n uint8) ipdata.SessionStats {
	if f.IPData == nil {
		return ipdata.SessionStats{Session: n}
	}
	return f.IPData.SessionStatsOf(n)
}
