package sweep

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/proto/framing"
)

// shipped loads a shipped profile.
func shipped(t *testing.T, name string) *Profile {
	t.Helper()
	p, err := LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// virtualRun runs a sweep in virtual time.
func virtualRun(t *testing.T, prof *Profile, sizes, mrus []int, packets, iterations, parallel int) *Report {
	t.Helper()
	rep, err := Run(context.Background(), Options{
		Format: framing.NTB16, Sizes: sizes, MRUs: mrus,
		Packets: packets, Iterations: iterations, Timing: prof, Parallel: parallel,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Conserved() {
		t.Fatalf("not conserved: %+v", rep.Points)
	}
	return rep
}

// modelled is what must be identical between two runs of the same profile,
// grid and packets: everything but the host's real CPU time.
func modelled(p Point) Point {
	p.HostCPUNsPerPacket = 0
	return p
}

// TestVirtualDeterministic: the same profile, grid and packets give the
// same modelled figures, bit for bit, whatever the number of points run at
// once and the order of the grid.
func TestVirtualDeterministic(t *testing.T) {
	prof := shipped(t, "mru-thread")
	sizes, mrus := []int{64, 1262, 1263, 1500}, []int{3500, 32768}
	a := virtualRun(t, prof, sizes, mrus, 3000, 2, 2)
	b := virtualRun(t, prof, []int{1500, 1263, 1262, 64}, []int{32768, 3500}, 3000, 2, 1)
	for _, p := range a.Points {
		q := b.point(p.MRU, p.Size)
		if q == nil {
			t.Fatalf("point MRU %d size %d missing", p.MRU, p.Size)
		}
		pa, pb := modelled(p), modelled(*q)
		if pa.PPS != pb.PPS || *pa.LineRatePct != *pb.LineRatePct || pa.MBps != pb.MBps ||
			pa.ElementsPerPacket != pb.ElementsPerPacket || pa.EventsPerPacket != pb.EventsPerPacket ||
			pa.PacketsPerTransfer != pb.PacketsPerTransfer || pa.Sent != pb.Sent || pa.Delivered != pb.Delivered {
			t.Errorf("MRU %d size %d differs:\n%+v %+v\n%+v %+v", p.MRU, p.Size, pa, *pa.LineRatePct, pb, *pb.LineRatePct)
		}
		if p.HostCPUNsPerPacket <= 0 {
			t.Errorf("MRU %d size %d: no host CPU time measured", p.MRU, p.Size)
		}
	}
}

// freeProfile models nothing but a 1 GbE link: no receive queue (every
// packet goes into an aggregate as it arrives), no modem or host cost.
func freeProfile() *Profile {
	return &Profile{Name: "free", Parameters: []Parameter{
		{Name: ParamLinkRate, Value: 1e9, Unit: "bit/s"},
		{Name: ParamTREPoll, Value: 100, Unit: "us"},
	}}
}

// TestVirtualProperties: a larger MRU never needs more ring elements per
// transfer, nor more elements per packet (the modem builds the same
// aggregates whatever the MRU: its batches are its receive queue's); and
// no point exceeds the line rate.
func TestVirtualProperties(t *testing.T) {
	sizes := []int{64, 256, 1024, 1262, 1263, 1428, 1518}
	mrus := []int{1024, 3500, 16384, 32768, 65535}
	for _, tc := range []struct {
		prof     *Profile
		perPkt   bool
		packets  int
		minShare float64
	}{
		{shipped(t, "mru-thread"), true, 4000, 0},
		{freeProfile(), true, 4000, 50},
	} {
		rep := virtualRun(t, tc.prof, sizes, mrus, tc.packets, 1, 0)
		for _, size := range sizes {
			prevT, prevP := -1.0, -1.0
			for _, mru := range mrus {
				p := rep.point(mru, size)
				if p.LineRatePct.Max > 100 || p.LineRatePct.Min <= tc.minShare {
					t.Errorf("%s: MRU %d size %d: line rate %+v%%", tc.prof.Name, mru, size, *p.LineRatePct)
				}
				perT := p.ElementsPerPacket * p.PacketsPerTransfer
				if prevT >= 0 && perT > prevT*(1+1e-9) {
					t.Errorf("%s: size %d: MRU %d needs %.4f elements per transfer, more than the smaller MRU's %.4f", tc.prof.Name, size, mru, perT, prevT)
				}
				if tc.perPkt && prevP >= 0 && p.ElementsPerPacket > prevP*(1+1e-9) {
					t.Errorf("%s: size %d: MRU %d needs %.4f elements per packet, more than the smaller MRU's %.4f", tc.prof.Name, size, mru, p.ElementsPerPacket, prevP)
				}
				prevT, prevP = perT, p.ElementsPerPacket
			}
		}
	}
}

// TestVirtualFreeLink: with nothing modelled but the link, every packet
// the generator offers arrives and the sweep runs at the line rate (less
// the last window and interrupt moderation, the pipeline's tail, counted
// in the iteration's time).
func TestVirtualFreeLink(t *testing.T) {
	for _, size := range []int{64, 1500} {
		packets := 200_000
		if size == 1500 {
			packets = 20_000
		}
		rep := virtualRun(t, freeProfile(), []int{size}, []int{3500, 65535}, packets, 1, 0)
		for _, p := range rep.Points {
			if p.Dropped != 0 || p.LineRatePct.Median > 100 || p.LineRatePct.Median < 99 {
				t.Errorf("MRU %d size %d: %.3f%% of the line rate, %d dropped", p.MRU, p.Size, p.LineRatePct.Median, p.Dropped)
			}
		}
	}
}

// TestCliffMechanism: the shipped profile's 1262/1263 cliff comes from its
// mechanism (a batch that needs one more TRE than a burst holds waits for
// the next read of the ring), so it is there with 3500-byte buffers and
// gone with 32 KiB ones, where every aggregate is one TRE.
func TestCliffMechanism(t *testing.T) {
	rep := virtualRun(t, shipped(t, "mru-thread"), []int{1262, 1263}, []int{3500, 32768}, 20000, 1, 0)
	ratio := func(mru int) float64 {
		return rep.point(mru, 1263).LineRatePct.Median / rep.point(mru, 1262).LineRatePct.Median
	}
	if r := ratio(3500); r > 0.6 {
		t.Errorf("MRU 3500: 1263 bytes at %.2f of 1262's rate, want the cliff (< 0.6)", r)
	}
	if r := ratio(32768); r < 0.85 {
		t.Errorf("MRU 32768: 1263 bytes at %.2f of 1262's rate, want no cliff (> 0.85)", r)
	}
}

// TestVirtualOptions: timing mode refuses what it does not model.
func TestVirtualOptions(t *testing.T) {
	prof := shipped(t, "mru-thread")
	for _, o := range []Options{
		{Timing: prof, Mode: Loopback},
		{Timing: prof, Sizes: []int{40}},
		{Timing: prof, Target: &Target{}},
		{Timing: &Profile{Name: "bad", Parameters: []Parameter{{Name: "nope", Unit: "s"}}}},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestProfileValidate: the model's parameters only, once each, in its
// units, at most 8, none negative.
func TestProfileValidate(t *testing.T) {
	link := Parameter{Name: ParamLinkRate, Value: 1e9, Unit: "bit/s"}
	for name, params := range map[string][]Parameter{
		"unknown":     {link, {Name: "speed", Value: 1, Unit: "us"}},
		"unit":        {link, {Name: ParamModemPacket, Value: 1, Unit: "ms"}},
		"twice":       {link, {Name: ParamModemPacket, Value: 1, Unit: "us"}, {Name: ParamModemPacket, Value: 2, Unit: "us"}},
		"negative":    {link, {Name: ParamModemPacket, Value: -1, Unit: "us"}},
		"no link":     {{Name: ParamModemPacket, Value: 1, Unit: "us"}},
		"nine params": append(slices.Clone(shipped(t, "mru-thread").Parameters), Parameter{Name: ParamModemPacket, Value: 1, Unit: "us"}),
	} {
		p := &Profile{Name: name, Parameters: params}
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if len(paramSpecs) > maxProfileParameter {
		t.Errorf("the model has %d parameters, more than %d", len(paramSpecs), maxProfileParameter)
	}
	for _, name := range ProfileNames() {
		p := shipped(t, name)
		for _, q := range p.Parameters {
			if q.Meaning == "" || q.Source == "" {
				t.Errorf("%s: %s lacks its meaning or source", name, q.Name)
			}
		}
	}
	if _, err := LoadProfile("no-such-profile"); err == nil {
		t.Error("unknown profile loaded")
	}
	if _, err := ReadProfile(strings.NewReader(`{"name":"x","parameters":[],"extra":1}`)); err == nil {
		t.Error("unknown field accepted")
	}
}

// TestReadTable reads the shipped table and refuses bad ones.
func TestReadTable(t *testing.T) {
	f, err := os.Open("profiles/mru-thread.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := ReadTable(f)
	if err != nil || len(rows) != 10 || rows[6] != (Row{Size: 1263, MRU: 3500, LineRatePct: 22.45}) {
		t.Fatalf("%v %+v", err, rows)
	}
	if got := ReferenceTable("mru-thread"); !slices.Equal(got, rows) {
		t.Errorf("embedded table %+v", got)
	}
	for _, bad := range []string{
		"size,mru\n64,3500\n",
		"size,mru,line_rate_pct\n64,3500,x\n",
		"size,mru,line_rate_pct\n64,100,5\n",
		"size,mru,line_rate_pct\n20,3500,5\n",
		"size,mru,line_rate_pct\n64,3500,150\n",
		"size,mru,line_rate_pct\n",
	} {
		if _, err := ReadTable(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestHeaderWindow: the modem's header cost is real work of the simulated
// modem, per packet and per header byte: with the shipped profile, the
// time per packet (the modem is the bottleneck at every size) grows by
// min(datagram, header_window) × modem_header_byte against the same
// profile without that cost — 50 B of a 64-byte frame's datagram, the
// whole window of a 1500-byte one.
func TestHeaderWindow(t *testing.T) {
	prof := shipped(t, "mru-thread")
	perByte, _ := prof.Value(ParamModemHeader)
	window, _ := prof.Value(ParamHeaderWindow)
	if perByte <= 0 || window <= 0 {
		t.Fatalf("the shipped profile has no header cost (%g ns/B, %g B)", perByte, window)
	}
	off := prof.Clone()
	off.set(ParamModemHeader, 0)
	sizes := []int{64, 1500}
	with := virtualRun(t, prof, sizes, []int{3500}, 20000, 1, 0)
	without := virtualRun(t, off, sizes, []int{3500}, 20000, 1, 0)
	for _, size := range sizes {
		a, b := with.point(3500, size), without.point(3500, size)
		got := (1/a.PPS.Median - 1/b.PPS.Median) * 1e9 // ns per packet
		want := min(float64(size-FrameHeader), window) * perByte
		t.Logf("size %d: %.0f ns per packet more with the header cost, want %.0f", size, got, want)
		if math.Abs(got-want) > 0.03*want {
			t.Errorf("size %d: the header cost adds %.0f ns per packet, want %.0f (±3 %%)", size, got, want)
		}
	}
}
