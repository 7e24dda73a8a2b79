package vfiouser_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomhi/gomhi/internal/labvm"
	"github.com/gomhi/gomhi/pcigeneric/internal/qemuguest"
	"github.com/gomhi/gomhi/pcigeneric/vfiouser"
)

// TestIOMMUGuestPowerOff boots Debian's 6.1 kernel with an emulated Intel
// IOMMU in front of the mock (QEMU's intel-iommu with caching-mode, the
// guest's intel_iommu=on: the set-up of a VFIO passthrough rehearsal, see
// docs/VFIO.md) and powers it off. With the IOMMU, QEMU maps and unmaps
// guest memory as the guest's IOMMU page tables change, and at power-off it
// unmaps every range its notifier covered — the last one from above the
// interrupt window to the end of the 64-bit space (iova 0xfef00000, size
// 2^64 - 0xfef00000), which the server once refused as malformed (QEMU:
// "error reply on async request: command 3 error Invalid argument"). Every
// message must be answered without an error.
func TestIOMMUGuestPowerOff(t *testing.T) {
	env := qemuguest.Find(t, labvm.Options{VFIOUser: true})
	dev, err := vfiouser.NewServerDevice(vfiouser.DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "modem.sock")
	stop := serve(t, sock, dev)
	initrd := env.Build(t, dir, labvm.Initramfs{Init: `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
for d in /sys/bus/pci/devices/*; do
	if [ "$(/bin/busybox cat $d/vendor)" = 0x17cb ]; then
		g=$(/bin/busybox readlink $d/iommu_group)
		echo "MODEM $(/bin/busybox basename $d) group ${g##*/}"
	fi
done
/bin/busybox poweroff -f
`})
	res := env.Run(context.Background(), labvm.Boot{
		Args: []string{"-machine", "q35,kernel-irqchip=split,memory-backend=mem", "-accel", "tcg",
			"-object", "memory-backend-memfd,id=mem,size=256M,share=on", "-m", "256", "-smp", "1",
			"-device", "intel-iommu,intremap=on,caching-mode=on",
			"-device", fmt.Sprintf(`{"driver":"vfio-user-pci","id":"mhi0","socket":{"type":"unix","path":%q}}`, sock)},
		Initrd:  initrd,
		Append:  "intel_iommu=on",
		Timeout: 90 * time.Second,
	})
	stop()
	t.Logf("guest ran %v", res.Elapsed.Round(time.Millisecond))
	if res.Err != nil {
		t.Fatalf("qemu: %v\nstderr:\n%s\nserial:\n%s", res.Err, res.Stderr, res.Serial)
	}
	line := ""
	for _, l := range strings.Split(res.Serial, "\n") {
		if strings.HasPrefix(l, "MODEM ") {
			line = l
		}
	}
	// A group number means the guest's IOMMU driver took the device, so
	// QEMU's mappings followed the guest's page tables.
	if line == "" || strings.HasSuffix(line, "group ") {
		t.Fatalf("the guest saw no modem in an IOMMU group:\n%s", res.Serial)
	}
	t.Log(line)
	st := dev.Stats()
	t.Logf("server: %+v", st)
	if st.Malformed != 0 || st.ErrorReplies != 0 {
		t.Errorf("the server refused %d malformed messages and sent %d error replies, want none", st.Malformed, st.ErrorReplies)
	}
	if strings.Contains(res.Stderr, "error reply") {
		t.Errorf("QEMU got an error reply:\n%s", res.Stderr)
	}
	if st.DMAMaps == 0 {
		t.Errorf("no DMA_MAP through the IOMMU")
	}
}
