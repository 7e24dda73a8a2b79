package genl_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/gomhi/gomhi/mhi/ep"
	"github.com/gomhi/gomhi/mhi/testenv/fuzzcheck"
	"github.com/gomhi/gomhi/pcigeneric/mock"
	"github.com/gomhi/gomhi/sysfs"
	"github.com/gomhi/gomhi/sysfs/genl"
)

// FuzzClientReply's client calls Dump last. The seeds here answer the
// calls before it with ENODEV and aim their last group at the client's
// reassembly of a GET_DUMP answer.

// dumpSeedPrefix answers Dial and the six calls before Dump.
func dumpSeedPrefix() []byte {
	const patch = recPatchSeq | recPatchPort
	ae := netlink.NewAttributeEncoder()
	ae.Uint16(unix.CTRL_ATTR_FAMILY_ID, genl.FamilyID)
	ae.String(unix.CTRL_ATTR_FAMILY_NAME, "mhi")
	ae.Uint32(unix.CTRL_ATTR_VERSION, 1)
	fam, _ := ae.Encode()
	b := record(patch|recEndGroup, answer(0x10, 0, unix.CTRL_CMD_NEWFAMILY, fam))
	for range 6 {
		b = append(b, record(patch|recEndGroup, seedError(unix.ENODEV, "no MHI device"))...)
	}
	return b
}

// seedError is an NLMSG_ERROR with a message TLV.
func seedError(errno unix.Errno, msg string) []byte {
	p := ne.AppendUint32(nil, negErrno(errno))
	p = append(p, make([]byte, nlHdr)...)
	p = append(p, attr(unix.NLMSGERR_ATTR_MSG, str(msg))...)
	return nlAnswer(uint16(netlink.Error), uint16(netlink.AcknowledgeTLVs|netlink.Capped), p)
}

func u64b(v uint64) []byte { return ne.AppendUint64(nil, v) }

// seedSummary and seedChunk are GET_DUMP answer messages.
func seedSummary(size uint64, sum []byte) []byte {
	return answer(genl.FamilyID, uint16(netlink.Multi), genl.CmdGetDump, bytes.Join([][]byte{
		attr(genl.AttrDevName, str("mhi0")), attr(genl.AttrDumpSize, u64b(size)),
		attr(genl.AttrDumpSHA256, sum), attr(genl.AttrDumpTime, u64b(1e18)),
	}, nil))
}

func seedChunk(off uint64, data []byte) []byte {
	return answer(genl.FamilyID, uint16(netlink.Multi), genl.CmdGetDump,
		append(attr(genl.AttrDumpOffset, u64b(off)), attr(genl.AttrDumpData, data)...))
}

// dumpClientSeeds are hand-made GET_DUMP answers, good and hostile.
func dumpClientSeeds() []clientSeed {
	const patch = recPatchSeq | recPatchPort
	data := bytes.Repeat([]byte("dump"), 3000) // 12000 bytes: two chunks
	sum := sha256.Sum256(data)
	bad := sum
	bad[5] ^= 0x40
	done := nlAnswer(uint16(netlink.Done), uint16(netlink.Multi), []byte{0, 0, 0, 0})
	group := func(dgrams ...[]byte) []byte {
		var b []byte
		for i, d := range dgrams {
			f := byte(patch)
			if i == len(dgrams)-1 {
				f |= recEndGroup
			}
			b = append(b, record(f, d)...)
		}
		return append(dumpSeedPrefix(), b...)
	}
	sumMsg := seedSummary(uint64(len(data)), sum[:])
	c0, c1 := seedChunk(0, data[:8192]), seedChunk(8192, data[8192:])
	return []clientSeed{
		{"dump_good", group(sumMsg, c0, c1, done)},
		{"dump_good_one_datagram", group(bytes.Join([][]byte{sumMsg, c0, c1, done}, nil))},
		{"dump_enoent", group(seedError(unix.ENOENT, "mhi0 has no RAM dump"))},
		{"dump_lost_chunk", group(sumMsg, c1, done)},
		{"dump_repeated_chunk", group(sumMsg, c0, c0, c1, done)},
		{"dump_digest_mismatch", group(seedSummary(uint64(len(data)), bad[:]), c0, c1, done)},
		{"dump_huge_size", group(seedSummary(1<<62, sum[:]), c0, done)},
		{"dump_chunk_past_end", group(seedSummary(100, sum[:]), c0, done)},
		{"dump_no_done", group(sumMsg, c0, c1)},
		{"dump_chunks_only", group(c0, c1, done)},
		{"dump_two_summaries", group(sumMsg, c0, sumMsg, c1, done)},
	}
}

