// Package vfiouser serves gomhi's mock modem (package mhi/ep) as a PCI
// function over the vfio-user protocol (package
// pcigeneric/vfiouser/protocol), to QEMU's vfio-user-pci client or to
// gomhi's own (package pcigeneric/vfiouser/client, which links none of
// this package).
//
// NewServerDevice builds the function from a device-table model: the
// entry's vendor, device and subsystem IDs, class 0xff0000, a 64-bit
// non-prefetchable BAR0 as large as the modem's MHI registers (a power of
// two, at least 4 KiB) and an MSI capability with 32 vectors; 256 bytes of
// config space, so QEMU treats it as conventional PCI. Each session runs a
// fresh ep.Device per client whose registers are BAR0
// (REGION_READ/REGION_WRITE, posted writes honoured), whose host memory is
// the client's DMA_MAP regions (mmapped from the passed fd, or reached with
// DMA_READ/DMA_WRITE messages when none was passed; accesses outside every
// mapping are refused and counted) and whose interrupts are the eventfds of
// DEVICE_SET_IRQS (vector n fires eventfd n modulo the number set).
// DEVICE_RESET is a function-level reset of the modem. ListenAndServe serves
// clients one after another on a unix socket; one that connects while
// another is served is refused with an EBUSY reply after a second (its
// setup fails with protocol.ErrBusy). The socket is created with mode 0600,
// whatever the umask, and never replaces anything but a stale socket; a
// peer that is neither root nor the socket's owner (SO_PEERCRED) is refused
// with an EPERM reply (its setup fails with protocol.ErrPeerRefused) and a
// Warn log.
//
// With QEMU >= 10.1 (guest RAM must be shareable for the fd path):
//
//	qemu-system-x86_64 -machine q35,memory-backend=mem \
//	  -object memory-backend-memfd,id=mem,size=512M,share=on -m 512 \
//	  -device '{"driver":"vfio-user-pci","id":"mhi0","socket":{"type":"unix","path":"/run/mhi/vu.sock"}}'
package vfiouser
