// Package protocol is the vfio-user wire protocol that the server
// (package pcigeneric/vfiouser) and the client (package
// pcigeneric/vfiouser/client) speak: version 0.0 as QEMU's vfio-user-pci
// client speaks it. Every message is a 16-byte little-endian header
// followed by a command-specific body (DecodeMessage, EncodeMessage); file
// descriptors (DMA memory, eventfds) travel as SCM_RIGHTS ancillary data
// on the message's first byte, framed by a Conn on a unix stream socket.
// It also holds what both ends agree on beyond the messages: the served
// function's configuration-space layout (Cfg*), the server's capabilities
// and the refusals a client may get (ErrBusy, ErrPeerRefused). It links
// nothing of gomhi's.
package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors. Decoding errors wrap ErrMalformed.
var (
	// ErrMalformed: a message does not have the size, flags or fields its
	// command requires.
	ErrMalformed = errors.New("vfiouser: malformed message")
	// ErrUnknownCommand: a message names a command this package does not
	// implement.
	ErrUnknownCommand = errors.New("vfiouser: unknown command")
	// ErrUnexpectedFDs: a message carries file descriptors where none (or
	// fewer) are expected.
	ErrUnexpectedFDs = errors.New("vfiouser: unexpected file descriptors")
	// ErrRemote: the peer answered with an error reply.
	ErrRemote = errors.New("vfiouser: error reply")
	// ErrClosed: the connection or transport is closed.
	ErrClosed = errors.New("vfiouser: closed")
	// ErrTimeout: the peer did not answer in time.
	ErrTimeout = errors.New("vfiouser: timeout")
	// ErrBusy: the server already serves a client. The server returns it
	// for a connection it turns away, and a client's setup fails with it
	// when the server refused it so (an EBUSY error reply to VERSION).
	ErrBusy = errors.New("vfiouser: device busy with another client")
	// ErrPeerRefused: the server refused the connecting process because it
	// is neither root nor the user that owns the server's socket. A
	// client's setup fails with it (wrapped) when the server answers
	// VERSION with EPERM.
	ErrPeerRefused = errors.New("vfiouser: refused: only root and the socket's owner may connect")
	// ErrNotSocket: the path exists but is not a unix socket.
	ErrNotSocket = errors.New("vfiouser: not a unix socket")
)

// HeaderSize is the size of the message header.
const HeaderSize = 16

// MaxDataXfer is the largest data transfer in one REGION_READ/WRITE or
// DMA_READ/WRITE message that this package sends or accepts.
const MaxDataXfer = 1 << 20

// MaxMessageSize is the largest message accepted: header, the largest fixed
// body and MaxDataXfer bytes of data. Bigger sizes in a header end the
// connection.
const MaxMessageSize = HeaderSize + 32 + MaxDataXfer

// MaxFDs is the largest number of file descriptors accepted with one message.
const MaxFDs = 16

// ServerCapabilities is the capabilities JSON the server sends in its
// VERSION reply (no write_multiple: REGION_WRITE_MULTI is not implemented).
const ServerCapabilities = `{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535}}`

// Command is a vfio-user command number.
type Command uint16

// Commands of vfio-user 0.0.
const (
	CmdVersion         Command = 1
	CmdDMAMap          Command = 2
	CmdDMAUnmap        Command = 3
	CmdDeviceGetInfo   Command = 4
	CmdRegionInfo      Command = 5
	CmdRegionIOFDs     Command = 6
	CmdIRQInfo         Command = 7
	CmdSetIRQs         Command = 8
	CmdRegionRead      Command = 9
	CmdRegionWrite     Command = 10
	CmdDMARead         Command = 11
	CmdDMAWrite        Command = 12
	CmdDeviceReset     Command = 13
	CmdRegionWriteMult Command = 15
)

