package vfio

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const testAddr = "0000:01:00.0"

// fixture is a fake kernel plus a fake sysfs tree with testAddr in group 7
// bound to vfio-pci.
type fixture struct {
	k    *fakeKernel
	opts Options
}

func newFixture(t testing.TB, devs ...sysDev) *fixture {
	t.Helper()
	if len(devs) == 0 {
		devs = []sysDev{{testAddr, "vfio-pci", "7"}}
	}
	return &fixture{k: newFakeKernel(testAddr), opts: Options{SysfsRoot: makeSysfs(t, devs...), DevDir: fakeDevDir}}
}

func (f *fixture) open(t testing.TB) *Device {
	t.Helper()
	d, err := open(f.k, testAddr, f.opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestOpenHappyPath(t *testing.T) {
	f := newFixture(t)
	d, err := open(f.k, "01:00.0", f.opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if d.Address() != testAddr || d.Group() != "7" || d.NoIOMMU() {
		t.Errorf("address %q group %q noiommu %v", d.Address(), d.Group(), d.NoIOMMU())
	}
	if want := (Info{Flags: DeviceFlagPCI | DeviceFlagReset, NumRegions: 9, NumIRQs: 5}); d.Info() != want {
		t.Errorf("Info = %+v, want %+v", d.Info(), want)
	}
	if f.k.iommu != iommuType1v2 {
		t.Errorf("IOMMU type %d, want TYPE1v2", f.k.iommu)
	}
	if d.PageSize() != 4096 {
		t.Errorf("page size %d", d.PageSize())
	}
	if n := f.k.openFDs(); n != 3 {
		t.Errorf("%d fds open, want 3 (container, group, device)", n)
	}
	want := []string{"open container", "open group 7", "set container", "set iommu 3", "get device fd"}
	if got := f.k.logCopy(); !reflect.DeepEqual(got, want) {
		t.Errorf("open sequence %q, want %q", got, want)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if n := f.k.openFDs(); n != 0 {
		t.Errorf("%d fds open after Close", n)
	}
	got := f.k.logCopy()[len(want):]
	if w := []string{"close device", "close group 7", "close container"}; !reflect.DeepEqual(got, w) {
		t.Errorf("close sequence %q, want %q", got, w)
	}
	if _, err := d.Region(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Region after Close: %v, want ErrClosed", err)
	}
}

func TestOpenIOMMUTypes(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(k *fakeKernel)
		wantType  uintptr
		wantNoIO  bool
		wantErr   error
		wantErrno error
	}{
		{name: "type1v2", setup: func(*fakeKernel) {}, wantType: iommuType1v2},
		{name: "type1 fallback", setup: func(k *fakeKernel) { delete(k.extensions, iommuType1v2) }, wantType: iommuType1},
		{name: "no type1", setup: func(k *fakeKernel) { k.extensions = map[uintptr]bool{} }, wantErr: ErrNoVFIO},
		{name: "noiommu", setup: func(k *fakeKernel) {
			k.groups["noiommu-7"] = k.groups["7"]
			k.groups["noiommu-7"].name = "noiommu-7"
			delete(k.groups, "7")
			k.extensions[iommuNoIOMMU] = true
		}, wantType: iommuNoIOMMU, wantNoIO: true},
		{name: "noiommu without extension", setup: func(k *fakeKernel) {
			k.groups["noiommu-7"] = k.groups["7"]
			delete(k.groups, "7")
		}, wantErr: ErrNoIOMMU},
		{name: "API version", setup: func(k *fakeKernel) { k.apiVersion = 1 }, wantErr: ErrNoVFIO},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f.k)
			d, err := open(f.k, testAddr, f.opts)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if n := f.k.openFDs(); n != 0 {
					t.Errorf("%d fds leaked", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if f.k.iommu != tc.wantType || d.NoIOMMU() != tc.wantNoIO {
				t.Errorf("type %d noiommu %v, want %d %v", f.k.iommu, d.NoIOMMU(), tc.wantType, tc.wantNoIO)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	grpPath := fakeDevDir + "/7"
	tests := []struct {
		name      string
		devs      []sysDev
		addr      string
		setup     func(k *fakeKernel)
		want      error
		wantErrno error
		wantText  []string
	}{
		{name: "no /dev/vfio/vfio", setup: func(k *fakeKernel) { k.noVFIO = true },
			want: ErrNoVFIO, wantErrno: unix.ENOENT, wantText: []string{"/dev/vfio/vfio missing", "CONFIG_VFIO"}},
		{name: "no iommu_group", devs: []sysDev{{testAddr, "vfio-pci", ""}},
			want: ErrNoIOMMUGroup, wantText: []string{"intel_iommu=on"}},
		{name: "group not viable", devs: []sysDev{{testAddr, "vfio-pci", "7"}, {"0000:01:00.1", "snd_hda_intel", "7"}},
			setup: func(k *fakeKernel) { k.groups["7"].viable = false },
			want:  ErrGroupNotViable, wantText: []string{"IOMMU group 7", "0000:01:00.1 (bound to snd_hda_intel)"}},
		{name: "group busy", setup: func(k *fakeKernel) { k.openErr[grpPath] = unix.EBUSY },
			want: ErrDeviceBusy, wantErrno: unix.EBUSY, wantText: []string{"in use by another process"}},
		{name: "device busy", setup: func(k *fakeKernel) { k.devices[testAddr].getFDErr = unix.EBUSY },
			want: ErrDeviceBusy, wantErrno: unix.EBUSY, wantText: []string{"in use by another process"}},
		{name: "group EACCES", setup: func(k *fakeKernel) { k.openErr[grpPath] = unix.EACCES },
			want: ErrPermission, wantErrno: unix.EACCES, wantText: []string{"needs root or ownership of " + grpPath}},
		{name: "group EPERM", setup: func(k *fakeKernel) { k.openErr[grpPath] = unix.EPERM },
			want: ErrPermission, wantErrno: unix.EPERM},
		{name: "bound elsewhere", devs: []sysDev{{testAddr, "mhi-pci-generic", "7"}},
			want: ErrNotBound, wantText: []string{"bound to mhi-pci-generic, not vfio-pci: mhictl bind " + testAddr}},
		{name: "unbound", devs: []sysDev{{testAddr, "", "7"}},
			want: ErrNotBound, wantText: []string{"bound to no driver"}},
		{name: "no group node", setup: func(k *fakeKernel) { delete(k.groups, "7") },
			want: ErrNotBound, wantErrno: unix.ENOENT},
		{name: "no such device", addr: "0000:02:00.0", want: ErrNoDevice},
		{name: "bad address", addr: "nonsense", want: ErrNoDevice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.devs...)
			if tc.setup != nil {
				tc.setup(f.k)
			}
			addr := tc.addr
			if addr == "" {
				addr = testAddr
			}
			d, err := open(f.k, addr, f.opts)
			if err == nil {
				d.Close()
				t.Fatal("open succeeded")
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if tc.wantErrno != nil && !errors.Is(err, tc.wantErrno) {
				t.Errorf("err = %v does not wrap %v", err, tc.wantErrno)
			}
			msg := err.Error()
			if !strings.Contains(msg, addr) {
				t.Errorf("error %q does not name the device", msg)
			}
			for _, s := range tc.wantText {
				s = strings.ReplaceAll(s, "/dev/vfio/vfio", fakeDevDir+"/vfio")
				if !strings.Contains(msg, s) {
					t.Errorf("error %q lacks %q", msg, s)
				}
			}
			if n := f.k.openFDs(); n != 0 {
				t.Errorf("%d fds leaked", n)
			}
		})
	}
}

// TestOpenTeardown fails each step of Open in turn and checks that what was
// opened is closed again, in reverse order.
func TestOpenTeardown(t *testing.T) {
	steps := []struct {
		req       uint
		wantClose []string
	}{
		{ioctlGetAPIVersion, []string{"close container"}},
		{ioctlCheckExtension, []string{"close group 7", "close container"}},
		{ioctlGroupGetStatus, []string{"close group 7", "close container"}},
		{ioctlGroupSetContainer, []string{"close group 7", "close container"}},
		{ioctlSetIOMMU, []string{"close group 7", "close container"}},
		{ioctlGroupGetDeviceFD, []string{"close group 7", "close container"}},
		{ioctlDeviceGetInfo, []string{"close device", "close group 7", "close container"}},
	}
	for _, s := range steps {
		t.Run(fmtReq(s.req), func(t *testing.T) {
			f := newFixture(t)
			f.k.failIoctl[s.req] = unix.EIO
			_, err := open(f.k, testAddr, f.opts)
			if err == nil {
				t.Fatal("open succeeded")
			}
			if !strings.Contains(err.Error(), testAddr) {
				t.Errorf("error %q does not name the device", err)
			}
			if s.req != ioctlCheckExtension && !errors.Is(err, unix.EIO) {
				t.Errorf("err = %v does not wrap EIO", err)
			}
			if n := f.k.openFDs(); n != 0 {
				t.Errorf("%d fds leaked", n)
			}
			var closes []string
			for _, l := range f.k.logCopy() {
				if strings.HasPrefix(l, "close") {
					closes = append(closes, l)
				}
			}
			if !reflect.DeepEqual(closes, s.wantClose) {
				t.Errorf("closes %q, want %q", closes, s.wantClose)
			}
		})
	}
	t.Run("IOMMU_GET_INFO failure is tolerated", func(t *testing.T) {
		f := newFixture(t)
		f.k.failIoctl[ioctlIOMMUGetInfo] = unix.ENOTTY
		d := f.open(t)
		if d.PageSize() != 4096 {
			t.Errorf("page size %d", d.PageSize())
		}
	})
}

func fmtReq(r uint) string { return fmt.Sprintf("%#x", r) }

func TestNormalizeAddress(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0000:01:00.0", "0000:01:00.0"},
		{"01:00.0", "0000:01:00.0"},
		{" 0000:3B:00.1 ", "0000:3b:00.1"},
		{"01:00", ""},
		{"0000:01:20.0", ""},
	}
	for _, tc := range tests {
		got, err := normalizeAddress(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%q: no error", tc.in)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
