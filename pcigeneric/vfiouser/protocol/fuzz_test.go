package protocol

import (
	"testing"
)

// FuzzDecodeMessage feeds arbitrary bytes and descriptor counts to the
// decoder: it must never panic, and what it accepts must be consistent.
func FuzzDecodeMessage(f *testing.F) {
	seeds := [][]byte{
		EncodeMessage(1, CmdVersion, 0, 0, Version{Capabilities: ServerCapabilities}),
		EncodeMessage(2, CmdDMAMap, 0, 0, DMAMap{Argsz: 32, Flags: 3, IOVA: 0x4000_0000, Size: 1 << 20}),
		EncodeMessage(3, CmdDMAUnmap, 0, 0, DMAUnmap{Argsz: 24, IOVA: 0x4000_0000, Size: 1 << 20}),
		EncodeMessage(4, CmdDeviceGetInfo, 0, 0, DeviceInfo{Argsz: 16}),
		EncodeMessage(5, CmdRegionInfo, 0, 0, RegionInfo{Argsz: 32, Index: 7}),
		EncodeMessage(6, CmdIRQInfo, 0, 0, IRQInfo{Argsz: 16, Index: 1}),
		EncodeMessage(7, CmdSetIRQs, 0, 0, SetIRQs{Flags: IRQDataEventfd | IRQActionTrig, Index: 1, Count: 1}),
		EncodeMessage(7, CmdSetIRQs, 0, 0, SetIRQs{Flags: IRQDataBool | IRQActionTrig, Index: 1, Count: 2, Data: []byte{1, 0}}),
		EncodeMessage(8, CmdRegionRead, 0, 0, RegionAccess{Offset: 0x48, Count: 4}),
		EncodeMessage(8, CmdRegionRead, FlagReply, 0, RegionAccess{Offset: 0x48, Count: 4, Data: []byte{1, 2, 3, 4}}),
		EncodeMessage(9, CmdRegionWrite, FlagNoReply, 0, RegionAccess{Offset: 0x38, Count: 4, Data: []byte{0, 2, 0, 0}}),
		EncodeMessage(10, CmdDMARead, 0, 0, DMAAccess{Address: 0x4000_0000, Count: 8}),
		EncodeMessage(11, CmdDMAWrite, 0, 0, DMAAccess{Address: 0x4000_0000, Count: 2, Data: []byte{1, 2}}),
		EncodeMessage(12, CmdDeviceReset, 0, 0, nil),
		EncodeMessage(13, CmdRegionRead, FlagReply|FlagError, 22, nil),
	}
	for i, s := range seeds {
		f.Add(s, uint8(i%2))
	}
	f.Fuzz(func(t *testing.T, data []byte, nfds uint8) {
		if len(data) < HeaderSize {
			if _, err := DecodeMessage(data, nil, int(nfds)); err == nil {
				t.Fatal("short header accepted")
			}
			return
		}
		m, err := DecodeMessage(data[:HeaderSize], data[HeaderSize:], int(nfds%20))
		if err != nil {
			return
		}
		if int(m.Header.Size) != len(data) {
			t.Fatalf("size %d for %d bytes accepted", m.Header.Size, len(data))
		}
		// A command body re-encodes to a message the decoder accepts again.
		if e, ok := m.Body.(encoder); ok && !m.Header.IsReply() {
			if _, ok := m.Body.(Version); ok {
				return // the capabilities string loses what follows a NUL
			}
			re := EncodeMessage(m.Header.ID, m.Header.Cmd, m.Header.Flags, 0, e)
			if _, err := DecodeMessage(re[:HeaderSize], re[HeaderSize:], int(nfds%20)); err != nil {
				t.Fatalf("re-encoded %s rejected: %v", m.Header.Cmd, err)
			}
		}
	})
}