var commandNames = map[Command]string{
	CmdVersion: "VERSION", CmdDMAMap: "DMA_MAP", CmdDMAUnmap: "DMA_UNMAP",
	CmdDeviceGetInfo: "DEVICE_GET_INFO", CmdRegionInfo: "DEVICE_GET_REGION_INFO",
	CmdRegionIOFDs: "DEVICE_GET_REGION_IO_FDS", CmdIRQInfo: "DEVICE_GET_IRQ_INFO",
	CmdSetIRQs: "DEVICE_SET_IRQS", CmdRegionRead: "REGION_READ", CmdRegionWrite: "REGION_WRITE",
	CmdDMARead: "DMA_READ", CmdDMAWrite: "DMA_WRITE", CmdDeviceReset: "DEVICE_RESET",
	CmdRegionWriteMult: "REGION_WRITE_MULTI",
}

// String returns the command's protocol name.
func (c Command) String() string {
	if s, ok := commandNames[c]; ok {
		return s
	}
	return fmt.Sprintf("CMD_%d", uint16(c))
}

// Header flags.
const (
	flagTypeMask uint32 = 0xf  // message type: 0 command, 1 reply
	FlagReply    uint32 = 0x1  // the message is a reply
	FlagNoReply  uint32 = 0x10 // the sender expects no reply (commands only)
	FlagError    uint32 = 0x20 // the reply reports an error in Header.Error
	knownFlags          = flagTypeMask | FlagNoReply | FlagError
)

// Header is the header of every message.
type Header struct {
	ID    uint16  // message ID; a reply reuses the command's
	Cmd   Command // command; a reply reuses the command's
	Size  uint32  // size of the whole message including the header
	Flags uint32  // FlagReply, FlagNoReply, FlagError
	Error uint32  // errno of an error reply
}

// IsReply reports whether h is the header of a reply.
func (h Header) IsReply() bool { return h.Flags&flagTypeMask == FlagReply }

// Encode writes h into b[:HeaderSize].
func (h Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], h.ID)
	binary.LittleEndian.PutUint16(b[2:], uint16(h.Cmd))
	binary.LittleEndian.PutUint32(b[4:], h.Size)
	binary.LittleEndian.PutUint32(b[8:], h.Flags)
	binary.LittleEndian.PutUint32(b[12:], h.Error)
}

// DecodeHeader parses and checks a message header: its length, its flags
// and its size against HeaderSize and MaxMessageSize.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) != HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes", ErrMalformed, len(b))
	}
	h := Header{
		ID:    binary.LittleEndian.Uint16(b[0:]),
		Cmd:   Command(binary.LittleEndian.Uint16(b[2:])),
		Size:  binary.LittleEndian.Uint32(b[4:]),
		Flags: binary.LittleEndian.Uint32(b[8:]),
		Error: binary.LittleEndian.Uint32(b[12:]),
	}
	switch {
	case h.Size < HeaderSize || h.Size > MaxMessageSize:
		return h, fmt.Errorf("%w: message size %d", ErrMalformed, h.Size)
	case h.Flags&^knownFlags != 0:
		return h, fmt.Errorf("%w: unknown flags 0x%x", ErrMalformed, h.Flags)
	case h.Flags&flagTypeMask > FlagReply:
		return h, fmt.Errorf("%w: message type %d", ErrMalformed, h.Flags&flagTypeMask)
	case h.IsReply() && h.Flags&FlagNoReply != 0:
		return h, fmt.Errorf("%w: reply with NO_REPLY", ErrMalformed)
	case !h.IsReply() && (h.Flags&FlagError != 0 || h.Error != 0):
		return h, fmt.Errorf("%w: command with an error", ErrMalformed)
	}
	return h, nil
}

// Version is the body of VERSION (command and reply).
type Version struct {
	Major, Minor uint16
	// Capabilities is the JSON capabilities object (without the NUL).
	Capabilities string
}

// DMAMap flags.
const (
	DMAFlagRead  uint32 = 1
	DMAFlagWrite uint32 = 2
)

// DMAUnmapAll in DMAUnmap.Flags unmaps every region.
const DMAUnmapAll uint32 = 2

// DMAMap is the body of a DMA_MAP command: the client makes [IOVA,
// IOVA+Size) reachable, backed by the passed fd at Offset if it passed one.
type DMAMap struct {
	Argsz, Flags       uint32
	Offset, IOVA, Size uint64
}

// DMAUnmap is the body of DMA_UNMAP (command and reply).
type DMAUnmap struct {
	Argsz, Flags uint32
	IOVA, Size   uint64
}

