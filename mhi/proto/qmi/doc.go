// Package qmi is a codec for Qualcomm MSM Interface (QMI) messages as they
// travel on a QMUX link: the QMI control channel of an MHI modem (channels
// 14/15, Linux's /dev/wwan0qmi0), a cdc-wdm port, or libqmi's proxy socket.
//
// A frame is
//
//	I/F type u8 (0x01) | QMUX length u16 (bytes after the I/F type) |
//	control flags u8 | service u8 | client id u8 | SDU
//
// and the SDU is, for the control service CTL (service 0),
//
//	flags u8 | transaction id u8 | message id u16 | TLV length u16 | TLVs
//
// and for every other service
//
//	flags u8 | transaction id u16 | message id u16 | TLV length u16 | TLVs
//
// Each TLV is type u8 | length u16 | value. All integers are little-endian.
// Every response carries the result TLV 0x02 (status u16, error code u16).
//
// The package keeps no state and imports nothing of the module: the host
// side and the mock modem both use it. Parsing is zero-copy (a Frame's TLVs
// are a view into the caller's buffer) and strict in the way libqmi is: a
// frame is rejected unless its QMUX length is the buffer's length minus one
// and its TLVs exactly fill the SDU; each violation has its own error.
// Building appends into a caller-owned buffer (Builder).
package qmi
