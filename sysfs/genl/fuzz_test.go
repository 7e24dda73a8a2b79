package genl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/sysfs/genl"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// FuzzDecodeRequest feeds arbitrary datagrams to the request decoder and
// walks them message by message as the server does. It must never panic,
// always make progress, and either accept a request that satisfies the
// policy or refuse it with an errno and a message. Seeds: the f.Add calls
// below and testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	dev := attr(genl.AttrDevName, str("mhi0"))
	f.Add(nlmsg(genl.FamilyID, req, 1, genl.CmdGetDevice, dev))
	f.Add(nlmsg(genl.FamilyID, req|uint16(netlink.Dump), 2, genl.CmdGetDevice))
	f.Add(nlmsg(genl.FamilyID, req, 3, genl.CmdSetDevice, dev,
		attr(genl.AttrMRU, u32b(16384)), attr(genl.AttrMTU, u32b(1500)), attr(genl.AttrTimeoutMs, u32b(8000))))
	f.Add(nlmsg(genl.FamilyID, req, 4, genl.CmdGetStats, dev))
	f.Add(nlmsg(genl.FamilyID, req|uint16(netlink.Dump), 5, genl.CmdDumpChannels, dev))
	f.Add(nlmsg(0x10, req, 6, unix.CTRL_CMD_GETFAMILY, attr(unix.CTRL_ATTR_FAMILY_NAME, str("mhi"))))
	f.Add(nlmsg(0x10, req, 7, unix.CTRL_CMD_GETFAMILY, attr(unix.CTRL_ATTR_FAMILY_ID, []byte{0x4d, 0})))
	f.Add(append(nlmsg(genl.FamilyID, req, 8, genl.CmdGetDevice, dev), nlmsg(genl.FamilyID, req, 9, 99)...))
	f.Add(nlmsg(genl.FamilyID, req, 10, genl.CmdSetDevice, dev, attr(genl.AttrMRU|0x8000, []byte{1})))
	f.Add([]byte{0x14, 0, 0, 0, 0x4d, 0})
	f.Add(nlmsg(genl.FamilyID, req, 11, genl.CmdConnect, dev, attr(genl.AttrAPN, str("internet")), attr(genl.AttrIPType, str("ipv4v6"))))
	f.Add(nlmsg(genl.FamilyID, req, 12, genl.CmdConnect, dev, attr(genl.AttrAPN, str("a b"))))
	f.Add(nlmsg(genl.FamilyID, req, 13, genl.CmdDisconnect, dev))
	f.Add(nlmsg(genl.FamilyID, req, 14, genl.CmdGetSession, dev))
	f.Add(nlmsg(genl.FamilyID, req|uint16(netlink.Dump), 15, genl.CmdDumpPorts, dev))
	f.Fuzz(func(t *testing.T, b []byte) {
		rest := b
		for len(rest) > 0 {
			r, n, err := genl.DecodeRequest(rest)
			if n < 1 || n > len(rest) {
				t.Fatalf("DecodeRequest consumed %d of %d bytes", n, len(rest))
			}
			if err != nil {
				var re *genl.RequestError
				if !errors.As(err, &re) || re.Errno == 0 || re.Msg == "" {
					t.Fatalf("error %#v is not a complete RequestError", err)
				}
				if re.Offset < 0 || re.Offset >= n {
					t.Fatalf("offset %d outside the %d-byte message", re.Offset, n)
				}
			} else if !r.Ignored() && !r.Ctrl() {
				checkRequest(t, &r, n)
			}
			rest = rest[n:]
		}
	})
}

// checkRequest asserts what the decoder promises about an accepted
// mhi-family request.
func checkRequest(t *testing.T, r *genl.Request, n int) {
	t.Helper()
	if r.Command < genl.CmdGetDevice || r.Command > genl.CmdGetDump {
		t.Fatalf("accepted command %d", r.Command)
	}
	if r.DevName == "" && !(r.Command == genl.CmdGetDevice && r.Dump()) {
		t.Fatalf("accepted %d without dev-name", r.Command)
	}
	if len(r.DevName) > genl.MaxDevNameLen || strings.ContainsAny(r.DevName, "/\x00") || r.DevName == ".." {
		t.Fatalf("accepted dev-name %q", r.DevName)
	}
	setting := r.MRU != nil || r.MTU != nil || r.TimeoutMs != nil || r.AutosuspendMs != nil || r.PMRequest != nil
	if r.Command == genl.CmdSetDevice && !setting {
		t.Fatal("accepted an empty set-device")
	}
	if r.Command != genl.CmdSetDevice && setting {
		t.Fatalf("accepted values in command %d", r.Command)
	}
	if r.PMRequest != nil && *r.PMRequest != genl.PMRequestSuspend && *r.PMRequest != genl.PMRequestResume {
		t.Fatalf("accepted pm-request %d", *r.PMRequest)
	}
	if r.Command != genl.CmdGetDump && (r.DumpCrash || r.DumpWaitMs != nil) {
		t.Fatalf("accepted dump values in command %d", r.Command)
	}
	if r.DumpWaitMs != nil && (!r.DumpCrash || *r.DumpWaitMs < 1 || *r.DumpWaitMs > genl.MaxDumpWaitMs) {
		t.Fatalf("accepted dump-wait-ms %d (crash %v)", *r.DumpWaitMs, r.DumpCrash)
	}
	if r.Command == genl.CmdConnect && (r.APN == "" || len(r.APN) > genl.MaxAPNLen || strings.ContainsAny(r.APN+r.IPType, " \t\r\n\x00")) {
		t.Fatalf("accepted connect with APN %q, IP type %q", r.APN, r.IPType)
	}
	if r.Command != genl.CmdConnect && (r.APN != "" || r.IPType != "") {
		t.Fatalf("accepted APN or IP type in command %d", r.Command)
	}
	if r.DevName != "" {
		if off := r.AttrOffset(genl.AttrDevName); off < 20 || off >= n {
			t.Fatalf("dev-name offset %d in a %d-byte message", off, n)
		}
	}
}
