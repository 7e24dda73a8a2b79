package ep

import "context"

// LoopbackName is the name of the channel pair served by Loopback.
const LoopbackName = "LOOPBACK"

// Loopback is the built-in Function of the LOOPBACK pair (channels 0/1):
// every uplink transfer is queued byte for byte as one downlink transfer.
// When the host posts no downlink buffers the downlink queue fills, Send
// blocks, and the uplink channel stops consuming until there is room:
// nothing is dropped except by a reset, and that is counted.
type Loopback struct{}

// Receive implements Function.
func (Loopback) Receive(ctx context.Context, p *Pipe, transfer []byte) error {
	return p.Send(ctx, transfer)
}