// Device info flags.
const (
	DeviceFlagReset uint32 = 1
	DeviceFlagPCI   uint32 = 2
)

// DeviceInfo is the body of DEVICE_GET_INFO (the command carries Argsz only,
// or the whole struct).
type DeviceInfo struct {
	Argsz, Flags, NumRegions, NumIRQs uint32
}

// Region flags and PCI region indices.
const (
	RegionFlagRead  uint32 = 1
	RegionFlagWrite uint32 = 2
	regionFlagMmap  uint32 = 4

	RegionBAR0   = 0
	RegionBAR2   = 2
	RegionROM    = 6
	RegionConfig = 7
	NumRegions   = 9
)

// RegionInfo is the body of DEVICE_GET_REGION_INFO (command and reply).
type RegionInfo struct {
	Argsz, Flags, Index, CapOffset uint32
	Size, Offset                   uint64
}

// IRQ info flags and PCI IRQ indices.
const (
	IRQInfoEventfd  uint32 = 1
	IRQInfoMaskable uint32 = 2
	IRQInfoNoResize uint32 = 8

	IRQINTx = 0
	IRQMSI  = 1
	IRQMSIX = 2
	IRQErr  = 3
	IRQReq  = 4
	NumIRQs = 5
)

// IRQInfo is the body of DEVICE_GET_IRQ_INFO (command and reply).
type IRQInfo struct {
	Argsz, Flags, Index, Count uint32
}

// SET_IRQS flags: one data type and one action.
const (
	IRQDataNone    uint32 = 1
	IRQDataBool    uint32 = 2
	IRQDataEventfd uint32 = 4
	IRQActionMask  uint32 = 8
	IRQActionUnmsk uint32 = 0x10
	IRQActionTrig  uint32 = 0x20
	irqDataMask           = 0x7
	irqActionMask         = 0x38
)

// SetIRQs is the body of a DEVICE_SET_IRQS command. With IRQDataEventfd the
// message carries Count eventfds, or none to de-assign those vectors; with
// IRQDataBool, Data holds Count bytes.
type SetIRQs struct {
	Argsz, Flags, Index, Start, Count uint32
	Data                              []byte
}

// DataType returns the data type of s.Flags: IRQDataNone, IRQDataBool or
// IRQDataEventfd (one of them once DecodeMessage accepted s).
func (s SetIRQs) DataType() uint32 { return s.Flags & irqDataMask }

// Action returns the action of s.Flags: IRQActionMask, IRQActionUnmsk or
// IRQActionTrig (one of them once DecodeMessage accepted s).
func (s SetIRQs) Action() uint32 { return s.Flags & irqActionMask }

// RegionAccess is the body of REGION_READ and REGION_WRITE: Data is the
// written data (write command) or the read data (read reply), else nil.
type RegionAccess struct {
	Offset uint64
	Region uint32
	Count  uint32
	Data   []byte
}

// DMAAccess is the body of DMA_READ and DMA_WRITE: Data is the written data
// (write command) or the read data (read reply), else nil.
type DMAAccess struct {
	Address, Count uint64
	Data           []byte
}

// Message is a decoded message. Body is one of Version, DMAMap, DMAUnmap,
// DeviceInfo, RegionInfo, IRQInfo, SetIRQs, RegionAccess, DMAAccess, or nil
// for bodiless messages (DEVICE_RESET, header-only replies, error replies).
type Message struct {
	Header Header
	Body   any
}

func malformed(h Header, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s: %s", ErrMalformed, h.Cmd, kind(h), fmt.Sprintf(format, args...))
}

func kind(h Header) string {
	if h.IsReply() {
		return "reply"
	}
	return "command"
}

