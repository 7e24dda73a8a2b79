package wire

import (
	"fmt"
	"time"
)

// Direction is the direction of a channel's data.
type Direction uint8

// Channel directions. Uplink channels have even numbers, downlink odd ones.
const (
	Uplink   Direction = 1 // host to device ("outbound")
	Downlink Direction = 2 // device to host ("inbound")
)

// String returns "UL" or "DL".
func (d Direction) String() string {
	switch d {
	case Uplink:
		return "UL"
	case Downlink:
		return "DL"
	}
	return fmt.Sprintf("DIR(%d)", uint8(d))
}

// EventRingKind says what an event ring carries.
type EventRingKind uint8

// Event ring kinds, after the event macros of Linux's pci_generic table.
const (
	EventCtrl   EventRingKind = iota // control and data, no moderation
	EventData                        // data, moderated
	EventSWData                      // software data, no moderation
	EventHWData                      // hardware data, dedicated to one channel
)

var erKindNames = []string{"CTRL", "DATA", "SW_DATA", "HW_DATA"}

// String returns the kind's name.
func (k EventRingKind) String() string {
	if int(k) < len(erKindNames) {
		return erKindNames[k]
	}
	return fmt.Sprintf("ERKIND(%d)", uint8(k))
}

// ChannelConfig describes one channel of a modem's configuration.
type ChannelConfig struct {
	Num          uint8     // channel number (0..127)
	Name         string    // e.g. "LOOPBACK", "IP_HW0"
	Elements     int       // transfer ring size in elements (power of two)
	EventRing    int       // index of the event ring receiving completions
	Dir          Direction // Uplink or Downlink
	EE           ExecEnv   // execution environment in which the channel exists
	Burst        bool      // hardware channel in burst (doorbell-less) mode
	DBModeSwitch bool      // re-enter doorbell mode on every M0 entry
}

// EventRingConfig describes one event ring of a modem's configuration.
type EventRingConfig struct {
	Elements     int           // ring size in elements (power of two)
	Kind         EventRingKind // what the ring carries
	ModerationMs int           // interrupt moderation time (INTMODT), ms
	Vector       int           // MSI vector index
	Hardware     bool          // hardware event ring (set up at mission mode)
	Channel      int           // dedicated channel for hardware rings, -1 otherwise
}

// ControllerConfig is a modem's static MHI configuration: its channels and
// event rings. It is plain data, from a device-table entry (pcigeneric): the
// host builds its mhi.Controller from it and the mock modem its ep.Device.
type ControllerConfig struct {
	MaxChannels     int
	Timeout         time.Duration // command and state timeout
	ReadyTimeout    time.Duration // READY wait, when longer than Timeout
	Channels        []ChannelConfig
	EventRings      []EventRingConfig
	CommandElements int // command ring size in elements
}

// Channel returns the configuration of channel num.
func (c *ControllerConfig) Channel(num uint8) (ChannelConfig, bool) {
	for _, ch := range c.Channels {
		if ch.Num == num {
			return ch, true
		}
	}
	return ChannelConfig{}, false
}

// ChannelByName returns the configuration of the named channel in direction d.
func (c *ControllerConfig) ChannelByName(name string, d Direction) (ChannelConfig, bool) {
	for _, ch := range c.Channels {
		if ch.Name == name && ch.Dir == d {
			return ch, true
		}
	}
	return ChannelConfig{}, false
}

// HWEventRings returns the number of hardware event rings.
func (c *ControllerConfig) HWEventRings() int {
	n := 0
	for _, er := range c.EventRings {
		if er.Hardware {
			n++
		}
	}
	return n
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// Validate checks the configuration for internal consistency.
func (c *ControllerConfig) Validate() error {
	if c.MaxChannels <= 0 || c.MaxChannels > MaxDoorbellChannels {
		return fmt.Errorf("%w: max channels %d outside 1..%d", ErrConfig, c.MaxChannels, MaxDoorbellChannels)
	}
	if len(c.EventRings) == 0 || len(c.EventRings) > 255 {
		return fmt.Errorf("%w: %d event rings, need 1..255", ErrConfig, len(c.EventRings))
	}
	if !isPow2(c.CommandElements) || c.CommandElements < 2 {
		return fmt.Errorf("%w: command ring of %d elements is not a power of two >= 2", ErrConfig, c.CommandElements)
	}
	for i, er := range c.EventRings {
		if !isPow2(er.Elements) || er.Elements < 2 {
			return fmt.Errorf("%w: event ring %d: %d elements is not a power of two >= 2", ErrConfig, i, er.Elements)
		}
		if er.ModerationMs < 0 || er.ModerationMs > 0xFFFF {
			return fmt.Errorf("%w: event ring %d: moderation %d ms outside 0..65535", ErrConfig, i, er.ModerationMs)
		}
	}
	seen := map[uint8]bool{}
	for _, ch := range c.Channels {
		if int(ch.Num) >= c.MaxChannels {
			return fmt.Errorf("%w: channel %d (%s) beyond max channels %d", ErrConfig, ch.Num, ch.Name, c.MaxChannels)
		}
		if seen[ch.Num] {
			return fmt.Errorf("%w: channel %d (%s) listed twice", ErrConfig, ch.Num, ch.Name)
		}
		seen[ch.Num] = true
		if !isPow2(ch.Elements) || ch.Elements < 2 {
			return fmt.Errorf("%w: channel %d (%s): %d elements is not a power of two >= 2", ErrConfig, ch.Num, ch.Name, ch.Elements)
		}
		if ch.EventRing < 0 || ch.EventRing >= len(c.EventRings) {
			return fmt.Errorf("%w: channel %d (%s): event ring %d does not exist", ErrConfig, ch.Num, ch.Name, ch.EventRing)
		}
		want := Uplink
		if ch.Num%2 == 1 {
			want = Downlink
		}
		if ch.Dir != want {
			return fmt.Errorf("%w: channel %d (%s) must be %s", ErrConfig, ch.Num, ch.Name, want)
		}
	}
	return nil
}

// WithLoopback returns a copy of c that has a LOOPBACK channel pair on
// channels 0 and 1 (32 elements, event ring 0), as the mock modem offers on
// every model; c is returned unchanged when channel 0 or 1 is already used.
func (c ControllerConfig) WithLoopback() ControllerConfig {
	if _, ok := c.Channel(0); ok {
		return c
	}
	if _, ok := c.Channel(1); ok {
		return c
	}
	chs := make([]ChannelConfig, 0, len(c.Channels)+2)
	chs = append(chs,
		ChannelConfig{Num: 0, Name: "LOOPBACK", Elements: 32, EventRing: 0, Dir: Uplink, EE: EEAMSS},
		ChannelConfig{Num: 1, Name: "LOOPBACK", Elements: 32, EventRing: 0, Dir: Downlink, EE: EEAMSS})
	c.Channels = append(chs, c.Channels...)
	return c
}
