package mhi

import "github.com/gomhi/gomhi/mhi/wire"

// EventRingStatus describes an event ring for status displays.
type EventRingStatus struct {
	Index    int    `json:"index"`
	Kind     string `json:"kind"`
	Elements int    `json:"elements"`
	Vector   int    `json:"vector"`
	ModMs    int    `json:"moderation_ms"`
	RingBase uint64 `json:"ring_base"`
	HostRP   uint64 `json:"host_rp"`
	HostWP   uint64 `json:"host_wp"`
	DeviceRP uint64 `json:"device_rp"`
	Hardware bool   `json:"hardware"`
	Events   uint64 `json:"events"`
}

// Status is a snapshot of the controller: MHI state, execution environment,
// channels and event rings.
type Status struct {
	Name       string                  `json:"name"`
	PM         string                  `json:"pm_state"`
	State      string                  `json:"mhi_state"`
	EE         string                  `json:"ee"`
	Channels   []ChannelStatus         `json:"channels"`
	EventRings []EventRingStatus       `json:"event_rings"`
	Stats      ControllerStatsSnapshot `json:"stats"`
	Recovery   RecoveryStatus          `json:"recovery"`
}

// Status returns a snapshot of the controller.
func (c *Controller) Status() Status {
	c.mu.Lock()
	st := Status{Name: c.name, PM: c.pm.String(), State: c.devState.String(), EE: c.ee.String()}
	c.mu.Unlock()
	for _, ch := range c.channels {
		if ch != nil {
			st.Channels = append(st.Channels, ch.Status())
		}
	}
	c.procMu.Lock() // event ring indices belong to their goroutines
	if c.allocated {
		for _, er := range c.eventRings {
			st.EventRings = append(st.EventRings, EventRingStatus{
				Index: er.index, Kind: er.cfg.Kind.String(), Elements: er.n, Vector: er.vector,
				ModMs: er.cfg.ModerationMs, Hardware: er.cfg.Hardware, RingBase: er.base(),
				HostRP: er.iova(er.rp), HostWP: er.iova(er.wp), DeviceRP: wire.Load64(er.ctx(), wire.CtxRP),
				Events: er.events.Load(),
			})
		}
	}
	c.procMu.Unlock()
	st.Stats = c.Stats()
	st.Recovery = c.Recovery()
	return st
}