// DecodeMessage decodes a message from its header, its payload (the bytes
// after the header) and the number of file descriptors that came with it.
// It checks the sizes the command requires, the flags and the fd count;
// it never panics. Unknown commands give ErrUnknownCommand; descriptors
// where none are expected give ErrUnexpectedFDs; everything else wrong gives
// ErrMalformed. Data slices alias payload.
func DecodeMessage(hdr, payload []byte, nfds int) (Message, error) {
	h, err := DecodeHeader(hdr)
	if err != nil {
		return Message{Header: h}, err
	}
	m := Message{Header: h}
	if int64(h.Size) != int64(HeaderSize)+int64(len(payload)) {
		return m, malformed(h, "size %d with %d payload bytes", h.Size, len(payload))
	}
	if nfds < 0 || nfds > MaxFDs {
		return m, fmt.Errorf("%w: %d descriptors", ErrUnexpectedFDs, nfds)
	}
	reply := h.IsReply()
	if reply && h.Flags&FlagError != 0 {
		// An error reply has no body, whatever the command was.
		if len(payload) > 4096 || nfds > 0 {
			return m, malformed(h, "error reply with %d bytes and %d descriptors", len(payload), nfds)
		}
		return m, nil
	}
	if _, ok := commandNames[h.Cmd]; !ok || h.Cmd == CmdRegionIOFDs || h.Cmd == CmdRegionWriteMult {
		if nfds > 0 {
			return m, fmt.Errorf("%w: %d with %s", ErrUnexpectedFDs, nfds, h.Cmd)
		}
		return m, fmt.Errorf("%w: %s", ErrUnknownCommand, h.Cmd)
	}
	body, wantFDs, err := decodeBody(h, payload, nfds)
	if err != nil {
		return m, err
	}
	m.Body = body
	if reply {
		wantFDs = 0
	}
	if nfds > wantFDs {
		return m, fmt.Errorf("%w: %d with %s %s", ErrUnexpectedFDs, nfds, h.Cmd, kind(h))
	}
	return m, nil
}

// decodeBody decodes and checks the body of a known command or its
// (non-error) reply, one decoder per command. It returns the body (nil for
// the commands and replies that have none) and the largest descriptor count
// the command allows; the caller checks nfds against it. On error the body
// is to be dropped.
func decodeBody(h Header, payload []byte, nfds int) (body any, wantFDs int, err error) {
	switch h.Cmd {
	case CmdVersion:
		return decodeVersion(h, payload)
	case CmdDMAMap:
		return decodeDMAMap(h, payload)
	case CmdDMAUnmap:
		return decodeDMAUnmap(h, payload)
	case CmdDeviceGetInfo:
		return decodeDeviceInfo(h, payload)
	case CmdRegionInfo:
		return decodeRegionInfo(h, payload)
	case CmdIRQInfo:
		return decodeIRQInfo(h, payload)
	case CmdSetIRQs:
		return decodeSetIRQs(h, payload, nfds)
	case CmdRegionRead, CmdRegionWrite:
		a, err := DecodeRegionAccess(h, payload)
		if err != nil {
			return nil, 0, err
		}
		return a, 0, nil
	case CmdDMARead, CmdDMAWrite:
		return decodeDMAAccess(h, payload)
	case CmdDeviceReset:
		if len(payload) != 0 {
			return nil, 0, malformed(h, "%d bytes", len(payload))
		}
	}
	return nil, 0, nil
}

// decodeVersion decodes a VERSION command or reply: the version and the
// capabilities JSON up to its NUL.
func decodeVersion(h Header, payload []byte) (any, int, error) {
	if len(payload) < 4 {
		return nil, 0, malformed(h, "%d bytes", len(payload))
	}
	v := Version{Major: le16(payload[0:]), Minor: le16(payload[2:])}
	caps := payload[4:]
	for i, c := range caps {
		if c == 0 {
			caps = caps[:i]
			break
		}
	}
	v.Capabilities = string(caps)
	return v, 0, nil
}

// decodeDMAMap decodes a DMA_MAP command (which may carry the region's
// descriptor) or its empty reply.
func decodeDMAMap(h Header, payload []byte) (any, int, error) {
	if h.IsReply() {
		if len(payload) != 0 {
			return nil, 0, malformed(h, "%d bytes", len(payload))
		}
		return nil, 0, nil
	}
	if len(payload) != 32 {
		return nil, 0, malformed(h, "%d bytes, want 32", len(payload))
	}
	d := DMAMap{Argsz: le32(payload[0:]), Flags: le32(payload[4:]), Offset: le64(payload[8:]), IOVA: le64(payload[16:]), Size: le64(payload[24:])}
	if d.Argsz != 32 || d.Flags&^(DMAFlagRead|DMAFlagWrite) != 0 || d.Size == 0 || d.IOVA+d.Size < d.IOVA {
		return nil, 0, malformed(h, "argsz %d flags 0x%x iova 0x%x size 0x%x", d.Argsz, d.Flags, d.IOVA, d.Size)
	}
	return d, 1, nil
}

