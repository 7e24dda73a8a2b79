package vfio

import (
	"errors"
	"testing"
)

func TestRegionInfo(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	tests := []struct {
		index int
		want  Region
		err   error
	}{
		{RegionBAR0, Region{Index: 0, Flags: RegionFlagRead | RegionFlagWrite | RegionFlagMmap, Size: 16 << 10, Offset: 0}, nil},
		{RegionBAR1, Region{Index: 1, Offset: 1 << 40}, nil},
		{RegionBAR2, Region{Index: 2, Flags: RegionFlagRead | RegionFlagWrite, Size: 4 << 10, Offset: 2 << 40}, nil},
		{RegionConfig, Region{Index: 7, Flags: RegionFlagRead | RegionFlagWrite, Size: 4 << 10, Offset: 0x70000000000}, nil},
		{9, Region{}, ErrNoRegion},
		{-1, Region{}, ErrNoRegion},
	}
	for _, tc := range tests {
		got, err := d.Region(tc.index)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("Region(%d) = %+v, %v; want %+v, %v", tc.index, got, err, tc.want, tc.err)
		}
	}
	before := f.k.ioctls[ioctlDeviceGetRegion]
	_, _ = d.Region(RegionBAR0)
	if f.k.ioctls[ioctlDeviceGetRegion] != before {
		t.Error("region info not cached")
	}
}

func TestConfigSpace(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	b := make([]byte, 4)
	if err := d.ReadConfig(0, b); err != nil {
		t.Fatal(err)
	}
	if v := ne.Uint32(b); v != 0x030617cb {
		t.Errorf("vendor/device %#x", v)
	}
	if err := d.EnableBusMaster(); err != nil {
		t.Fatal(err)
	}
	cfg := f.k.devices[testAddr].regions[RegionConfig].data
	if cmd := ne.Uint16(cfg[4:]); cmd != 0x0107 {
		t.Errorf("command %#x after EnableBusMaster, want 0x107 (0x103 | memory | bus master)", cmd)
	}
	if err := d.WriteConfig(0x40, []byte{1, 2, 3}); err != nil || cfg[0x41] != 2 {
		t.Errorf("WriteConfig: %v, byte %d", err, cfg[0x41])
	}
	for _, tc := range []struct {
		off int64
		n   int
	}{{4094, 4}, {-1, 1}, {4096, 1}} {
		if err := d.ReadConfig(tc.off, make([]byte, tc.n)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ReadConfig(%d, %d bytes) = %v, want ErrInvalid", tc.off, tc.n, err)
		}
	}
}

