package qmap

// Command names (byte 0 of a command).
const (
	// CmdFlowDisable asks the peer to stop sending on a mux id.
	CmdFlowDisable = 1
	// CmdFlowEnable asks the peer to resume sending on a mux id.
	CmdFlowEnable = 2
)

// Command types (bits 1:0 of byte 1 of a command).
const (
	// CmdRequest is a request.
	CmdRequest = 0
	// CmdAck acknowledges a request.
	CmdAck = 1
	// CmdUnsupported answers a request the peer does not support.
	CmdUnsupported = 2
	// CmdInvalid answers a malformed request.
	CmdInvalid = 3
)

// Command is the body of a MAP command frame: command name, type,
// transaction id and the command's data.
type Command struct {
	Name uint8  // e.g. CmdFlowDisable
	Type uint8  // CmdRequest…CmdInvalid (2 bits)
	TxID uint32 // transaction id
	Data []byte // command data; from ParseCommand, a view into the frame
}

// Len returns the encoded size of c.
func (c Command) Len() int { return CommandHeaderLen + len(c.Data) }

// Put encodes c into b and returns the bytes written; it fails with
// ErrShortBuffer if b is shorter than c.Len().
func (c Command) Put(b []byte) (int, error) {
	n := c.Len()
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	b[0] = c.Name
	b[1] = c.Type & 3
	b[2], b[3] = 0, 0
	be.PutUint32(b[4:], c.TxID)
	copy(b[CommandHeaderLen:], c.Data)
	return n, nil
}

// ParseCommand decodes the command payload of a command frame (as handed
// to Parser.OnCommand). Data is a view into b. It fails with ErrTruncated
// if b is shorter than CommandHeaderLen.
func ParseCommand(b []byte) (Command, error) {
	if len(b) < CommandHeaderLen {
		return Command{}, ErrTruncated
	}
	return Command{
		Name: b[0],
		Type: b[1] & 3,
		TxID: be.Uint32(b[4:]),
		Data: b[CommandHeaderLen:len(b):len(b)],
	}, nil
}
