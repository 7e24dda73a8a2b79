package tun_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomhi/gomhi/mhi/ep/ipdata"
	"github.com/gomhi/gomhi/mhi/proto/framing"
	"github.com/gomhi/gomhi/mhinet"
	"github.com/gomhi/gomhi/mhinet/gso"
	"github.com/gomhi/gomhi/mhinet/tun"
	"github.com/gomhi/gomhi/pcigeneric/mock"
)

// benchPacket is the IP packet size of the benchmark traffic.
const benchPacket = 1500

// startSender floods 198.18.0.2:9 from 198.18.0.1 with benchPacket-byte IP
// packets until the benchmark ends. The socket is made on the calling
// (namespaced) thread; the sending goroutine may run anywhere. Send errors
// (ENOBUFS when the TUN queue is full) are ignored: the kernel counts
// those drops, the benchmark counts what arrives.
func startSender(b *testing.B) {
	b.Helper()
	conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, 9)))
	if err != nil {
		b.Fatal(err)
	}
	floodUDP(b, conn)
}

// floodUDP writes benchPacket-byte IP packets on conn until the benchmark
// ends, then closes it.
func floodUDP(b *testing.B, conn net.Conn) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		payload := make([]byte, benchPacket-28)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = conn.Write(payload)
		}
	}()
	b.Cleanup(func() {
		close(stop)
		wg.Wait()
		_ = conn.Close()
	})
}

// reportRate reports packets per second over the timed part.
func reportRate(b *testing.B, packets int) {
	b.ReportMetric(float64(packets)/b.Elapsed().Seconds(), "pkts/s")
	b.ReportMetric(float64(packets)*benchPacket*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
}

// The baseline: kernel → TUN read → TUN write back, batched, with nothing
// between read and write. b.N counts packets.
func BenchmarkRawTUN(b *testing.B) {
	enterNetns(b)
	rawTUNLoop(b, openTUN(b), 2048)
}

// The same baseline on a TUN opened as `mhictl up` opens it by default
// (IFF_VNET_HDR, checksum, TSO and USO offloads): every frame is read and
// written back with its virtio_net_hdr, one write per packet.
func BenchmarkRawTUNVnet(b *testing.B) {
	enterNetns(b)
	rawTUNLoop(b, openGSOTUN(b), gso.VirtioNetHdrLen+65535+40)
}

func rawTUNLoop(b *testing.B, ifc *tun.Interface, bufSize int) {
	bufs := make([][]byte, tun.DefaultBatch)
	for i := range bufs {
		bufs[i] = make([]byte, bufSize)
	}
	sizes := make([]int, len(bufs))
	out := make([][]byte, len(bufs))
	startSender(b)
	b.ResetTimer()
	for got := 0; got < b.N; {
		n, err := ifc.Read(bufs, sizes)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			out[i] = bufs[i][:sizes[i]]
		}
		if _, err := ifc.Write(out[:n]); err != nil {
			b.Fatal(err)
		}
		got += n
	}
	b.StopTimer()
	reportRate(b, b.N)
}

// The same traffic through the Bridge and the mock modem: kernel → TUN
// read → Transmit → uplink → modem internal loopback (raw IP) → downlink →
// Receive → TUN write. b.N counts packets written back to the TUN.
//
// Sub-benchmarks: raw (IP_HW0, one packet per transfer each way, as the
// default model) and ntb16 (IP_HW0_MBIM with transmit aggregation, the
// modem aggregating up to 32 packets per NTB).
func BenchmarkBridge(b *testing.B) {
	benchBridges(b, openTUN)
}

// BenchmarkBridgeVnet: the same on a TUN opened as `mhictl up` opens it by
// default (IFF_VNET_HDR, checksum, TSO and USO offloads; GRO on): the
// looped-back datagrams of the benchmark's one UDP flow are merged into
// UDP_L4 super-packets before they are written (gro_udp.go).
func BenchmarkBridgeVnet(b *testing.B) {
	benchBridges(b, func(tb testing.TB) *tun.Interface { return openGSOTUN(tb) })
}

func benchBridges(b *testing.B, open func(testing.TB) *tun.Interface) {
	for _, c := range []struct {
		name  string
		model string
		ipd   ipdata.Config
		cfg   mhinet.Config
	}{
		{"raw", mock.DefaultModel, ipdata.Config{Format: framing.RawIP}, mhinet.Config{Format: framing.RawIP}},
		// mhinet's default uplink aggregates (rmnet's 4096 bytes, 16
		// packets), then aggregates as large as a 16 KiB transmit buffer.
		{"ntb16", "telit-fn990", ipdata.Config{Format: framing.NTB16}, mhinet.Config{Format: framing.NTB16, TXAggregate: true}},
		{"ntb16-16k", "telit-fn990", ipdata.Config{Format: framing.NTB16},
			mhinet.Config{Format: framing.NTB16, TXAggregate: true, TXAggMaxBytes: 16 << 10, TXAggMaxPackets: 64}},
	} {
		b.Run(c.name, func(b *testing.B) { benchBridge(b, open, c.model, c.ipd, c.cfg) })
	}
}

