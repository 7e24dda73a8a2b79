package soak

import (
	"bytes"
	"testing"
	"time"
)

// TestWriteCurve pins the resource curve of the text and the Markdown
// report, with and without the served modem's RSS column.
func TestWriteCurve(t *testing.T) {
	samples := func(server bool) []Sample {
		s := []Sample{
			{At: 0, Packets: 0, RSS: 30 << 20, HeapInuse: 4 << 20, Goroutines: 12, FDs: 9},
			{At: 61 * time.Second, Packets: 123456, RSS: 31<<20 + 1<<19, HeapInuse: 5 << 20, Goroutines: 14, FDs: 11},
			{At: 122*time.Second + 400*time.Millisecond, Packets: 250000, RSS: 32 << 20, HeapInuse: 5<<20 + 1<<18, Goroutines: 13, FDs: 11},
		}
		if server {
			for i := range s {
				s[i].ServerRSS = int64(20+i) << 20
			}
		}
		return s
	}
	cases := []struct {
		name             string
		server, markdown bool
		want             string
	}{
		{"text", false, false, "resource curve (a sample about every 1m1s):\n" +
			"     t  packets  RSS MiB  heap MiB  goroutines  fds\n" +
			"    0s        0     30.0       4.0          12    9\n" +
			"  1m1s   123456     31.5       5.0          14   11\n" +
			"  2m2s   250000     32.0       5.2          13   11\n"},
		{"markdown", false, true, "Resource curve (a sample about every 1m1s):\n\n" +
			"| t | packets | RSS MiB | heap MiB | goroutines | fds |\n" +
			"|---|---|---|---|---|---|\n" +
			"| 0s | 0 | 30.0 | 4.0 | 12 | 9 |\n" +
			"| 1m1s | 123456 | 31.5 | 5.0 | 14 | 11 |\n" +
			"| 2m2s | 250000 | 32.0 | 5.2 | 13 | 11 |\n"},
		{"text, server", true, false, "resource curve (a sample about every 1m1s):\n" +
			"     t  packets  RSS MiB  heap MiB  goroutines  fds  server RSS MiB\n" +
			"    0s        0     30.0       4.0          12    9            20.0\n" +
			"  1m1s   123456     31.5       5.0          14   11            21.0\n" +
			"  2m2s   250000     32.0       5.2          13   11            22.0\n"},
		{"markdown, server", true, true, "Resource curve (a sample about every 1m1s):\n\n" +
			"| t | packets | RSS MiB | heap MiB | goroutines | fds | server RSS MiB |\n" +
			"|---|---|---|---|---|---|---|\n" +
			"| 0s | 0 | 30.0 | 4.0 | 12 | 9 | 20.0 |\n" +
			"| 1m1s | 123456 | 31.5 | 5.0 | 14 | 11 | 21.0 |\n" +
			"| 2m2s | 250000 | 32.0 | 5.2 | 13 | 11 | 22.0 |\n"},
	}
	for _, c := range cases {
		s := &Summary{Samples: samples(c.server)}
		var b bytes.Buffer
		if err := s.writeCurve(&b, 10, c.markdown); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); got != c.want {
			t.Errorf("%s:\ngot  %q\nwant %q", c.name, got, c.want)
		}
	}
}
