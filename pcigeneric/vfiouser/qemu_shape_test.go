package vfiouser

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gomhi/gomhi/pcigeneric/vfiouser/protocol"
	"golang.org/x/sys/unix"
)

// qemuCaps is the capabilities string QEMU 11.1 sends in VERSION.
const qemuCaps = `{"capabilities":{"pgsizes":4096,"max_msg_fds":16,"max_dma_maps":65535,"max_data_xfer_size":1048576,"migration":{"pgsize":4096,"max_bitmap_size":1048576},"write_multiple":true}}`

// TestQEMURealizeSequence replays, message by message, what QEMU's
// vfio-user-pci client sends (as recorded in the reference notes) and
// checks the replies it relies on.
func TestQEMURealizeSequence(t *testing.T) {
	dev := newDevice(t)
	conn, done := serve(t, dev)
	w := protocol.NewConn(conn)
	le := binary.LittleEndian
	var id uint16
	send := func(cmd protocol.Command, flags uint32, body any, fds []int) protocol.Message {
		t.Helper()
		id++
		if err := w.WriteMessage(protocol.EncodeMessage(id, cmd, flags, 0, body), fds); err != nil {
			t.Fatal(err)
		}
		if flags&protocol.FlagNoReply != 0 {
			return protocol.Message{}
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		hdr, payload, rfds, err := w.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		m, err := protocol.DecodeMessage(hdr, payload, len(rfds))
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.ID != id || m.Header.Cmd != cmd || !m.Header.IsReply() {
			t.Fatalf("%s: reply header %+v", cmd, m.Header)
		}
		if m.Header.Flags&protocol.FlagError != 0 {
			t.Fatalf("%s: error %d", cmd, m.Header.Error)
		}
		return m
	}

	v := send(protocol.CmdVersion, 0, protocol.Version{Capabilities: qemuCaps}, nil).Body.(protocol.Version)
	if v.Major != 0 || v.Minor != 0 || v.Capabilities != protocol.ServerCapabilities {
		t.Fatalf("version reply %+v", v)
	}
	di := send(protocol.CmdDeviceGetInfo, 0, protocol.DeviceInfo{Argsz: 16}, nil).Body.(protocol.DeviceInfo)
	if di.Flags != protocol.DeviceFlagPCI|protocol.DeviceFlagReset || di.NumRegions != 9 || di.NumIRQs != 5 {
		t.Fatalf("device info %+v", di)
	}
	for i := range uint32(protocol.NumRegions) {
		ri := send(protocol.CmdRegionInfo, 0, protocol.RegionInfo{Argsz: 32, Index: i}, nil).Body.(protocol.RegionInfo)
		switch i {
		case protocol.RegionBAR0:
			if ri.Size != 4096 || ri.Flags != protocol.RegionFlagRead|protocol.RegionFlagWrite {
				t.Fatalf("BAR0 %+v", ri)
			}
		case protocol.RegionConfig:
			if ri.Size != 256 {
				t.Fatalf("config %+v", ri)
			}
		case protocol.RegionBAR2:
			if ri.Size != msixBARSize || ri.Flags != protocol.RegionFlagRead|protocol.RegionFlagWrite {
				t.Fatalf("BAR2 (MSI-X) %+v", ri)
			}
		default:
			if ri.Size != 0 {
				t.Fatalf("region %d %+v", i, ri)
			}
		}
	}
	if ii := send(protocol.CmdIRQInfo, 0, protocol.IRQInfo{Argsz: 16, Index: protocol.IRQErr}, nil).Body.(protocol.IRQInfo); ii.Count != 0 {
		t.Fatalf("ERR irq %+v", ii)
	}
	if ii := send(protocol.CmdIRQInfo, 0, protocol.IRQInfo{Argsz: 16, Index: protocol.IRQMSI}, nil).Body.(protocol.IRQInfo); ii.Count != 32 || ii.Flags&protocol.IRQInfoEventfd == 0 {
		t.Fatalf("MSI irq %+v", ii)
	}
	send(protocol.CmdDeviceReset, 0, nil, nil)

	// Config space in 4-byte reads, as QEMU reads it at realize.
	cfg := make([]byte, 0, protocol.ConfigSize)
	for off := 0; off < protocol.ConfigSize; off += 4 {
		a := send(protocol.CmdRegionRead, 0, protocol.RegionAccess{Offset: uint64(off), Region: protocol.RegionConfig, Count: 4}, nil).Body.(protocol.RegionAccess)
		cfg = append(cfg, a.Data...)
	}
	if le.Uint16(cfg[0:]) != dev.PCI.Vendor || le.Uint16(cfg[2:]) != dev.PCI.Device || le.Uint32(cfg[8:])>>8 != pciClass {
		t.Fatalf("config header % x", cfg[:16])
	}
	// Capability chain: MSI, then MSI-X with 32 entries, table at BAR2+0
	// and PBA at BAR2+0x800, then PM (D0 and D3hot, PME from both).
	if p := cfg[protocol.CfgCapPtr]; p != protocol.CfgMSI || cfg[p] != 0x05 || cfg[p+1] != protocol.CfgMSIX {
		t.Fatalf("MSI capability at 0x%x: % x", p, cfg[p:p+4])
	}
	if x := cfg[cfgPM:]; x[0] != 0x01 || x[1] != 0 || le.Uint16(x[2:]) != pmCapability || le.Uint16(x[4:])&pmcsrStateMask != powerD0 {
		t.Fatalf("PM capability % x", cfg[cfgPM:cfgPM+8])
	}
	if x := cfg[protocol.CfgMSIX:]; x[0] != 0x11 || x[1] != cfgPM || le.Uint16(x[2:])&0x7ff != 31 ||
		le.Uint32(x[4:]) != msixBAR || le.Uint32(x[8:]) != msixPBAOffset|msixBAR {
		t.Fatalf("MSI-X capability % x", cfg[protocol.CfgMSIX:protocol.CfgMSIX+12])
	}
	if ii := send(protocol.CmdIRQInfo, 0, protocol.IRQInfo{Argsz: 16, Index: protocol.IRQMSIX}, nil).Body.(protocol.IRQInfo); ii.Count != 32 || ii.Flags&protocol.IRQInfoEventfd == 0 {
		t.Fatalf("MSI-X irq %+v", ii)
	}

	// ROM area without fd, guest RAM with a memfd.
	send(protocol.CmdDMAMap, 0, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead, IOVA: 0xc0000, Size: 0x20000}, nil)
	fd, err := unix.MemfdCreate("ram", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	send(protocol.CmdDMAMap, 0, protocol.DMAMap{Argsz: 32, Flags: protocol.DMAFlagRead | protocol.DMAFlagWrite, Offset: 0, IOVA: 0x100000, Size: 1 << 20}, []int{fd})
	unix.Close(fd)

	// BAR programming and MSI enable through config writes (with replies).
	send(protocol.CmdRegionWrite, 0, protocol.RegionAccess{Offset: protocol.CfgBAR0, Region: protocol.RegionConfig, Count: 4, Data: le.AppendUint32(nil, 0)}, nil)
	send(protocol.CmdRegionWrite, 0, protocol.RegionAccess{Offset: protocol.CfgBAR1, Region: protocol.RegionConfig, Count: 4, Data: le.AppendUint32(nil, 1)}, nil)
	send(protocol.CmdRegionWrite, 0, protocol.RegionAccess{Offset: protocol.CfgCommand, Region: protocol.RegionConfig, Count: 2, Data: le.AppendUint16(nil, 0x107)}, nil)
	send(protocol.CmdRegionWrite, 0, protocol.RegionAccess{Offset: protocol.CfgMSI + 4, Region: protocol.RegionConfig, Count: 4, Data: le.AppendUint32(nil, 0xfee01004)}, nil)
	send(protocol.CmdRegionWrite, 0, protocol.RegionAccess{Offset: protocol.CfgMSI + 12, Region: protocol.RegionConfig, Count: 2, Data: le.AppendUint16(nil, 0x26)}, nil)
	send(protocol.CmdRegionWrite, 0, protocol.RegionAccess{Offset: protocol.CfgMSI + 2, Region: protocol.RegionConfig, Count: 2, Data: le.AppendUint16(nil, 0x0081|5<<1)}, nil)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	send(protocol.CmdSetIRQs, 0, protocol.SetIRQs{Flags: protocol.IRQDataEventfd | protocol.IRQActionTrig, Index: protocol.IRQMSI, Start: 0, Count: 1}, []int{efd})

	// Driver-style BAR accesses: reads answered, posted writes unanswered.
	bhi := le.Uint32(send(protocol.CmdRegionRead, 0, protocol.RegionAccess{Offset: 0x28, Region: protocol.RegionBAR0, Count: 4}, nil).Body.(protocol.RegionAccess).Data)
	if bhi == 0 || bhi >= 4096 {
		t.Fatalf("BHIOFF 0x%x", bhi)
	}
	send(protocol.CmdRegionWrite, protocol.FlagNoReply, protocol.RegionAccess{Offset: uint64(bhi) + 0x20, Region: protocol.RegionBAR0, Count: 4, Data: le.AppendUint32(nil, 0)}, nil)
	// Any vector folds onto the single enabled eventfd.
	send(protocol.CmdSetIRQs, 0, protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: protocol.IRQMSI, Start: 0, Count: 1}, nil)
	var cnt [8]byte
	if n, err := unix.Read(efd, cnt[:]); n != 8 || err != nil || le.Uint64(cnt[:]) != 1 {
		t.Fatalf("eventfd read %d %v %x", n, err, cnt)
	}
	dev.Modem() // the session's modem is attached
	send(protocol.CmdSetIRQs, 0, protocol.SetIRQs{Flags: protocol.IRQDataNone | protocol.IRQActionTrig, Index: protocol.IRQMSI}, nil)
	u := send(protocol.CmdDMAUnmap, 0, protocol.DMAUnmap{Argsz: 24, IOVA: 0x100000, Size: 1 << 20}, nil).Body.(protocol.DMAUnmap)
	if u.IOVA != 0x100000 || u.Size != 1<<20 {
		t.Fatalf("unmap reply %+v", u)
	}
	// At guest power-off with an intel-iommu, QEMU unmaps what its notifier
	// covered: from above the interrupt window to the end of the 64-bit
	// space (iova+size is 2^64). A reply, not an error.
	top := protocol.DMAUnmap{Argsz: 24, IOVA: 0xfef00000, Size: ^uint64(0) - 0xfef00000 + 1}
	if u := send(protocol.CmdDMAUnmap, 0, top, nil).Body.(protocol.DMAUnmap); u != top {
		t.Fatalf("unmap to the end of the address space: reply %+v", u)
	}
	conn.Close()
	if err := waitServe(t, done); err != nil {
		t.Fatal(err)
	}
	if s := dev.Stats(); s.Malformed != 0 || s.ErrorReplies != 0 || s.DMAMaps != 2 {
		t.Fatalf("stats %+v", s)
	}
}