// TestDumpReplySeeds records the real server's answer to GET_DUMP for a
// device with a small dump, replays it, after the prefix, to the client
// (which must reassemble it), checks that the hand-made good seeds
// decode and the hostile ones fail as they should, and with -write-seeds
// writes all of them to FuzzClientReply's corpus.
func TestDumpReplySeeds(t *testing.T) {
	dump := bytes.Repeat([]byte{0xd5, 0x4d, 0x50}, 7000) // 21000 bytes: three chunks
	m, err := mock.Open(mock.Options{Name: "mhi0", RDDMSize: 1 << 20,
		Device: func(c *ep.Config) { c.Boot = ep.BootConfig{RDDM: true, Dump: dump} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Controller.PowerUp(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Controller.CollectDump(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	tr := sysfs.NewTree()
	tr.AddDevice("mhi0", sysfs.Device{Controller: m.Controller, Model: m.Info.Name})
	srv, client := fuzzServerPair(t, tr)
	srv.HandleDatagram(nlmsg(genl.FamilyID, req|uint16(netlink.Dump), 1, genl.CmdGetDump, attr(genl.AttrDevName, str("mhi0"))), client.port, &unix.Ucred{})
	dgrams := client.drain(t, srv.Port())
	if len(dgrams) < 2 {
		t.Fatalf("%d datagrams for a dump of %d bytes", len(dgrams), len(dump))
	}
	script := dumpSeedPrefix()
	for j, d := range dgrams {
		flags := byte(recPatchSeq | recPatchPort)
		if j == len(dgrams)-1 {
			flags |= recEndGroup
		}
		script = append(script, record(flags, d)...)
	}
	seeds := append(dumpClientSeeds(), clientSeed{"real_server_dump", script})
	for _, s := range seeds {
		t.Run(s.name, func(t *testing.T) {
			rc, fake, port := replayClient(t)
			stop := make(chan struct{})
			defer close(stop)
			go func() { _ = fakeServer(fake, rc, s.script, stop) }()
			cl, err := genl.Dial(genl.ClientOptions{Port: port, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for range 6 { // the calls before Dump; Devices and StatsMap count as one each
				if _, err := cl.GetDevice("mhi0"); err == nil {
					t.Fatal("the prefix answered a call")
				}
			}
			d, err := cl.Dump("mhi0", genl.DumpOptions{})
			switch s.name {
			case "real_server_dump":
				if err != nil || !bytes.Equal(d.Data, dump) {
					t.Fatalf("replayed dump: %d bytes, %v", len(d.Data), err)
				}
			case "dump_good", "dump_good_one_datagram":
				if err != nil || d.Size != 12000 || d.Chunks != 2 {
					t.Fatalf("%+v, %v", d, err)
				}
			case "dump_enoent":
				if !errors.Is(err, genl.ErrNoDump) {
					t.Fatalf("%v, want ErrNoDump", err)
				}
			default:
				if !errors.Is(err, genl.ErrProtocol) {
					t.Fatalf("%v, want ErrProtocol", err)
				}
				t.Log(err)
			}
		})
	}
	if !*writeSeeds {
		return
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzClientReply")
	for _, s := range seeds {
		if err := fuzzcheck.WriteCorpus(dir, s.name, s.script); err != nil {
			t.Fatal(err)
		}
	}
}