// decodeDMAUnmap decodes a DMA_UNMAP command or its reply (empty, or the
// command echoed).
func decodeDMAUnmap(h Header, payload []byte) (any, int, error) {
	if h.IsReply() && len(payload) == 0 {
		return nil, 0, nil
	}
	if len(payload) != 24 {
		return nil, 0, malformed(h, "%d bytes, want 24", len(payload))
	}
	d := DMAUnmap{Argsz: le32(payload[0:]), Flags: le32(payload[4:]), IOVA: le64(payload[8:]), Size: le64(payload[16:])}
	// The range may end exactly at 2^64: QEMU unmaps "from here to the end
	// of the address space" when a vIOMMU notifier goes away (the intel-iommu
	// region above the interrupt window at guest power-off: iova 0xfef00000,
	// size 2^64 - 0xfef00000). Only a range past 2^64 is malformed.
	if d.Argsz != 24 || d.Flags&^DMAUnmapAll != 0 || d.Size != 0 && d.IOVA+(d.Size-1) < d.IOVA {
		return nil, 0, malformed(h, "argsz %d flags 0x%x iova 0x%x size 0x%x", d.Argsz, d.Flags, d.IOVA, d.Size)
	}
	return d, 0, nil
}

// decodeDeviceInfo decodes a DEVICE_GET_INFO command (4 to 16 bytes, whole
// words) or its 16-byte reply.
func decodeDeviceInfo(h Header, payload []byte) (any, int, error) {
	reply := h.IsReply()
	if reply && len(payload) != 16 || !reply && (len(payload) < 4 || len(payload) > 16 || len(payload)%4 != 0) {
		return nil, 0, malformed(h, "%d bytes", len(payload))
	}
	var p [16]byte
	copy(p[:], payload)
	return DeviceInfo{Argsz: le32(p[0:]), Flags: le32(p[4:]), NumRegions: le32(p[8:]), NumIRQs: le32(p[12:])}, 0, nil
}

// decodeRegionInfo decodes a DEVICE_GET_REGION_INFO command (32 bytes) or
// its reply (32 bytes or more, with capabilities).
func decodeRegionInfo(h Header, payload []byte) (any, int, error) {
	if len(payload) < 32 || !h.IsReply() && len(payload) != 32 {
		return nil, 0, malformed(h, "%d bytes", len(payload))
	}
	return RegionInfo{Argsz: le32(payload[0:]), Flags: le32(payload[4:]), Index: le32(payload[8:]),
		CapOffset: le32(payload[12:]), Size: le64(payload[16:]), Offset: le64(payload[24:])}, 0, nil
}

// decodeIRQInfo decodes a DEVICE_GET_IRQ_INFO command or reply (16 bytes).
func decodeIRQInfo(h Header, payload []byte) (any, int, error) {
	if len(payload) != 16 {
		return nil, 0, malformed(h, "%d bytes, want 16", len(payload))
	}
	return IRQInfo{Argsz: le32(payload[0:]), Flags: le32(payload[4:]), Index: le32(payload[8:]), Count: le32(payload[12:])}, 0, nil
}