func TestBARMmap(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	b, err := d.MapBAR(RegionBAR0)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := d.MapBAR(RegionBAR0); again != b {
		t.Error("second MapBAR returned another BAR")
	}
	if b.Size() != 16<<10 || b.Index() != 0 {
		t.Errorf("size %d index %d", b.Size(), b.Index())
	}
	mem := f.k.devices[testAddr].regions[RegionBAR0].data

	b.Write32(0x100, 0xdeadbeef)
	if v := ne.Uint32(mem[0x100:]); v != 0xdeadbeef {
		t.Errorf("Write32 did not reach the device: %#x", v)
	}
	ne.PutUint32(mem[0x3ffc:], 0x12345678)
	if v := b.Read32(0x3ffc); v != 0x12345678 {
		t.Errorf("Read32(last word) = %#x", v)
	}
	b.Write64(0x80, 0x1122334455667788)
	if v := ne.Uint64(mem[0x80:]); v != 0x1122334455667788 {
		t.Errorf("Write64: %#x", v)
	}
	if v := b.Read64(0x80); v != 0x1122334455667788 {
		t.Errorf("Read64: %#x", v)
	}

	bad := []struct {
		name  string
		off   uint32
		width int
	}{
		{"past end", 0x4000, 4},
		{"straddling end", 0x3ffe, 4},
		{"misaligned", 0x102, 4},
		{"huge", 0xfffffffc, 4},
		{"64 past end", 0x3ffc, 8},
		{"64 misaligned", 0x84, 8},
	}
	for _, tc := range bad {
		n := b.BadAccesses()
		snapshot := append([]byte(nil), mem...)
		if tc.width == 4 {
			if v := b.Read32(tc.off); v != 0xFFFFFFFF {
				t.Errorf("%s: Read32 = %#x, want all ones", tc.name, v)
			}
			b.Write32(tc.off, 0)
			if _, err := b.CheckedRead32(tc.off); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: CheckedRead32 err %v", tc.name, err)
			}
			if err := b.CheckedWrite32(tc.off, 0); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: CheckedWrite32 err %v", tc.name, err)
			}
		} else {
			if v := b.Read64(tc.off); v != ^uint64(0) {
				t.Errorf("%s: Read64 = %#x", tc.name, v)
			}
			b.Write64(tc.off, 0)
			if _, err := b.CheckedRead64(tc.off); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: CheckedRead64 err %v", tc.name, err)
			}
			if err := b.CheckedWrite64(tc.off, 0); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: CheckedWrite64 err %v", tc.name, err)
			}
		}
		if got := b.BadAccesses() - n; got != 2 {
			t.Errorf("%s: %d bad accesses counted, want 2", tc.name, got)
		}
		if string(snapshot) != string(mem) {
			t.Errorf("%s: a dropped write changed the memory", tc.name)
		}
	}
	if v, err := b.CheckedRead32(0x100); err != nil || v != 0xdeadbeef {
		t.Errorf("CheckedRead32 = %#x, %v", v, err)
	}

	if err := b.Unmap(); err != nil {
		t.Fatal(err)
	}
	if f.k.liveMaps() != 0 {
		t.Error("BAR still mapped after Unmap")
	}
	if v := b.Read32(0); v != 0xFFFFFFFF {
		t.Errorf("Read32 after Unmap = %#x", v)
	}
	if _, err := b.CheckedRead32(0); !errors.Is(err, ErrClosed) {
		t.Errorf("CheckedRead32 after Unmap: %v", err)
	}
	if err := b.Unmap(); err != nil {
		t.Errorf("second Unmap: %v", err)
	}
}

func TestMapBARErrors(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	for _, idx := range []int{RegionBAR1, RegionBAR2, RegionConfig, -1, 6} {
		if _, err := d.MapBAR(idx); !errors.Is(err, ErrNoRegion) {
			t.Errorf("MapBAR(%d) = %v, want ErrNoRegion", idx, err)
		}
	}
}

func TestBARPreadPath(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	mem := f.k.devices[testAddr].regions[RegionBAR2].data
	if err := d.WriteBAR32(RegionBAR2, 8, 0xcafef00d); err != nil {
		t.Fatal(err)
	}
	if v := ne.Uint32(mem[8:]); v != 0xcafef00d {
		t.Errorf("WriteBAR32 wrote %#x", v)
	}
	if v, err := d.ReadBAR32(RegionBAR2, 8); err != nil || v != 0xcafef00d {
		t.Errorf("ReadBAR32 = %#x, %v", v, err)
	}
	if err := d.WriteBAR64(RegionBAR2, 16, 1<<40|5); err != nil {
		t.Fatal(err)
	}
	if v, err := d.ReadBAR64(RegionBAR2, 16); err != nil || v != 1<<40|5 {
		t.Errorf("ReadBAR64 = %#x, %v", v, err)
	}
	tests := []struct {
		index int
		off   int64
		want  error
	}{
		{RegionBAR2, 4096, ErrInvalid},
		{RegionBAR2, 2, ErrInvalid},
		{RegionBAR2, -4, ErrInvalid},
		{RegionConfig, 0, ErrNoRegion},
		{RegionBAR1, 0, ErrNoRegion}, // absent BAR: no flags
	}
	for _, tc := range tests {
		if _, err := d.ReadBAR32(tc.index, tc.off); !errors.Is(err, tc.want) {
			t.Errorf("ReadBAR32(%d, %#x) = %v, want %v", tc.index, tc.off, err, tc.want)
		}
	}
}

func TestReset(t *testing.T) {
	f := newFixture(t)
	d := f.open(t)
	if err := d.Reset(); err != nil || f.k.resets != 1 {
		t.Fatalf("Reset: %v (resets %d)", err, f.k.resets)
	}
	d.info.Flags &^= DeviceFlagReset
	if err := d.Reset(); !errors.Is(err, ErrNoReset) {
		t.Errorf("Reset without the flag: %v", err)
	}
}
