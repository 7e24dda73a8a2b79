// Package mockformat matches the mock modem's IP data framing (ep.Format)
// to a host network device's format (mhinet.Format), for the harnesses and
// commands that join the two. It is a package of its own because
// pcigeneric/mock cannot import mhinet: mhinet's own tests use the mock.
package mockformat

import (
	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhinet"
)

// For returns the mock modem's framing that matches a host network
// device's format: MBIM NTB16 for mhinet.FormatMBIM, QMAP for
// mhinet.FormatQMAP, raw IP otherwise. A harness that joins a host to the
// mock configures the mock's IP data function with it.
func For(f mhinet.Format) ep.Format {
	switch f {
	case mhinet.FormatMBIM:
		return ep.FormatNTB16
	case mhinet.FormatQMAP:
		return ep.FormatQMAP
	}
	return ep.FormatRaw
}