// decodeSetIRQs decodes a DEVICE_SET_IRQS command, whose flags must name
// exactly one data kind and one action, and whose data must match its count
// (Count eventfds, or none to de-assign), or its empty reply.
func decodeSetIRQs(h Header, payload []byte, nfds int) (any, int, error) {
	if h.IsReply() {
		if len(payload) != 0 {
			return nil, 0, malformed(h, "%d bytes", len(payload))
		}
		return nil, 0, nil
	}
	if len(payload) < 20 {
		return nil, 0, malformed(h, "%d bytes", len(payload))
	}
	s := SetIRQs{Argsz: le32(payload[0:]), Flags: le32(payload[4:]), Index: le32(payload[8:]),
		Start: le32(payload[12:]), Count: le32(payload[16:]), Data: payload[20:]}
	data, action := s.Flags&irqDataMask, s.Flags&irqActionMask
	if s.Flags&^(irqDataMask|irqActionMask) != 0 || data&(data-1) != 0 || data == 0 || action&(action-1) != 0 || action == 0 {
		return nil, 0, malformed(h, "flags 0x%x", s.Flags)
	}
	if s.Start > 1<<16 || s.Count > 1<<16 || int(s.Argsz) != len(payload) {
		return nil, 0, malformed(h, "argsz %d start %d count %d", s.Argsz, s.Start, s.Count)
	}
	wantFDs := 0
	switch data {
	case IRQDataNone:
		if len(s.Data) != 0 {
			return nil, 0, malformed(h, "%d data bytes with DATA_NONE", len(s.Data))
		}
		s.Data = nil
	case IRQDataBool:
		if len(s.Data) != int(s.Count) {
			return nil, 0, malformed(h, "%d bool bytes for count %d", len(s.Data), s.Count)
		}
	case IRQDataEventfd:
		if len(s.Data) != 0 {
			return nil, 0, malformed(h, "%d data bytes with DATA_EVENTFD", len(s.Data))
		}
		s.Data = nil
		// Count descriptors, or none: a run of vectors without
		// eventfd (de-assigned), as QEMU sends the -1 entries of its
		// VFIO request.
		if nfds != int(s.Count) && nfds != 0 {
			if nfds > int(s.Count) {
				return nil, 0, fmt.Errorf("%w: %d eventfds for count %d", ErrUnexpectedFDs, nfds, s.Count)
			}
			return nil, 0, malformed(h, "%d eventfds for count %d (want %d, or none to de-assign)", nfds, s.Count, s.Count)
		}
		wantFDs = nfds
	}
	return s, wantFDs, nil
}

// decodeDMAAccess decodes a DMA_READ or DMA_WRITE command or reply: the
// data follows the 16-byte head on a write command and a read reply.
func decodeDMAAccess(h Header, payload []byte) (any, int, error) {
	if len(payload) < 16 {
		return nil, 0, malformed(h, "%d bytes", len(payload))
	}
	a := DMAAccess{Address: le64(payload[0:]), Count: le64(payload[8:])}
	withData := (h.Cmd == CmdDMARead) == h.IsReply()
	want := uint64(16)
	if a.Count > MaxDataXfer {
		return nil, 0, malformed(h, "count %d", a.Count)
	}
	if withData {
		want += a.Count
		a.Data = payload[16:]
	}
	if uint64(len(payload)) != want || a.Address+a.Count < a.Address {
		return nil, 0, malformed(h, "count %d with %d bytes", a.Count, len(payload))
	}
	return a, 0, nil
}

// DecodeRegionAccess decodes and checks the body of a REGION_READ or
// REGION_WRITE (command or reply) without boxing it: DecodeMessage's
// checks, for the servers' and clients' hot paths. Data aliases payload.
func DecodeRegionAccess(h Header, payload []byte) (RegionAccess, error) {
	if len(payload) < 16 {
		return RegionAccess{}, malformed(h, "%d bytes", len(payload))
	}
	a := RegionAccess{Offset: le64(payload[0:]), Region: le32(payload[8:]), Count: le32(payload[12:])}
	withData := (h.Cmd == CmdRegionRead) == h.IsReply()
	want := 16
	if withData {
		want += int(a.Count)
		a.Data = payload[16:]
	}
	if a.Count > MaxDataXfer || len(payload) != want || a.Offset+uint64(a.Count) < a.Offset {
		return RegionAccess{}, malformed(h, "count %d with %d bytes", a.Count, len(payload))
	}
	return a, nil
}

// AppendRegionAccess appends a whole REGION_READ or REGION_WRITE message
// (command or reply): header, the 16-byte head and data, if any. It is
// EncodeMessage for a RegionAccess body without boxing it.
func AppendRegionAccess(b []byte, id uint16, cmd Command, flags uint32, off uint64, region, count uint32, data []byte) []byte {
	b = appendHeader(b, id, cmd, flags, 0, 16+len(data))
	b = binary.LittleEndian.AppendUint64(b, off)
	b = binary.LittleEndian.AppendUint32(b, region)
	b = binary.LittleEndian.AppendUint32(b, count)
	return append(b, data...)
}

