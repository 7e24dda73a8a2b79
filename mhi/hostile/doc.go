// Package hostile is a toolkit for testing the MHI host stack (package mhi)
// against a device that lies, and the home of the project's
// malicious-device suite (its _test.go files, docs/RELIABILITY.md).
//
// It offers two building blocks, both mhi.Transport implementations:
//
//   - Transport wraps any mhi.Transport (typically the in-process mock modem
//     of mhi/inproc) and lets a test tamper with every register read and
//     write, every interrupt and every reset through Hooks. It records what
//     the host did to the device (Log), keeps every buffer the host frees in
//     quarantine, filled with Poison, and reports any byte changed after the
//     free (Violations): a device or host write to freed memory.
//   - Device is a scripted MHI device: just enough of the protocol for the
//     host to power up, run its command ring and move data on its channels,
//     with each behaviour switchable (never READY, never M0, SYS_ERR at
//     every M0, …) and direct access to the event rings to post any event
//     at any time. Its DMA memory never reuses an address and it records
//     every device-side access to memory the host has freed.
//
// Both are meant to be reused by the suites of higher layers (mhinet, the
// control plane): wrap the transport a test already builds, set Hooks, and
// check Violations at the end.
package hostile