func benchBridge(b *testing.B, open func(testing.TB) *tun.Interface, model string, ipd ipdata.Config, cfg mhinet.Config) {
	enterNetns(b)
	ifc := open(b)
	r := newRig(b, ifc, model, ipd, cfg, tun.BridgeConfig{}, true)
	startSender(b)
	// Let the pipeline fill before timing.
	r.waitStats(b, "first packets", func(s tun.BridgeStats) bool { return s.DownlinkPackets > 0 })
	base := r.bridge.Stats().DownlinkPackets
	b.ResetTimer()
	last, lastAt := base, time.Now()
	for {
		got := r.bridge.Stats().DownlinkPackets
		if got-base >= uint64(b.N) {
			break
		}
		if got != last {
			last, lastAt = got, time.Now()
		} else if time.Since(lastAt) > 10*time.Second {
			b.Fatalf("stalled: bridge %+v device %+v", r.bridge.Stats(), r.dev.Stats())
		}
		// The benchmark goroutine is locked to the namespaced thread:
		// each wake-up hands the P to that thread and back, so a fine
		// poll (it was 50 µs) takes CPU from the path measured. 1 ms is
		// 0.05 % of a 2 s run.
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	reportRate(b, b.N)
	s := r.bridge.Stats()
	b.ReportMetric(float64(s.UplinkPackets)/float64(max(s.UplinkReads, 1)), "pkts/read")
	b.ReportMetric(float64(s.BusyRetries)/float64(max(s.UplinkReads, 1)), "busy/read")
	if s.DownlinkWrites < s.DownlinkPackets {
		b.ReportMetric(float64(s.DownlinkPackets)/float64(max(s.DownlinkWrites, 1)), "pkts/write")
	}
	if s.UplinkDropped()+s.WriteErrors != 0 {
		b.Logf("bridge drops: %+v", s)
	}
}

// BenchmarkTCPGSO: one TCP connection's bulk transfer from 198.18.0.1 to
// 198.18.0.2 where every packet, data and ACKs, crosses the TUN, the
// bridge, the device and the mock modem's internal loopback (MBIM with
// transmit aggregation, the modem aggregating the downlink into 32 KiB /
// 32-packet NTBs; policy routing as in TestGSOTCPThroughLoopback). One op
// is 64 KiB written by the client and read by the server.
//
// Per uplink aggregation setting, the same traffic: gso=off is a plain
// TUN (the kernel cuts the stream into MTU-sized packets before the TUN,
// one read syscall each, one write per looped-back packet); gso=on opens
// it with IFF_VNET_HDR and TSO (super-packets of up to 64 KiB in one read,
// cut by mhinet before the ring) and merges the looped-back segments into
// super-packets for the kernel (GRO); gso=on,gro=off does the first half
// only. agg=32k packs up to 32 KiB / 32 packets per uplink element, as
// the modem does on the downlink, so the host's per-packet work is the
// limit; agg=4k is mhinet's default (rmnet's 4 KiB / 16 packets), where
// the modelled uplink ring (127 elements, completions moderated to 1 ms)
// is the limit whatever the host does.
func BenchmarkTCPGSO(b *testing.B) {
	for _, agg := range []struct {
		name  string
		bytes int
		pkts  int
	}{{"agg=32k", 32 << 10, 32}, {"agg=4k", 0, 0}} {
		for _, c := range []struct {
			name     string
			gso, gro bool
		}{
			{"gso=off", false, false},
			{"gso=on,gro=off", true, false},
			{"gso=on", true, true},
		} {
			cfg := mhinet.Config{Format: framing.NTB16, TXAggregate: true, TXAggMaxBytes: agg.bytes, TXAggMaxPackets: agg.pkts}
			b.Run(agg.name+"/"+c.name, func(b *testing.B) { benchTCPLoop(b, cfg, c.gso, c.gro) })
		}
	}
}

func benchTCPLoop(b *testing.B, cfg mhinet.Config, gsoOn, gro bool) {
	enterNetns(b)
	var ifc *tun.Interface
	peer := netip.PrefixFrom(peerAddr, 32)
	if gsoOn {
		ifc = openGSOTUN(b, peer)
	} else {
		ifc = openTUN(b)
		if err := ifc.Configure(tun.Config{Up: true, Addrs: []netip.Prefix{peer}}); err != nil {
			b.Fatal(err)
		}
	}
	loopRouting(b, ifc.Name())
	r := newRig(b, ifc, "telit-fn990", ipdata.Config{Format: framing.NTB16}, cfg, tun.BridgeConfig{NoGRO: !gro}, true)
	l := dialLoop(b)
	const chunk = 64 << 10
	total := int64(b.N) * chunk
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		var got int64
		_ = l.server.SetReadDeadline(time.Now().Add(2 * time.Minute))
		for got < total {
			n, err := l.server.Read(buf)
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	data := make([]byte, chunk)
	b.SetBytes(chunk)
	cpu0 := cpuNow()
	b.ResetTimer()
	for range b.N {
		if _, err := l.client.Write(data); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatalf("server: %v; bridge %+v", err, r.bridge.Stats())
	}
	b.StopTimer()
	b.ReportMetric(float64(total)*8/b.Elapsed().Seconds()/1e9, "Gbit/s")
	s := r.bridge.Stats()
	// One read(2) per packet or super-packet read, one write(2) per
	// packet or merged super-packet written.
	b.ReportMetric(float64(s.UplinkPackets+s.UplinkDropped())/float64(b.N), "tun-reads/op")
	b.ReportMetric(float64(s.DownlinkWrites)/float64(b.N), "tun-writes/op")
	b.ReportMetric(float64(s.BusyRetries)/float64(b.N), "busy/op")
	b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if os.Getenv("GOMHI_BENCH_DEBUG") != "" {
		ds := r.dev.Stats()
		b.Logf("N=%d bridge %+v", b.N, s)
		b.Logf("device tx_transfers %d tx_queued %d tx_busy %d inflight_high %d rx_transfers %d rx_packets %d gso %+v", ds.TxTransfers, ds.TxQueued, ds.TxBusy, ds.TxInFlightHigh, ds.RxTransfers, ds.RxPackets, ds.GSO)
	}
	if s.UplinkDropped()+s.WriteErrors+s.DropBusySegments != 0 {
		b.Logf("bridge drops: %+v", s)
	}
}

// cpuNow returns the CPU time (user + system) the process has used: the
// kernel's TCP and TUN work, the bridge and the mock modem together.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUDPDelivery: one UDP flow whose datagrams are delivered to a
// socket after the whole round trip — the sender's socket, the TUN (as
// `mhictl up` opens it), the bridge, the device and the mock modem's
// internal loopback (MBIM, 16 KiB uplink aggregates), the TUN again, the
// kernel's UDP input, the receiving socket, read one datagram per call
// (policy routing: see loopRouting). With gro=true the bridge writes the
// looped-back datagrams as UDP_L4 super-packets, which the kernel cuts
// again for the socket (it has no UDP_GRO); gro=false writes one frame per
// datagram. b.N counts datagrams received.
func BenchmarkUDPDelivery(b *testing.B) {
	for _, gro := range []bool{true, false} {
		b.Run(fmt.Sprintf("gro=%v", gro), func(b *testing.B) { benchUDPDelivery(b, gro) })
	}
}

func benchUDPDelivery(b *testing.B, gro bool) {
	enterNetns(b)
	ifc := openGSOTUN(b, netip.PrefixFrom(peerAddr, 32))
	loopRouting(b, ifc.Name())
	cfg := mhinet.Config{Format: framing.NTB16, TXAggregate: true, TXAggMaxBytes: 16 << 10, TXAggMaxPackets: 64}
	r := newRig(b, ifc, "telit-fn990", ipdata.Config{Format: framing.NTB16}, cfg, tun.BridgeConfig{NoGRO: !gro}, true)
	lc := net.ListenConfig{Control: markControl}
	rx, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(peerAddr, 0).String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rx.Close() })
	_ = rx.(*net.UDPConn).SetReadBuffer(4 << 20)
	d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(localAddr, 0)), Control: markControl}
	conn, err := d.Dial("udp4", rx.LocalAddr().String())
	if err != nil {
		b.Fatal(err)
	}
	floodUDP(b, conn)
	// The receiver runs on its own goroutine: the benchmark's is locked
	// to the namespaced thread, and parking it on every empty read would
	// hand the P between threads.
	buf := make([]byte, 2048)
	urx := rx.(*net.UDPConn)
	read := func(n int) error {
		for range n {
			_ = urx.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, _, err := urx.ReadFromUDPAddrPort(buf); err != nil {
				return err
			}
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- read(1000) }() // let the pipeline fill
	if err := <-done; err != nil {
		b.Fatalf("first datagrams: %v; bridge %+v", err, r.bridge.Stats())
	}
	base := r.bridge.Stats()
	b.ResetTimer()
	go func() { done <- read(b.N) }()
	if err := <-done; err != nil {
		b.Fatalf("read: %v; bridge %+v", err, r.bridge.Stats())
	}
	b.StopTimer()
	reportRate(b, b.N)
	s := r.bridge.Stats()
	if w := s.DownlinkWrites - base.DownlinkWrites; w > 0 {
		b.ReportMetric(float64(s.DownlinkPackets-base.DownlinkPackets)/float64(w), "pkts/write")
	}
	if s.UplinkDropped()+s.WriteErrors != 0 {
		b.Logf("bridge drops: %+v", s)
	}
}