// appendHeader appends a header for a message of payload bytes.
func appendHeader(b []byte, id uint16, cmd Command, flags, errno uint32, payload int) []byte {
	var hb [HeaderSize]byte
	Header{ID: id, Cmd: cmd, Size: uint32(HeaderSize + payload), Flags: flags, Error: errno}.Encode(hb[:])
	return append(b, hb[:]...)
}

// Encode appends v's wire form.
func (v Version) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, v.Major)
	b = binary.LittleEndian.AppendUint16(b, v.Minor)
	b = append(b, v.Capabilities...)
	return append(b, 0)
}

// Encode appends d's wire form.
func (d DMAMap) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, d.Argsz)
	b = binary.LittleEndian.AppendUint32(b, d.Flags)
	b = binary.LittleEndian.AppendUint64(b, d.Offset)
	b = binary.LittleEndian.AppendUint64(b, d.IOVA)
	return binary.LittleEndian.AppendUint64(b, d.Size)
}

// Encode appends d's wire form.
func (d DMAUnmap) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, d.Argsz)
	b = binary.LittleEndian.AppendUint32(b, d.Flags)
	b = binary.LittleEndian.AppendUint64(b, d.IOVA)
	return binary.LittleEndian.AppendUint64(b, d.Size)
}

// Encode appends d's wire form.
func (d DeviceInfo) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, d.Argsz)
	b = binary.LittleEndian.AppendUint32(b, d.Flags)
	b = binary.LittleEndian.AppendUint32(b, d.NumRegions)
	return binary.LittleEndian.AppendUint32(b, d.NumIRQs)
}

// Encode appends r's wire form.
func (r RegionInfo) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, r.Argsz)
	b = binary.LittleEndian.AppendUint32(b, r.Flags)
	b = binary.LittleEndian.AppendUint32(b, r.Index)
	b = binary.LittleEndian.AppendUint32(b, r.CapOffset)
	b = binary.LittleEndian.AppendUint64(b, r.Size)
	return binary.LittleEndian.AppendUint64(b, r.Offset)
}

// Encode appends i's wire form.
func (i IRQInfo) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, i.Argsz)
	b = binary.LittleEndian.AppendUint32(b, i.Flags)
	b = binary.LittleEndian.AppendUint32(b, i.Index)
	return binary.LittleEndian.AppendUint32(b, i.Count)
}

// Encode appends s's wire form (Argsz is computed).
func (s SetIRQs) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(20+len(s.Data)))
	b = binary.LittleEndian.AppendUint32(b, s.Flags)
	b = binary.LittleEndian.AppendUint32(b, s.Index)
	b = binary.LittleEndian.AppendUint32(b, s.Start)
	b = binary.LittleEndian.AppendUint32(b, s.Count)
	return append(b, s.Data...)
}

// Encode appends a's wire form: the 16-byte head and then Data.
func (a RegionAccess) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, a.Offset)
	b = binary.LittleEndian.AppendUint32(b, a.Region)
	b = binary.LittleEndian.AppendUint32(b, a.Count)
	return append(b, a.Data...)
}

// Encode appends a's wire form: the 16-byte head and then Data.
func (a DMAAccess) Encode(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, a.Address)
	b = binary.LittleEndian.AppendUint64(b, a.Count)
	return append(b, a.Data...)
}

// encoder is implemented by every body type.
type encoder interface{ Encode([]byte) []byte }

// EncodeMessage returns the wire form of a message with header fields id,
// cmd, flags and errno and the given body (nil for none); Size is computed.
func EncodeMessage(id uint16, cmd Command, flags, errno uint32, body any) []byte {
	var p []byte
	if e, ok := body.(encoder); ok {
		p = e.Encode(make([]byte, 0, 64))
	}
	b := appendHeader(make([]byte, 0, HeaderSize+len(p)), id, cmd, flags, errno, len(p))
	return append(b, p...)
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
