package wire

import "encoding/binary"

// ContextSize is the size of a channel, event or command context: 44 bytes,
// with its 64-bit fields at 4-byte aligned offsets.
const ContextSize = 0x2C

// Offsets of the fields of a context.
const (
	CtxCfg   = 0x00 // chcfg / intmod / reserved
	CtxType  = 0x04 // chtype / ertype / reserved
	CtxIndex = 0x08 // erindex / msivec / reserved
	CtxRBase = 0x0C
	CtxRLen  = 0x14
	CtxRP    = 0x1C
	CtxWP    = 0x24
)

// chcfg field layout.
const (
	ChCfgStateMask = 0xFF
	ChCfgBrstShift = 8
	ChCfgBrstMask  = 0x300
	ChCfgPollShift = 10
	ChCfgPollMask  = 0xFC00
)

// Burst (doorbell) modes written into chcfg[9:8].
const (
	BurstDisable = 2
	BurstEnable  = 3
)

// Channel types (chtype).
const (
	ChTypeInvalid          = 0
	ChTypeOutbound         = 1
	ChTypeInbound          = 2
	ChTypeInboundCoalesced = 3
)

// Event context fields.
const (
	IntModTShift = 16
	IntModTMask  = 0xFFFF0000
	ERTypeValid  = 1
)

// Context is the decoded form of one 44-byte context.
type Context struct {
	Cfg   uint32
	Type  uint32
	Index uint32
	RBase uint64
	RLen  uint64
	RP    uint64
	WP    uint64
}

// Put writes c into b (at least ContextSize bytes).
func (c Context) Put(b []byte) {
	_ = b[ContextSize-1]
	le := binary.LittleEndian
	le.PutUint32(b[CtxCfg:], c.Cfg)
	le.PutUint32(b[CtxType:], c.Type)
	le.PutUint32(b[CtxIndex:], c.Index)
	le.PutUint64(b[CtxRBase:], c.RBase)
	le.PutUint64(b[CtxRLen:], c.RLen)
	le.PutUint64(b[CtxRP:], c.RP)
	le.PutUint64(b[CtxWP:], c.WP)
}

// ParseContext decodes a context from b (at least ContextSize bytes).
func ParseContext(b []byte) Context {
	_ = b[ContextSize-1]
	le := binary.LittleEndian
	return Context{
		Cfg:   le.Uint32(b[CtxCfg:]),
		Type:  le.Uint32(b[CtxType:]),
		Index: le.Uint32(b[CtxIndex:]),
		RBase: le.Uint64(b[CtxRBase:]),
		RLen:  le.Uint64(b[CtxRLen:]),
		RP:    le.Uint64(b[CtxRP:]),
		WP:    le.Uint64(b[CtxWP:]),
	}
}

// ChannelState returns the CHSTATE field of a channel context.
func (c Context) ChannelState() ChannelState { return ChannelState(c.Cfg & ChCfgStateMask) }

// BurstMode returns the BRSTMODE field of a channel context.
func (c Context) BurstMode() uint32 { return (c.Cfg & ChCfgBrstMask) >> ChCfgBrstShift }

// IntModT returns the interrupt moderation time (ms) of an event context.
func (c Context) IntModT() uint32 { return c.Cfg >> IntModTShift }
