package genl

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/mdlayher/genetlink"
)

// dumpMsg builds one GET_DUMP answer message from raw attributes.
func dumpMsg(cmd uint8, attrs ...[]byte) genetlink.Message {
	return genetlink.Message{Header: genetlink.Header{Command: cmd, Version: FamilyVersion}, Data: bytes.Join(attrs, nil)}
}

func u64Attr(t uint16, v uint64) []byte { return appendAttr(nil, t, ne.AppendUint64(nil, v)) }

func dumpSummary(size uint64, sum []byte) genetlink.Message {
	return dumpMsg(CmdGetDump, appendAttr(nil, AttrDevName, []byte("mhi0\x00")), u64Attr(AttrDumpSize, size),
		appendAttr(nil, AttrDumpSHA256, sum), u64Attr(AttrDumpTime, 1e18))
}

func dumpChunk(off uint64, data []byte) genetlink.Message {
	return dumpMsg(CmdGetDump, u64Attr(AttrDumpOffset, off), appendAttr(nil, AttrDumpData, data))
}

// TestDecodeDumpReply: the client reassembles chunks only when they cover
// the announced size in order, once, and match the digest.
func TestDecodeDumpReply(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes
	sum := sha256.Sum256(data)
	good := []genetlink.Message{dumpSummary(uint64(len(data)), sum[:]), dumpChunk(0, data[:8192]), dumpChunk(8192, data[8192:])}
	d, err := decodeDumpReply(good)
	if err != nil || !bytes.Equal(d.Data, data) || d.Chunks != 2 || d.Device != "mhi0" || d.Time.UnixNano() != 1e18 || d.Crashed {
		t.Fatalf("good reply: %+v, %v", d, err)
	}
	empty := sha256.Sum256(nil)
	if d, err := decodeDumpReply([]genetlink.Message{dumpSummary(0, empty[:])}); err != nil || len(d.Data) != 0 || d.Data == nil {
		t.Fatalf("empty dump: %+v, %v", d, err)
	}
	other := sum
	other[0] ^= 1
	for _, c := range []struct {
		name string
		msgs []genetlink.Message
		want string
	}{
		{"nothing", nil, "empty answer: no summary"},
		{"chunk first", []genetlink.Message{good[1], good[0], good[2]}, "the first reply message is not the summary"},
		{"lost chunk", []genetlink.Message{good[0], good[2]}, "chunk at offset 8192, expected 0: part of the dump is missing or repeated"},
		{"last chunk lost", good[:2], "dump incomplete: 8192 of the announced 16000 bytes arrived"},
		{"repeated chunk", []genetlink.Message{good[0], good[1], good[1], good[2]}, "chunk at offset 0, expected 8192"},
		{"overlapping chunk", []genetlink.Message{good[0], good[1], dumpChunk(8000, data[8000:])}, "chunk at offset 8000, expected 8192"},
		{"chunk past the end", []genetlink.Message{good[0], good[1], dumpChunk(8192, append(bytes.Clone(data[8192:]), 'x'))}, "runs past the announced 16000 bytes"},
		{"wrong digest", []genetlink.Message{dumpSummary(uint64(len(data)), other[:]), good[1], good[2]}, "dump digest mismatch"},
		{"short digest", []genetlink.Message{dumpSummary(uint64(len(data)), sum[:31])}, "dump-sha256 of 31 bytes, want 32"},
		{"no digest", []genetlink.Message{dumpMsg(CmdGetDump, u64Attr(AttrDumpSize, 1))}, "the summary has no dump-sha256"},
		{"second summary", []genetlink.Message{good[0], good[1], good[0]}, "reply message 2 is a second summary"},
		{"huge size", []genetlink.Message{dumpSummary(1<<62, sum[:])}, "more than the client's limit"},
		{"empty chunk", []genetlink.Message{good[0], dumpChunk(0, nil)}, "a chunk needs dump-offset and a non-empty dump-data"},
		{"chunk without offset", []genetlink.Message{good[0], dumpMsg(CmdGetDump, appendAttr(nil, AttrDumpData, data))}, "a chunk needs dump-offset"},
		{"offset not u64", []genetlink.Message{good[0], dumpMsg(CmdGetDump, appendAttr(nil, AttrDumpOffset, []byte{1, 2}), appendAttr(nil, AttrDumpData, data))}, "reply message 1:"},
		{"wrong command", []genetlink.Message{good[0], dumpMsg(CmdGetDevice, good[1].Data)}, "reply message 1 is get-device, not get-dump"},
		{"bad attributes", []genetlink.Message{good[0], dumpMsg(CmdGetDump, []byte{0xff, 0xff, 1, 0})}, "reply message 1:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := decodeDumpReply(c.msgs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("decodeDumpReply = %d bytes, %v; want an error with %q", len(d.Data), err, c.want)
			}
		})
	}
}
