package mhinet

// Packet is one received IP packet: a view into the receive buffer it
// arrived in. Ownership rule: the receiver owns the Packet until it calls
// Release, exactly once; the host does not reuse the bytes until then, and
// the buffer returns to the pool when the last packet cut from it is
// released. Copy Data to keep it longer. With copy-on-receive
// (Config.RxCopy, the default for devices the transport does not trust) the
// bytes are host memory the device cannot reach, so they also stay
// unchanged; with zero-copy they are the DMA buffer, and the device can
// change them while the receiver holds them. Packet values are small and
// are passed in slices owned by the caller, so delivery does not allocate.
type Packet struct {
	Data []byte
	// Mux is the wire id the packet came on: the QMAP mux id or the MBIM
	// session id of its NDP (0 for raw IP).
	Mux uint8
	// Session is the session number N the packet belongs to: Mux minus
	// the device's session base (Config.Session, as FollowSession
	// follows it), or Mux itself when Mux is below the base (0 for raw
	// IP). tun.Mux routes by it.
	Session uint8
	buf     *rxBuffer
}

// Release gives the packet's share of its buffer back.
func (p Packet) Release() {
	if p.buf != nil {
		p.buf.release()
	}
}

// Receiver takes received packets. Receive is called from the device's
// receive goroutine with one batch (the packets of one aggregate); the slice
// is reused after the call, the packets are the receiver's to Release.
type Receiver interface {
	Receive(pkts []Packet)
}

// ReceiverFunc adapts a function to Receiver.
type ReceiverFunc func(pkts []Packet)

// Receive implements Receiver.
func (f ReceiverFunc) Receive(pkts []Packet) { f(pkts) }
