package mockformat

import (
	"testing"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhinet"
)

// TestFor: every host format has the mock framing that speaks it.
func TestFor(t *testing.T) {
	for _, c := range []struct {
		host mhinet.Format
		want ep.Format
	}{
		{mhinet.FormatRawIP, ep.FormatRaw},
		{mhinet.FormatMBIM, ep.FormatNTB16},
		{mhinet.FormatQMAP, ep.FormatQMAP},
	} {
		if got := For(c.host); got != c.want {
			t.Errorf("For(%v) = %v, want %v", c.host, got, c.want)
		}
	}
}
